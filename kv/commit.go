package kv

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/hecsys/hec/shared/panics"
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
// The committer also keeps the store's own log (wal.go): each round's
// effects — the queued writes' sets and deletes, after the records
// writers appended themselves (Async cached Puts) — are appended with one
// write, and in Sync mode one fdatasync, before any writer of the round is
// acknowledged. Badger itself runs without syncing, and plain Puts held in
// the cache reach Badger only when flushed (coalesced).
//
// A write's apply must return a clean error (the write's own failure, such
// as ErrExists) only before its first txn.Set or Delete, so a failed write
// leaves nothing in the group's transaction. Any other error, or a
// transaction grown too big, makes the committer discard the group's
// transaction and redo each of its writes alone: slower, never wrong.

// write is one queued write.
type write struct {
	apply func(txn *wtxn) error
	put   *cachedPut // a plain Put the cache may take (Sync mode with the log)
	keys  [][]byte   // keys it may change: the read cache forgets them
	size  int64      // estimated bytes in the transaction
	count int64      // entries it may write
	err   error
	done  chan struct{}

	installed bool                   // put went to the cache: nothing to forget
	finished  atomic.Bool            // released
	notify    atomic.Pointer[func()] // run once released (Pending.Notify)
}

// cachedPut is a plain Put in Sync mode. In a round of nothing but such
// Puts the committer logs them, syncs the log and then installs them in
// the cache as dirty entries — visible only once durable — for a later,
// coalesced flush to Badger. In a round with other writes, which may read
// them from Badger, apply writes them to Badger instead.
type cachedPut struct {
	key, value []byte
	expires    uint64
}

var writePool = sync.Pool{New: func() any { return &write{done: make(chan struct{}, 1)} }}

// wtxn is the committer's transaction: its sets and deletes are also
// logged when the store keeps its own log.
type wtxn struct {
	*badger.Txn
	log *wal         // nil: none
	ttl *atomic.Bool // set when an entry has an expiry (committer.hasTTL)
}

func (t *wtxn) SetEntry(e *badger.Entry) error {
	if err := t.Txn.SetEntry(e); err != nil {
		return err
	}
	if e.ExpiresAt != 0 && t.ttl != nil && !t.ttl.Load() {
		t.ttl.Store(true)
	}
	if t.log != nil {
		op := byte(walSet)
		if e.UserMeta != 0 {
			op = walSetKind | e.UserMeta
		}
		t.log.add(op, e.Key, e.Value, e.ExpiresAt)
	}
	return nil
}

func (t *wtxn) Set(key, value []byte) error { return t.SetEntry(badger.NewEntry(key, value)) }

func (t *wtxn) Delete(key []byte) error {
	if err := t.Txn.Delete(key); err != nil {
		return err
	}
	if t.log != nil {
		t.log.add(walDelete, key, nil, 0)
	}
	return nil
}

// cleanErr reports whether err is a write's own failure, returned before it
// wrote anything.
func cleanErr(err error) bool {
	var refused refusedError
	return errors.Is(err, ErrExists) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrMismatch) ||
		errors.Is(err, ErrNotNumber) || errors.Is(err, ErrOverflow) || errors.Is(err, ErrWrongType) ||
		errors.As(err, &refused)
}

// refusedError is an error a Modify function returned: the write changed
// nothing.
type refusedError struct{ err error }

func (e refusedError) Error() string { return e.err.Error() }
func (e refusedError) Unwrap() error { return e.err }

