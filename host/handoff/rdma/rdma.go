package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/shared/rdmalink"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/verbs"
	"github.com/hecsys/hec/shared/wire"
)

// rdmaWindow is the host's window on an RDMA handoff (capped by the
// agent's): registered once, the agent reads the ops' inputs from it and
// writes their outputs into it.
const rdmaWindow = 32 << 20

// Transport runs ops over an RDMA connection (rdmalink's handoff): the
// window is registered memory the agent reads and writes with RDMA READ
// and WRITE; descriptors and completions are messages.
type Transport struct {
	addr string
	link *rdmalink.Link
	win  *verbs.Region
	buf  []byte // the window: win's first bytes
	// credits bounds the ops in flight by the agent's message slots.
	credits chan struct{}
	origin  string

	mu      sync.Mutex
	arena   *ring.Allocator
	pending map[uint64]*handoff.Call
	seq     uint64
	closed  bool
	// setup takes the messages of the handshake, until ready.
	setup chan []byte
	ready bool
}

// Dial connects to the agent's RDMA handoff at hostport (HOST:PORT, its
// --rdma-listen) and registers the window, proving o.Token where the agent
// asks for one.
func Dial(ctx context.Context, hostport string, o handoff.Options) (*Transport, error) {
	addr, err := resolveRDMA(ctx, hostport)
	if err != nil {
		return nil, err
	}
	t := &Transport{addr: hostport, pending: map[uint64]*handoff.Call{}, setup: make(chan []byte, 4)}
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
	if err := t.handshake(ctx, acc, o.Token); err != nil {
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
		return netip.AddrPort{}, fmt.Errorf("%q: %v: %w", hostport, err, handoff.ErrTarget)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("resolve %s: %v: %w", host, err, wire.StatusUnavailable)
	}
	return netip.ParseAddrPort(net.JoinHostPort(ips[0].String(), port))
}

// handshake sends the window and proves the token where the agent asks.
func (t *Transport) handshake(ctx context.Context, acc rdmalink.Accept, token string) error {
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
func (t *Transport) onMessage(b []byte) {
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
	res := handoff.WindowResult(c, &d, t.buf)
	t.unstage(c)
	t.mu.Unlock()
	<-t.credits
	c.Complete(res, nil)
}

func (t *Transport) String() string {
	return fmt.Sprintf("rdma://%s window %d KiB", t.addr, len(t.buf)>>10)
}

func (t *Transport) Window() int { return len(t.buf) }

// offset returns b's offset in the window, if b lies in it.
func (t *Transport) offset(b []byte) (uint64, bool) { return handoff.WindowOffset(t.buf, b) }

func (t *Transport) InWindow(b []byte) bool {
	_, ok := t.offset(b)
	return ok
}

// windowSGL: the agent takes no scatter-gather lists over RDMA (it reads
// only the spans a descriptor names).
func (t *Transport) WindowSGL([]byte, [][]byte) ([]byte, bool) { return nil, false }

func (t *Transport) WindowRuns(in, out [][]byte) (inRun, outRun []byte, ok bool) {
	if inRun, ok = t.run(in); ok {
		outRun, ok = t.run(out)
	}
	return inRun, outRun, ok
}

func (t *Transport) run(bufs [][]byte) ([]byte, bool) { return handoff.WindowRun(t.buf, bufs) }

func (t *Transport) Alloc(n int) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	off, err := t.arena.Alloc(uint64(n))
	if err != nil {
		return nil, err
	}
	return t.buf[off : off+uint64(n) : off+uint64(n)], nil
}

func (t *Transport) Free(b []byte) error {
	off, ok := t.offset(b)
	if !ok {
		return errors.New("host: free of a buffer not from this client's window")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.arena.Free(off)
}

func (t *Transport) Submit(ctx context.Context, calls []*handoff.Call) error {
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
			delete(t.pending, c.Tag())
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
func (t *Transport) prepare(c *handoff.Call) (wire.Desc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return wire.Desc{}, handoff.ErrClosed
	}
	d, err := handoff.WindowDesc(c, t.buf, t.arena)
	if err != nil {
		return d, err
	}
	c.Arm()
	t.seq++
	d.Tag = t.seq
	c.Submitted(d.Tag, t.origin)
	t.pending[d.Tag] = c
	return d, nil
}

// unstage frees c's staging buffers. With t.mu held.
func (t *Transport) unstage(c *handoff.Call) { handoff.Unstage(c, t.arena) }

func (t *Transport) failAll(err error) {
	t.mu.Lock()
	calls := make([]*handoff.Call, 0, len(t.pending))
	for tag, c := range t.pending {
		calls = append(calls, c)
		delete(t.pending, tag)
	}
	t.mu.Unlock()
	for _, c := range calls {
		c.Complete(handoff.Result{Status: wire.StatusUnavailable}, err)
	}
}

func (t *Transport) Wait(ctx context.Context, c *handoff.Call) error {
	return c.Await(ctx)
}

func (t *Transport) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	err := t.link.Close()
	t.failAll(handoff.ErrClosed)
	return err
}
