package peer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/shared/trace"
)

// Errors of a connection.
var (
	ErrAuth   = errors.New("peer: authentication failed") // wrong cluster key; a forged, damaged, replayed or reordered frame
	ErrClosed = errors.New("peer: closed")
	// ErrNotSent: Send wrote none of the frame (its deadline passed,
	// or its context was cancelled, first); the connection stays good.
	ErrNotSent = errors.New("peer: frame not sent")
	// ErrStalled: the peer took none of a frame's bytes for the stall
	// (SetStall): it stopped reading.
	ErrStalled = errors.New("peer: the peer took nothing")
)

const nonceSize = 16

// helloLoopback, in a Hello's Flags, says that its sender sees the
// connection as one between two loopback addresses; the Hello's payload
// then carries, after the nonce, the connection's two ends as the sender
// sees them (loopbackBinding).
const helloLoopback = 1

// maxBinding bounds a Hello's binding (two addresses with ports).
const maxBinding = 128

// Conn is an authenticated frame connection to one peer. Send is safe for
// concurrent use; Recv is for one reader.
type Conn struct {
	nc            net.Conn
	local, remote uint32
	br            *bufio.Reader
	wmu           sync.Mutex
	sending       atomic.Int32 // Sends under way or waiting for wmu
	sendSeq       uint64
	recvSeq       uint64
	sendMAC       cipher.AEAD
	recvMAC       cipher.AEAD
	// headerOnly: frames' tags cover their header, not their payload (a
	// direct connection between loopback addresses, both sides agreeing:
	// see Handshake).
	headerOnly     bool
	stall          time.Duration                           // SetStall
	whead          [prefixSize + HeaderSize + TagSize]byte // length, sealed header, tag
	wbufs, wvec    net.Buffers                             // wvec: the iovecs; wbufs consumed by a write
	rbuf           []byte                                  // payload and tag of the frame received
	snonce, rnonce [12]byte
	// Per-frame scratch kept here: passed to interfaces, they would
	// escape and be allocated per frame.
	hdr, plain [HeaderSize]byte
	rhead      [prefixSize + HeaderSize]byte
	sealed     [HeaderSize + TagSize]byte

	// rec, while it records, has Send record a frame's seal and write
	// under the op its context carries (trace.WithOp), and Recv time the
	// frame's read and open (recvTimes) for the node to record once the
	// header says whose frame it was.
	rec       *trace.Recorder
	recvTimes frameTimes
}

// frameTimes are when Recv's last frame's payload began and ended being
// read and its tag was checked; ok is false where nothing was recording.
type frameTimes struct {
	read, readEnd, openEnd time.Time
	ok                     bool
}

// frameSize is a frame's bytes on the connection with a payload of n:
// its length prefix, sealed header and tag too.
func frameSize(n int) int { return prefixSize + HeaderSize + n + TagSize }

// record records stage of op, from t0 to t1, for a frame of bytes with
// the other end.
func (c *Conn) record(op trace.Op, stage string, t0, t1 time.Time, bytes int, err error) {
	s := trace.Span{ID: op.ID, Name: op.Name, Stage: stage, Start: t0.UnixNano(), Dur: int64(t1.Sub(t0)),
		Bytes: int64(bytes), Peer: "node " + strconv.FormatUint(uint64(c.remote), 10)}
	if err != nil {
		s.Status = "failed"
	}
	c.rec.Add(s)
}

// SetStall makes a frame's send fail once the peer has taken none of its
// bytes for d (0, the default: only the send's own deadline bounds it):
// liveness by progress, so that a peer that stopped reading fails a large
// send within d, while one that reads slowly never does. Set it before
// the first Send.
func (c *Conn) SetStall(d time.Duration) { c.stall = d }

// PayloadSealed reports whether frames' tags cover their payloads: always
// but on a direct loopback connection (Handshake).
func (c *Conn) PayloadSealed() bool { return !c.headerOnly }

