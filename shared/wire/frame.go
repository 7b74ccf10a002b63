package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// Stream framing (the TCP transport). A frame is
//
//	u32 little-endian n = DescSize + payload length
//	descriptor (DescSize bytes)
//	payload (n - DescSize bytes)
//
// The descriptor's spans are relative to the payload. Requests carry their
// input data inline; responses carry their output data inline.
const FrameHeaderSize = 4

// DefaultMaxPayload bounds a frame's payload unless the reader says otherwise.
const DefaultMaxPayload = 64 << 20

// ErrFrameTooLarge is returned for a frame whose declared size exceeds the
// reader's limit. The stream cannot be resynchronised after it: close it.
var ErrFrameTooLarge = errors.New("wire: frame too large")

// FrameReader reads frames from a stream into a buffer it reuses, so that the
// steady state does not allocate. It is not safe for concurrent use.
type FrameReader struct {
	r          io.Reader
	maxPayload int
	hdr        [FrameHeaderSize + DescSize]byte
	buf        []byte
}

// NewFrameReader returns a reader that refuses payloads over maxPayload bytes
// (DefaultMaxPayload when maxPayload <= 0).
func NewFrameReader(r io.Reader, maxPayload int) *FrameReader {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	return &FrameReader{r: r, maxPayload: maxPayload}
}

// Next reads one frame. The payload aliases the reader's buffer and is valid
// until the next call. The descriptor is decoded but not validated: call
// Validate(uint64(len(payload))) for a request.
func (fr *FrameReader) Next() (Desc, []byte, error) {
	var d Desc
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return d, nil, fmt.Errorf("read frame header: %w", err)
		}
		return d, nil, err // io.EOF between frames is a clean end
	}
	n := binary.LittleEndian.Uint32(fr.hdr[:4])
	if n < DescSize {
		return d, nil, fmt.Errorf("read frame: length %d below descriptor size: %w", n, ErrMalformed)
	}
	plen := uint64(n) - DescSize
	if plen > uint64(fr.maxPayload) {
		return d, nil, fmt.Errorf("read frame: payload %d > %d: %w", plen, fr.maxPayload, ErrFrameTooLarge)
	}
	if err := d.Unmarshal(fr.hdr[FrameHeaderSize:]); err != nil {
		return d, nil, fmt.Errorf("read frame: %w", err)
	}
	if uint64(cap(fr.buf)) < plen {
		fr.buf = make([]byte, plen)
	}
	p := fr.buf[:plen]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		return d, nil, fmt.Errorf("read frame payload (%d bytes): %w", plen, noEOF(err))
	}
	return d, p, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendFrameHeader appends the length word and descriptor of a frame whose
// payload is payloadLen bytes long.
func AppendFrameHeader(b []byte, d *Desc, payloadLen int) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(DescSize+payloadLen))
	off := len(b)
	b = append(b, make([]byte, DescSize)...)
	d.Marshal(b[off:])
	return b
}

// WriteFrame writes one frame with the concatenation of payload as its
// payload, using writev where w is a net.Conn.
func WriteFrame(w io.Writer, d *Desc, payload ...[]byte) error {
	total := 0
	for _, p := range payload {
		total += len(p)
	}
	if total > 1<<32-1-DescSize {
		return fmt.Errorf("write frame: payload %d: %w", total, ErrFrameTooLarge)
	}
	var hdr [FrameHeaderSize + DescSize]byte
	AppendFrameHeader(hdr[:0], d, total)
	bufs := make(net.Buffers, 0, 1+len(payload))
	bufs = append(bufs, hdr[:])
	for _, p := range payload {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}
	if _, err := bufs.WriteTo(w); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}
