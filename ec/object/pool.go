package object

import "github.com/hecsys/hec/shared/bufpool"

// Buffers of a stripe's shards and of shard messages are large (a MiB and
// more) and short-lived: allocating each afresh costs page faults and
// clearing on every stripe, on the DPU's few cores. They are kept in a
// pool by size class (shared/bufpool), so that a stripe is never handed a
// message's buffer, too small, nor a message a stripe's.

// minBuf is the smallest buffer handed out: a shard's message, so that a
// reply built by appending to a small one (a read's: a shard) does not
// outgrow it.
const minBuf = DefaultChunk + 4096

// getBuf returns a buffer of n bytes (not cleared).
func getBuf(n int) []byte {
	return (*bufpool.Get(max(n, minBuf)))[:n]
}

// putBuf gives b back; it must not be used after.
func putBuf(b []byte) { bufpool.Put(&b) }

// Buffer returns a buffer of n bytes, not cleared, from the pool the
// package's messages use; Release gives it back.
func Buffer(n int) []byte { return getBuf(n) }

// Release gives a buffer from Buffer (or one a reply was appended to) back
// to the pool; it must not be used after.
func Release(b []byte) { putBuf(b) }
