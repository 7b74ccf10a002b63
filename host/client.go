package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/mono"
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
var ErrClosed = errors.New("host: client closed")

// ErrTarget is returned by Dial for a target it cannot parse.
var ErrTarget = errors.New("host: bad target")

// ErrAgentDead says a shared-memory dial found a region whose agent's
// heartbeat stood still for the agent timeout (WithAgentTimeout): the agent
// died without removing it (SIGKILL, a crash). Trying again does not help
// until an agent formats the region again.
var ErrAgentDead = ring.ErrAgentSilent

// Request is one op: its code, two arguments, the buffers handed to the
// agent (In) and the buffers it may write into (Out), at most
// wire.MaxSpans in all. Buffers from Alloc are used in place; others are
// copied (In before, Out after).
type Request struct {
	Op         wire.Op
	Flags      uint16
	Arg0, Arg1 uint64
	In         [][]byte
	Out        [][]byte
}

// Result is what the agent answered. Out holds the parts of the request's
// Out buffers the agent wrote, in the order its completion named them.
type Result struct {
	Status     wire.Status
	Arg0, Arg1 uint64
	Out        [][]byte
}

// Call is an op in flight. Wait for it; do not touch its input buffers
// before it completes.
type Call struct {
	Req  Request
	res  Result
	err  error
	done atomic.Bool
	ch   chan struct{} // closed on completion when set (the TCP transport waits on it)
	// long: the op is expected to take a millisecond or more, so its
	// waiter sleeps on the completion bell from the start instead of
	// spinning and yielding the core first (set before Wait).
	long bool
	// wakeAt, when set, is shortly before a long op is expected to end:
	// its waiter sleeps on the completion bell until then and looks
	// without sleeping until spinTo, so that the end of the op does not
	// wait on the host's wake-up (tens of microseconds on a virtual
	// machine, more than a 16 MiB stripe's 3 %).
	wakeAt, spinTo time.Time
	// meter, when set, is told (park) before the waiter first yields,
	// sleeps or blocks: the op's CPU time is its wall time until then.
	meter *cpuMeter

	tag    uint64
	staged []uint64 // window offsets to free on completion (shm)
	// stagedA is staged's room for as many buffers as a descriptor names.
	stagedA [wire.MaxSpans]uint64
	// outSpans are the Out buffers' spans in the transport's address space
	// (the window, or the request payload plus its reserve).
	outSpans [wire.MaxSpans]wire.Span
	// outA is the room of the result's Out, and self the list of one call
	// Go submits: an op allocates its Call and nothing else for them.
	outA [wire.MaxSpans][]byte
	self [1]*Call

	// tr records the call's span while a recording is under way (the
	// client's, HEC_TRACE); the transport sets traceFrom (its origin) and
	// t0 when it hands the op over during one.
	tr        *trace.Recorder
	traceFrom string
	t0        time.Time
}

// traceSubmit notes, during a recording, where the call came from and
// when it was handed over.
func (c *Call) traceSubmit(origin string) {
	if c.tr.On() {
		c.traceFrom, c.t0 = origin, mono.Now()
	}
}

// placeOutputs copies what the agent wrote (the completion's spans, whose
// bytes read returns) into the call's Out buffers and records them in res.
// Spans outside every Out buffer are ignored: the agent is not trusted to
// name memory the op did not give it.
func (c *Call) placeOutputs(res *Result, spans []wire.Span, read func(wire.Span) []byte) {
	for _, sp := range spans {
		src := read(sp) // always: a stream transport consumes its bytes in order
		if src == nil && sp.Len != 0 {
			continue
		}
		for j, o := range c.outSpans[:len(c.Req.Out)] {
			if sp.Off < o.Off || sp.End() > o.End() {
				continue
			}
			dst := c.Req.Out[j][sp.Off-o.Off : sp.End()-uint64(o.Off)]
			copy(dst, src)
			if res.Out == nil {
				res.Out = c.outA[:0]
			}
			res.Out = append(res.Out, dst)
			break
		}
	}
}

func newCall(req Request) *Call {
	c := new(Call)
	c.init(req)
	return c
}

// init readies c, new or done with, for req.
func (c *Call) init(req Request) {
	*c = Call{Req: req}
	c.staged = c.stagedA[:0]
}

// complete ends c. Once its done is seen the call is its caller's alone,
// who may use it for another op (pieces keep a call): complete touches
// nothing of it after.
func (c *Call) complete(res Result, err error) {
	if c.done.Load() {
		return
	}
	ch := c.ch
	c.res, c.err = res, err
	if !c.t0.IsZero() {
		c.traceComplete()
	}
	c.done.Store(true)
	if ch != nil {
		close(ch)
	}
}

// traceComplete records the call's span, from its handing over to now.
func (c *Call) traceComplete() {
	var bytes int64
	for _, b := range c.Req.In {
		bytes += int64(len(b))
	}
	status := c.res.Status.String()
	if c.err != nil && c.res.Status == wire.StatusOK {
		status = "failed"
	}
	c.tr.Add(trace.Span{ID: trace.OpID(c.traceFrom, c.tag), Name: c.Req.Op.String(), Stage: trace.StageOp,
		Start: c.t0.UnixNano(), Dur: int64(mono.Now().Sub(c.t0)), Status: status, Bytes: bytes})
}

// Done reports whether the call has completed.
func (c *Call) Done() bool { return c.done.Load() }

