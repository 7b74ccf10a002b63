package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hecsys/hec/shared/rdmalink"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/verbs"
	"github.com/hecsys/hec/shared/wire"
)

// rdmaWindow is the host's window on an RDMA handoff (capped by the
// agent's): registered once, the agent reads the ops' inputs from it and
// writes their outputs into it.
const rdmaWindow = 32 << 20

// rdmaTransport runs ops over an RDMA connection (rdmalink's handoff): the
// window is registered memory the agent reads and writes with RDMA READ
// and WRITE; descriptors and completions are messages.
type rdmaTransport struct {
	addr string
	link *rdmalink.Link
	win  *verbs.Region
	buf  []byte // the window: win's first bytes
	// credits bounds the ops in flight by the agent's message slots.
	credits chan struct{}
	origin  string

	mu      sync.Mutex
	arena   *ring.Allocator
	pending map[uint64]*Call
	seq     uint64
	closed  bool
	// setup takes the messages of the handshake, until ready.
	setup chan []byte
	ready bool
}

func dialRDMA(ctx context.Context, hostport string, o options) (*rdmaTransport, error) {
	addr, err := resolveRDMA(ctx, hostport)
	if err != nil {
		return nil, err
	}
	t := &rdmaTransport{addr: hostport, pending: map[uint64]*Call{}, setup: make(chan []byte, 4)}
	cfg := rdmalink.Config{SlotSize: rdmalink.HandoffSlotSize, OnMessage: t.onMessage}
	conn, reply, err := verbs.Dial(ctx, addr, rdmalink.Request(), rdmalink.QueueDepth(cfg, 0))
	if err != nil {
		return nil, fmt.Errorf("connect %s: %v: %w", hostport, err, wire.StatusUnavailable)
	}
	acc, err := rdmalink.ParseAccept(reply)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect %s: %w", hostport, err)
	}
	cfg.Slots = int(acc.Slots)
	if t.link, err = rdmalink.New(conn, cfg); err != nil {
		return nil, fmt.Errorf("connect %s: %w", hostport, err)
	}
	ok := false
	defer func() {
		if !ok {
			t.link.Close()
		}
	}()
	if t.win, err = t.link.Register(int(min(rdmaWindow, acc.MaxWindow))); err != nil {
		return nil, fmt.Errorf("connect %s: the window: %w", hostport, err)
	}
	// The agent's region mirrors the window: its length, not the pages
	// Register rounded it up to.
	t.buf = t.win.Buf[:min(rdmaWindow, acc.MaxWindow)]
	t.arena = ring.NewAllocator(uint64(len(t.buf)))
	t.credits = make(chan struct{}, acc.Slots)
	if err := t.handshake(ctx, acc, o.token); err != nil {
		return nil, fmt.Errorf("connect %s: %w", hostport, err)
	}
	go func() { // the link's end fails what is in flight
		<-t.link.Done()
		t.failAll(fmt.Errorf("host: RDMA connection to %s: %v: %w", hostport, t.link.Err(), wire.StatusUnavailable))
	}()
	ok = true
	return t, nil
}

// resolveRDMA turns HOST:PORT into the IPv4 address the connection
// manager wants.
func resolveRDMA(ctx context.Context, hostport string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		return ap, nil
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: %v: %w", hostport, err, ErrTarget)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("resolve %s: %v: %w", host, err, wire.StatusUnavailable)
	}
	return netip.ParseAddrPort(net.JoinHostPort(ips[0].String(), port))
}

// handshake sends the window and proves the token where the agent asks.
func (t *rdmaTransport) handshake(ctx context.Context, acc rdmalink.Accept, token string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wantsToken := acc.Flags&rdmalink.HandoffToken != 0
	switch {
	case wantsToken && token == "":
		return fmt.Errorf("the agent requires the operator's token (host.WithToken): %w", wire.StatusDenied)
	case !wantsToken && token != "":
		return fmt.Errorf("%w: the agent asks for no token (then give none)", wire.ErrAuth)
	}
	m := &rdmalink.Messages{L: t.link, Ctx: ctx, In: t.setup}
	key := t.win.Key()
	key.Len = uint64(len(t.buf))
	if _, err := m.Write(rdmalink.Hello(key)); err != nil {
		return err
	}
	answer := make([]byte, rdmalink.HandoffSlotSize)
	n, err := m.Read(answer)
	if err != nil {
		return fmt.Errorf("the agent's answer: %w", err)
	}
	if n == 0 || answer[0] != 0 {
		return fmt.Errorf("the agent refused the connection: %s: %w", answer[min(n, 1):n], wire.StatusDenied)
	}
	// The agent names the connection; both sides' traces use the name.
	t.origin = string(answer[1:n])
	if wantsToken {
		if err := wire.AuthHost(m, []byte(token)); err != nil {
			return fmt.Errorf("%v: %w", err, wire.StatusDenied)
		}
	}
	t.mu.Lock()
	t.ready = true
	t.mu.Unlock()
	return nil
}

