package ring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Region is a mapping of a region file. It is the raw memory; Agent and Host
// give it meaning.
type Region struct {
	path string
	mem  []byte
	heap bool
	f    *os.File // kept open: its size is watched (shrunk) and restored
	base uintptr
}

// Map maps size bytes of the file at path, shared and writable. With create
// set the file is created (mode 0600) and sized to size; otherwise it must
// already be at least size bytes, or, with size 0, it is mapped whole.
func Map(path string, size uint64, create bool) (*Region, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open region: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat region: %w", err)
	}
	have := uint64(st.Size())
	if !st.Mode().IsRegular() {
		// A PCI BAR resource file reports its size through stat as well;
		// anything else (a directory, a pipe) is not a region.
		if st.Mode()&os.ModeDevice == 0 {
			return nil, fmt.Errorf("map region %s: not a regular file", path)
		}
	}
	switch {
	case create && have != size:
		if err := f.Truncate(int64(size)); err != nil {
			return nil, fmt.Errorf("size region to %d: %w", size, err)
		}
	case size == 0:
		size = have
	case have < size:
		return nil, fmt.Errorf("region %s is %d bytes, need %d", path, have, size)
	}
	if size < headerSize || size > 1<<46 {
		return nil, fmt.Errorf("map region %s: size %d out of range", path, size)
	}
	// MAP_POPULATE: fault the whole region in now, so the first touch of a
	// window on the data path does not pay a page fault per 4 KiB.
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap region %s (%d bytes): %w", path, size, err)
	}
	keep = true
	return &Region{path: path, mem: mem, f: f, base: uintptr(unsafe.Pointer(&mem[0]))}, nil
}

// NewHeapRegion returns a region in ordinary Go memory, for tests of both
// ends in one process: unlike a mapping, the race detector tracks it, so the
// ring protocol's happens-before edges are checked under -race.
func NewHeapRegion(size uint64) *Region {
	words := make([]uint64, (size+7)/8) // 8-byte aligned for the atomics
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), size)
	return &Region{path: "(heap)", mem: mem, heap: true, base: uintptr(unsafe.Pointer(&mem[0]))}
}

// Path returns the file the region maps.
func (r *Region) Path() string { return r.path }

// Len returns the mapped size.
func (r *Region) Len() uint64 { return uint64(len(r.mem)) }

// Bytes returns the whole mapping. Tests and hostile-writer tools use it;
// services go through an Accessor.
func (r *Region) Bytes() []byte { return r.mem }

// Close unmaps the region. Views into it must not be used afterwards.
func (r *Region) Close() error {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	if r.mem == nil || r.heap {
		r.mem = nil
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	if err != nil {
		return fmt.Errorf("munmap region: %w", err)
	}
	return nil
}

// ErrRegionLost is returned for an access that faulted on the mapping: the
// file behind it was truncated, or the device behind it went away.
var ErrRegionLost = errors.New("ring: region lost its backing")

// CatchFault runs fn with memory faults turned into panics (Go's
// debug.SetPanicOnFault) and returns ErrRegionLost when fn faulted on this
// mapping, instead of the process dying of SIGBUS. A fault anywhere else is
// a bug and panics on. Whatever fn was doing is abandoned half done: the
// caller must treat the region as lost (Agent.Rebuild).
func (r *Region) CatchFault(fn func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if v := recover(); v != nil {
			if err = r.Faulted(v); err == nil {
				panic(v)
			}
		}
	}()
	fn()
	return nil
}

// Faulted says whether v, a value recover returned, is a memory fault on
// this mapping (ErrRegionLost, wrapped) or something else (nil): for a
// recover inside CatchFault's fn that must leave the region's faults to
// it.
func (r *Region) Faulted(v any) error {
	if f, ok := v.(interface{ Addr() uintptr }); ok && f.Addr() >= r.base && f.Addr()-r.base < uintptr(len(r.mem)) {
		return fmt.Errorf("%s: fault at offset %d: %w", r.path, f.Addr()-r.base, ErrRegionLost)
	}
	// qemu-user delivers SIGBUS without the address (Go then reports a
	// nil dereference): a fault while the file is cut short is taken for
	// the region's.
	if _, ok := v.(runtime.Error); ok && r.shrunk() {
		return fmt.Errorf("%s: fault (no address) with the file cut short: %w", r.path, ErrRegionLost)
	}
	return nil
}

// shrunk reports whether the file is now shorter than the mapping.
func (r *Region) shrunk() bool {
	if r.f == nil {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(r.f.Fd()), &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && uint64(st.Size) < uint64(len(r.mem))
}

// restore sizes the file back to the mapping (the pages that were cut off
// come back as zeros).
func (r *Region) restore() error {
	if !r.shrunk() {
		return nil
	}
	if err := r.f.Truncate(int64(len(r.mem))); err != nil {
		return fmt.Errorf("restore %s to %d bytes: %w", r.path, len(r.mem), err)
	}
	return nil
}

// word returns the 64-bit word at off. Offsets are multiples of 8 inside the
// mapping by construction (layout), never taken from the region.
func (r *Region) word(off uint64) *atomic.Uint64 {
	if off%8 != 0 || off+8 > uint64(len(r.mem)) {
		panic(fmt.Sprintf("ring: word offset %d outside region of %d", off, len(r.mem)))
	}
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off]))
}

func (r *Region) u32(off uint64) uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off])).Load()
}

func (r *Region) setU32(off uint64, v uint32) {
	(*atomic.Uint32)(unsafe.Pointer(&r.mem[off])).Store(v)
}

// ErrNotFormatted is returned by Attach for a region without a ready agent.
var ErrNotFormatted = errors.New("ring: region not formatted by a running agent")

// ErrVersion is returned by Attach for a layout version this code does not speak.
var ErrVersion = errors.New("ring: unsupported layout version")

// loadWord atomically loads the 8-byte word at the start of b (which must be
// 8-byte aligned, as every slot is).
func loadWord(b []byte) uint64 {
	_ = b[7]
	return (*atomic.Uint64)(unsafe.Pointer(&b[0])).Load()
}
