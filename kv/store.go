package kv

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Sentinel errors, checked with errors.Is.
var (
	ErrNotFound  = errors.New("kv: key not found")
	ErrExists    = errors.New("kv: key exists")
	ErrMismatch  = errors.New("kv: value mismatch")
	ErrNotNumber = errors.New("kv: value is not an integer or out of range")
	ErrOverflow  = errors.New("kv: increment or decrement would overflow")
	ErrKeySize   = errors.New("kv: key empty or too large")
	ErrValueSize = errors.New("kv: value too large")
	ErrClosed    = errors.New("kv: store closed")
	// ErrDiskFull: the store's file system has less free space than the
	// store needs to write safely; writes resume, by themselves, once
	// space returns. Reads go on.
	ErrDiskFull = errors.New("kv: disk full: writes refused until space returns")
	// ErrWritesRefused: a write or sync of the store's log failed, so
	// what follows could not be made durable; the store refuses writes
	// until it is opened again. Reads go on.
	ErrWritesRefused = errors.New("kv: writes refused after a failed disk write")
	// ErrFailed: the store's committer panicked (a bug): the store takes
	// no more writes, and its process should restart (WithFailHook);
	// what was acknowledged is on disk.
	ErrFailed = errors.New("kv: the store failed (its committer panicked); restart the agent")
)

// Limits on what a client may store.
const (
	MaxKeySize   = 64 << 10
	MaxValueSize = 32 << 20
)

// Durability says when a write is acknowledged.
type Durability int

const (
	// Sync: acknowledged once on disk (fsync), commits grouped.
	Sync Durability = iota
	// Async: acknowledged once in memory; a crash may lose recent writes.
	Async
)

func (d Durability) String() string {
	if d == Async {
		return "async"
	}
	return "sync"
}

// ParseDurability reads "sync" or "async".
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "sync", "":
		return Sync, nil
	case "async":
		return Async, nil
	}
	return Sync, fmt.Errorf("kv: durability %q: want sync or async", s)
}

// Option configures Open (reedsolomon style: documented defaults).
type Option func(*config)

type config struct {
	durability  Durability
	memtable    int64
	memtables   int
	blockCache  int64
	indexCache  int64
	valueThresh int64
	cacheBytes  int64
	flushEvery  time.Duration
	inMemory    bool
	lazy        bool
	diskSize    int64                // tests: size the store for a disk of this size
	logSync     func(*os.File) error // tests: the log's fdatasync
	log         *slog.Logger
	written     func(key []byte)
	onFail      func(error)
}

// WithDurability sets when writes are acknowledged (default Sync).
func WithDurability(d Durability) Option { return func(c *config) { c.durability = d } }

// WithMemory sets the memtable size and the block and index cache sizes
// (defaults 16 MiB, 16 MiB, 8 MiB; two memtables).
func WithMemory(memtable, blockCache, indexCache int64) Option {
	return func(c *config) { c.memtable, c.blockCache, c.indexCache = memtable, blockCache, indexCache }
}

// WithCache sets the read cache's byte budget (default 32 MiB; 0 turns it
// off). It holds values of up to 4 KiB.
func WithCache(bytes int64) Option { return func(c *config) { c.cacheBytes = bytes } }

// WithFlushInterval sets how long, at most, a plain Put held in the cache
// waits before the committer writes it to Badger (default 10s; sooner
// whenever another kind of write needs the committer, the cache's dirty
// share fills or the log reaches a checkpoint). The log holds it
// meanwhile, so this bounds the log's replay, not what a crash loses.
func WithFlushInterval(d time.Duration) Option { return func(c *config) { c.flushEvery = d } }

// WithOpenOnFirstUse opens Badger, replays the log and checks the store
// in Open, then closes Badger again until the first operation needs it: an
// agent whose store is never used runs none of Badger's goroutines (its
// compactors wake every 50 ms, about 1% of a core when idle). Errors
// still show in Open.
func WithOpenOnFirstUse() Option { return func(c *config) { c.lazy = true } }

// WithInMemory keeps everything in memory (tests).
func WithInMemory() Option { return func(c *config) { c.inMemory = true } }

// WithWriteHook makes the store call f with every key a write may have
// changed, once the write is visible to Get and before it is
// acknowledged — whichever path the write took (queued, or acknowledged
// from the cache). A cache of the store's values outside it (the XDP
// hot-GET map) drops the key there, so no reader sees an older value after
// the acknowledgement. f runs on the writer's or the committer's
// goroutine: it must be quick and must not block.
func WithWriteHook(f func(key []byte)) Option { return func(c *config) { c.written = f } }

// WithFailHook calls f, once, if the store fails for good (ErrFailed: its
// committer panicked), so that its owner stops and is restarted. f runs on
// the committer's goroutine and must not block.
func WithFailHook(f func(error)) Option { return func(c *config) { c.onFail = f } }

// WithLogger sends Badger's warnings and errors to log.
func WithLogger(log *slog.Logger) Option { return func(c *config) { c.log = log } }

