package rdma

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/dpu/handoff"
	"github.com/hecsys/hec/shared/rdmalink"
	"github.com/hecsys/hec/shared/verbs"
	"github.com/hecsys/hec/shared/wire"
)

// Slots is the messages in flight each way on a connection: the host's
// ops in flight.
const Slots = 64

// AuthTimeout bounds a connection's setup: its window and the proof of
// the token.
const AuthTimeout = 5 * time.Second

// Transport serves the handoff over RDMA (rdmalink's handoff): each
// connection's host window is mirrored in a region of the agent's, its
// ops' spans read in with RDMA READ before the op and written back with
// RDMA WRITE after it, then the completion sent. A host can make the
// agent touch only the window it registered: the spans are checked
// against its length, and the NIC checks the key.
type Transport struct {
	ln        *verbs.Listener
	addr      netip.AddrPort
	maxWindow uint64
	conns     atomic.Uint64

	stop   context.CancelFunc
	ctx    context.Context
	wg     sync.WaitGroup
	closed sync.Once
}

var _ handoff.Transport = (*Transport)(nil)

// Listen listens for hosts at addr, an address of an RDMA device's
// interface, mirroring windows of up to maxWindow bytes.
func Listen(addr netip.AddrPort, maxWindow uint64) (*Transport, error) {
	ln, err := verbs.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("rdma: listen at %s: %w", addr, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Transport{ln: ln, addr: addr, maxWindow: maxWindow, ctx: ctx, stop: stop}, nil
}

// Addr is where hosts reach it: rdma://ADDR.
func (t *Transport) Addr() string { return t.addr.String() }

// Close stops accepting, ends every connection and waits for them.
func (t *Transport) Close() {
	t.closed.Do(func() {
		t.stop()
		t.ln.Close()
	})
	t.wg.Wait()
}

// Run accepts connections until Close (or ctx ends), each served on a
// goroutine of its own.
func (t *Transport) Run(ctx context.Context, srv handoff.Server) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(t.ctx, cancel)() // Close ends the connections too
	cfg := rdmalink.Config{Slots: Slots, SlotSize: rdmalink.HandoffSlotSize}
	depth := rdmalink.QueueDepth(cfg, 2*wire.MaxSpans)
	for ctx.Err() == nil {
		conn, err := t.ln.Accept(ctx, depth, func(private []byte) ([]byte, error) {
			if err := rdmalink.CheckRequest(private); err != nil {
				return nil, err
			}
			a := rdmalink.Accept{MaxWindow: t.maxWindow, Slots: Slots, SlotSize: rdmalink.HandoffSlotSize}
			if srv.Token() != "" {
				a.Flags |= rdmalink.HandoffToken
			}
			return a.Append(nil), nil
		})
		if err != nil {
			if ctx.Err() == nil {
				srv.Warn("rdma: connection not taken", "err", err)
				time.Sleep(10 * time.Millisecond) // not a busy loop on a broken listener
			}
			continue
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.serveConn(ctx, srv, conn)
		}()
	}
	return nil
}

// serveConn serves one host's connection until it or ctx ends.
func (t *Transport) serveConn(ctx context.Context, srv handoff.Server, conn *verbs.Conn) {
	msgs := make(chan []byte, Slots)
	var overrun atomic.Bool
	link, err := rdmalink.New(conn, rdmalink.Config{Slots: Slots, SlotSize: rdmalink.HandoffSlotSize, OnMessage: func(b []byte) {
		select {
		case msgs <- append([]byte(nil), b...):
		default: // more in flight than the slots it was given: a broken host
			overrun.Store(true)
		}
	}})
	if err != nil {
		srv.Warn("rdma: connection", "err", err)
		return
	}
	defer link.Close()
	n := t.conns.Add(1)
	origin := "rdma " + t.addr.String() + " #" + strconv.FormatUint(n, 10)
	window, mirror, err := t.setup(ctx, link, msgs, origin, srv.Token())
	if err != nil {
		srv.Warn("rdma: connection refused", "conn", origin, "err", err)
		return
	}
	sess := srv.Begin(origin)
	defer srv.End(sess)
	for {
		var b []byte
		select {
		case b = <-msgs:
		case <-link.Done():
			return
		case <-ctx.Done():
			return
		}
		if overrun.Load() {
			srv.Warn("rdma: closing connection: the host sent more ops than its slots", "conn", origin)
			return
		}
		if err := t.serveOp(ctx, srv, link, sess, window, mirror, b); err != nil {
			srv.Warn("rdma: closing connection", "conn", origin, "err", err)
			return
		}
	}
}

