package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	// DescSize is the size of a descriptor: one cache line.
	DescSize = 64
	// MaxSpans is the number of spans a descriptor carries inline.
	MaxSpans = 4
	// SpanSize is the encoded size of one span (in a descriptor or an SGL).
	SpanSize = 8
	// MaxSGL is the largest number of spans a scatter-gather list may hold.
	MaxSGL = 1024
)

// MaxTouch returns the most data bytes one request may name in a window (or
// payload) of limit bytes: MaxSpans × limit, what four inline spans can name.
// A scatter-gather list whose spans add up to more is refused (DecodeSGL),
// so no descriptor makes the agent touch more than this, and the work one
// descriptor costs is bounded by the window it lives in.
func MaxTouch(limit uint64) uint64 {
	if limit > ^uint64(0)/MaxSpans {
		return ^uint64(0)
	}
	return MaxSpans * limit
}

// Flag bits of a descriptor.
const (
	// FlagSGL: Spans[0] names a scatter-gather list rather than data.
	FlagSGL uint16 = 1 << 0
	// FlagMore: a chunk of a larger operation; the host library sets it on
	// every chunk but the last.
	FlagMore uint16 = 1 << 1

	knownFlags = FlagSGL | FlagMore
)

// Decoding errors. They wrap into errors that say what was wrong.
var (
	ErrShort     = errors.New("wire: short buffer")
	ErrMalformed = errors.New("wire: malformed descriptor")
	ErrSpan      = errors.New("wire: span out of bounds")
)

// Span is a byte range {Off, Len} relative to a window or payload.
type Span struct {
	Off uint32
	Len uint32
}

// End returns Off+Len computed without overflow.
func (s Span) End() uint64 { return uint64(s.Off) + uint64(s.Len) }

// Within reports whether s lies inside [0, limit). Zero-length spans are
// valid anywhere in [0, limit]. The arithmetic is in 64 bits, so Off+Len
// cannot wrap.
func (s Span) Within(limit uint64) bool { return s.End() <= limit }

// Desc is a decoded descriptor. Request and completion share the format.
type Desc struct {
	Op     Op
	Flags  uint16
	Status Status
	NSpan  uint8
	Tag    uint64
	Arg0   uint64
	Arg1   uint64
	Spans  [MaxSpans]Span
}

// SpanList returns the valid spans of d (those below NSpan, capped at MaxSpans).
func (d *Desc) SpanList() []Span {
	n := min(int(d.NSpan), MaxSpans)
	return d.Spans[:n]
}

// Marshal writes d into b[:DescSize]. It panics if b is shorter, like
// binary.LittleEndian.PutUint64: callers own their buffers.
func (d *Desc) Marshal(b []byte) {
	_ = b[DescSize-1]
	le := binary.LittleEndian
	le.PutUint16(b[0:], uint16(d.Op))
	le.PutUint16(b[2:], d.Flags)
	le.PutUint16(b[4:], uint16(d.Status))
	b[6] = d.NSpan
	b[7] = 0
	le.PutUint64(b[8:], d.Tag)
	le.PutUint64(b[16:], d.Arg0)
	le.PutUint64(b[24:], d.Arg1)
	for i, s := range d.Spans {
		le.PutUint32(b[32+8*i:], s.Off)
		le.PutUint32(b[36+8*i:], s.Len)
	}
}

// Unmarshal decodes b[:DescSize] into d. It checks structure only (reserved
// bits, span count); spans are checked against a window by Validate.
func (d *Desc) Unmarshal(b []byte) error {
	if len(b) < DescSize {
		return fmt.Errorf("decode descriptor (%d bytes): %w", len(b), ErrShort)
	}
	le := binary.LittleEndian
	d.Op = Op(le.Uint16(b[0:]))
	d.Flags = le.Uint16(b[2:])
	d.Status = Status(le.Uint16(b[4:]))
	d.NSpan = b[6]
	d.Tag = le.Uint64(b[8:])
	d.Arg0 = le.Uint64(b[16:])
	d.Arg1 = le.Uint64(b[24:])
	for i := range d.Spans {
		d.Spans[i] = Span{Off: le.Uint32(b[32+8*i:]), Len: le.Uint32(b[36+8*i:])}
	}
	if b[7] != 0 {
		return fmt.Errorf("decode descriptor: reserved byte %#x: %w", b[7], ErrMalformed)
	}
	if d.NSpan > MaxSpans {
		return fmt.Errorf("decode descriptor: %d spans (max %d): %w", d.NSpan, MaxSpans, ErrMalformed)
	}
	return nil
}

