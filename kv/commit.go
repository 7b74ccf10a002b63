package kv

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Group commit. Every write of the store goes through one committer
// goroutine: it takes all writes queued since its last round, applies them
// in order in one Badger transaction and commits that once — one WAL append
// and, in Sync mode, one fsync for the whole group — then acknowledges each.
// Badger syncs its WAL once per transaction, so without this, concurrent
// writers would each pay their own fsync.
//
// Being the only writer, the committer needs no conflict detection, and a
// later write in a group sees the earlier ones (a transaction reads its own
// pending writes), so INCR twice in one group counts twice.
//
// A write's apply must return a clean error (the write's own failure, such
// as ErrExists) only before its first txn.Set or Delete, so a failed write
// leaves nothing in the group's transaction. Any other error, or a
// transaction grown too big, makes the committer discard the group's
// transaction and redo each of its writes alone: slower, never wrong.

// write is one queued write.
type write struct {
	apply func(txn *badger.Txn) error
	keys  [][]byte // keys it may change: the read cache forgets them
	size  int64    // estimated bytes in the transaction
	count int64    // entries it may write
	err   error
	done  chan struct{}
}

var writePool = sync.Pool{New: func() any { return &write{done: make(chan struct{}, 1)} }}

// cleanErr reports whether err is a write's own failure, returned before it
// wrote anything.
func cleanErr(err error) bool {
	return errors.Is(err, ErrExists) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrMismatch) ||
		errors.Is(err, ErrNotNumber)
}

type committer struct {
	db    *badger.DB
	cache *cache // nil: no read cache
	log   *slog.Logger

	flushEvery time.Duration // how long a dirty cache entry may wait
	dirty      []dirtyEntry  // taken for this round's flush, reused
	hasDirty   atomic.Bool   // a dirty entry was written since the last take
	flushNow   atomic.Bool   // a shard's dirty share is filling up

	mu      sync.Mutex
	queue   []*write
	closed  bool
	wake    chan struct{}
	stopped chan struct{}

	maxSize, maxCount int64 // a group's transaction stays under these

	groups, writes atomic.Uint64 // transactions committed, writes in them
	commitNanos    atomic.Uint64 // time spent in Badger's Commit
}

func newCommitter(db *badger.DB, c *cache, flushEvery time.Duration, log *slog.Logger) *committer {
	cm := &committer{db: db, cache: c, log: log, flushEvery: flushEvery, wake: make(chan struct{}, 1), stopped: make(chan struct{}),
		// Half of Badger's limits: Badger's own size estimate of an entry is
		// a little larger than ours, and a transaction that hits its limit
		// would have to be redone write by write.
		maxSize: db.MaxBatchSize() / 2, maxCount: db.MaxBatchCount() / 2}
	go cm.run()
	return cm
}

// submit queues w; its done channel is signalled once it is committed (or
// failed). It fails only when the store is closed.
func (cm *committer) submit(w *write) error {
	cm.mu.Lock()
	if cm.closed {
		cm.mu.Unlock()
		return ErrClosed
	}
	cm.queue = append(cm.queue, w)
	cm.mu.Unlock()
	cm.signal()
	return nil
}

// signal wakes the committer.
func (cm *committer) signal() {
	select {
	case cm.wake <- struct{}{}:
	default:
	}
}

// dirtied tells the committer the cache holds a new dirty entry — the
// first since its last flush starts the flush timer — and with now asks for
// a flush at once.
func (cm *committer) dirtied(now bool) {
	if now {
		cm.flushNow.Store(true)
		cm.signal()
	} else if !cm.hasDirty.Load() && !cm.hasDirty.Swap(true) {
		cm.signal()
	}
}

// close commits what is queued, stops the committer and waits for it.
func (cm *committer) close() {
	cm.mu.Lock()
	already := cm.closed
	cm.closed = true
	cm.mu.Unlock()
	if !already {
		select {
		case cm.wake <- struct{}{}:
		default:
		}
	}
	<-cm.stopped
}

