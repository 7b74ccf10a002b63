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
//	u32 little-endian reserve: zeroed bytes the receiver appends to the payload
//	descriptor (DescSize bytes)
//	payload (n - DescSize bytes)
//
// The descriptor's spans are relative to the payload plus its reserve.
// Requests carry their input data inline and reserve room for their output
// (a GET's value buffer), which costs no bytes on the wire. Responses carry
// only the output the agent wrote: the spans of the response descriptor
// keep the offsets of the request's memory, and their data follow one after
// the other in the payload.
const FrameHeaderSize = 8

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

// Next reads one frame. The payload (with its reserve, zeroed, appended)
// aliases the reader's buffer and is valid until the next call. The
// descriptor is decoded but not validated: call Validate(uint64(len(payload)))
// for a request.

// NewFrameReader returns a reader that refuses payloads over maxPayload bytes
// (DefaultMaxPayload when maxPayload <= 0).
func NewFrameReader(r io.Reader, maxPayload int) *FrameReader {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	return &FrameReader{r: r, maxPayload: maxPayload}
}

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
	reserve := uint64(binary.LittleEndian.Uint32(fr.hdr[4:8]))
	if plen+reserve > uint64(fr.maxPayload) {
		return d, nil, fmt.Errorf("read frame: payload %d + reserve %d > %d: %w", plen, reserve, fr.maxPayload, ErrFrameTooLarge)
	}
	if err := d.Unmarshal(fr.hdr[FrameHeaderSize:]); err != nil {
		return d, nil, fmt.Errorf("read frame: %w", err)
	}
	if uint64(cap(fr.buf)) < plen+reserve {
		fr.buf = make([]byte, plen+reserve)
	}
	p := fr.buf[:plen+reserve]
	if _, err := io.ReadFull(fr.r, p[:plen]); err != nil {
		return d, nil, fmt.Errorf("read frame payload (%d bytes): %w", plen, noEOF(err))
	}
	clear(p[plen:])
	return d, p, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendFrameHeader appends the length words and descriptor of a frame
// whose payload is payloadLen bytes long, asking for reserve more.
func AppendFrameHeader(b []byte, d *Desc, payloadLen, reserve int) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(DescSize+payloadLen))
	b = binary.LittleEndian.AppendUint32(b, uint32(reserve))
	off := len(b)
	b = append(b, make([]byte, DescSize)...)
	d.Marshal(b[off:])
	return b
}

// WriteFrame writes one frame with the concatenation of payload as its
// payload, using writev where w is a net.Conn.
func WriteFrame(w io.Writer, d *Desc, payload ...[]byte) error {
	return WriteFrameReserve(w, d, 0, payload...)
}

// WriteFrameReserve is WriteFrame asking the receiver to append reserve
// zeroed bytes to the payload (room for output).
func WriteFrameReserve(w io.Writer, d *Desc, reserve int, payload ...[]byte) error {
	total := 0
	for _, p := range payload {
		total += len(p)
	}
	if total > 1<<32-1-DescSize || reserve < 0 || reserve > 1<<32-1 {
		return fmt.Errorf("write frame: payload %d: %w", total, ErrFrameTooLarge)
	}
	var hdr [FrameHeaderSize + DescSize]byte
	AppendFrameHeader(hdr[:0], d, total, reserve)
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