// Sending reports whether a frame is being written or waits to be.
func (c *Conn) Sending() bool { return c.sending.Load() > 0 }

// Local and Remote are the node ids at either end.
func (c *Conn) Local() uint32  { return c.local }
func (c *Conn) Remote() uint32 { return c.remote }

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

func helloMAC(key, hdr, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(hdr)
	m.Write(payload)
	return m.Sum(nil)[:TagSize]
}

func sessionMAC(key []byte, label string, dialerNonce, listenerNonce []byte) (cipher.AEAD, error) {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("hec-peer v1 " + label))
	m.Write(dialerNonce)
	m.Write(listenerNonce)
	blk, err := aes.NewCipher(m.Sum(nil)[:16])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(blk)
}

// loopbackBinding returns the connection's two ends, dialer's first, as
// this side sees them, when both are loopback addresses; ok is false
// otherwise.
func loopbackBinding(nc net.Conn, dialer bool) (binding []byte, ok bool) {
	la, lok := nc.LocalAddr().(*net.TCPAddr)
	ra, rok := nc.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok || !la.IP.IsLoopback() || !ra.IP.IsLoopback() {
		return nil, false
	}
	if !dialer {
		la, ra = ra, la
	}
	b := []byte(la.String() + " " + ra.String())
	return b, len(b) <= maxBinding
}