// run commits rounds: the queued writes, and before them the cache's
// dirty entries — taken after the queue, so every dirty write acknowledged
// before a queued write was submitted is in Badger before it applies.
func (cm *committer) run() {
	defer close(cm.stopped)
	var group []*write
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	timing, due := false, false
	for {
		cm.mu.Lock()
		group, cm.queue = cm.queue, group[:0]
		closed := cm.closed
		cm.mu.Unlock()
		if cm.cache != nil && (len(group) > 0 || closed || due || cm.flushNow.Swap(false)) {
			due = false
			cm.hasDirty.Store(false)
			cm.flushDirty(closed && len(group) == 0)
		}
		if len(group) > 0 {
			cm.commitAll(group)
			clear(group)
			continue
		}
		if closed {
			return
		}
		if cm.hasDirty.Load() && !timing {
			timer.Reset(cm.flushEvery)
			timing = true
		}
		if !timing {
			<-cm.wake
			continue
		}
		select {
		case <-cm.wake:
		case <-timer.C:
			timing, due = false, true
		}
	}
}

// flushDirty writes the cache's dirty entries to Badger, in transactions
// within the limits; last closes the cache to dirty writes first. A flush
// that fails leaves its entries dirty, for the next round.
func (cm *committer) flushDirty(last bool) {
	cm.dirty = cm.cache.takeDirty(cm.dirty[:0], last)
	for rest := cm.dirty; len(rest) > 0; {
		txn := cm.db.NewTransaction(true)
		n, size := 0, int64(0)
		for ; n < len(rest) && (n == 0 || (size < cm.maxSize && int64(n) < cm.maxCount)); n++ {
			d := rest[n]
			size += entrySize(d.key, d.value)
			e := badger.NewEntry(d.key, d.value)
			e.ExpiresAt = uint64(d.expires)
			if err := txn.SetEntry(e); err != nil {
				break // too big after all: commit what fits
			}
		}
		var err error
		if n == 0 {
			txn.Discard()
			err = errors.New("an entry does not fit a transaction")
		} else {
			t0 := time.Now()
			err = txn.Commit()
			cm.commitNanos.Add(uint64(time.Since(t0)))
		}
		cm.groups.Add(1)
		cm.writes.Add(uint64(n))
		if err != nil {
			cm.log.Error("kv: flushing cached writes", "entries", n, "err", err)
			cm.hasDirty.Store(true)
			cm.cache.relist(rest)
			break
		}
		cm.cache.markClean(rest[:n])
		rest = rest[n:]
	}
	clear(cm.dirty)
}

// commitAll commits group in as few transactions as the limits allow.
func (cm *committer) commitAll(group []*write) {
	for len(group) > 0 {
		n, size, count := 0, int64(0), int64(0)
		for n < len(group) && (n == 0 || (size+group[n].size <= cm.maxSize && count+group[n].count <= cm.maxCount)) {
			size += group[n].size
			count += group[n].count
			n++
		}
		cm.commitGroup(group[:n])
		group = group[n:]
	}
}

func (cm *committer) commitGroup(group []*write) {
	txn := cm.db.NewTransaction(true)
	ok := true
	for _, w := range group {
		w.err = w.apply(txn)
		if w.err != nil && !cleanErr(w.err) {
			ok = false
			break
		}
	}
	if ok {
		t0 := time.Now()
		err := txn.Commit()
		cm.commitNanos.Add(uint64(time.Since(t0)))
		cm.groups.Add(1)
		cm.writes.Add(uint64(len(group)))
		for _, w := range group {
			if err != nil && w.err == nil {
				w.err = err
			}
			cm.release(w)
		}
		return
	}
	// Redo each write in its own transaction.
	txn.Discard()
	for _, w := range group {
		t := cm.db.NewTransaction(true)
		w.err = w.apply(t)
		if w.err == nil {
			w.err = t.Commit()
		} else {
			t.Discard()
		}
		cm.groups.Add(1)
		cm.writes.Add(1)
		cm.release(w)
	}
}

// release forgets w's keys in the read cache — after the commit, so a
// reader that missed before it cannot cache the old value — and wakes its
// writer.
func (cm *committer) release(w *write) {
	if cm.cache != nil {
		for _, k := range w.keys {
			cm.cache.forget(k)
		}
	}
	w.done <- struct{}{}
}
