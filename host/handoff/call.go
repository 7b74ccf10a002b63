package handoff

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/shared/mono"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// ErrClosed is returned for ops on a closed client or transport.
var ErrClosed = errors.New("host: client closed")

// ErrTarget is returned for a target that cannot be parsed.
var ErrTarget = errors.New("host: bad target")

// Request is one op: its code, two arguments, the buffers handed to the
// agent (In) and the buffers it may write into (Out), at most
// wire.MaxSpans in all. Buffers in the transport's window are used in
// place; others are copied (In before, Out after).
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

// Meter is told (LeaveSpin) before an op's waiter first yields, sleeps
// or blocks: the op's CPU time is its wall time until then (ring.Waiter's
// Leave).
type Meter interface{ LeaveSpin() }

// Call is an op in flight. Wait for it; do not touch its input buffers
// before it completes.
type Call struct {
	Req  Request
	res  Result
	err  error
	done atomic.Bool
	ch   chan struct{} // closed on completion when armed (Arm, Await)
	// long: the op is expected to take a millisecond or more, so its
	// waiter sleeps on the completion bell from the start instead of
	// spinning and yielding the core first.
	long bool
	// wakeAt, when set, is shortly before a long op is expected to end:
	// its waiter sleeps until then and looks without sleeping until
	// spinTo, so that the end of the op does not wait on the host's
	// wake-up (tens of microseconds on a virtual machine, more than a 16
	// MiB stripe's 3 %).
	wakeAt, spinTo time.Time
	meter          Meter

	tag    uint64
	staged []uint64 // window offsets to free on completion
	// stagedA is staged's room for as many buffers as a descriptor names.
	stagedA [wire.MaxSpans]uint64
	// outSpans are the Out buffers' spans in the transport's address space
	// (the window, or the request payload plus its reserve).
	outSpans [wire.MaxSpans]wire.Span
	// outA is the room of the result's Out, and self the list of one call
	// Submit takes: an op allocates its Call and nothing else for them.
	outA [wire.MaxSpans][]byte
	self [1]*Call

	// tr records the call's span while a recording is under way; the
	// transport sets traceFrom (its origin) and t0 when it hands the op
	// over during one (Submitted).
	tr        *trace.Recorder
	traceFrom string
	t0        time.Time
}

// NewCall returns a call for req, recording its span in tr while tr
// records (nil: never).
func NewCall(req Request, tr *trace.Recorder) *Call {
	c := new(Call)
	c.Init(req, tr)
	return c
}

// Init readies c, new or done with, for req: it allocates nothing.
func (c *Call) Init(req Request, tr *trace.Recorder) {
	*c = Call{Req: req, tr: tr}
	c.staged = c.stagedA[:0]
}

// One returns the batch of c alone, for Submit (without allocating).
func (c *Call) One() []*Call {
	c.self[0] = c
	return c.self[:]
}

// Done reports whether the call has completed.
func (c *Call) Done() bool { return c.done.Load() }

// Outcome is what the call completed with: the agent's result, and an
// error where the call failed on the way (the transport's; the agent's
// status is in the result). Valid once Done.
func (c *Call) Outcome() (Result, error) { return c.res, c.err }

// SetLong marks the call as expected to take a millisecond or more: its
// waiter sleeps at once instead of spinning and yielding first. Set
// before Wait.
func (c *Call) SetLong(long bool) { c.long = long }

// Long reports whether the call is marked long (SetLong, Expect).
func (c *Call) Long() bool { return c.long }

// Expect marks the call long and expected to end between wakeAt and
// spinTo: its waiter sleeps until wakeAt and looks without sleeping
// until spinTo. Set before Wait.
func (c *Call) Expect(wakeAt, spinTo time.Time) { c.long, c.wakeAt, c.spinTo = true, wakeAt, spinTo }

// Expected returns the window set by Expect (zero times: none).
func (c *Call) Expected() (wakeAt, spinTo time.Time) { return c.wakeAt, c.spinTo }

// SetMeter has m told before the call's waiter first gives up its
// thread. Set before Wait.
func (c *Call) SetMeter(m Meter) { c.meter = m }

// Meter returns the call's meter (nil: none).
func (c *Call) Meter() Meter { return c.meter }

// Park tells the call's meter, if any, that its waiter gives up its
// thread now.
func (c *Call) Park() {
	if c.meter != nil {
		c.meter.LeaveSpin()
	}
}

// Submitted records, as the transport hands the call over, its tag (the
// descriptor's) and, during a recording, where it came from (the
// transport's origin, trace.Origin) and when.
func (c *Call) Submitted(tag uint64, origin string) {
	c.tag = tag
	if c.tr.On() {
		c.traceFrom, c.t0 = origin, mono.Now()
	}
}

// Tag is the tag Submitted gave the call.
func (c *Call) Tag() uint64 { return c.tag }

// Arm readies the call for Await, for a transport whose waiters block
// until its completion: before the call is handed over.
func (c *Call) Arm() { c.ch = make(chan struct{}) }

// Await blocks until c, armed, completes or ctx ends: the wait of a
// transport whose completions arrive on a goroutine of its own.
func (c *Call) Await(ctx context.Context) error {
	c.Park() // it blocks on the channel
	select {
	case <-c.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PlaceOutputs copies what the agent wrote (the completion's spans, whose
// bytes read returns) into the call's Out buffers and records them in
// res. Spans outside every Out buffer are ignored: the agent is not
// trusted to name memory the op did not give it.
func (c *Call) PlaceOutputs(res *Result, spans []wire.Span, read func(wire.Span) []byte) {
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

// Complete ends c, once: later completions are ignored. Once its Done is
// seen the call is its caller's alone, who may use it for another op:
// Complete touches nothing of it after.
func (c *Call) Complete(res Result, err error) {
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