// Handshake authenticates nc with the cluster key: each side sends a Hello
// with a fresh nonce under HMAC-SHA256 and checks the other's; both then
// derive the session keys. dialer says which side this is. It must finish
// by deadline.
//
// A side that sees both ends of nc on loopback addresses says so in its
// Hello, with the two ends as it sees them. When both sides say so and
// saw the same two ends — a direct connection, which only this machine's
// kernel carries — frames' tags cover their headers and not their
// payloads: authenticating every payload byte would buy nothing there and
// cost a pass over it on each side. A process relaying between two
// loopback sockets makes the two sides see different ends, and the tags
// cover payloads again. Which kind of connection it is goes into the
// session keys, so two sides that disagreed could not talk at all.
func Handshake(nc net.Conn, key []byte, local uint32, dialer bool, deadline time.Time) (*Conn, error) {
	if len(key) < 16 {
		return nil, fmt.Errorf("peer: cluster key of %d bytes: want at least 16", len(key))
	}
	nc.SetDeadline(deadline)
	defer nc.SetDeadline(time.Time{})
	var mine [nonceSize]byte
	if _, err := rand.Read(mine[:]); err != nil {
		return nil, err
	}
	binding, onLoopback := loopbackBinding(nc, dialer)
	h := Header{Type: TypeHello, Length: nonceSize, Sender: local}
	payload := mine[:]
	if onLoopback {
		h.Flags = helloLoopback
		payload = append(payload, binding...)
		h.Length = uint32(len(payload))
	}
	out := make([]byte, HeaderSize, HeaderSize+len(payload)+TagSize)
	h.Put(out)
	out = append(out, payload...)
	out = append(out, helloMAC(key, out[:HeaderSize], payload)...)
	if _, err := nc.Write(out); err != nil {
		return nil, fmt.Errorf("peer: send hello: %w", err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	var in [HeaderSize + nonceSize + maxBinding + TagSize]byte
	if _, err := io.ReadFull(br, in[:HeaderSize]); err != nil {
		return nil, fmt.Errorf("peer: read hello: %w", err)
	}
	ph, err := ParseHeader(in[:HeaderSize])
	if err != nil {
		return nil, err
	}
	if ph.Type != TypeHello || ph.Length < nonceSize || ph.Length > nonceSize+maxBinding ||
		(ph.Length != nonceSize) != (ph.Flags&helloLoopback != 0) {
		return nil, fmt.Errorf("%w: %s of %d bytes where a hello belongs", ErrFrame, ph.Type, ph.Length)
	}
	end := HeaderSize + int(ph.Length)
	if _, err := io.ReadFull(br, in[HeaderSize:end+TagSize]); err != nil {
		return nil, fmt.Errorf("peer: read hello: %w", err)
	}
	if !hmac.Equal(in[end:end+TagSize], helloMAC(key, in[:HeaderSize], in[HeaderSize:end])) {
		return nil, fmt.Errorf("%w: hello from node %d (is the cluster key the same?)", ErrAuth, ph.Sender)
	}
	if ph.Sender == local {
		return nil, fmt.Errorf("peer: hello from our own id %d", local)
	}
	theirs := in[HeaderSize : HeaderSize+nonceSize]
	headerOnly := onLoopback && bytes.Equal(in[HeaderSize+nonceSize:end], binding)
	dn, ln := mine[:], theirs
	if !dialer {
		dn, ln = theirs, mine[:]
	}
	kind := ""
	if headerOnly {
		kind = ", headers only"
	}
	d2l, err := sessionMAC(key, "dialer to listener"+kind, dn, ln)
	if err != nil {
		return nil, err
	}
	l2d, err := sessionMAC(key, "listener to dialer"+kind, dn, ln)
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, local: local, remote: ph.Sender, br: br, sendMAC: d2l, recvMAC: l2d, headerOnly: headerOnly}
	if !dialer {
		c.sendMAC, c.recvMAC = l2d, d2l
	}
	return c, nil
}

// On the wire after the handshake a frame is
//
//	length u32 (payload bytes, in clear) | header, AES-GCM encrypted (40) |
//	payload (in clear) | tag (16)
//
// sealed with the sequence number as the nonce and the payload as
// additional data: the tag covers header and payload, the payload is sent
// from the caller's buffer without a copy (writev), and a frame replayed
// or reordered fails its tag, its nonce being another sequence number.

const prefixSize = 4

// Send writes one frame: h's Type, Flags, Epoch and Comm, with payload.
// Sender, Length and Seq are filled in. It blocks while the peer does not
// read (back-pressure) until ctx's deadline, until ctx is cancelled (a
// blocked send looks every sendPoll), or until the peer has taken nothing
// for the stall (SetStall). An error wrapping ErrNotSent means none of the
// frame was written and the connection is still good; after any other
// error it is not (part of a frame may be on the wire).
func (c *Conn) Send(ctx context.Context, h Header, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("peer: payload of %d bytes: at most %d per frame", len(payload), MaxPayload)
	}
	c.sending.Add(1)
	defer c.sending.Add(-1)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.sendSeq++
	h.Sender, h.Length, h.Seq = c.local, uint32(len(payload)), c.sendSeq
	h.Put(c.hdr[:])
	binary.LittleEndian.PutUint32(c.whead[:], h.Length)
	binary.LittleEndian.PutUint64(c.snonce[:], c.sendSeq)
	// Seal writes the encrypted header and then the tag.
	covered := payload
	if c.headerOnly {
		covered = nil
	}
	var op trace.Op
	traced := c.rec.On()
	if traced {
		op, traced = trace.OpOf(ctx)
	}
	var t0 time.Time
	if traced {
		t0 = time.Now()
	}
	c.sendMAC.Seal(c.whead[prefixSize:prefixSize], c.snonce[:], c.hdr[:], covered)
	var t1 time.Time
	if traced {
		t1 = time.Now()
	}
	c.wvec = append(c.wvec[:0], c.whead[:prefixSize+HeaderSize], payload, c.whead[prefixSize+HeaderSize:])
	c.wbufs = c.wvec
	n, err := c.write(ctx)
	c.wvec[1] = nil // do not keep the caller's buffer
	if traced {
		size := frameSize(len(payload))
		c.record(op, trace.StageSeal, t0, t1, size, nil)
		c.record(op, trace.StageWrite, t1, time.Now(), size, err)
	}
	if err != nil && n == 0 {
		// None of it went out (the peer reads slowly and the deadline
		// came first, or the caller gave up): the stream is intact and
		// the next frame takes this one's sequence number.
		c.sendSeq--
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return err
}

// sendPoll is how often a blocked send looks at its context: one that was
// cancelled (its collective aborted) stops waiting for a peer that does
// not read.
const sendPoll = 50 * time.Millisecond

// write writes c.wbufs (WriteTo consumes what it wrote) until done, ctx's
// deadline or cancellation, or the stall without progress.
func (c *Conn) write(ctx context.Context) (int64, error) {
	// Disarm the deadline set below when done: a timer left to fire
	// wakes a thread of an idle process for nothing.
	defer c.nc.SetWriteDeadline(time.Time{})
	deadline, _ := ctx.Deadline()
	var n int64
	moved := time.Now() // the last progress
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		set := time.Now()
		dl := set.Add(sendPoll)
		if !deadline.IsZero() && deadline.Before(dl) {
			dl = deadline
		}
		if c.stall > 0 && moved.Add(c.stall).Before(dl) {
			dl = moved.Add(c.stall)
		}
		c.nc.SetWriteDeadline(dl)
		m, err := c.wbufs.WriteTo(c.nc)
		n += m
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		now := time.Now()
		if m > 0 {
			moved = now
		} else if late := now.Sub(dl); dl.After(set) && late > sendPoll {
			// This process did not run for a while (stopped, starved,
			// its machine paused): the peer's reader may not have run
			// since either, so the time lost is not its stall.
			moved = moved.Add(late)
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			return n, err
		}
		if c.stall > 0 && now.Sub(moved) >= c.stall {
			return n, fmt.Errorf("%w for %v: %w", ErrStalled, c.stall, err)
		}
	}
}