// Option configures Dial.
type Option func(*options)

type options struct {
	token        string
	chunk        int
	attachWait   time.Duration
	agentTimeout time.Duration
	heartbeat    time.Duration
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
	trace        *trace.Recorder
}

// WithDialer sets how the TCP handoff connects (default net.Dialer): a
// connection made inside another network namespace, say.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dial = dial }
}

// WithChunk sets the size of the pieces large buffers are split into
// (default 4 MiB).
func WithChunk(n int) Option { return func(o *options) { o.chunk = n } }

// WithToken sets the operator's token, which an agent that has one asks
// for on the TCP handoff (the shared-memory handoff is governed by the
// region file's permissions instead).
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTrace has the client record its ops' spans (trace.StageOp, each
// from its handing over to its completion) in rec while rec records
// (trace.Recorder.Begin), in place of the process's own recorder
// (HEC_TRACE, which hecctl trace record asks).
func WithTrace(rec *trace.Recorder) Option { return func(o *options) { o.trace = rec } }

// WithAgentTimeout sets how long the agent may show no sign of life before
// ops in flight fail with wire.StatusUnavailable (default 2s).
func WithAgentTimeout(d time.Duration) Option { return func(o *options) { o.agentTimeout = d } }

// transport is what a Client runs over.
type transport interface {
	alloc(n int) ([]byte, error)
	free(b []byte) error
	submit(ctx context.Context, calls []*Call) error
	wait(ctx context.Context, c *Call) error
	close() error
	window() int // the largest span one op may name
	// inWindow reports whether b is handed over without a copy (in the
	// shared window); such buffers need no chunking.
	inWindow(b []byte) bool
	// windowSGL appends to list the scatter-gather list naming bufs (each
	// one's offset in the window and length), when every one lies there.
	windowSGL(list []byte, bufs [][]byte) ([]byte, bool)
	// windowRuns returns in and out each as one span of the window, when
	// their buffers lie there back to back.
	windowRuns(in, out [][]byte) (inRun, outRun []byte, ok bool)
	String() string
}

// Client is a connection to an agent. It is safe for concurrent use.
type Client struct {
	target string
	opts   options
	t      transport
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
	o := options{chunk: defaultChunk, attachWait: 5 * time.Second, agentTimeout: 2 * time.Second, heartbeat: 250 * time.Millisecond}
	for _, f := range opt {
		f(&o)
	}
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
	c.t, err = d.dial(ctx, where, o)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return c, nil
}

// transports are the schemes Dial takes: one line each.
var transports = map[string]struct {
	form string
	path bool // the target names a path (shm:///PATH), not HOST:PORT
	dial func(ctx context.Context, where string, o options) (transport, error)
}{
	"shm":  {"shm:///PATH", true, func(ctx context.Context, p string, o options) (transport, error) { return dialShm(ctx, p, o) }},
	"tcp":  {"tcp://HOST:PORT", false, func(ctx context.Context, a string, o options) (transport, error) { return dialTCP(ctx, a, o) }},
	"rdma": {"rdma://HOST:PORT", false, func(ctx context.Context, a string, o options) (transport, error) { return dialRDMA(ctx, a, o) }},
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
	return c.t.close()
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
	return c.t.alloc(n)
}

// WindowSize returns the bytes one op may name: the leased queue pair's
// window of the region (shared memory), or the agent's largest frame (TCP).
func (c *Client) WindowSize() int { return c.t.window() }

// InWindow reports whether b lies wholly in the client's shared window (a
// buffer from Alloc, or a part of one), which is handed to the agent
// without a copy. Over TCP there is no window: false.
func (c *Client) InWindow(b []byte) bool { return c.t.inWindow(b) }

// Free returns a buffer from Alloc.
func (c *Client) Free(b []byte) error { return c.t.free(b) }

// Go submits one op and returns at once.
func (c *Client) Go(ctx context.Context, req Request) (*Call, error) {
	if err := c.checkBatch(req); err != nil {
		return nil, err
	}
	call := newCall(req)
	if err := c.submitInto(ctx, call); err != nil {
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
	call.init(req)
	return c.submitInto(ctx, call)
}

// submitInto submits call (initialised) as a batch of one.
func (c *Client) submitInto(ctx context.Context, call *Call) error {
	call.self[0] = call
	call.tr = c.tr
	return c.t.submit(ctx, call.self[:])
}

// GoBatch submits several ops with one doorbell where the ring has room for
// all of them.
func (c *Client) GoBatch(ctx context.Context, reqs []Request) ([]*Call, error) {
	if err := c.checkBatch(reqs...); err != nil {
		return nil, err
	}
	calls := make([]*Call, len(reqs))
	for i, r := range reqs {
		calls[i] = newCall(r)
		calls[i].tr = c.tr
	}
	if err := c.t.submit(ctx, calls); err != nil {
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
	win := c.t.window()
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
	if !call.done.Load() {
		if err := c.t.wait(ctx, call); err != nil {
			return Result{}, err
		}
	}
	if call.err != nil {
		return call.res, call.err
	}
	if call.res.Status != wire.StatusOK {
		return call.res, &wire.OpError{Op: call.Req.Op, Status: call.res.Status}
	}
	return call.res, nil
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
	chunk := max(min(c.opts.chunk, c.t.window()/4), 4096)
	if len(b) <= chunk || c.t.inWindow(b) {
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
