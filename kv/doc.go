// Package kv is the key-value store the agent serves from the DPU (the
// DPU-KV case study): Badger underneath, sized for a DPU's memory, with the
// operations its three front ends need — the handoff (host library), the
// Redis protocol (kv/resp) and the memcached-style UDP GET (kv/udp).
//
// # Durability
//
// Sync (the default) acknowledges a write only after it is on disk. Every
// write goes through one committer goroutine (commit.go) that takes all
// writes queued meanwhile — concurrent writers', and a client's pipelined
// SETs, queued with PutAsync — applies them in order and makes the round
// durable once, by appending its effects to the store's own log with one
// write and one fdatasync (wal.go); Badger runs unsynced and the log is
// replayed onto it when the store opens. Async acknowledges from memory
// and writes the log within 10ms, unsynced: a crashed agent loses at most
// that, a power cut what the kernel had not written back. Sync is the
// default because a store that loses acknowledged writes surprises its
// users; async is for caches.
//
// # Reads and write-back
//
// Gets go through a cache of recent entries, hits and misses both
// (cache.go), in front of Badger's memtable skiplist. A per-shard sequence
// keeps it from ever returning a value older than the last write
// acknowledged before the Get began. Plain Puts are written back: held
// dirty in the cache (Async: at once; Sync: once logged) and flushed to
// Badger by the committer, coalesced, within the flush interval (10s),
// before any other write or scan, at log checkpoints, or early when the
// dirty share fills.
//
// # Expiry
//
// A key expires to the millisecond (store.go, expiryMs): Badger's
// ExpiresAt holds Unix milliseconds, which Badger, comparing it with
// seconds, never acts on; the store hides expired keys on every read and
// its sweeper deletes them (sweep.go).
//
// # A full disk
//
// Writes are refused, not crashed into, when the file system nears full
// (disk.go); a failed sync refuses them until the store is opened again
// (wal.go). Reads go on either way.
//
// # Memory
//
// Badger's own defaults (64 MiB memtables ×5, 256 MiB block cache) would not
// fit a DPU beside its other work, and Badger is known to spike and OOM on
// small machines. Open caps memtables, caches and the value-log threshold;
// MemoryBudget reports the configured bound, read cache included.
//
// # Kinds
//
// A key holds a string, or a typed value that the Redis front end keeps
// (a list, a set, a hash, a sorted set: kind.go). The kind travels with
// the value — Badger's user metadata, a record of its own in the log —
// and the store never hands a typed value to a caller that reads strings
// (Get, Modify, IncrBy …: ErrWrongType), so the handoff, UDP GETs and the
// XDP cache serve strings only; the read cache holds strings only.
//
// # What the XDP fast path needs
//
// Every entry has a version — Badger's commit timestamp, or for a write
// held in the cache the store's own clock, with the top bit set — which
// changes with every write of the key and never returns to an earlier
// value, and an expiry; Get returns both, so a cache of hot keys outside
// the store can tell a stale copy from a fresh one by comparing versions
// for equality.
package kv
