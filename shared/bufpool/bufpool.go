package bufpool

import (
	"math/bits"
	"sync"
)

// minSize is the smallest class: smaller buffers come from (and go back
// to) it.
const minSize = 64

// classes index the sizes 64, 96, 128, 192, …: class 2c−12 is 2^c bytes,
// the class after it 3·2^(c−1).
var classes [2 * 40]sync.Pool

// class returns the index of the smallest class of at least n bytes, and
// its size.
func class(n int) (int, int) {
	if n <= minSize {
		return 0, minSize
	}
	c := bits.Len(uint(n - 1)) // 2^c ≥ n > 2^(c−1)
	if three := 3 << (c - 2); three >= n {
		return 2*c - 13, three
	}
	return 2*c - 12, 1 << c
}

// Get returns a buffer of n bytes, not cleared, whose capacity is its
// class's size.
func Get(n int) *[]byte {
	i, size := class(n)
	if i >= len(classes) {
		b := make([]byte, n)
		return &b
	}
	if p, ok := classes[i].Get().(*[]byte); ok {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n, size)
	return &b
}

// Put gives b back for reuse; nothing may use it after. A buffer whose
// capacity is not a class size is dropped.
func Put(b *[]byte) {
	i, size := class(cap(*b))
	if i < len(classes) && size == cap(*b) {
		classes[i].Put(b)
	}
}