// onMessage takes a message on the link's poller: a handshake's until
// ready, then completions.
func (t *rdmaTransport) onMessage(b []byte) {
	t.mu.Lock()
	if !t.ready {
		t.mu.Unlock()
		select {
		case t.setup <- append([]byte(nil), b...):
		default: // more than a handshake sends: ignored, and the handshake fails
		}
		return
	}
	var d wire.Desc
	if len(b) != wire.DescSize || d.Unmarshal(b) != nil {
		t.mu.Unlock()
		return // not a completion: ignored (the call it was for times out)
	}
	c := t.pending[d.Tag]
	delete(t.pending, d.Tag)
	if c == nil {
		t.mu.Unlock()
		return
	}
	res := windowResult(c, &d, t.buf)
	t.unstage(c)
	t.mu.Unlock()
	<-t.credits
	c.complete(res, nil)
}

func (t *rdmaTransport) String() string {
	return fmt.Sprintf("rdma://%s window %d KiB", t.addr, len(t.buf)>>10)
}

func (t *rdmaTransport) window() int { return len(t.buf) }

// offset returns b's offset in the window, if b lies in it.
func (t *rdmaTransport) offset(b []byte) (uint64, bool) { return windowOffset(t.buf, b) }

func (t *rdmaTransport) inWindow(b []byte) bool {
	_, ok := t.offset(b)
	return ok
}

// windowSGL: the agent takes no scatter-gather lists over RDMA (it reads
// only the spans a descriptor names).
func (t *rdmaTransport) windowSGL([]byte, [][]byte) ([]byte, bool) { return nil, false }

func (t *rdmaTransport) windowRuns(in, out [][]byte) (inRun, outRun []byte, ok bool) {
	if inRun, ok = t.run(in); ok {
		outRun, ok = t.run(out)
	}
	return inRun, outRun, ok
}

func (t *rdmaTransport) run(bufs [][]byte) ([]byte, bool) { return windowRun(t.buf, bufs) }

func (t *rdmaTransport) alloc(n int) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	off, err := t.arena.Alloc(uint64(n))
	if err != nil {
		return nil, err
	}
	return t.buf[off : off+uint64(n) : off+uint64(n)], nil
}

func (t *rdmaTransport) free(b []byte) error {
	off, ok := t.offset(b)
	if !ok {
		return errors.New("host: free of a buffer not from this client's window")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.arena.Free(off)
}

func (t *rdmaTransport) submit(ctx context.Context, calls []*Call) error {
	for _, c := range calls {
		select {
		case t.credits <- struct{}{}:
		case <-t.link.Done():
			return fmt.Errorf("host: RDMA connection to %s: %v: %w", t.addr, t.link.Err(), wire.StatusUnavailable)
		case <-ctx.Done():
			return ctx.Err()
		}
		d, err := t.prepare(c)
		if err != nil {
			<-t.credits
			return err
		}
		var b [wire.DescSize]byte
		d.Marshal(b[:])
		if err := t.link.Send(ctx, b[:]); err != nil {
			t.mu.Lock()
			delete(t.pending, c.tag)
			t.unstage(c)
			t.mu.Unlock()
			<-t.credits
			return fmt.Errorf("host: send to %s: %v: %w", t.addr, err, wire.StatusUnavailable)
		}
	}
	return nil
}

// prepare builds c's descriptor, copying inputs outside the window into
// staging buffers in it, and makes c pending.
func (t *rdmaTransport) prepare(c *Call) (wire.Desc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return wire.Desc{}, ErrClosed
	}
	d, err := windowDesc(c, t.buf, t.arena)
	if err != nil {
		return d, err
	}
	c.ch = make(chan struct{})
	t.seq++
	c.tag = t.seq
	d.Tag = c.tag
	c.traceSubmit(t.origin)
	t.pending[c.tag] = c
	return d, nil
}

// unstage frees c's staging buffers. With t.mu held.
func (t *rdmaTransport) unstage(c *Call) { unstage(c, t.arena) }

func (t *rdmaTransport) failAll(err error) {
	t.mu.Lock()
	calls := make([]*Call, 0, len(t.pending))
	for tag, c := range t.pending {
		calls = append(calls, c)
		delete(t.pending, tag)
	}
	t.mu.Unlock()
	for _, c := range calls {
		c.complete(Result{Status: wire.StatusUnavailable}, err)
	}
}

func (t *rdmaTransport) wait(ctx context.Context, c *Call) error {
	c.meter.park()
	select {
	case <-c.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *rdmaTransport) close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	err := t.link.Close()
	t.failAll(ErrClosed)
	return err
}
