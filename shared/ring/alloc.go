package ring

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// ErrNoSpace is returned by Allocator.Alloc when no free range is large
// enough; a caller may wait for completions to free buffers, or chunk.
var ErrNoSpace = errors.New("ring: window full")

// AllocAlign is the alignment of every allocation: a cache line, which is
// also what DOCA's engines ask of their buffers.
const AllocAlign = 64

// Allocator hands out ranges of a window, first fit, coalescing on Free. It
// is safe for concurrent use. It lives in the host process only: the agent
// never trusts it, it validates spans.
type Allocator struct {
	mu   sync.Mutex
	size uint64
	free []extent          // sorted by offset, never adjacent
	used map[uint64]uint64 // offset -> size
}

type extent struct{ off, n uint64 }

// NewAllocator returns an allocator over [0, size).
func NewAllocator(size uint64) *Allocator {
	return &Allocator{size: size, free: []extent{{0, size}}, used: map[uint64]uint64{}}
}

// Alloc reserves n bytes (rounded up to AllocAlign) and returns their offset.
func (a *Allocator) Alloc(n uint64) (uint64, error) {
	if n == 0 {
		n = 1
	}
	if n > a.size {
		return 0, fmt.Errorf("alloc %d bytes in a window of %d: %w", n, a.size, ErrNoSpace)
	}
	n = roundUp(n, AllocAlign)
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, e := range a.free {
		if e.n < n {
			continue
		}
		off := e.off
		if e.n == n {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = extent{e.off + n, e.n - n}
		}
		a.used[off] = n
		return off, nil
	}
	return 0, fmt.Errorf("alloc %d bytes: %w", n, ErrNoSpace)
}

// Free releases the allocation at off. Freeing an offset that was not
// allocated is an error, never a corruption.
func (a *Allocator) Free(off uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.used[off]
	if !ok {
		return fmt.Errorf("ring: free of unallocated offset %d", off)
	}
	delete(a.used, off)
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	a.free = append(a.free, extent{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = extent{off, n}
	// Coalesce with the right, then the left neighbour.
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	return nil
}

// SizeOf returns the size of the allocation at off (0 if none).
func (a *Allocator) SizeOf(off uint64) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used[off]
}

// Free bytes in total (not necessarily contiguous).
func (a *Allocator) Available() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var t uint64
	for _, e := range a.free {
		t += e.n
	}
	return t
}