// Recv reads the next frame. The payload aliases a buffer reused by the
// next Recv. A frame that fails its tag — forged, damaged, replayed or out
// of sequence — is an error: the connection cannot be trusted past it.
func (c *Conn) Recv() (Header, []byte, error) {
	head := c.rhead[:]
	if _, err := io.ReadFull(c.br, head); err != nil {
		return Header{}, nil, err
	}
	n := int(binary.LittleEndian.Uint32(head[:]))
	if n > MaxPayload {
		return Header{}, nil, fmt.Errorf("%w: payload of %d bytes", ErrFrame, n)
	}
	if cap(c.rbuf) < n+TagSize {
		c.rbuf = make([]byte, n+TagSize, max(n+TagSize, 64<<10))
	}
	buf := c.rbuf[:n+TagSize]
	c.recvTimes.ok = c.rec.On()
	if c.recvTimes.ok {
		c.recvTimes.read = time.Now()
	}
	if _, err := io.ReadFull(c.br, buf); err != nil {
		return Header{}, nil, err
	}
	if c.recvTimes.ok {
		c.recvTimes.readEnd = time.Now()
	}
	copy(c.sealed[:], head[prefixSize:])
	copy(c.sealed[HeaderSize:], buf[n:])
	seq := c.recvSeq + 1
	binary.LittleEndian.PutUint64(c.rnonce[:], seq)
	covered := buf[:n]
	if c.headerOnly {
		covered = nil
	}
	if _, err := c.recvMAC.Open(c.plain[:0], c.rnonce[:], c.sealed[:], covered); err != nil {
		return Header{}, nil, fmt.Errorf("%w: frame %d from node %d: forged, damaged, replayed or out of sequence", ErrAuth, seq, c.remote)
	}
	if c.recvTimes.ok {
		c.recvTimes.openEnd = time.Now()
	}
	h, err := ParseHeader(c.plain[:])
	if err != nil {
		return h, nil, err
	}
	if h.Sender != c.remote || h.Seq != seq || int(h.Length) != n {
		return h, nil, fmt.Errorf("%w: header (node %d, frame %d, %d bytes) disagrees with its connection", ErrAuth, h.Sender, h.Seq, h.Length)
	}
	c.recvSeq = seq
	return h, buf[:n], nil
}
