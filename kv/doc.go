// Package kv is the key-value store the agent serves from the DPU (the
// DPU-KV case study): Badger underneath, sized for a DPU's memory, with the
// operations its three front ends need — the handoff (host library), the
// Redis protocol (kv/resp) and the memcached-style UDP GET (kv/udp).
//
// # Durability
//
// Sync (the default) acknowledges a write only after it is on disk (Badger's
// SyncWrites). Measured here, concurrent commits barely share fsyncs: 3.9 k
// SET/s from 50 RESP clients on one core, 12 ms average latency, with an
// fsync costing 0.2 ms; a group commit of our own is still to do. Async acknowledges
// once the write is in Badger's memtable and value log buffer; a crash or
// power cut can lose the last writes. Sync is the default because a store
// that loses acknowledged writes surprises its users; async is for caches.
//
// # Memory
//
// Badger's own defaults (64 MiB memtables ×5, 256 MiB block cache) would not
// fit a DPU beside its other work, and Badger is known to spike and OOM on
// small machines. Open caps memtables, caches and the value-log threshold;
// MemoryBudget reports the configured bound.
//
// # What the XDP fast path needs
//
// Every entry has a version (Badger's commit timestamp, which grows with
// every write of the key) and an expiry; Get returns both, so a cache of hot
// keys outside the store can tell a stale copy from a fresh one.
package kv
