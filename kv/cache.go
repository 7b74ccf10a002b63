package kv

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// The read cache keeps recently read entries in Go maps in front of Badger,
// whose memtable lookup (a skiplist walk over cache-missing nodes) is most
// of a GET's cost. It holds values of at most cacheMaxValue bytes within a
// byte budget, in shards each with its own lock.
//
// Staleness is ruled out by a per-shard sequence: the committer forgets a
// written key after its commit and bumps the shard's sequence; a reader
// notes the sequence before it reads Badger and fills the cache only if it
// has not moved. A reader that started before a commit therefore never
// caches what the commit replaced; one that started after it reads the new
// value from Badger. Expiry is checked on every hit, as Badger would.
//
// In Async mode the cache is also where plain SETs land (write-back): a
// dirty entry is acknowledged from here, read from here, never evicted,
// and written to Badger by the committer at its next round, which comes
// at once for any other write, after the flush interval otherwise, and
// early when a shard's dirty bytes pass dirtyFlush of its budget. Writers
// of a shard whose dirty bytes would pass dirtyMax of it wait for the
// committer instead. The share is large on purpose: a key written many
// times between flushes costs Badger one write, and Badger's write path
// (skiplist insert, WAL, memtable flush) costs more per write than the
// rest of a SET. A dirty entry's version comes from the store's own
// clock, far above Badger's commit timestamps, so a key's version changes
// with every write and never returns to an earlier value.

const (
	cacheShards    = 64
	cacheMaxValue  = 4 << 10
	cacheEntryCost = 80 // map slot, entry header, slice headers

	// Shares of a shard's budget that dirty entries may hold (eighths).
	dirtyFlush = 6 // flush now above 3/4
	dirtyMax   = 7 // writers wait above 7/8
)

type cacheEntry struct {
	absent  bool // the key is not in the store (a cached miss)
	dirty   bool // written here, not yet in Badger
	listed  bool // in its shard's dirty list
	taken   bool // handed to a flush (takeDirty), which reads buf until markClean or relist
	klen    uint32
	buf     []byte // key, then value: one allocation, the map's key points into it
	version uint64
	expires int64 // Unix milliseconds, 0: never
}

func (e *cacheEntry) value() []byte { return e.buf[e.klen:] }

// key is the map's key string for e, in e's own buffer: storing under it
// (re)points the map's key there.
func (e *cacheEntry) key() string { return unsafe.String(unsafe.SliceData(e.buf), e.klen) }

func (e *cacheEntry) cost() int64 { return int64(len(e.buf)) + cacheEntryCost }

type cacheShard struct {
	mu         sync.Mutex
	seq        uint64
	bytes      int64
	dirtyBytes int64
	hits       uint64
	closed     bool     // the committer took its last dirty entries
	dirty      []string // keys of dirty entries (copies)
	m          map[string]cacheEntry
	_          [32]byte // keep shards' locks on separate cache lines
}

type cache struct {
	log      *wal // Async mode: dirty writes log themselves (nil otherwise)
	seed     maphash.Seed
	perShard int64
	shards   [cacheShards]cacheShard
}

func newCache(budget int64) *cache {
	c := &cache{seed: maphash.MakeSeed(), perShard: budget / cacheShards}
	for i := range c.shards {
		c.shards[i].m = map[string]cacheEntry{}
	}
	return c
}

func (c *cache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, key)%cacheShards]
}

// get appends key's cached value to dst and returns the entry, or ok false
// when the cache does not know the key; absent reports a key known not to
// be in the store. seq is the shard's sequence to pass to fill after a
// miss.
func (c *cache) get(key, dst []byte) (e Entry, absent bool, seq uint64, ok bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	ce, found := sh.m[string(key)]
	if found && ce.absent || found && ce.expires != 0 && ce.expires <= time.Now().UnixMilli() {
		absent = true
		sh.hits++
	} else if found {
		e = Entry{Value: append(dst[:0], ce.value()...), Version: ce.version}
		if ce.expires != 0 {
			e.ExpiresAt = time.UnixMilli(ce.expires)
		}
		sh.hits++
	}
	seq = sh.seq
	sh.mu.Unlock()
	return e, absent, seq, found
}

