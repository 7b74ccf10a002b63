// Package bufpool keeps large, short-lived byte buffers for reuse, by size
// class, so that a steady stream of messages or stripes allocates nothing:
// a fresh buffer of megabytes costs a page fault and a cleared page per
// 4 KiB on first touch, and garbage the collector must find.
//
// Classes come two to an octave (2^c and 3·2^(c−1)), so a buffer is at
// most a third larger than asked for, and a size that is three times a
// power of two — a 4+2 stripe of 1 MiB shards — fits its class exactly.
// Get never hands back a buffer smaller than asked for, and a Put of a
// buffer whose capacity is not a class size (one grown by append, say) is
// dropped, never filed where it would be too small. Buffers are 8-byte
// aligned (made of 64 bytes or more), as typed views of them want.
package bufpool