// Store is a Badger-backed key-value store. It is safe for concurrent use.
type Store struct {
	db     *badger.DB // set once awake
	cfg    config
	closed atomic.Bool
	cache  *cache        // nil: off
	commit *committer    // set once awake
	clock  atomic.Uint64 // versions of writes acknowledged from the cache

	// Opening Badger (at once, or on first use): wake runs it once; awake
	// says it succeeded, wakeErr why not.
	open func() (*badger.DB, *wal, error)
	plan diskPlan // sizes that follow the disk's (disk.go)
	// The sweeper of expired keys (sweep.go): closing stop stops it.
	sweepStop, sweepDone chan struct{}
	guard                *diskGuard // the disk's free space; nil: in memory
	wake                 sync.Once
	awake                atomic.Bool
	wakeErr              error

	gets, puts, dels, scans, misses atomic.Uint64

	gate sync.RWMutex // see Gate
}

// Gate orders the front ends around transactions: every front-end
// operation (a RESP command, a handoff op, a UDP GET) holds it shared,
// and a RESP EXEC holds it alone while its queued commands run, so no
// other client's operation, from any front end, lands or looks between
// them. The store's own methods do not take it.
func (s *Store) Gate() *sync.RWMutex { return &s.gate }

// Open opens (creating) the store in dir.
func Open(dir string, opts ...Option) (*Store, error) {
	cfg := config{durability: Sync, memtable: 16 << 20, memtables: 2, blockCache: 16 << 20, indexCache: 8 << 20, valueThresh: 1 << 10,
		cacheBytes: 32 << 20, flushEvery: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.flushEvery <= 0 {
		cfg.flushEvery = 10 * time.Second
	}
	log := cfg.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The store keeps its own log (wal.go) and lets Badger write without
	// syncing; without a disk there is nothing to log.
	useWAL := !cfg.inMemory
	var total int64
	if !cfg.inMemory {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("kv: %w", err)
		}
		var err error
		if total, _, err = fsSpace(dir); err != nil {
			return nil, err
		}
	}
	if cfg.diskSize > 0 {
		total = cfg.diskSize
	}
	plan := planDisk(total, cfg.memtable, cfg.memtables) // disk.go
	bo := badger.DefaultOptions(dir).
		WithSyncWrites(false).
		WithMemTableSize(plan.memtable).
		WithNumMemtables(cfg.memtables).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(cfg.blockCache).
		WithIndexCacheSize(cfg.indexCache).
		WithValueThreshold(cfg.valueThresh).
		WithValueLogFileSize(plan.vlogFile).
		WithNumCompactors(2).
		WithCompression(options.None).
		WithDetectConflicts(false). // one writer: the committer
		WithLogger(badgerLogger{cfg.log})
	if cfg.inMemory {
		bo = bo.WithInMemory(true).WithDir("").WithValueDir("")
	}
	open := func() (*badger.DB, *wal, error) {
		db, err := badger.Open(bo)
		if err != nil {
			return nil, nil, fmt.Errorf("kv: open %s: %w", dir, err)
		}
		var l *wal
		if useWAL {
			if l, err = recoverWAL(db, dir, log); err != nil {
				db.Close()
				return nil, nil, err
			}
			l.ahead = plan.ahead
			if cfg.logSync != nil {
				l.sync = cfg.logSync
			}
		}
		return db, l, nil
	}
	s := &Store{cfg: cfg, open: open, plan: plan}
	if !cfg.inMemory {
		s.guard = newDiskGuard(dir, plan)
	}
	if cfg.cacheBytes > 0 {
		s.cache = newCache(cfg.cacheBytes)
	}
	// Versions of writes acknowledged from the cache: the top bit set, so
	// never one of Badger's commit timestamps, and counting on from the
	// time in nanoseconds, which a restart's new start outruns.
	s.clock.Store(1<<63 | uint64(time.Now().UnixNano())&(1<<63-1))
	if cfg.lazy && !cfg.inMemory {
		// Open and replay now, so errors show here; Badger then rests
		// until the first operation.
		db, l, err := open()
		if err != nil {
			return nil, err
		}
		err = errors.Join(db.Close(), l.close())
		if err != nil {
			return nil, fmt.Errorf("kv: close %s after checking it: %w", dir, err)
		}
		return s, nil
	}
	if err := s.ready(); err != nil {
		return nil, err
	}
	return s, nil
}

// ready opens Badger and starts the committer, once: at Open, or at the
// first operation with WithOpenOnFirstUse.
func (s *Store) ready() error {
	if s.awake.Load() {
		return nil
	}
	s.wake.Do(func() {
		db, l, err := s.open()
		if err != nil {
			s.wakeErr = err
			return
		}
		s.db = db
		if s.cache != nil && s.cfg.durability == Async {
			s.cache.log = l // writers log their cached Puts themselves
		}
		s.commit = newCommitter(db, s.cache, l, s.cfg.durability == Sync, &s.clock, s.cfg.flushEvery, s.cfg.logger())
		s.commit.written = s.cfg.written
		s.commit.onFail = s.cfg.onFail
		s.commit.guard = s.guard
		s.commit.checkpointAt.Store(s.plan.checkpoint)
		if !s.cfg.inMemory {
			s.commit.dir = db.Opts().Dir
		}
		go s.commit.run()
		s.sweepStop, s.sweepDone = make(chan struct{}), make(chan struct{})
		go s.sweeper(s.sweepStop, s.sweepDone)
		s.awake.Store(true)
	})
	if !s.awake.Load() {
		if s.wakeErr == nil {
			return ErrClosed
		}
		return s.wakeErr
	}
	return nil
}