type committer struct {
	db      *badger.DB
	cache   *cache // nil: no read cache
	wal     *wal   // nil: in memory, nothing to log
	syncLog bool   // Sync mode: each round's log is synced before acknowledging
	log     *slog.Logger
	written func(key []byte) // WithWriteHook; nil: none
	dir     string           // Badger's directory ("": in memory)
	guard   *diskGuard       // nil: in memory
	// checkpointAt is the log size past which the committer checkpoints
	// (the file keeps about this size: its blocks are reused).
	checkpointAt atomic.Int64
	refusing     bool // writes are refused (logged once, when it starts)

	clock      *atomic.Uint64 // the store's versions for cached writes
	flushEvery time.Duration  // how long a dirty cache entry may wait for Badger
	unflushed  []dirtyEntry   // dirty entries being flushed, reused
	hasDirty   atomic.Bool    // a dirty entry was written since the last take
	flushNow   atomic.Bool    // a shard's dirty share is filling up

	mu      sync.Mutex
	queue   []*write
	closed  bool
	failed  error       // the committer panicked: why (submit answers it)
	onFail  func(error) // WithFailHook; nil: none
	wake    chan struct{}
	stopped chan struct{}

	maxSize, maxCount int64 // a group's transaction stays under these

	back      backWait    // Sync: the writers the last round acknowledged, expected back
	gatherOff atomic.Bool // tests: rounds do not wait for their writers

	groups, writes   atomic.Uint64 // rounds made durable (log syncs, or Badger commits without the log), writes in them
	flushes, flushed atomic.Uint64 // Badger commits of cached writes, the writes in them
	commitNanos      atomic.Uint64 // time spent in Badger's Commit and the log's sync
	checkpoints      atomic.Uint64 // logs started over, Badger durable
	hasTTL           atomic.Bool   // a write set an expiry: the sweeper has work (sweep.go)
}

// newCommitter makes the committer; the caller sets the optional fields
// (written, dir, guard, checkpointAt), then starts it: go cm.run().
func newCommitter(db *badger.DB, c *cache, l *wal, syncLog bool, clock *atomic.Uint64, flushEvery time.Duration,
	log *slog.Logger) *committer {
	cm := &committer{db: db, cache: c, wal: l, syncLog: syncLog && l != nil, clock: clock, log: log, flushEvery: flushEvery, wake: make(chan struct{}, 1),
		stopped: make(chan struct{}),
		// Half of Badger's limits: Badger's own size estimate of an entry is
		// a little larger than ours, and a transaction that hits its limit
		// would have to be redone write by write.
		maxSize: db.MaxBatchSize() / 2, maxCount: db.MaxBatchCount() / 2}
	return cm
}