// setup takes the host's window, answers it (with the connection's name,
// origin, which the host's traces use too), and runs the token's handshake
// where the agent has one. It returns the window and the agent's mirror of
// it (registered: its first window.Len bytes are the window's).
func (t *Transport) setup(ctx context.Context, link *rdmalink.Link, msgs chan []byte, origin, token string) (verbs.RemoteKey, *verbs.Region, error) {
	ctx, cancel := context.WithTimeout(ctx, AuthTimeout)
	defer cancel()
	m := &rdmalink.Messages{L: link, Ctx: ctx, In: msgs}
	var first []byte
	select {
	case first = <-msgs:
	case <-link.Done():
		return verbs.RemoteKey{}, nil, link.Err()
	case <-ctx.Done():
		return verbs.RemoteKey{}, nil, fmt.Errorf("no window from the host: %w", ctx.Err())
	}
	window, err := rdmalink.ParseHello(first)
	refuse := func(why error) (verbs.RemoteKey, *verbs.Region, error) {
		m.Write(append([]byte{1}, why.Error()[:min(len(why.Error()), rdmalink.HandoffSlotSize-1)]...))
		return verbs.RemoteKey{}, nil, why
	}
	if err != nil {
		return refuse(err)
	}
	if window.Len == 0 || window.Len > t.maxWindow {
		return refuse(fmt.Errorf("a window of %d bytes (this agent mirrors 1 to %d)", window.Len, t.maxWindow))
	}
	mirror, err := link.Register(int(window.Len))
	if err != nil {
		return refuse(fmt.Errorf("the window's mirror: %w", err))
	}
	if _, err := m.Write(append([]byte{0}, origin...)); err != nil {
		return verbs.RemoteKey{}, nil, err
	}
	if token != "" {
		if err := wire.AuthAgent(m, []byte(token)); err != nil {
			return verbs.RemoteKey{}, nil, err
		}
	}
	return window, mirror, nil
}

// errProtocol: a message that is no descriptor (the connection ends,
// as a stream that cannot be decoded does).
var errProtocol = errors.New("rdma: a message that is not a descriptor")

// serveOp serves one descriptor: its spans read from the host's window
// into the mirror, the op, the outputs written back, the completion.
func (t *Transport) serveOp(ctx context.Context, srv handoff.Server, link *rdmalink.Link, sess handoff.Session, window verbs.RemoteKey, mirror *verbs.Region, b []byte) error {
	var req, resp wire.Desc
	if len(b) != wire.DescSize || req.Unmarshal(b) != nil {
		return errProtocol
	}
	if req.Flags&wire.FlagSGL != 0 {
		// The agent reads only the spans a descriptor names: a list
		// would name memory it has not read.
		resp = wire.Desc{Tag: req.Tag, Op: req.Op, Status: wire.StatusBadArg}
	} else {
		if req.Validate(window.Len) == nil {
			if err := readSpans(ctx, link, mirror, window, req.SpanList()); err != nil {
				return err
			}
		}
		srv.Serve(ctx, "rdma", sess, &req, mirror.Buf[:window.Len], &resp)
		for _, sp := range resp.SpanList() {
			if !sp.Within(window.Len) {
				resp.Status, resp.NSpan = wire.StatusInternal, 0
				break
			}
		}
		for _, sp := range resp.SpanList() {
			if sp.Len == 0 {
				continue
			}
			if err := link.Post(verbs.Work{Op: verbs.Write, Region: mirror, Off: int(sp.Off), Len: int(sp.Len),
				Remote: verbs.RemoteKey{Addr: window.Addr + uint64(sp.Off), RKey: window.RKey}}); err != nil {
				return fmt.Errorf("write the op's outputs: %w", err)
			}
		}
	}
	var out [wire.DescSize]byte
	resp.Marshal(out[:])
	return link.Send(ctx, out[:])
}

// Reads of an op's spans: pieces of at most readPiece bytes, at most
// readsInFlight at once (the connection's READ resources): a lost
// packet costs one piece's retry, and pieces overlap on the wire.
const (
	readPiece     = 1 << 20
	readsInFlight = 16
)

// readSpans reads spans of the host's window into the same offsets of the
// agent's mirror.
func readSpans(ctx context.Context, link *rdmalink.Link, region *verbs.Region, window verbs.RemoteKey, spans []wire.Span) error {
	var reads [readsInFlight]verbs.Work
	n := 0
	flush := func() error {
		err := link.Do(ctx, reads[:n]...)
		n = 0
		if err != nil {
			return fmt.Errorf("read the op's spans: %w", err)
		}
		return nil
	}
	for _, sp := range spans {
		for off := uint64(sp.Off); off < sp.End(); off += readPiece {
			ln := min(sp.End()-off, readPiece)
			reads[n] = verbs.Work{Op: verbs.Read, Region: region, Off: int(off), Len: int(ln),
				Remote: verbs.RemoteKey{Addr: window.Addr + off, RKey: window.RKey}}
			if n++; n == len(reads) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if n > 0 {
		return flush()
	}
	return nil
}
