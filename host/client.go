package host

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/host/handoff/rdma"
	"github.com/hecsys/hec/host/handoff/shm"
	"github.com/hecsys/hec/host/handoff/tcp"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// Default targets, matching the agent's defaults (package api).
const (
	DefaultShm    = "shm://" + api.DefaultRegion
	DefaultTCP    = "tcp://" + api.DefaultTCP
	DefaultMgmt   = api.DefaultMgmt
	defaultChunk  = 4 << 20
	maxChunksInFl = 8
)

// ErrClosed is returned for ops on a closed client.
var ErrClosed = handoff.ErrClosed

// ErrTarget is returned by Dial for a target it cannot parse.
var ErrTarget = handoff.ErrTarget

// ErrAgentDead says a shared-memory dial found a region whose agent's
// heartbeat stood still for the agent timeout (WithAgentTimeout): the agent
// died without removing it (SIGKILL, a crash). Trying again does not help
// until an agent formats the region again.
var ErrAgentDead = ring.ErrAgentSilent

// Request is one op: its code, two arguments, the buffers handed to the
// agent (In) and the buffers it may write into (Out), at most
// wire.MaxSpans in all. Buffers from Alloc are used in place; others are
// copied (In before, Out after).
type Request = handoff.Request

// Result is what the agent answered. Out holds the parts of the request's
// Out buffers the agent wrote, in the order its completion named them.
type Result = handoff.Result

// Call is an op in flight. Wait for it; do not touch its input buffers
// before it completes.
type Call = handoff.Call

// Option configures Dial.
type Option func(*options)

type options struct {
	handoff.Options // what the transport is dialled with
	chunk           int
	trace           *trace.Recorder
}

// WithDialer sets how the TCP handoff connects (default net.Dialer): a
// connection made inside another network namespace, say.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.Dial = dial }
}

// WithChunk sets the size of the pieces large buffers are split into
// (default 4 MiB).
func WithChunk(n int) Option { return func(o *options) { o.chunk = n } }

// WithToken sets the operator's token, which an agent that has one asks
// for on the TCP handoff (the shared-memory handoff is governed by the
// region file's permissions instead).
func WithToken(token string) Option { return func(o *options) { o.Token = token } }

// WithTrace has the client record its ops' spans (trace.StageOp, each
// from its handing over to its completion) in rec while rec records
// (trace.Recorder.Begin), in place of the process's own recorder
// (HEC_TRACE, which hecctl trace record asks).
func WithTrace(rec *trace.Recorder) Option { return func(o *options) { o.trace = rec } }

// WithAgentTimeout sets how long the agent may show no sign of life before
// ops in flight fail with wire.StatusUnavailable (default 2s).
func WithAgentTimeout(d time.Duration) Option { return func(o *options) { o.AgentTimeout = d } }

// Client is a connection to an agent. It is safe for concurrent use.
type Client struct {
	target string
	opts   options
	t      handoff.Transport
	closed atomic.Bool
	tr     *trace.Recorder // this process's, when HEC_TRACE asks for one
	splits atomic.Uint64   // multi-rail ops recorded: their ids (traceShares)
}

// Dial connects to the agent at target: "shm:///dev/shm/NAME" (the shared
// region; the agent must be running), "tcp://HOST:PORT" or
// "rdma://HOST:PORT" (the agent's RDMA handoff, hecd --rdma-listen: the
// window is registered memory the agent reads and writes). An empty
// target means DefaultShm.
func Dial(ctx context.Context, target string, opt ...Option) (*Client, error) {
	o := options{chunk: defaultChunk}
	for _, f := range opt {
		f(&o)
	}
	o.Options = o.Options.Defaults()
	if target == "" {
		target = DefaultShm
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("dial %q: %v: %w", target, err, ErrTarget)
	}
	c := &Client{target: target, opts: o, tr: o.trace}
	if c.tr == nil {
		c.tr = processTracer()
	}
	d, ok := transports[u.Scheme]
	if !ok {
		return nil, fmt.Errorf("dial %q: scheme %q (want %s): %w", target, u.Scheme, schemes(), ErrTarget)
	}
	if d.path != (u.Path != "" && u.Path != "/") || d.path == (u.Host != "") {
		return nil, fmt.Errorf("dial %q: want %s: %w", target, d.form, ErrTarget)
	}
	where := u.Host
	if d.path {
		where = u.Path
	}
	c.t, err = d.dial(ctx, where, o.Options)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return c, nil
}