// submit queues w; its done channel is signalled once it is committed (or
// failed). It fails only when the store is closed.
func (cm *committer) submit(w *write) error {
	cm.mu.Lock()
	if cm.closed {
		err := cm.failed
		cm.mu.Unlock()
		if err != nil {
			return err
		}
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
// first since its last take wakes it, to start the flush timer — and with
// now asks for a flush at once.
func (cm *committer) dirtied(now bool) {
	if now {
		cm.flushNow.Store(true)
		cm.signal()
	} else if !cm.hasDirty.Load() && !cm.hasDirty.Swap(true) {
		cm.signal()
	}
}

// close commits what is queued, flushes and checkpoints, stops the
// committer and waits for it.
func (cm *committer) close() {
	cm.mu.Lock()
	already := cm.closed
	cm.closed = true
	cm.mu.Unlock()
	if !already {
		cm.signal()
	}
	<-cm.stopped
}

// run commits rounds. A round takes the queued writes, then the cache's
// new dirty entries — after the queue, so every cached write acknowledged
// before a queued write was submitted is applied before it — logs those,
// flushes cached writes to Badger when due (always before queued writes
// other than barriers, which may read them), applies the queued writes,
// makes the log durable and acknowledges everyone.
func (cm *committer) run() {
	defer close(cm.stopped)
	var group []*write
	defer func() {
		// A panic outside a write's apply (apply contains its own) may
		// have left the round half done: the store stops.
		if v := recover(); v != nil {
			cm.fail(panics.Recovered(cm.log, "kv/committer", v), group)
		}
	}()
	timer := time.NewTimer(time.Hour) // the flush interval
	timer.Stop()
	logTimer := time.NewTimer(time.Hour) // writers' log records waiting
	logTimer.Stop()
	timing, due, logTiming, logDue := false, false, false, false
	for {
		cm.gather()
		cm.mu.Lock()
		group, cm.queue = cm.queue, group[:0]
		closed := cm.closed
		cm.mu.Unlock()
		group = cm.admit(group)
		last := closed && len(group) == 0
		needsBadger := false // a write that may read Badger
		for _, w := range group {
			needsBadger = needsBadger || w.put == nil || cm.wal == nil
		}
		if cm.cache != nil && (needsBadger || last || due || cm.flushNow.Swap(false)) {
			due = false
			cm.flushDirty(last)
		}
		// Writers' log records go out with any round that writes (ahead
		// of its own records), else once they waited walWriteEvery or
		// pile up — checked every round, not only when the committer
		// idles: an Async round of queued Puts only adds to them, and
		// under a steady stream of such rounds the log fell behind
		// without bound.
		onlyPuts := !needsBadger
		writeShared := len(group) > 0 && (!onlyPuts || cm.syncLog) || logDue || last ||
			cm.wal != nil && cm.wal.due(time.Now())
		if writeShared && len(group) == 0 && cm.wal != nil && cm.wal.pending.Load() > 0 &&
			cm.writable(cm.wal.pending.Load()) != nil {
			writeShared = false // kept, for when space returns (flushed to Badger meanwhile)
		}
		logDue = false
		t0 := time.Now()
		if cm.commitAll(group, onlyPuts, writeShared) {
			due = true
		}
		if cm.syncLog && len(group) > 0 {
			cm.mu.Lock()
			queued := len(cm.queue)
			cm.mu.Unlock()
			cm.back.acked(len(group)+queued, time.Since(t0))
		}
		if last || cm.wal != nil && cm.wal.size > cm.checkpointAt.Load() {
			cm.checkpoint()
		}
		clear(group)
		if len(group) > 0 {
			continue
		}
		if last {
			return
		}
		if cm.hasDirty.Load() && !timing {
			timer.Reset(cm.flushEvery)
			timing = true
		}
		if cm.wal != nil && cm.wal.pending.Load() > 0 && !logTiming {
			logTimer.Reset(walWriteEvery)
			logTiming = true
		}
		var logC, flushC <-chan time.Time
		if logTiming {
			logC = logTimer.C
		}
		if timing {
			flushC = timer.C
		}
		select {
		case <-cm.wake:
		case <-logC:
			logTiming, logDue = false, true
		case <-flushC:
			timing, due = false, true
		}
	}
}

// backWait is what a Sync round waits for before it starts. A round
// acknowledges its writers, and most come straight back with their next
// write, one after another as their replies reach them: a committer that
// started the next round with the first of them would leave the rest a
// whole sync to wait, for the round after, and rounds settle at about
// half the writers each (seen: 50 redis-benchmark clients, 24.7 writes a
// sync, and the agent's CPU per write 1.8× Redis's, whose appendfsync
// always syncs once per pass of its event loop, for every client read in
// it). So a round waits until as many writes are queued as the last one
// committed, with those queued meanwhile — for one sync at most (the time
// it saves), and not in the round after a wait that ran out (writers that
// come back only some of the time do not make every round wait).
type backWait struct {
	want  int           // writes to wait for; 0: none
	until time.Time     // stop waiting then
	sync  time.Duration // a round's commit, smoothed
	short bool          // the last wait ran out
	timer *time.Timer
}

// acked records a Sync round that committed n writes, counting those
// queued behind it, in took.
func (b *backWait) acked(n int, took time.Duration) {
	if b.sync == 0 {
		b.sync = took
	}
	b.sync += (took - b.sync) / 4
	if b.short {
		b.short = false
		return
	}
	b.want, b.until = n, time.Now().Add(min(b.sync, maxBackWait))
}

// maxBackWait bounds a round's wait for its writers on a disk that syncs
// slowly.
const maxBackWait = 10 * time.Millisecond

// gather waits, before a Sync round takes the queue, for the writers the
// last round acknowledged (backWait). With nothing queued yet it returns
// at once: the committer sleeps until the first write as usual, and
// waits for the rest then.
func (cm *committer) gather() {
	b := &cm.back
	want := b.want
	if want == 0 || cm.gatherOff.Load() {
		return
	}
	for {
		cm.mu.Lock()
		n, closed := len(cm.queue), cm.closed
		cm.mu.Unlock()
		if n == 0 && !closed {
			return // still waiting for the first: the committer sleeps as usual
		}
		b.want = 0
		if n >= want || closed {
			return
		}
		d := time.Until(b.until)
		if d <= 0 {
			b.short = true
			return
		}
		if b.timer == nil {
			b.timer = time.NewTimer(d)
		} else {
			b.timer.Reset(d)
		}
		select {
		case <-cm.wake:
			b.timer.Stop()
		case <-b.timer.C:
			b.short = true
			return
		}
	}
}

// flushDirty writes the cache's dirty entries to Badger, in transactions
// within the limits; last closes the cache to dirty writes first. A flush
// that fails leaves its entries dirty, for the next round.
func (cm *committer) flushDirty(last bool) {
	cm.hasDirty.Store(false)
	cm.unflushed = cm.cache.takeDirty(cm.unflushed[:0], last)
	// In key order: consecutive inserts into Badger's skiplist then walk
	// mostly the same, cached, nodes — the walk is most of a write's cost.
	slices.SortFunc(cm.unflushed, func(a, b dirtyEntry) int { return bytes.Compare(a.key, b.key) })
	for rest := cm.unflushed; len(rest) > 0; {
		txn := cm.db.NewTransaction(true)
		n, size := 0, int64(0)
		var err error
		for ; n < len(rest) && (n == 0 || (size < cm.maxSize && int64(n) < cm.maxCount)); n++ {
			d := rest[n]
			size += entrySize(d.key, d.value)
			e := badger.NewEntry(d.key, d.value)
			e.ExpiresAt = uint64(d.expires)
			if err = txn.SetEntry(e); err != nil {
				break
			}
		}
		if n == 0 {
			txn.Discard()
		} else {
			t0 := time.Now()
			err = txn.Commit()
			cm.commitNanos.Add(uint64(time.Since(t0)))
			cm.flushes.Add(1)
			cm.flushed.Add(uint64(n))
		}
		if err != nil || n == 0 {
			cm.log.Error("kv: flushing cached writes to Badger", "entries", len(rest), "err", err)
			cm.cache.relist(rest)
			cm.hasDirty.Store(true)
			break
		}
		cm.cache.markClean(rest[:n])
		rest = rest[n:]
	}
	clear(cm.unflushed)
	cm.unflushed = cm.unflushed[:0]
}

// checkpoint makes Badger hold, synced, every effect in the log, then
// empties the log.
func (cm *committer) checkpoint() {
	if cm.wal == nil {
		return
	}
	if cm.cache != nil {
		cm.flushDirty(false)
		if cm.hasDirty.Load() {
			return // a flush failed: the log keeps them
		}
	}
	if err := cm.db.Sync(); err != nil {
		cm.log.Error("kv: sync Badger for a checkpoint", "err", err)
		return
	}
	if err := syncBadgerFiles(cm.dir); err != nil {
		cm.log.Error("kv: sync Badger for a checkpoint", "err", err)
		return
	}
	if err := cm.wal.reset(); err != nil {
		cm.log.Error("kv: checkpoint", "err", err)
		return
	}
	cm.checkpoints.Add(1)
}

// logFailed reports a failed write or sync of the log; one that found
// the disk full marks it so, and later rounds are refused until space
// returns.
func (cm *committer) logFailed(err error) {
	if errors.Is(err, ErrDiskFull) && cm.guard != nil {
		cm.guard.markFull()
	}
	cm.log.Error("kv: log", "err", err)
}

// writable is why a round that writes about n bytes may not go ahead: the
// log broken by a failed sync, or the disk too full; nil if it may.
func (cm *committer) writable(n int64) error {
	if cm.wal != nil {
		if err := cm.wal.failed(); err != nil {
			return err
		}
	}
	return cm.guard.room(n)
}

// admit refuses the group's writes when the store may not write (see
// writable) — failing and releasing them — and returns the rest: barriers,
// which write nothing.
func (cm *committer) admit(group []*write) []*write {
	if cm.wal == nil || len(group) == 0 {
		return group
	}
	n := cm.wal.pending.Load() // writers' records, for the log (in the cache already)
	for _, w := range group {  // the log, then Badger
		n += 2 * (w.size + walHeader)
	}
	err := cm.writable(n)
	if err == nil {
		if cm.refusing {
			cm.refusing = false
			cm.log.Info("kv: writing again", "free", mib(cm.guard.free.Load()))
		}
		return group
	}
	if !cm.refusing {
		cm.refusing = true
		cm.log.Warn("kv: refusing writes", "err", err)
	}
	kept := group[:0]
	for _, w := range group {
		if w.count == 0 {
			kept = append(kept, w)
			continue
		}
		w.err = err
		w.installed = true // nothing written: nothing to forget
		cm.release(w)
	}
	clear(group[len(kept):])
	return kept
}

// commitAll commits group in as few transactions as the limits allow,
// makes the round's log durable, then acknowledges the writes. With
// onlyPuts (every write a cachedPut) and the log, the Puts are logged and
// then installed in the cache instead; it reports whether the cache's
// dirty share asks for a flush.
func (cm *committer) commitAll(group []*write, onlyPuts, writeShared bool) (flush bool) {
	if onlyPuts && cm.wal != nil && cm.cache != nil && len(group) > 0 {
		// Sync: logged and synced, then visible. Async (Puts the cache
		// refused for the moment): into the cache, each logging itself as
		// a writer's Put would.
		var err error
		if cm.syncLog {
			for _, w := range group {
				cm.wal.add(walSet, w.put.key, w.put.value, w.put.expires)
			}
			t0 := time.Now()
			err = cm.wal.commit(true, true)
			cm.commitNanos.Add(uint64(time.Since(t0)))
			cm.groups.Add(1)
			cm.writes.Add(uint64(len(group)))
			if err != nil {
				cm.logFailed(err)
			}
		}
		for _, w := range group {
			if err != nil {
				w.err = err
				continue
			}
			flush = cm.cache.install(w.put.key, w.put.value, int64(w.put.expires), cm.clock.Add(1), !cm.syncLog) || flush
			if w.put.expires != 0 {
				cm.hasTTL.Store(true)
			}
			cm.hasDirty.Store(true)
			w.installed = true
		}
		if !cm.syncLog && writeShared && cm.writable(cm.wal.pending.Load()) == nil {
			// Async: the Puts logged themselves; write the writers'
			// records when due (run), as a round without writes would
			// (and, as it would, keep them while the disk is full).
			if err := cm.wal.commit(false, true); err != nil {
				cm.logFailed(err)
			}
		}
		for _, w := range group {
			cm.release(w)
		}
		return flush
	}
	for rest := group; len(rest) > 0; {
		n, size, count := 0, int64(0), int64(0)
		for n < len(rest) && (n == 0 || (size+rest[n].size <= cm.maxSize && count+rest[n].count <= cm.maxCount)) {
			size += rest[n].size
			count += rest[n].count
			n++
		}
		cm.commitGroup(rest[:n])
		rest = rest[n:]
	}
	if cm.wal != nil {
		t0 := time.Now()
		err := cm.wal.commit(cm.syncLog, writeShared)
		cm.commitNanos.Add(uint64(time.Since(t0)))
		if len(group) > 0 && cm.syncLog {
			cm.groups.Add(1)
			cm.writes.Add(uint64(len(group)))
		}
		if err != nil {
			cm.logFailed(err)
			for _, w := range group {
				if w.err == nil {
					w.err = err
				}
			}
		}
	}
	for _, w := range group {
		cm.release(w)
	}
	return false
}

// commitGroup applies group's writes in one transaction and commits it;
// on an unclean error it redoes each write alone. The writes are
// acknowledged by the caller.
func (cm *committer) commitGroup(group []*write) {
	txn := &wtxn{Txn: cm.db.NewTransaction(true), log: cm.wal, ttl: &cm.hasTTL}
	mark := 0
	if cm.wal != nil {
		mark = cm.wal.mark()
	}
	ok, applied := true, 0
	for _, w := range group {
		if w.apply == nil {
			continue
		}
		applied++
		w.err = cm.apply(w, txn)
		if w.err != nil && !cleanErr(w.err) {
			ok = false
			break
		}
	}
	if applied == 0 {
		txn.Discard()
		return
	}
	if ok {
		err := cm.commitTxn(txn)
		if !cm.syncLog {
			cm.groups.Add(1)
			cm.writes.Add(uint64(applied))
		}
		for _, w := range group {
			if err != nil && w.err == nil {
				w.err = err
			}
		}
		return
	}
	// Redo each write in its own transaction.
	txn.Discard()
	if cm.wal != nil {
		cm.wal.cut(mark)
	}
	for _, w := range group {
		if w.apply == nil {
			continue
		}
		t := &wtxn{Txn: cm.db.NewTransaction(true), log: cm.wal, ttl: &cm.hasTTL}
		if cm.wal != nil {
			mark = cm.wal.mark()
		}
		if w.err = cm.apply(w, t); w.err == nil {
			w.err = cm.commitTxn(t)
		} else {
			t.Discard()
			if cm.wal != nil {
				cm.wal.cut(mark)
			}
		}
		if !cm.syncLog {
			cm.groups.Add(1)
			cm.writes.Add(1)
		}
	}
}

// fail stops the committer after it panicked in a round: every write of
// the round not yet acknowledged, and every queued one, fails with
// ErrFailed (an outcome unknown, as after any failed commit: what was
// acknowledged is on disk, the rest may or may not be), later writes are
// refused with it, and the owner hears of it first (WithFailHook), to
// restart the store's process.
func (cm *committer) fail(cause error, group []*write) {
	err := fmt.Errorf("%w: %w", ErrFailed, cause)
	cm.log.Error("kv: the committer failed; the store takes no more writes until the agent restarts", "err", err)
	cm.mu.Lock()
	cm.closed, cm.failed = true, err
	queued := cm.queue
	cm.queue = nil
	cm.mu.Unlock()
	if cm.onFail != nil {
		cm.onFail(err) // before any writer hears of it
	}
	for _, w := range append(group, queued...) {
		if w.finished.Load() {
			continue
		}
		w.err = err
		w.finished.Store(true)
		f := w.notify.Swap(nil)
		w.done <- struct{}{}
		if f != nil {
			(*f)()
		}
	}
}

// apply runs w's apply in txn. A panic in it (a command's function, with
// a bug, for some argument) fails w alone with an error wrapping
// panics.ErrPanic: not a clean error, so the group's transaction is
// discarded and the others redone without it, and w is never
// acknowledged. What apply set before panicking was in a transaction (and
// a log mark) that is discarded: nothing of w is applied.
func (cm *committer) apply(w *write, txn *wtxn) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panics.Recovered(cm.log, "kv/commit", v)
		}
	}()
	return w.apply(txn)
}