func (c config) logger() *slog.Logger {
	if c.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.log
}

// recoverWAL opens the store's log and replays it onto Badger: effects of
// acknowledged writes that Badger lost in a crash come back. Badger then
// syncs and the log starts empty.
func recoverWAL(db *badger.DB, dir string, log *slog.Logger) (*wal, error) {
	l, err := openWAL(filepath.Join(dir, walName))
	if err != nil {
		return nil, err
	}
	txn := db.NewTransaction(true)
	var size, count int64
	n, err := l.replay(func(r walRecord) error {
		if size+entrySize(r.key, r.value) > db.MaxBatchSize()/2 || count+1 > db.MaxBatchCount()/2 {
			if err := txn.Commit(); err != nil {
				return err
			}
			txn, size, count = db.NewTransaction(true), 0, 0
		}
		size += entrySize(r.key, r.value)
		count++
		if r.op == walDelete {
			return txn.Delete(bytes.Clone(r.key))
		}
		e := badger.NewEntry(bytes.Clone(r.key), bytes.Clone(r.value)).WithMeta(byte(r.kind))
		e.ExpiresAt = r.expires
		return txn.SetEntry(e)
	})
	if err == nil {
		err = txn.Commit()
	} else {
		txn.Discard()
	}
	if err == nil {
		err = db.Sync()
	}
	if err == nil {
		err = syncBadgerFiles(dir)
	}
	if err == nil {
		err = l.reset()
	}
	if err != nil {
		l.close()
		return nil, fmt.Errorf("kv: replay the log: %w", err)
	}
	if n > 0 {
		log.Info("kv: replayed the log", "records", n)
	}
	return l, nil
}

// MemoryBudget is the memory the store is configured to hold at most in
// memtables and caches (Badger adds its goroutines and some buffers).
func (s *Store) MemoryBudget() int64 {
	return s.cfg.memtable*int64(s.cfg.memtables) + s.cfg.blockCache + s.cfg.indexCache + s.cfg.cacheBytes
}

// WriteErr is why the store refuses writes now — ErrDiskFull (it
// resumes once space returns) or ErrWritesRefused (a failed sync: until
// the store is opened again) — or nil. Reads are served either way.
func (s *Store) WriteErr() error {
	if s.awake.Load() { // s.commit is set before awake
		if c := s.commit; c.wal != nil {
			if err := c.wal.failed(); err != nil {
				return err
			}
		}
	}
	return s.guard.err()
}

// MaxValueSize is the largest value the store takes: MaxValueSize, or
// less on a small disk (a value must fit in one of Badger's value-log
// files, which the disk's size bounds).
func (s *Store) MaxValueSize() int { return s.plan.maxValue }

// Durability returns how writes are acknowledged.
func (s *Store) Durability() Durability { return s.cfg.durability }

// Close flushes and closes the store.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.wake.Do(func() {}) // a store never used stays closed
	if !s.awake.Load() {
		return nil
	}
	close(s.sweepStop)
	<-s.sweepDone
	s.commit.close()
	err := s.db.Close()
	if s.commit.wal != nil {
		err = errors.Join(err, s.commit.wal.close())
	}
	return err
}

// Entry is a stored value with what a cache needs to know about it.
type Entry struct {
	Value     []byte
	Kind      Kind      // KindString but from Lookup
	Version   uint64    // changes with every write of the key, never back to an earlier value
	ExpiresAt time.Time // zero: never
}

func checkKey(k []byte) error {
	if len(k) == 0 || len(k) > MaxKeySize {
		return fmt.Errorf("key of %d bytes: %w", len(k), ErrKeySize)
	}
	return nil
}

func (s *Store) view(f func(txn *badger.Txn) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.ready(); err != nil {
		return err
	}
	return s.db.View(f)
}

// update runs f in the committer's transaction (see commit.go): writes
// are serialised, so read-modify-write ops are atomic. keys are those f may
// change; size and count bound what f adds to the transaction.
func (s *Store) update(keys [][]byte, size, count int64, f func(txn *wtxn) error) error {
	return s.start(keys, size, count, f).Wait()
}

// Pending is a write queued by PutAsync.
type Pending struct{ w *write }

// start queues a write for the committer and returns at once. Once the
// store is closed the committer refuses it: ErrClosed.
func (s *Store) start(keys [][]byte, size, count int64, f func(txn *wtxn) error) Pending {
	return s.startPut(nil, keys, size, count, f)
}

// startPut is start for a Put the committer may take into the cache.
func (s *Store) startPut(put *cachedPut, keys [][]byte, size, count int64, f func(txn *wtxn) error) Pending {
	w := writePool.Get().(*write)
	w.apply, w.put, w.keys, w.size, w.count = f, put, keys, size, count
	if err := s.ready(); err != nil {
		return failed(w, err)
	}
	if count > 0 {
		if err := s.WriteErr(); err != nil {
			return failed(w, err)
		}
	}
	if err := s.commit.submit(w); err != nil {
		return failed(w, err)
	}
	return Pending{w}
}