// transports are the schemes Dial takes, each a package implementing
// handoff.Transport: one line each.
var transports = map[string]struct {
	form string
	path bool // the target names a path (shm:///PATH), not HOST:PORT
	dial handoff.Dialer
}{
	"shm": {"shm:///PATH", true, func(ctx context.Context, p string, o handoff.Options) (handoff.Transport, error) {
		return shm.Dial(ctx, p, o)
	}},
	"tcp": {"tcp://HOST:PORT", false, func(ctx context.Context, a string, o handoff.Options) (handoff.Transport, error) {
		return tcp.Dial(ctx, a, o)
	}},
	"rdma": {"rdma://HOST:PORT", false, func(ctx context.Context, a string, o handoff.Options) (handoff.Transport, error) {
		return rdma.Dial(ctx, a, o)
	}},
}

// schemes lists the schemes Dial takes, for errors.
func schemes() string {
	names := slices.Sorted(maps.Keys(transports))
	return strings.Join(names, ", ")
}

// Target returns what Dial was given.
func (c *Client) Target() string { return c.target }

// String describes the connection (transport, queue pair, window).
func (c *Client) String() string { return c.t.String() }

// Close releases the queue pair or connection. Calls in flight fail.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.t.Close()
}

// Alloc returns a buffer of n bytes handed to the agent without a copy: in
// the queue pair's window over shared memory (wrapping ring.ErrNoSpace when
// the window is full), ordinary memory over TCP. Free it when done.
func (c *Client) Alloc(n int) ([]byte, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if n <= 0 {
		return nil, fmt.Errorf("host: alloc of %d bytes", n)
	}
	return c.t.Alloc(n)
}

// WindowSize returns the bytes one op may name: the leased queue pair's
// window of the region (shared memory), or the agent's largest frame (TCP).
func (c *Client) WindowSize() int { return c.t.Window() }

// InWindow reports whether b lies wholly in the client's shared window (a
// buffer from Alloc, or a part of one), which is handed to the agent
// without a copy. Over TCP there is no window: false.
func (c *Client) InWindow(b []byte) bool { return c.t.InWindow(b) }

// Free returns a buffer from Alloc.
func (c *Client) Free(b []byte) error { return c.t.Free(b) }

// Go submits one op and returns at once.
func (c *Client) Go(ctx context.Context, req Request) (*Call, error) {
	if err := c.checkBatch(req); err != nil {
		return nil, err
	}
	call := handoff.NewCall(req, c.tr)
	if err := c.t.Submit(ctx, call.One()); err != nil {
		return nil, err
	}
	return call, nil
}

// goInto is Go with a call of the caller's, new or done with: it
// allocates nothing. The caller may use call again once it is done, and
// not after an error here: a submit that failed part way may have left
// it with the transport, which fails it later.
func (c *Client) goInto(ctx context.Context, req Request, call *Call) error {
	if err := c.checkBatch(req); err != nil {
		return err
	}
	call.Init(req, c.tr)
	return c.t.Submit(ctx, call.One())
}

// GoBatch submits several ops with one doorbell where the ring has room for
// all of them.
func (c *Client) GoBatch(ctx context.Context, reqs []Request) ([]*Call, error) {
	if err := c.checkBatch(reqs...); err != nil {
		return nil, err
	}
	calls := make([]*Call, len(reqs))
	for i, r := range reqs {
		calls[i] = handoff.NewCall(r, c.tr)
	}
	if err := c.t.Submit(ctx, calls); err != nil {
		return nil, err
	}
	return calls, nil
}