// fill caches e under key (or, with absent, that the key is not in the
// store) if no write of the shard committed since seq.
func (c *cache) fill(key []byte, e Entry, absent bool, seq uint64) {
	if len(e.Value) > cacheMaxValue {
		return
	}
	cost := int64(len(key)+len(e.Value)) + cacheEntryCost
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.seq != seq {
		return
	}
	if old, ok := sh.m[string(key)]; ok {
		if old.dirty {
			return // written meanwhile (seq moved too)
		}
		sh.bytes -= old.cost()
	}
	c.evict(sh, cost, key)
	if sh.bytes+cost > c.perShard {
		return
	}
	// Key and value in one allocation, the map's key pointing into it: a
	// lookup then touches one object, not a key and a value apart.
	n := len(key)
	if !absent {
		n += len(e.Value)
	}
	buf := make([]byte, n)
	copy(buf, key)
	ce := cacheEntry{absent: true, buf: buf, klen: uint32(len(key))}
	if !absent {
		copy(buf[len(key):], e.Value)
		ce = cacheEntry{buf: buf, klen: uint32(len(key)), version: e.Version}
	}
	if !e.ExpiresAt.IsZero() {
		ce.expires = e.ExpiresAt.UnixMilli()
	}
	sh.m[ce.key()] = ce
	sh.bytes += cost
}

// forget drops key and moves its shard's sequence, so a fill that read
// Badger before the write that calls this is refused. A dirty entry stays:
// it was written after the committed write (the committer flushes dirty
// entries before the writes of its round).
//
// In Async mode that dirty entry's log record may precede the committed
// write's; it is logged again after it, so the log replays to what the
// cache holds.
func (c *cache) forget(key []byte) {
	sh := c.shard(key)
	sh.mu.Lock()
	if old, ok := sh.m[string(key)]; ok && !old.dirty {
		delete(sh.m, string(key))
		sh.bytes -= old.cost()
	} else if ok && c.log != nil {
		c.log.addShared(walSet, key, old.value(), uint64(old.expires))
	}
	sh.seq++
	sh.mu.Unlock()
}

// stats returns the cached entries, their bytes and the hits so far.
func (c *cache) stats() (entries int, bytes int64, hits uint64) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		entries += len(sh.m)
		bytes += sh.bytes
		hits += sh.hits
		sh.mu.Unlock()
	}
	return
}

// putDirty stores a write in the cache, to be flushed to Badger by the
// committer. It reports false — the caller takes the committer's path —
// when the value is too big to cache, the shard holds its share of dirty
// bytes or the store is closing; wake says the committer should flush now.
func (c *cache) putDirty(key, value []byte, expires int64, version uint64) (ok, wake, logged bool) {
	if len(value) > cacheMaxValue || c.log != nil && c.log.pending.Load() > walMaxShared {
		return false, false, false
	}
	cost := int64(len(key)+len(value)) + cacheEntryCost
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed || sh.dirtyBytes+cost > c.perShard*dirtyMax/8 {
		return false, true, false
	}
	c.insertDirty(sh, key, value, expires, version, cost)
	if c.log != nil {
		// Under the shard's lock: the log has a key's writes in the order
		// the cache took them.
		logged = c.log.addShared(walSet, key, value, uint64(expires))
	}
	return true, sh.dirtyBytes > c.perShard*dirtyFlush/8, logged
}

// dirtyEntry is a dirty entry taken for a flush.
type dirtyEntry struct {
	key, value []byte
	version    uint64
	expires    int64
}

// takeDirty returns the dirty entries, in no particular order, for the
// committer to write; they stay dirty (and readable) until markClean.
// With last, the shards take no more dirty writes.
func (c *cache) takeDirty(dst []dirtyEntry, last bool) []dirtyEntry {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.closed = sh.closed || last
		for _, k := range sh.dirty {
			e, ok := sh.m[k]
			if !ok || !e.listed {
				continue
			}
			e.listed = false
			e.taken = e.dirty
			sh.m[e.key()] = e
			if e.dirty {
				dst = append(dst, dirtyEntry{key: e.buf[:e.klen:e.klen], value: e.value(), version: e.version,
					expires: e.expires})
			}
		}
		clear(sh.dirty)
		sh.dirty = sh.dirty[:0]
		sh.mu.Unlock()
	}
	return dst
}