// failed is a Pending already done with err.
func failed(w *write, err error) Pending {
	w.err = err
	w.finished.Store(true)
	w.done <- struct{}{}
	return Pending{w}
}

// Notify arranges for f to run once the write is done, so an event loop
// can wait for it without blocking: f runs on the committer (it must not
// block), or at once here if the write is done already. Call Wait after.
func (p Pending) Notify(f func()) {
	p.w.notify.Store(&f)
	if p.w.finished.Load() {
		if g := p.w.notify.Swap(nil); g != nil {
			(*g)()
		}
	}
}

// Wait waits until the write is committed — on disk in Sync mode — and
// returns its error. Call it exactly once.
func (p Pending) Wait() error {
	<-p.w.done
	err := p.w.err
	done := p.w.done
	*p.w = write{}
	p.w.done = done
	writePool.Put(p.w)
	return err
}

// entrySize is what one write of key and value may add to a transaction,
// on the high side of Badger's own estimate.
func entrySize(key, value []byte) int64 { return int64(len(key)+len(value)) + 32 }

func entryOf(item *badger.Item, dst []byte) (Entry, error) {
	v, err := item.ValueCopy(dst[:0])
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Value: v, Version: item.Version(), Kind: Kind(item.UserMeta())}
	if exp := item.ExpiresAt(); exp != 0 {
		e.ExpiresAt = time.UnixMilli(int64(expiryMs(exp)))
	}
	return e, nil
}

// Get returns the entry of key, or ErrNotFound, or ErrWrongType when the
// key holds a typed value (see Kind). The value is appended to dst[:0]
// (pass nil to allocate).
func (s *Store) Get(key, dst []byte) (Entry, error) {
	e, err := s.Lookup(key, dst)
	if err == nil && e.Kind != KindString {
		return Entry{Kind: e.Kind}, ErrWrongType
	}
	return e, err
}

