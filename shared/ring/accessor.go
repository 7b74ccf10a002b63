package ring

import (
	"fmt"

	"github.com/hecsys/hec/shared/wire"
)

// Accessor reaches the bytes of one window. Services are written against it
// so that they do not depend on the window being mapped: on a real DPU the
// Arm cores reach host memory by DMA (staged copies), in emulation and in the
// QEMU VM it is mapped.
//
// Spans given to an Accessor have been validated against Len; an Accessor
// still refuses spans outside the window rather than trusting its caller.
type Accessor interface {
	// Len is the window's size.
	Len() uint64
	// View returns the span's bytes in place when the window is mapped, and
	// ok == false when it is not (then use ReadAt/WriteAt).
	View(s wire.Span) (b []byte, ok bool)
	// ReadAt copies len(p) bytes at off into p.
	ReadAt(p []byte, off uint64) error
	// WriteAt copies p into the window at off.
	WriteAt(p []byte, off uint64) error
}

// Bytes returns the span's bytes: the mapped view when there is one, else a
// copy read into scratch (grown when too small). Callers that only read use
// it; the returned slice must not be kept past the descriptor's completion.
func Bytes(a Accessor, s wire.Span, scratch []byte) ([]byte, error) {
	if b, ok := a.View(s); ok {
		return b, nil
	}
	if uint64(cap(scratch)) < uint64(s.Len) {
		scratch = make([]byte, s.Len)
	}
	p := scratch[:s.Len]
	return p, a.ReadAt(p, uint64(s.Off))
}

func checkRange(off, n, limit uint64) error {
	if off > limit || n > limit-off {
		return fmt.Errorf("ring: access [%d,+%d) outside window of %d: %w", off, n, limit, wire.ErrSpan)
	}
	return nil
}

// MappedWindow is an Accessor over mapped memory.
type MappedWindow struct{ mem []byte }

// NewMappedWindow returns an Accessor over mem.
func NewMappedWindow(mem []byte) *MappedWindow { return &MappedWindow{mem: mem} }

func (m *MappedWindow) Len() uint64 { return uint64(len(m.mem)) }

func (m *MappedWindow) View(s wire.Span) ([]byte, bool) {
	if !s.Within(m.Len()) {
		return nil, false
	}
	return m.mem[s.Off:s.End():s.End()], true
}

func (m *MappedWindow) ReadAt(p []byte, off uint64) error {
	if err := checkRange(off, uint64(len(p)), m.Len()); err != nil {
		return err
	}
	copy(p, m.mem[off:])
	return nil
}

func (m *MappedWindow) WriteAt(p []byte, off uint64) error {
	if err := checkRange(off, uint64(len(p)), m.Len()); err != nil {
		return err
	}
	copy(m.mem[off:], p)
	return nil
}

// StagedWindow hides the mapping of another Accessor: View always fails, and
// reads and writes go through copies in chunks of at most Chunk bytes, as a
// DMA engine would move them. Tests run services over it to prove they do
// not depend on mapped memory.
type StagedWindow struct {
	Under Accessor
	// Chunk bounds one transfer (default 64 KiB).
	Chunk int
	// Transfers and Bytes count what was moved.
	Transfers, Bytes uint64
}

func (s *StagedWindow) Len() uint64                   { return s.Under.Len() }
func (s *StagedWindow) View(wire.Span) ([]byte, bool) { return nil, false }

func (s *StagedWindow) chunk() int {
	if s.Chunk <= 0 {
		return 64 << 10
	}
	return s.Chunk
}

func (s *StagedWindow) ReadAt(p []byte, off uint64) error { return s.stage(p, off, s.Under.ReadAt) }

func (s *StagedWindow) WriteAt(p []byte, off uint64) error { return s.stage(p, off, s.Under.WriteAt) }

// stage moves p in chunks of at most Chunk bytes with move, counting them.
func (s *StagedWindow) stage(p []byte, off uint64, move func([]byte, uint64) error) error {
	if err := checkRange(off, uint64(len(p)), s.Len()); err != nil {
		return err
	}
	for len(p) > 0 {
		n := min(len(p), s.chunk())
		if err := move(p[:n], off); err != nil {
			return err
		}
		s.Transfers++
		s.Bytes += uint64(n)
		p, off = p[n:], off+uint64(n)
	}
	return nil
}