// markClean marks flushed entries clean, unless written again meanwhile
// (a newer version, dirty and listed again).
func (c *cache) markClean(flushed []dirtyEntry) {
	for _, d := range flushed {
		sh := c.shard(d.key)
		sh.mu.Lock()
		if e, ok := sh.m[string(d.key)]; ok && e.dirty && e.version == d.version {
			e.dirty, e.taken = false, false
			sh.m[e.key()] = e
			sh.dirtyBytes -= e.cost()
		}
		sh.mu.Unlock()
	}
}

// relist puts entries whose flush failed back on their shards' dirty
// lists, unless written again meanwhile.
func (c *cache) relist(failed []dirtyEntry) {
	for _, d := range failed {
		sh := c.shard(d.key)
		sh.mu.Lock()
		if e, ok := sh.m[string(d.key)]; ok && e.dirty && !e.listed {
			e.taken = e.taken && e.version != d.version
			e.listed = true
			sh.m[e.key()] = e
			sh.dirty = append(sh.dirty, strings.Clone(e.key()))
		}
		sh.mu.Unlock()
	}
}

// evict drops clean entries (any but key), in map order, until cost more
// bytes fit the shard; dirty entries are at most dirtyMax eighths of it.
func (c *cache) evict(sh *cacheShard, cost int64, key []byte) {
	for k, e := range sh.m {
		if sh.bytes+cost <= c.perShard {
			return
		}
		if e.dirty || k == string(key) {
			continue
		}
		delete(sh.m, k)
		sh.bytes -= e.cost()
	}
}

// install puts a Put the committer took in the cache as a dirty entry —
// in Sync mode once logged and synced; with logIt (Async) it logs itself
// as putDirty does — and reports whether the shard's dirty share asks for
// a flush.
// Only the committer calls it, so the share may run over by a round.
func (c *cache) install(key, value []byte, expires int64, version uint64, logIt bool) (full bool) {
	cost := int64(len(key)+len(value)) + cacheEntryCost
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c.insertDirty(sh, key, value, expires, version, cost)
	if logIt && c.log != nil {
		c.log.addShared(walSet, key, value, uint64(expires))
	}
	return sh.dirtyBytes > c.perShard*dirtyFlush/8
}

// insertDirty stores a dirty entry, listed for the next flush, in sh
// (locked).
func (c *cache) insertDirty(sh *cacheShard, key, value []byte, expires int64, version uint64, cost int64) {
	old, had := sh.m[string(key)]
	if had {
		sh.bytes -= old.cost()
		if old.dirty {
			sh.dirtyBytes -= old.cost()
		}
	}
	if sh.bytes+cost > c.perShard {
		c.evict(sh, cost, key)
	}
	var buf []byte
	if n := len(key) + len(value); had && !old.taken && cap(old.buf) >= n && cap(old.buf)-n <= n/4 {
		// The key written again, its buffer read by no flush (and by
		// nothing else outside the lock): the value goes in place, no
		// allocation (a hot key's writes make no garbage).
		buf = old.buf[:n]
		copy(buf[len(key):], value)
	} else {
		// value appended to key capped at its length, so append
		// allocates: unlike make, it leaves unzeroed the bytes it is
		// about to overwrite. (With nothing to append it would return
		// key itself.)
		buf = append(key[:len(key):len(key)], value...)
		if len(value) == 0 {
			buf = slices.Clone(key)
		}
	}
	ce := cacheEntry{dirty: true, listed: had && old.listed, buf: buf, klen: uint32(len(key)), version: version,
		expires: expires}
	if !ce.listed {
		ce.listed = true
		// A copy: a slice of the entry would hold its buffer — a whole
		// value — after the key is written again, until the next flush.
		sh.dirty = append(sh.dirty, strings.Clone(ce.key()))
	}
	sh.m[ce.key()] = ce
	sh.bytes += cost
	sh.dirtyBytes += cost
	sh.seq++ // a Badger read that began before this must not fill
}