// commitTxn makes txn's logged effects durable (in Sync mode), then
// commits it to Badger: nothing is visible before it is on disk. Should
// the log write fail, nothing is applied; should Badger's commit fail
// after the log's, the writer hears of it, but the logged effect may come
// back with the log's replay — an error's outcome is unknown, as with any
// store.
func (cm *committer) commitTxn(txn *wtxn) error {
	t0 := time.Now()
	defer func() { cm.commitNanos.Add(uint64(time.Since(t0))) }()
	if cm.wal != nil {
		if err := cm.wal.commit(cm.syncLog, true); err != nil {
			txn.Discard()
			cm.logFailed(err)
			return err
		}
	}
	if err := txn.Commit(); err != nil {
		cm.log.Error("kv: Badger commit after the log's", "err", err)
		return err
	}
	return nil
}

// release forgets w's keys in the read cache — after the commit, so a
// reader that missed before it cannot cache the old value — tells the
// write hook, and wakes its writer.
func (cm *committer) release(w *write) {
	if cm.cache != nil && !w.installed {
		for _, k := range w.keys {
			cm.cache.forget(k)
		}
	}
	if cm.written != nil {
		for _, k := range w.keys {
			cm.written(k)
		}
	}
	w.finished.Store(true)
	f := w.notify.Swap(nil)
	w.done <- struct{}{}
	if f != nil {
		(*f)()
	}
}
