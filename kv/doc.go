// Package kv is the key-value store the agent serves from the DPU (the
// DPU-KV case study): Badger underneath, sized for a DPU's memory, with the
// operations its three front ends need — the handoff (host library), the
// Redis protocol (kv/resp) and the memcached-style UDP GET (kv/udp).
//
// # Durability
//
// Sync (the default) acknowledges a write only after it is on disk. Every
// write goes through one committer goroutine (commit.go) that applies all
// writes queued meanwhile in one Badger transaction and commits it once, so
// concurrent writers — and a client's pipelined SETs, queued with PutAsync
// — share one WAL sync. Async acknowledges once the write is in Badger's
// memtable; a crash or power cut can lose the last writes. Sync is the
// default because a store that loses acknowledged writes surprises its
// users; async is for caches.
//
// # Reads
//
// Gets go through a read cache of recent entries, hits and misses both
// (cache.go), in front of Badger's memtable skiplist. A per-shard sequence
// keeps it from ever returning a value older than the last write
// acknowledged before the Get began.
//
// # Memory
//
// Badger's own defaults (64 MiB memtables ×5, 256 MiB block cache) would not
// fit a DPU beside its other work, and Badger is known to spike and OOM on
// small machines. Open caps memtables, caches and the value-log threshold;
// MemoryBudget reports the configured bound, read cache included.
//
// # What the XDP fast path needs
//
// Every entry has a version (Badger's commit timestamp, which grows with
// every write of the key) and an expiry; Get returns both, so a cache of hot
// keys outside the store can tell a stale copy from a fresh one.
package kv
