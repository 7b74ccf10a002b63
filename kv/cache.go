package kv

import (
	"hash/maphash"
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

const (
	cacheShards    = 64
	cacheMaxValue  = 4 << 10
	cacheEntryCost = 80 // map slot, entry header, slice headers
)

type cacheEntry struct {
	absent  bool // the key is not in the store (a cached miss)
	value   []byte
	version uint64
	expires int64 // Unix seconds, 0: never (Badger's resolution)
}

type cacheShard struct {
	mu    sync.Mutex
	seq   uint64
	bytes int64
	hits  uint64
	m     map[string]cacheEntry
	_     [32]byte // keep shards' locks on separate cache lines
}

type cache struct {
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
	if found && ce.expires != 0 && ce.expires <= time.Now().Unix() {
		found = false
	}
	if found && ce.absent {
		absent = true
		sh.hits++
	} else if found {
		e = Entry{Value: append(dst[:0], ce.value...), Version: ce.version}
		if ce.expires != 0 {
			e.ExpiresAt = time.Unix(ce.expires, 0)
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
		sh.bytes -= int64(len(key)+len(old.value)) + cacheEntryCost
	}
	// Evict arbitrary entries (map order) until the new one fits.
	for k, old := range sh.m {
		if sh.bytes+cost <= c.perShard {
			break
		}
		delete(sh.m, k)
		sh.bytes -= int64(len(k)+len(old.value)) + cacheEntryCost
	}
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
	ce := cacheEntry{absent: true}
	if !absent {
		copy(buf[len(key):], e.Value)
		ce = cacheEntry{value: buf[len(key):], version: e.Version}
	}
	if !e.ExpiresAt.IsZero() {
		ce.expires = e.ExpiresAt.Unix()
	}
	sh.m[unsafe.String(&buf[0], len(key))] = ce
	sh.bytes += cost
}

// forget drops key and moves its shard's sequence, so a fill that read
// Badger before the write that calls this is refused.
func (c *cache) forget(key []byte) {
	sh := c.shard(key)
	sh.mu.Lock()
	if old, ok := sh.m[string(key)]; ok {
		delete(sh.m, string(key))
		sh.bytes -= int64(len(key)+len(old.value)) + cacheEntryCost
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
