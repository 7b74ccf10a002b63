package object

import "sync"

// Buffers of a stripe's shards and of shard messages are large (a MiB and
// more) and short-lived: allocating each afresh costs page faults and
// clearing on every stripe, on the DPU's few cores. They are kept in a
// pool instead.
var bufs sync.Pool

// getBuf returns a buffer of n bytes (not cleared).
func getBuf(n int) []byte {
	if p, ok := bufs.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]byte, n, max(n, DefaultChunk+4096))
}

// putBuf gives b back; it must not be used after.
func putBuf(b []byte) {
	if cap(b) >= DefaultChunk {
		bufs.Put(&b)
	}
}

// Buffer returns a buffer of n bytes, not cleared, from the pool the
// package's messages use; Release gives it back.
func Buffer(n int) []byte { return getBuf(n) }

// Release gives a buffer from Buffer (or one a reply was appended to) back
// to the pool; it must not be used after.
func Release(b []byte) { putBuf(b) }