// Lookup is Get of a key of any kind: Entry.Kind says which.
func (s *Store) Lookup(key, dst []byte) (Entry, error) {
	if err := checkKey(key); err != nil {
		return Entry{}, err
	}
	if s.closed.Load() {
		return Entry{}, ErrClosed
	}
	s.gets.Add(1)
	var seq uint64
	if s.cache != nil {
		e, absent, sq, hit := s.cache.get(key, dst)
		switch {
		case hit && absent:
			s.misses.Add(1)
			return Entry{}, ErrNotFound
		case hit:
			return e, nil
		}
		seq = sq
	}
	var e Entry
	err := s.view(func(txn *badger.Txn) error {
		item, err := getLive(txn, key)
		if err != nil {
			return err
		}
		e, err = entryOf(item, dst)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		s.misses.Add(1)
		if s.cache != nil {
			s.cache.fill(key, Entry{}, true, seq)
		}
		return Entry{}, ErrNotFound
	}
	if err == nil && s.cache != nil && e.Kind == KindString {
		s.cache.fill(key, e, false, seq)
	}
	return e, err
}

// PutOptions qualify a Put.
type PutOptions struct {
	TTL         time.Duration // 0: no expiry; to the millisecond, rounded up
	At          time.Time     // with TTL set: expire at this time instead (EXAT, PXAT)
	IfAbsent    bool          // NX
	IfPresent   bool          // XX
	KeepTTL     bool          // keep the key's current expiry
	ReturnPrior bool          // fill the prior value in Put's result
}

// expiry is the store's expiry for o (TTL > 0).
func (o PutOptions) expiry() uint64 {
	if !o.At.IsZero() {
		return ExpiryMillis(o.At)
	}
	return expiresAt(o.TTL)
}

// Put stores value under key. With IfAbsent/IfPresent it fails with
// ErrExists/ErrNotFound when the condition does not hold.
func (s *Store) Put(key, value []byte, o PutOptions) (prior []byte, err error) {
	if err := s.checkPut(key, value); err != nil {
		return nil, err
	}
	if s.putCached(key, value, o) {
		return nil, nil
	}
	err = s.putWrite(key, value, o, &prior).Wait()
	return prior, err
}

// PutNoWait stores value under key if it can without waiting — in Async
// mode, a plain Put of a cacheable value is acknowledged from the cache —
// and reports whether it did; err is a bad key or value. An event loop
// runs it inline and hands the other Puts to a goroutine.
func (s *Store) PutNoWait(key, value []byte, o PutOptions) (done bool, err error) {
	if err := s.checkPut(key, value); err != nil {
		return true, err
	}
	return s.putCached(key, value, o), nil
}

// putCached acknowledges an Async plain Put from the cache (see cache.go),
// and reports whether it could. (Sync plain Puts go through the committer,
// which may put them in the cache once logged: putWrite.)
func (s *Store) putCached(key, value []byte, o PutOptions) bool {
	if s.cfg.durability != Async || s.cache == nil || o.IfAbsent || o.IfPresent || o.KeepTTL || o.ReturnPrior ||
		s.closed.Load() || s.ready() != nil || s.WriteErr() != nil {
		return false // the committer's path (which refuses it, if the store may not write)
	}
	// What it will write — its log record, then its entry in Badger —
	// counts against the disk's margin, as a committer round's does.
	if s.guard.room(2*(entrySize(key, value)+walHeader)) != nil {
		return false // the committer's path refuses it
	}
	var exp int64
	if o.TTL > 0 {
		exp = int64(o.expiry())
	}
	ok, now, logged := s.cache.putDirty(key, value, exp, s.clock.Add(1))
	if !ok && s.commit.wal != nil && s.commit.wal.pending.Load() > walMaxShared {
		// The writers' records wait for the committer: give it the P
		// (see below) and try once more before taking the slow way.
		s.commit.signal()
		runtime.Gosched()
		ok, now, logged = s.cache.putDirty(key, value, exp, s.clock.Add(1))
	}
	if ok && exp != 0 {
		s.commit.hasTTL.Store(true)
	}
	if ok {
		if s.cfg.written != nil {
			s.cfg.written(key)
		}
		s.puts.Add(1)
		s.commit.dirtied(now)
		if logged {
			// The first record since the log's last write (start its
			// timer), or the records just passed walWriteSoon (write
			// them now): let the committer run now, even when this
			// goroutine holds the only P (an agent on one core). A
			// front end that keeps taking writes would otherwise run
			// until the runtime preempts it, its writers' records piling
			// up past walMaxShared meanwhile, which sends writes the slow
			// way, through the committer.
			s.commit.signal()
			runtime.Gosched()
		}
	} else if now {
		s.commit.signal()
	}
	return ok
}

// settle makes Badger hold every write acknowledged so far, for reads that
// go to Badger past the cache (scans): it waits for a committer round,
// which flushes the cache's dirty entries.
func (s *Store) settle() error {
	if s.cache == nil {
		return nil
	}
	return s.update(nil, 0, 0, func(*wtxn) error { return nil })
}

// PutAsync queues a Put (ReturnPrior ignored) and returns at once: a
// pipelining front end queues a run of writes, so they share one commit,
// then waits for each. key and value must stay unchanged until Wait
// returns. Writes queued by one goroutine commit in the order queued.
func (s *Store) PutAsync(key, value []byte, o PutOptions) Pending {
	if err := s.checkPut(key, value); err != nil {
		return failed(writePool.Get().(*write), err)
	}
	o.ReturnPrior = false
	// Always queued, never taken from the cache: a cached write would
	// overtake the caller's queued ones.
	return s.putWrite(key, value, o, nil)
}

func (s *Store) checkPut(key, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if len(value) > s.plan.maxValue {
		return fmt.Errorf("value of %d bytes: %w", len(value), ErrValueSize)
	}
	return nil
}

func (s *Store) putWrite(key, value []byte, o PutOptions, priorOut *[]byte) Pending {
	s.puts.Add(1)
	var put *cachedPut
	if s.cache != nil && !(o.IfAbsent || o.IfPresent || o.KeepTTL || o.ReturnPrior) && len(value) <= cacheMaxValue {
		put = &cachedPut{key: key, value: value}
		if o.TTL > 0 {
			put.expires = o.expiry()
		}
	}
	return s.startPut(put, [][]byte{key}, entrySize(key, value), 1, func(txn *wtxn) error {
		var prior []byte
		if priorOut != nil {
			*priorOut = nil
		}
		var exp uint64
		if o.IfAbsent || o.IfPresent || o.KeepTTL || o.ReturnPrior {
			item, err := getLive(txn, key)
			switch {
			case errors.Is(err, badger.ErrKeyNotFound):
				if o.IfPresent {
					return ErrNotFound
				}
			case err != nil:
				return err
			default:
				if o.IfAbsent {
					return ErrExists
				}
				exp = item.ExpiresAt()
				if o.ReturnPrior {
					if item.UserMeta() != byte(KindString) {
						return ErrWrongType
					}
					if prior, err = item.ValueCopy(nil); err != nil {
						return err
					}
					*priorOut = prior
				}
			}
		}
		e := badger.NewEntry(key, value)
		switch {
		case o.TTL > 0:
			e.ExpiresAt = o.expiry()
		case o.KeepTTL && exp != 0:
			e.ExpiresAt = exp
		}
		return txn.SetEntry(e)
	})
}

// Expiries are kept in Badger's ExpiresAt as Unix milliseconds, so a key
// expires to the millisecond, as in Redis. Badger compares ExpiresAt with
// the time in seconds and so never hides such an entry itself: the store
// does, on every read (getLive, the iterators, the cache), and its
// committer sweeps expired keys away (sweep.go). An ExpiresAt below
// legacyExpiry is in seconds, written by an earlier version of the store
// (Badger hides those itself); expiryMs reads both.
const legacyExpiry = 100_000_000_000 // as milliseconds 1973, as seconds the year 5138

// expiryMs is a raw ExpiresAt in Unix milliseconds (0: never).
func expiryMs(raw uint64) uint64 {
	if raw != 0 && raw < legacyExpiry {
		return raw * 1000
	}
	return raw
}

// expired reports whether a raw ExpiresAt is at or before now (Unix ms).
func expired(raw, now uint64) bool { return raw != 0 && expiryMs(raw) <= now }

func nowMs() uint64 { return uint64(time.Now().UnixMilli()) }

// getLive is txn.Get of a key that has not expired: an expired one is
// badger.ErrKeyNotFound.
func getLive(txn interface {
	Get(key []byte) (*badger.Item, error)
}, key []byte) (*badger.Item, error) {
	item, err := txn.Get(key)
	if err == nil && expired(item.ExpiresAt(), nowMs()) {
		return nil, badger.ErrKeyNotFound
	}
	return item, err
}

// ExpiryAfter is the expiry the store keeps for a key given ttl now.
func ExpiryAfter(ttl time.Duration) uint64 { return expiresAt(ttl) }

// expiresAt returns the expiry of a key written now with ttl: as Redis,
// the current millisecond plus ttl in milliseconds (rounded up), so PTTL
// at once says ttl.
func expiresAt(ttl time.Duration) uint64 {
	ms := int64(ttl / time.Millisecond) // rounded up, without overflowing at 292 years
	if ttl%time.Millisecond != 0 {
		ms++
	}
	return uint64(max(time.Now().UnixMilli()+ms, legacyExpiry))
}

// ExpiryMillis is the expiry the store keeps for t: Unix milliseconds,
// rounded up (a key lives at least as long as asked); a time before 1973
// (in the past: the key is gone) is kept as 1973.
func ExpiryMillis(t time.Time) uint64 {
	ms := t.UnixMilli()
	if t.Nanosecond()%1e6 != 0 {
		ms++
	}
	return uint64(max(ms, legacyExpiry))
}

// Delete removes keys and returns how many existed.
func (s *Store) Delete(keys ...[]byte) (int, error) {
	n := 0
	var size int64
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return 0, err
		}
		size += entrySize(k, nil)
	}
	s.dels.Add(uint64(len(keys)))
	err := s.update(keys, size, int64(len(keys)), func(txn *wtxn) error {
		n = 0
		for _, k := range keys {
			if _, err := getLive(txn, k); errors.Is(err, badger.ErrKeyNotFound) {
				continue
			} else if err != nil {
				return err
			}
			n++
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// Expire sets (ttl > 0) or removes (ttl == 0, PERSIST) a key's expiry. It
// reports whether the key exists.
func (s *Store) Expire(key []byte, ttl time.Duration) (bool, error) {
	var at uint64
	if ttl > 0 {
		at = expiresAt(ttl)
	}
	return s.expireAt(key, at)
}

// ExpireAt sets a key's expiry to t, to the millisecond (t rounded up).
// It reports whether the key exists.
func (s *Store) ExpireAt(key []byte, t time.Time) (bool, error) {
	return s.expireAt(key, ExpiryMillis(t))
}

// expireAt sets key's expiry to Unix millisecond at (0: none).
func (s *Store) expireAt(key []byte, at uint64) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	found := false
	err := s.update([][]byte{key}, entrySize(key, nil), 1, func(txn *wtxn) error {
		item, err := getLive(txn, key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		e := badger.NewEntry(key, v).WithMeta(item.UserMeta())
		e.ExpiresAt = at
		return txn.SetEntry(e)
	})
	return found, err
}

// IncrBy adds delta to the integer stored at key (0 when absent), keeping
// its expiry, and returns the new value.
func (s *Store) IncrBy(key []byte, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	var n int64
	err := s.update([][]byte{key}, entrySize(key, nil)+20, 1, func(txn *wtxn) error {
		var cur int64
		var exp uint64
		item, err := getLive(txn, key)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			if item.UserMeta() != byte(KindString) {
				return ErrWrongType
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			var ok bool
			if cur, ok = ParseInt(v); !ok {
				return ErrNotNumber
			}
			exp = item.ExpiresAt()
		}
		if (delta > 0 && cur > (1<<63-1)-delta) || (delta < 0 && cur < -(1<<63)-delta) {
			return ErrOverflow
		}
		n = cur + delta
		e := badger.NewEntry(key, strconv.AppendInt(nil, n, 10))
		e.ExpiresAt = exp
		return txn.SetEntry(e)
	})
	s.puts.Add(1)
	return n, err
}

// Cell is one key of an Update: what it holds, and what to make of it.
type Cell struct {
	Key     []byte
	Value   []byte // the current value (f may keep it: it is f's)
	Kind    Kind   // the current kind, and the kind Write stores
	Expires uint64 // the current expiry, Unix milliseconds (0: never)
	Exists  bool
	// Set by f: Write stores Value with Expires; Delete deletes the key;
	// neither leaves it as it is.
	Write, Delete bool
}

// Update reads keys and lets f decide what to write, atomically with
// every other write of the store (RENAME, MSETNX and the like). f sees
// one Cell per key, in order, and marks each to write, delete or leave;
// an error from f changes nothing and Update returns it. maxSize bounds
// the bytes f writes. f runs on the store's committer, inside its
// transaction: it must be quick.
func (s *Store) Update(keys [][]byte, maxSize int, f func(cells []Cell) error) error {
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	s.puts.Add(1)
	maxSize = min(maxSize, s.plan.maxValue*max(1, len(keys)))
	size := int64(maxSize)
	for _, k := range keys {
		size += entrySize(k, nil)
	}
	return s.update(keys, size, int64(len(keys)), func(txn *wtxn) error {
		cells := make([]Cell, len(keys))
		for i, k := range keys {
			cells[i].Key = k
			item, err := getLive(txn, k)
			switch {
			case errors.Is(err, badger.ErrKeyNotFound):
				continue
			case err != nil:
				return err
			}
			if cells[i].Value, err = item.ValueCopy(nil); err != nil {
				return err
			}
			cells[i].Expires, cells[i].Exists, cells[i].Kind = expiryMs(item.ExpiresAt()), true, Kind(item.UserMeta())
		}
		if err := f(cells); err != nil {
			return refusedError{err}
		}
		written := 0
		for _, c := range cells {
			if c.Write {
				written += len(c.Value)
				if len(c.Value) > s.plan.maxValue || written > maxSize {
					return refusedError{fmt.Errorf("value of %d bytes: %w", len(c.Value), ErrValueSize)}
				}
			}
		}
		for _, c := range cells {
			switch {
			case c.Write:
				if c.Kind > maxKind {
					return refusedError{fmt.Errorf("kind %d: %w", c.Kind, ErrWrongType)}
				}
				e := badger.NewEntry(c.Key, c.Value).WithMeta(byte(c.Kind))
				e.ExpiresAt = c.Expires
				if err := txn.SetEntry(e); err != nil {
					return err
				}
			case c.Delete && c.Exists:
				if err := txn.Delete(c.Key); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Modify replaces key's string with what f makes of the current one,
// atomically with every other write, keeping the key's expiry: f gets
// the value (exists false: none) and returns the new value, or del to
// delete the key, or an error to change nothing (Modify returns it). A
// key holding a typed value is ErrWrongType, f not called.
// maxSize bounds the new value. f runs on the store's committer, inside
// its transaction: it must be quick.
func (s *Store) Modify(key []byte, maxSize int, f func(cur []byte, exists bool) (next []byte, del bool, err error)) error {
	return s.Update([][]byte{key}, maxSize, func(cells []Cell) error {
		c := &cells[0]
		if c.Exists && c.Kind != KindString {
			return ErrWrongType
		}
		next, del, err := f(c.Value, c.Exists)
		if err != nil {
			return err
		}
		c.Value, c.Write, c.Delete = next, !del, del
		return nil
	})
}

// ParseInt reads a 64-bit integer as Redis does (string2ll): an optional
// minus sign and decimal digits, no plus sign, no spaces, no leading zeros
// ("0" alone is one), no "-0", nothing that overflows.
func ParseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	digits := b
	if neg {
		digits = b[1:]
	}
	if len(digits) == 0 || digits[0] < '1' || digits[0] > '9' {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}

// CompareAndSwap replaces key's value with new if it is old (old == nil:
// the key must be absent). It fails with ErrMismatch otherwise.
func (s *Store) CompareAndSwap(key, old, new []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	s.puts.Add(1)
	return s.update([][]byte{key}, entrySize(key, new), 1, func(txn *wtxn) error {
		item, err := getLive(txn, key)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			if old != nil {
				return ErrMismatch
			}
		case err != nil:
			return err
		default:
			if old == nil || item.UserMeta() != byte(KindString) {
				return ErrMismatch
			}
			eq := false
			if err := item.Value(func(v []byte) error { eq = bytes.Equal(v, old); return nil }); err != nil {
				return err
			}
			if !eq {
				return ErrMismatch
			}
		}
		return txn.Set(key, new)
	})
}

// Op is one write of a Batch.
type Op struct {
	Delete bool
	Key    []byte
	Value  []byte
	TTL    time.Duration
}

// Batch applies ops atomically: all or none.
func (s *Store) Batch(ops []Op) error {
	keys := make([][]byte, len(ops))
	var size int64
	for i, o := range ops {
		if err := checkKey(o.Key); err != nil {
			return err
		}
		if len(o.Value) > s.plan.maxValue {
			return ErrValueSize
		}
		keys[i] = o.Key
		size += entrySize(o.Key, o.Value)
	}
	s.puts.Add(uint64(len(ops)))
	return s.update(keys, size, int64(len(ops)), func(txn *wtxn) error {
		for _, o := range ops {
			var err error
			if o.Delete {
				err = txn.Delete(o.Key)
			} else {
				e := badger.NewEntry(o.Key, o.Value)
				if o.TTL > 0 {
					e.ExpiresAt = expiresAt(o.TTL)
				}
				err = txn.SetEntry(e)
			}
			if err != nil {
				return err // ErrTxnTooBig included: nothing is applied
			}
		}
		return nil
	})
}

// KV is a key and its value, from Scan.
type KV struct {
	Key, Value []byte
	Kind       Kind
}

// Scan returns up to limit pairs whose keys start with prefix, from the
// first key ≥ cursor (nil: the start), in key order, and the cursor for the
// next call (nil when done). Keys only when keysOnly.
func (s *Store) Scan(prefix, cursor []byte, limit int, keysOnly bool) ([]KV, []byte, error) {
	if limit <= 0 {
		limit = 10
	}
	s.scans.Add(1)
	if err := s.settle(); err != nil {
		return nil, nil, err
	}
	var out []KV
	var next []byte
	err := s.view(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Prefix = prefix
		o.PrefetchValues = !keysOnly
		it := txn.NewIterator(o)
		defer it.Close()
		start := prefix
		if bytes.Compare(cursor, prefix) > 0 {
			start = cursor
		}
		now := nowMs()
		for it.Seek(start); it.ValidForPrefix(prefix); it.Next() {
			item := it.Item()
			if expired(item.ExpiresAt(), now) {
				continue
			}
			if len(out) == limit {
				next = item.KeyCopy(nil)
				return nil
			}
			kv := KV{Key: item.KeyCopy(nil), Kind: Kind(item.UserMeta())}
			if !keysOnly {
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				kv.Value = v
			}
			out = append(out, kv)
		}
		return nil
	})
	return out, next, err
}

// DeleteAll deletes every key (FLUSHALL), a page of deleteAllPage at a
// time through the ordinary write path: each page is logged and durable
// like any delete, and the write hook sees every key. It is not atomic:
// a write that lands meanwhile behind the page being deleted survives.
// It returns the number of keys deleted.
func (s *Store) DeleteAll() (int, error) {
	n := 0
	for {
		page, _, err := s.Scan(nil, nil, deleteAllPage, true)
		if err != nil || len(page) == 0 {
			return n, err
		}
		keys := make([][]byte, len(page))
		for i, kv := range page {
			keys[i] = kv.Key
		}
		d, err := s.Delete(keys...)
		n += d
		if err != nil || d == 0 { // d == 0: nothing the scan showed was there to delete
			return n, err
		}
	}
}

const deleteAllPage = 1024

// Count returns the number of live keys (DBSIZE). It iterates keys.
func (s *Store) Count() (int, error) {
	if err := s.settle(); err != nil {
		return 0, err
	}
	n := 0
	err := s.view(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		now := nowMs()
		for it.Rewind(); it.Valid(); it.Next() {
			if !expired(it.Item().ExpiresAt(), now) {
				n++
			}
		}
		return nil
	})
	return n, err
}

// Stats are the store's counters.
type Stats struct {
	Gets, Puts, Deletes, Scans, Misses uint64
	LSMBytes, VlogBytes                int64
	MemoryBudget                       int64
	Durability                         string
	// Commits are the durable rounds the committer made — log syncs in
	// Sync mode, Badger transactions in Async mode — for Writes writes:
	// Writes/Commits is the mean group size. Flushes are the Badger
	// transactions that wrote Flushed writes acknowledged from the cache
	// (several writes of a key between flushes cost one).
	Commits, Writes  uint64
	Flushes, Flushed uint64
	CommitTime       time.Duration // spent committing and syncing
	// Checkpoints counts the log's restarts once Badger held, synced,
	// everything in it.
	Checkpoints uint64
	// The read cache: entries, bytes held and hits so far.
	CacheEntries int
	CacheBytes   int64
	CacheHits    uint64
	// WritesRefused is why writes are refused now ("": they are not):
	// see WriteErr. Refusals counts writes refused for a full disk;
	// DiskFree is the free space last read, DiskReserve what the store
	// keeps free (0: in memory).
	WritesRefused         string
	Refusals              uint64
	DiskFree, DiskReserve int64
	// LogSync is how the log is synced: "aio" (waited for without
	// holding a thread) or "fdatasync" ("": no log).
	LogSync string
}

// LogSync is how the store's log is synced: "aio", "fdatasync", or ""
// (no log: in memory, or not opened yet).
func (s *Store) LogSync() string {
	if !s.awake.Load() || s.commit.wal == nil { // s.commit is set before awake
		return ""
	}
	return s.commit.wal.syncer.kind()
}

// Stats returns counters and on-disk sizes.
func (s *Store) Stats() Stats {
	st := Stats{Gets: s.gets.Load(), Puts: s.puts.Load(), Deletes: s.dels.Load(), Scans: s.scans.Load(),
		Misses: s.misses.Load(), MemoryBudget: s.MemoryBudget(), Durability: s.cfg.durability.String()}
	if s.awake.Load() {
		st.LSMBytes, st.VlogBytes = s.db.Size()
		st.Commits, st.Writes = s.commit.groups.Load(), s.commit.writes.Load()
		st.Flushes, st.Flushed, st.CommitTime = s.commit.flushes.Load(), s.commit.flushed.Load(), time.Duration(s.commit.commitNanos.Load())
		st.Checkpoints = s.commit.checkpoints.Load()
	}
	st.LogSync = s.LogSync()
	if s.cache != nil {
		st.CacheEntries, st.CacheBytes, st.CacheHits = s.cache.stats()
	}
	if err := s.WriteErr(); err != nil {
		st.WritesRefused = err.Error()
	}
	if g := s.guard; g != nil {
		st.Refusals, st.DiskFree, st.DiskReserve = g.refusals.Load(), g.free.Load(), g.reserve
	}
	return st
}

// badgerLogger passes Badger's warnings and errors to slog and drops its
// info and debug chatter.
type badgerLogger struct{ log *slog.Logger }

func (l badgerLogger) Errorf(f string, a ...any) {
	if l.log != nil {
		l.log.Error("badger: " + fmt.Sprintf(f, a...))
	}
}
func (l badgerLogger) Warningf(f string, a ...any) {
	if l.log != nil {
		l.log.Warn("badger: " + fmt.Sprintf(f, a...))
	}
}
func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