// Validate checks a request against the window (or payload) of limit bytes:
// known flags, the span count, every span inside [0, limit), and for FlagSGL a
// list whose size is a whole number of spans and at most MaxSGL of them. It
// does not know which ops exist: the dispatcher checks that.
func (d *Desc) Validate(limit uint64) error {
	if d.Flags&^knownFlags != 0 {
		return fmt.Errorf("validate %s: unknown flags %#x: %w", d.Op, d.Flags&^knownFlags, ErrMalformed)
	}
	if d.NSpan > MaxSpans {
		return fmt.Errorf("validate %s: %d spans: %w", d.Op, d.NSpan, ErrMalformed)
	}
	if d.Status != StatusOK {
		return fmt.Errorf("validate %s: request carries status %s: %w", d.Op, d.Status, ErrMalformed)
	}
	for i, s := range d.SpanList() {
		if !s.Within(limit) {
			return fmt.Errorf("validate %s: span %d {%d,%d} outside %d bytes: %w", d.Op, i, s.Off, s.Len, limit, ErrSpan)
		}
	}
	if d.Flags&FlagSGL != 0 {
		if d.NSpan != 1 {
			return fmt.Errorf("validate %s: sgl needs exactly one span, has %d: %w", d.Op, d.NSpan, ErrMalformed)
		}
		l := d.Spans[0].Len
		if l%SpanSize != 0 || l/SpanSize > MaxSGL {
			return fmt.Errorf("validate %s: sgl of %d bytes: %w", d.Op, l, ErrMalformed)
		}
	}
	return nil
}

// DecodeSGL decodes a scatter-gather list from b (a whole number of 8-byte
// spans, at most MaxSGL) into dst, checking each span against limit and
// their total against MaxTouch(limit). It
// appends to dst[:0] and returns it, so a caller reusing dst does not allocate.
func DecodeSGL(dst []Span, b []byte, limit uint64) ([]Span, error) {
	if len(b)%SpanSize != 0 {
		return dst[:0], fmt.Errorf("decode sgl of %d bytes: %w", len(b), ErrMalformed)
	}
	n := len(b) / SpanSize
	if n > MaxSGL {
		return dst[:0], fmt.Errorf("decode sgl: %d spans (max %d): %w", n, MaxSGL, ErrMalformed)
	}
	dst = dst[:0]
	le := binary.LittleEndian
	var total uint64
	for i := 0; i < n; i++ {
		s := Span{Off: le.Uint32(b[8*i:]), Len: le.Uint32(b[8*i+4:])}
		if !s.Within(limit) {
			return dst[:0], fmt.Errorf("decode sgl: span %d {%d,%d} outside %d bytes: %w", i, s.Off, s.Len, limit, ErrSpan)
		}
		if total += uint64(s.Len); total > MaxTouch(limit) {
			return dst[:0], fmt.Errorf("decode sgl: spans 0..%d name %d bytes, more than %d (%d × the window): %w", i, total, MaxTouch(limit), MaxSpans, ErrSpan)
		}
		dst = append(dst, s)
	}
	return dst, nil
}

// AppendSGL appends the encoding of spans to b.
func AppendSGL(b []byte, spans []Span) []byte {
	for _, s := range spans {
		b = binary.LittleEndian.AppendUint32(b, s.Off)
		b = binary.LittleEndian.AppendUint32(b, s.Len)
	}
	return b
}