// checkBatch refuses ops that a descriptor, or the window, cannot carry,
// and every op once the client is closed.
func (c *Client) checkBatch(reqs ...Request) error {
	if c.closed.Load() {
		return ErrClosed
	}
	win := c.t.Window()
	for _, r := range reqs {
		if len(r.In)+len(r.Out) > wire.MaxSpans {
			return fmt.Errorf("host: %s with %d buffers (max %d): %w", r.Op, len(r.In)+len(r.Out), wire.MaxSpans, wire.StatusBadArg)
		}
		for _, bufs := range [2][][]byte{r.In, r.Out} {
			for _, b := range bufs {
				if len(b) > win {
					return fmt.Errorf("host: %s buffer of %d bytes exceeds one op (%d): %w", r.Op, len(b), win, wire.StatusTooLarge)
				}
			}
		}
	}
	return nil
}

// Wait waits for the call to complete. A status other than StatusOK comes
// back as a *wire.OpError (errors.Is(err, wire.StatusX) works).
func (c *Client) Wait(ctx context.Context, call *Call) (Result, error) {
	if !call.Done() {
		if err := c.t.Wait(ctx, call); err != nil {
			return Result{}, err
		}
	}
	res, err := call.Outcome()
	if err != nil {
		return res, err
	}
	if res.Status != wire.StatusOK {
		return res, &wire.OpError{Op: call.Req.Op, Status: res.Status}
	}
	return res, nil
}

// Do runs one op and waits for it.
func (c *Client) Do(ctx context.Context, req Request) (Result, error) {
	call, err := c.Go(ctx, req)
	if err != nil {
		return Result{}, err
	}
	return c.Wait(ctx, call)
}

// Ping makes one round trip through the agent's dispatcher.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.Do(ctx, Request{Op: wire.OpPing})
	return err
}

// Checksum returns the CRC-32C (Castagnoli) of b computed by the agent. A
// buffer from Alloc is read in place, in one op. Other memory is copied
// into the window (or sent, over TCP) in chunks that the agent checksums
// concurrently; the partial CRCs are combined exactly.
func (c *Client) Checksum(ctx context.Context, b []byte) (uint32, error) {
	chunk := max(min(c.opts.chunk, c.t.Window()/4), 4096)
	if len(b) <= chunk || c.t.InWindow(b) {
		r, err := c.Do(ctx, Request{Op: wire.OpChecksum, In: [][]byte{b}})
		return uint32(r.Arg0), err
	}
	var crc uint32
	type piece struct {
		call *Call
		n    int
	}
	var inflight []piece
	finish := func(p piece) error {
		r, err := c.Wait(ctx, p.call)
		if err != nil {
			return err
		}
		crc = crc32c.Combine(crc, uint32(r.Arg0), int64(p.n))
		return nil
	}
	for off := 0; off < len(b); off += chunk {
		part := b[off:min(off+chunk, len(b))]
		call, err := c.Go(ctx, Request{Op: wire.OpChecksum, In: [][]byte{part}})
		if err != nil {
			return 0, err
		}
		inflight = append(inflight, piece{call, len(part)})
		if len(inflight) == maxChunksInFl {
			if err := finish(inflight[0]); err != nil {
				return 0, err
			}
			inflight = inflight[1:]
		}
	}
	for _, p := range inflight {
		if err := finish(p); err != nil {
			return 0, err
		}
	}
	return crc, nil
}

// ParseTarget accepts the agent flag's forms: a full target, or a bare path
// (shm) or HOST:PORT (tcp).
func ParseTarget(s string) string {
	switch {
	case s == "":
		return DefaultShm
	case strings.Contains(s, "://"):
		return s
	case strings.HasPrefix(s, "/"):
		return "shm://" + s
	}
	return "tcp://" + s
}
