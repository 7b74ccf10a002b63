package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// Transport runs ops over a TCP connection with payloads inline: the
// fallback transport, and the way to an agent across the host–DPU network.
type Transport struct {
	addr string
	o    handoff.Options

	wmu    sync.Mutex // serialises dialing and writes
	conn   net.Conn
	origin string // the connection's, for traces (trace.TCPOrigin)
	closed bool

	pmu     sync.Mutex
	pending map[uint64]*handoff.Call
	seq     uint64
}

// maxTCPOp bounds one op's payload (the agent's default frame limit).
const maxTCPOp = wire.DefaultMaxPayload

// Dial connects to the agent's TCP handoff at addr (HOST:PORT), proving
// o.Token where one is given.
func Dial(ctx context.Context, addr string, o handoff.Options) (*Transport, error) {
	t := &Transport{addr: addr, o: o, pending: map[uint64]*handoff.Call{}}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if err := t.dial(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// dial connects and starts the reader. With t.wmu held.
func (t *Transport) dial(ctx context.Context) error {
	dial := t.o.Dial
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
func (t *Transport) authenticate(ctx context.Context, c net.Conn) error {
	if t.o.Token == "" {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	if err := wire.AuthHost(c, []byte(t.o.Token)); err != nil {
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

func (t *Transport) String() string { return "tcp://" + t.addr }
func (t *Transport) Window() int    { return maxTCPOp }

func (t *Transport) InWindow([]byte) bool { return false }

func (t *Transport) WindowSGL([]byte, [][]byte) ([]byte, bool)       { return nil, false }
func (t *Transport) WindowRuns(_, _ [][]byte) ([]byte, []byte, bool) { return nil, nil, false }

func (t *Transport) Alloc(n int) ([]byte, error) { return make([]byte, n), nil }
func (t *Transport) Free([]byte) error           { return nil }

func (t *Transport) Submit(ctx context.Context, calls []*handoff.Call) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.closed {
		return handoff.ErrClosed
	}
	if t.conn == nil {
		if err := t.dial(ctx); err != nil {
			return err
		}
	}
	for _, c := range calls {
		d, reserve := handoff.StreamDesc(c)
		c.Arm()
		t.pmu.Lock()
		t.seq++
		d.Tag = t.seq
		c.Submitted(d.Tag, t.origin) // before the reader can see the call
		t.pending[d.Tag] = c
		t.pmu.Unlock()
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
func (t *Transport) read(c net.Conn) {
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
			if t.o.Token == "" && sn.challenged() {
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
			call.Complete(handoff.StreamResult(call, &d, payload), nil)
		}
	}
}

func (t *Transport) failAll(err error) {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	for tag, c := range t.pending {
		c.Complete(handoff.Result{Status: wire.StatusUnavailable}, err)
		delete(t.pending, tag)
	}
}

func (t *Transport) Wait(ctx context.Context, c *handoff.Call) error {
	return c.Await(ctx)
}

func (t *Transport) Close() error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.closed = true
	if t.conn != nil {
		t.conn.Close()
		t.conn = nil
	}
	t.failAll(handoff.ErrClosed)
	return nil
}
