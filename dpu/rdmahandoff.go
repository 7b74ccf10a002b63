package dpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/shared/rdmalink"
	"github.com/hecsys/hec/shared/verbs"
	"github.com/hecsys/hec/shared/wire"
)

// rdmaSlots is the messages in flight each way on an RDMA handoff
// connection: the host's ops in flight.
const rdmaSlots = 64

// rdmaHandoff serves the handoff over RDMA (rdmalink's handoff): each
// connection's host window is mirrored in a region of the agent's, its
// ops' spans read in with RDMA READ before the op and written back with
// RDMA WRITE after it, then the completion sent. A host can make the
// agent touch only the window it registered: the spans are checked
// against its length, and the NIC checks the key.
type rdmaHandoff struct {
	ln        *verbs.Listener
	addr      netip.AddrPort
	maxWindow uint64
	env       *Env
	conns     atomic.Uint64
}

func listenRDMA(addr string, maxWindow uint64, env *Env) (*rdmaHandoff, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--rdma-listen %q: want IPv4:PORT: %w", addr, ErrConfig)
	}
	// An RDMA device's address reaches beyond this machine: as the TCP
	// handoff, it wants the operator's token, or --insecure.
	if err := env.Shared.checkExposed(env.Log, "--rdma-listen", addr, env.Shared.Token != ""); err != nil {
		return nil, err
	}
	ln, err := verbs.Listen(ap)
	if err != nil {
		env.Shared.notServed("rdma-listen") // not an insecure listener: none
		return nil, fmt.Errorf("rdma: listen at %s: %w", addr, err)
	}
	return &rdmaHandoff{ln: ln, addr: ap, maxWindow: maxWindow, env: env}, nil
}

// serve accepts connections until ctx ends.
func (h *rdmaHandoff) serve(ctx context.Context) {
	defer h.ln.Close()
	cfg := rdmalink.Config{Slots: rdmaSlots, SlotSize: rdmalink.HandoffSlotSize}
	depth := rdmalink.QueueDepth(cfg, 2*wire.MaxSpans)
	for ctx.Err() == nil {
		conn, err := h.ln.Accept(ctx, depth, func(private []byte) ([]byte, error) {
			if err := rdmalink.CheckRequest(private); err != nil {
				return nil, err
			}
			a := rdmalink.Accept{MaxWindow: h.maxWindow, Slots: rdmaSlots, SlotSize: rdmalink.HandoffSlotSize}
			if h.env.Shared.Token != "" {
				a.Flags |= rdmalink.HandoffToken
			}
			return a.Append(nil), nil
		})
		if err != nil {
			if ctx.Err() == nil {
				h.env.Dispatcher.limited.Log(slog.LevelWarn, "rdma: connection not taken", "err", err)
				time.Sleep(10 * time.Millisecond) // not a busy loop on a broken listener
			}
			continue
		}
		h.env.Go(func() { h.serveConn(ctx, conn) })
	}
}

// serveConn serves one host's connection until it or ctx ends.
func (h *rdmaHandoff) serveConn(ctx context.Context, conn *verbs.Conn) {
	d := h.env.Dispatcher
	msgs := make(chan []byte, rdmaSlots)
	var overrun atomic.Bool
	link, err := rdmalink.New(conn, rdmalink.Config{Slots: rdmaSlots, SlotSize: rdmalink.HandoffSlotSize, OnMessage: func(b []byte) {
		select {
		case msgs <- append([]byte(nil), b...):
		default: // more in flight than the slots it was given: a broken host
			overrun.Store(true)
		}
	}})
	if err != nil {
		d.limited.Log(slog.LevelWarn, "rdma: connection", "err", err)
		return
	}
	defer link.Close()
	n := h.conns.Add(1)
	origin := "rdma " + h.addr.String() + " #" + strconv.FormatUint(n, 10)
	window, mirror, err := h.setup(ctx, link, msgs, origin)
	if err != nil {
		d.limited.Log(slog.LevelWarn, "rdma: connection refused", "conn", origin, "err", err)
		return
	}
	sess := d.sessions.begin(origin)
	defer d.sessions.end(sess)
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
			d.limited.Log(slog.LevelWarn, "rdma: closing connection: the host sent more ops than its slots", "conn", origin)
			return
		}
		if err := h.serveOp(ctx, link, sess, window, mirror, b); err != nil {
			d.limited.Log(slog.LevelWarn, "rdma: closing connection", "conn", origin, "err", err)
			return
		}
	}
}

// setup takes the host's window, answers it (with the connection's name,
// origin, which the host's traces use too), and runs the token's handshake
// where the agent has one. It returns the window and the agent's mirror of
// it (registered: its first window.Len bytes are the window's).
func (h *rdmaHandoff) setup(ctx context.Context, link *rdmalink.Link, msgs chan []byte, origin string) (verbs.RemoteKey, *verbs.Region, error) {
	ctx, cancel := context.WithTimeout(ctx, authTimeout)
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
	if window.Len == 0 || window.Len > h.maxWindow {
		return refuse(fmt.Errorf("a window of %d bytes (this agent mirrors 1 to %d)", window.Len, h.maxWindow))
	}
	mirror, err := link.Register(int(window.Len))
	if err != nil {
		return refuse(fmt.Errorf("the window's mirror: %w", err))
	}
	if _, err := m.Write(append([]byte{0}, origin...)); err != nil {
		return verbs.RemoteKey{}, nil, err
	}
	if token := h.env.Shared.Token; token != "" {
		if err := wire.AuthAgent(m, []byte(token)); err != nil {
			return verbs.RemoteKey{}, nil, err
		}
	}
	return window, mirror, nil
}

// errRDMAProtocol: a message that is no descriptor (the connection ends,
// as a stream that cannot be decoded does).
var errRDMAProtocol = errors.New("rdma: a message that is not a descriptor")

// serveOp serves one descriptor: its spans read from the host's window
// into the mirror, the op, the outputs written back, the completion.
func (h *rdmaHandoff) serveOp(ctx context.Context, link *rdmalink.Link, sess Session, window verbs.RemoteKey, mirror *verbs.Region, b []byte) error {
	var req, resp wire.Desc
	if len(b) != wire.DescSize || req.Unmarshal(b) != nil {
		return errRDMAProtocol
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
		h.env.Dispatcher.ServeIn(ctx, "rdma", sess, &req, mirror.Buf[:window.Len], &resp)
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

// Reads of an op's spans: pieces of at most rdmaReadPiece bytes, at most
// rdmaReadsInFlight at once (the connection's READ resources): a lost
// packet costs one piece's retry, and pieces overlap on the wire.
const (
	rdmaReadPiece     = 1 << 20
	rdmaReadsInFlight = 16
)

// readSpans reads spans of the host's window into the same offsets of the
// agent's mirror.
func readSpans(ctx context.Context, link *rdmalink.Link, region *verbs.Region, window verbs.RemoteKey, spans []wire.Span) error {
	var reads [rdmaReadsInFlight]verbs.Work
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
		for off := uint64(sp.Off); off < sp.End(); off += rdmaReadPiece {
			ln := min(sp.End()-off, rdmaReadPiece)
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
