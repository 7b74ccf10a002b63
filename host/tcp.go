package host

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// tcpTransport runs ops over a TCP connection with payloads inline: the
// fallback transport, and the way to an agent across the host–DPU network.
type tcpTransport struct {
	addr string
	o    options

	wmu    sync.Mutex // serialises dialing and writes
	conn   net.Conn
	origin string // the connection's, for traces (trace.TCPOrigin)
	closed bool

	pmu     sync.Mutex
	pending map[uint64]*Call
	seq     uint64
}

// maxTCPOp bounds one op's payload (the agent's default frame limit).
const maxTCPOp = wire.DefaultMaxPayload

func dialTCP(ctx context.Context, addr string, o options) (*tcpTransport, error) {
	t := &tcpTransport{addr: addr, o: o, pending: map[uint64]*Call{}}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if err := t.dial(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// dial connects and starts the reader. With t.wmu held.
func (t *tcpTransport) dial(ctx context.Context) error {
	dial := t.o.dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	c, err := dial(ctx, "tcp", t.addr)
	if err != nil {
		return fmt.Errorf("connect %s: %v: %w", t.addr, err, wire.StatusUnavailable)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if err := t.authenticate(ctx, c); err != nil {
		c.Close()
		return err
	}
	t.conn = c
	t.origin = trace.TCPOrigin(c.LocalAddr().String())
	go t.read(c)
	return nil
}

// authenticate proves the token to an agent (its challenge comes first
// on the connection) and checks the agent's proof. Without a token there
// is nothing to do: an agent that wants one sends its challenge, which
// the reader recognises (sniffer) and reports.
func (t *tcpTransport) authenticate(ctx context.Context, c net.Conn) error {
	if t.o.token == "" {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	if err := wire.AuthHost(c, []byte(t.o.token)); err != nil {
		return fmt.Errorf("connect %s: %v: %w", t.addr, err, wire.StatusDenied)
	}
	return nil
}

// sniffer keeps the first bytes read from a connection, so a reader that
// fails can tell an agent's challenge (it wants a token) from a broken
// stream.
type sniffer struct {
	r     io.Reader
	first [len(wire.AuthMagic)]byte
	n     int
}

func (s *sniffer) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if s.n < len(s.first) {
		s.n += copy(s.first[s.n:], p[:n])
	}
	return n, err
}

// challenged reports whether the stream began with an agent's challenge.
func (s *sniffer) challenged() bool { return s.n == len(s.first) && s.first == wire.AuthMagic }

func (t *tcpTransport) String() string { return "tcp://" + t.addr }
func (t *tcpTransport) window() int    { return maxTCPOp }

func (t *tcpTransport) inWindow([]byte) bool { return false }

func (t *tcpTransport) windowSGL([]byte, [][]byte) ([]byte, bool)       { return nil, false }
func (t *tcpTransport) windowRuns(_, _ [][]byte) ([]byte, []byte, bool) { return nil, nil, false }

func (t *tcpTransport) alloc(n int) ([]byte, error) { return make([]byte, n), nil }
func (t *tcpTransport) free([]byte) error           { return nil }

func (t *tcpTransport) submit(ctx context.Context, calls []*Call) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if t.conn == nil {
		if err := t.dial(ctx); err != nil {
			return err
		}
	}
	for _, c := range calls {
		nIn := len(c.Req.In)
		d := wire.Desc{Op: c.Req.Op, Flags: c.Req.Flags, Arg0: c.Req.Arg0, Arg1: c.Req.Arg1, NSpan: uint8(nIn + len(c.Req.Out))}
		off, reserve := 0, 0
		for i, b := range c.Req.In {
			d.Spans[i] = wire.Span{Off: uint32(off), Len: uint32(len(b))}
			off += len(b)
		}
		for j, b := range c.Req.Out { // room the agent appends to the payload
			d.Spans[nIn+j] = wire.Span{Off: uint32(off), Len: uint32(len(b))}
			c.outSpans[j] = d.Spans[nIn+j]
			off += len(b)
			reserve += len(b)
		}
		c.ch = make(chan struct{})
		c.traceSubmit(t.origin) // before the reader can see the call
		t.pmu.Lock()
		t.seq++
		c.tag = t.seq
		t.pending[c.tag] = c
		t.pmu.Unlock()
		d.Tag = c.tag
		if err := wire.WriteFrameReserve(t.conn, &d, reserve, c.Req.In...); err != nil {
			t.conn.Close()
			t.conn = nil
			t.failAll(fmt.Errorf("host: send to %s: %v: %w", t.addr, err, wire.StatusUnavailable))
			return fmt.Errorf("send to %s: %v: %w", t.addr, err, wire.StatusUnavailable)
		}
	}
	return nil
}

// read completes calls from responses until the connection ends; then every
// call still pending fails with StatusUnavailable (retryable), and the next
// submit dials again.
func (t *tcpTransport) read(c net.Conn) {
	sn := &sniffer{r: c}
	fr := wire.NewFrameReader(sn, maxTCPOp)
	for {
		d, payload, err := fr.Next()
		if err != nil {
			t.wmu.Lock()
			if t.conn == c {
				t.conn = nil
			}
			t.wmu.Unlock()
			c.Close()
			if t.o.token == "" && sn.challenged() {
				t.failAll(fmt.Errorf("host: the agent at %s requires the operator's token (host.WithToken): %w", t.addr, wire.StatusDenied))
				return
			}
			t.failAll(fmt.Errorf("host: connection to %s: %v: %w", t.addr, err, wire.StatusUnavailable))
			return
		}
		t.pmu.Lock()
		call := t.pending[d.Tag]
		delete(t.pending, d.Tag)
		t.pmu.Unlock()
		if call != nil {
			res := Result{Status: d.Status, Arg0: d.Arg0, Arg1: d.Arg1}
			if len(call.Req.Out) > 0 { // on error too: a reason, when the op writes one
				pos := 0
				call.placeOutputs(&res, d.SpanList(), func(sp wire.Span) []byte {
					if pos+int(sp.Len) > len(payload) {
						return nil
					}
					b := payload[pos : pos+int(sp.Len)]
					pos += int(sp.Len)
					return b
				})
			}
			call.complete(res, nil)
		}
	}
}

func (t *tcpTransport) failAll(err error) {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	for tag, c := range t.pending {
		c.complete(Result{Status: wire.StatusUnavailable}, err)
		delete(t.pending, tag)
	}
}

func (t *tcpTransport) wait(ctx context.Context, c *Call) error {
	c.meter.park() // it blocks on the channel
	select {
	case <-c.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *tcpTransport) close() error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.closed = true
	if t.conn != nil {
		t.conn.Close()
		t.conn = nil
	}
	t.failAll(ErrClosed)
	return nil
}
