package dpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/mono"
	"github.com/hecsys/hec/shared/panics"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// Request is what a handler serves: a validated private copy of the
// descriptor, and the memory its spans name.
type Request struct {
	wire.Desc
	// Mem is the queue pair's window (shared memory) or the frame's payload
	// (TCP). Spans in Desc have been checked against Mem.Len().
	Mem ring.Accessor
	// Transport is "shm", "tcp" or "rdma".
	Transport string
	// Session is the host session it came from (its queue pair's lease,
	// its connection).
	Session Session

	yield func(*job) // what Yield does (nil: nothing), for job
	job   *job
	// start is when the poller began serving it inline (zero on a
	// worker): a handler that times its work may start from it rather
	// than read the clock again (tens of nanoseconds on a virtual
	// machine's kvm-clock).
	start time.Time
	// sgl is the scatter-gather list the poller read to size the request
	// when it ran it inline: the handler serves these spans, not a list
	// read again, which the host may have rewritten to name more since.
	sgl []wire.Span
	// Kept is the handler's, from its Serve to its Account: what it
	// keeps of the op to account for it (nil for handlers without).
	Kept any
	// disp is the dispatcher serving it, for its stages' spans (Stage).
	disp *Dispatcher
}

// Tracing says whether the op's spans are being recorded: a service
// reads the clock for its stages (Stage) only then.
func (r *Request) Tracing() bool { return r.disp != nil && r.disp.trace.On() }

// Stage records a stage of the op's service (trace.StageCode, …) from
// start to end, under the op's id, when the op's spans are being
// recorded (Tracing); nothing otherwise.
func (r *Request) Stage(stage string, start, end time.Time) {
	if !r.Tracing() {
		return
	}
	r.disp.trace.Add(trace.Span{ID: r.TraceID(), Name: wire.Op(r.Op).String(),
		Stage: stage, Start: start.UnixNano(), Dur: int64(end.Sub(start))})
}

// TraceID is the op's id in a trace (trace.OpID): the host's spans of it
// have it too. It allocates: ask only while Tracing.
func (r *Request) TraceID() string {
	if r.disp == nil {
		return ""
	}
	return trace.OpID(r.disp.sessions.origin(r.Session), r.Tag)
}

// SGL returns the spans of the request's scatter-gather list (FlagSGL:
// Spans[0] names it): the ones the poller read, else read from Mem now.
// A list that cannot be read or decoded is the status to complete with.
func (r *Request) SGL() ([]wire.Span, wire.Status) {
	if r.sgl != nil {
		return r.sgl, wire.StatusOK
	}
	return readSGL(r.Mem, r.Spans[0], nil, nil)
}

// readSGL reads and decodes the scatter-gather list at s in mem, into
// scratch (raw bytes, where mem is not mapped) and dst when they have
// room; a status other than OK is what the request completes with.
func readSGL(mem ring.Accessor, s wire.Span, scratch []byte, dst []wire.Span) ([]wire.Span, wire.Status) {
	raw, err := ring.Bytes(mem, s, scratch)
	if err != nil {
		return nil, wire.StatusBadSpan
	}
	if dst == nil {
		dst = make([]wire.Span, 0, min(len(raw)/wire.SpanSize, wire.MaxSGL))
	}
	spans, err := wire.DecodeSGL(dst[:0], raw, mem.Len())
	if err != nil {
		return nil, statusFor(err)
	}
	return spans, wire.StatusOK
}

// YieldEvery is the slice of a long request: a handler that touches more
// than this many bytes calls Yield after each YieldEvery bytes, and the
// worker serves another pair's waiting work there. 256 KiB is some 20–60 µs
// of CRC on one core.
const YieldEvery = 256 << 10

// Yield lets the agent serve another queue pair's waiting request before
// this one goes on. Handlers of long requests call it every YieldEvery
// bytes; it costs a lock when nobody waits.
func (r *Request) Yield() {
	if r.yield != nil {
		r.yield(r.job)
	}
}

// Handler serves one op code.
type Handler struct {
	// Inline handlers are cheap (no large copies or computation): they run
	// on the polling goroutine. Others run on the worker pool.
	Inline bool
	// InlineMax runs a request inline anyway when its spans hold at most
	// this many bytes (the spans its scatter-gather list names, for one
	// with FlagSGL): handing a small job to a worker costs more (a
	// thread wake-up, tens of microseconds here) than doing it.
	InlineMax uint64
	// InlineAlone raises InlineMax to this many bytes on an agent with one
	// P (GOMAXPROCS 1, pinned to one core): a worker could not run beside
	// the poller there, so handing it the job buys no parallelism, only
	// two goroutine switches (some 1.5 µs a job here, a tenth of a 1 MiB
	// stripe's coding). Keep it within the work a worker does between two
	// Yields, so that an inline job holds other pairs up no longer than a
	// worker's slice would.
	InlineAlone uint64
	// Detached handlers wait on others (agents across the network), not
	// on a core: each runs on a goroutine of its own, not holding a
	// worker (at most maxDetached at once; more complete StatusBusy).
	Detached bool
	// Serve fills resp (already carrying Op, Tag and StatusOK) for req. It
	// must not keep req.Mem or views of it after returning.
	Serve func(ctx context.Context, req *Request, resp *wire.Desc)
	// Account, when set, is the rest of the handler's work on an op that
	// the host need not wait for (metrics, a rate). The poller runs it
	// once the op's completion is written (and published, for a long
	// op), a worker or a stream transport once Serve has returned; end is
	// the time then. It gets what Serve left in req.Kept and must not
	// read req.Mem.
	Account func(req *Request, resp *wire.Desc, end time.Time)
}

type handlerEntry struct {
	op      wire.Op
	h       Handler
	ops     atomic.Uint64
	errs    atomic.Uint64
	latency prometheus.Observer
}

// handlerTable finds an op's handler in two loads, by its service's block
// of 0x100 codes and then by the code within it: every descriptor looks
// its op up, and a map's hash and buckets cost a 1 MiB EC op on the
// agent's core some 0.1 µs of cache misses (the coder has just streamed
// its stripe through that core's L2).
type handlerTable struct {
	blocks []*[0x100]*handlerEntry // by op>>8
	n      int
}

func (t *handlerTable) get(op wire.Op) *handlerEntry {
	if b := int(op >> 8); b < len(t.blocks) && t.blocks[b] != nil {
		return t.blocks[b][op&0xff]
	}
	return nil
}

func (t *handlerTable) set(e *handlerEntry) {
	b := int(e.op >> 8)
	for len(t.blocks) <= b {
		t.blocks = append(t.blocks, nil)
	}
	if t.blocks[b] == nil {
		t.blocks[b] = new([0x100]*handlerEntry)
	}
	t.blocks[b][e.op&0xff] = e
	t.n++
}

// all returns the entries in op order.
func (t *handlerTable) all() []*handlerEntry {
	out := make([]*handlerEntry, 0, t.n)
	for _, b := range t.blocks {
		if b == nil {
			continue
		}
		for _, e := range b {
			if e != nil {
				out = append(out, e)
			}
		}
	}
	return out
}

// Dispatcher routes descriptors from every transport to the handlers that
// services registered.
type Dispatcher struct {
	log      *slog.Logger
	limited  *limitedLog
	handlers handlerTable
	latency  *prometheus.HistogramVec
	waits    prometheus.Histogram
	badOps   atomic.Uint64
	workers  int
	detached atomic.Int64 // detached handlers running
	// detachedWG counts them too, for the agent to wait for before it
	// unmaps the region they write and ring.
	detachedWG sync.WaitGroup

	work *workQueue
	done chan *job
	wake chan struct{}
	jobs sync.Pool

	// doorbell: sleep on the region's futex doorbell when idle (hosts share
	// the agent's kernel); ring wakes the poller from a worker.
	doorbell bool
	ring     func()

	// shm is the region's agent side being served (workers ring its
	// doorbell); RunShm replaces it when the region is lost and formatted
	// again, and then calls onRebuild.
	shm       atomic.Pointer[ring.Agent]
	lost      atomic.Bool // a worker's access to the region faulted
	onRebuild func(gen uint32)
	rebuilds  atomic.Uint64

	sessions sessions
	// trace records the ops' spans while a recording is under way
	// (GET /v1/trace).
	trace *trace.Recorder

	mu            sync.Mutex
	snaps         []api.QueuePair
	spareSnaps    []api.QueuePair // the slice housekeeping fills next
	headerRepairs uint64
}

type job struct {
	q     *ring.AgentQP
	agent *ring.Agent // q's
	e     *handlerEntry
	req   Request
	resp  wire.Desc
	t0    time.Time

	queued time.Time     // workQueue: when pushed
	lone   bool          // nothing else of its pair queued or running then
	waited time.Duration // from pushed to started

	queuedAtSlice uint64 // workQueue.slices when pushed
	slices        int    // slices served so far (its yields)
}

// NewDispatcher returns a dispatcher with the agent's own ops (PING and
// CHECKSUM) registered.
func NewDispatcher(log *slog.Logger, workers int) *Dispatcher {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	d := &Dispatcher{
		log:     log,
		limited: newLimitedLog(log),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hec_op_duration_seconds",
			Help:    "Time the agent spent serving an op, by op (excludes queueing in the rings).",
			Buckets: prometheus.ExponentialBuckets(250e-9, 4, 12),
		}, []string{"op"}),
		waits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hec_worker_wait_seconds",
			Help:    "Time a request handed to the worker pool waited for a worker (or for another pair's slice to yield).",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}),
		workers: workers,
		trace:   trace.NewRecorder(0),
		work:    newWorkQueue(),
		done:    make(chan *job, 1024),
		wake:    make(chan struct{}, 1),
	}
	d.jobs.New = func() any { return new(job) }
	registerAgentOps(d)
	return d
}

// Handle registers h for op. It must be called before the dispatcher runs;
// registering an op twice panics (a programming error).
func (d *Dispatcher) Handle(op wire.Op, h Handler) {
	if d.handlers.get(op) != nil {
		panic(fmt.Sprintf("dpu: op %s registered twice", op))
	}
	d.handlers.set(&handlerEntry{op: op, h: h, latency: d.latency.WithLabelValues(op.String())})
}

// statusFor maps a validation error to the status its completion carries.
func statusFor(err error) wire.Status {
	if errors.Is(err, wire.ErrSpan) {
		return wire.StatusBadSpan
	}
	return wire.StatusBadArg
}

// begin checks a taken descriptor and finds its handler. It returns nil
// when resp is already final (an error completion).
func (d *Dispatcher) begin(in *ring.Incoming, resp *wire.Desc) *handlerEntry {
	*resp = wire.Desc{Op: in.Op, Tag: in.Tag}
	if in.Err != nil {
		resp.Status = statusFor(in.Err)
		d.badOps.Add(1)
		return nil
	}
	e := d.handlers.get(in.Op)
	if e == nil {
		resp.Status = wire.StatusBadOp
		d.badOps.Add(1)
		return nil
	}
	return e
}

func (d *Dispatcher) serve(ctx context.Context, e *handlerEntry, req *Request, resp *wire.Desc) {
	d.finish(e, req, resp, d.run(ctx, nil, e, req, resp))
}

// run serves req, without the bookkeeping (finish), and returns when it
// began.
func (d *Dispatcher) run(ctx context.Context, region *ring.Region, e *handlerEntry, req *Request, resp *wire.Desc) time.Time {
	t0 := mono.Now()
	req.start = t0
	d.call(ctx, region, e, req, resp)
	return t0
}

// call runs e's handler on req. A panic in it fails the request alone
// (StatusInternal), counted and logged (shared/panics): the poller, the
// worker or the connection goes on serving the others. A fault on region
// (req's window; nil for a stream transport's payload) is not contained
// here: ring.Region.CatchFault around the call turns it into a lost
// region.
func (d *Dispatcher) call(ctx context.Context, region *ring.Region, e *handlerEntry, req *Request, resp *wire.Desc) {
	defer func() {
		if v := recover(); v != nil {
			if region != nil && region.Faulted(v) != nil {
				panic(v)
			}
			panics.Recovered(d.log, "op/"+e.op.String(), v) //nolint:errcheck // the completion says it
			*resp = wire.Desc{Op: resp.Op, Tag: resp.Tag, Status: wire.StatusInternal}
		}
	}()
	req.disp = d
	e.h.Serve(ctx, req, resp)
}

// finish accounts for an op that began at t0: the dispatcher's metrics,
// then the handler's (Handler.Account).
func (d *Dispatcher) finish(e *handlerEntry, req *Request, resp *wire.Desc, t0 time.Time) {
	end := mono.Now()
	e.latency.Observe(end.Sub(t0).Seconds())
	e.ops.Add(1)
	if resp.Status != wire.StatusOK {
		e.errs.Add(1)
	}
	if e.h.Account != nil {
		e.h.Account(req, resp, end)
	}
	req.Kept = nil
	if d.trace.On() {
		d.traceOp(e, req, resp, t0, end)
	}
}

// traceOp records an op's spans: its wait for a worker, when it had one
// (from t0 to its service's start), and its service, to end.
func (d *Dispatcher) traceOp(e *handlerEntry, req *Request, resp *wire.Desc, t0, end time.Time) {
	id, name := trace.OpID(d.sessions.origin(req.Session), req.Tag), e.op.String()
	from := t0
	if req.start.After(t0) {
		d.trace.Add(trace.Span{ID: id, Name: name, Stage: trace.StageQueue, Start: t0.UnixNano(), Dur: int64(req.start.Sub(t0))})
		from = req.start
	}
	var bytes int64
	for _, s := range req.SpanList() {
		bytes += int64(s.Len)
	}
	d.trace.Add(trace.Span{ID: id, Name: name, Stage: trace.StageServe, Start: from.UnixNano(), Dur: int64(end.Sub(from)),
		Status: resp.Status.String(), Bytes: bytes})
}

// Trace is the recorder of the ops' spans.
func (d *Dispatcher) Trace() *trace.Recorder { return d.trace }

// ServeFrame serves one request that arrived over a stream transport; the
// payload is its memory.
func (d *Dispatcher) ServeFrame(ctx context.Context, sess Session, req *wire.Desc, payload []byte, resp *wire.Desc) {
	d.ServeIn(ctx, "tcp", sess, req, payload, resp)
}

// ServeIn serves one request whose memory the transport (named so in
// Request.Transport) has in mem: a stream's payload, or the agent's copy
// of an RDMA host's window.
func (d *Dispatcher) ServeIn(ctx context.Context, transport string, sess Session, req *wire.Desc, mem []byte, resp *wire.Desc) {
	in := ring.Incoming{Desc: *req, Err: req.Validate(uint64(len(mem)))}
	e := d.begin(&in, resp)
	if e == nil {
		return
	}
	r := Request{Desc: *req, Mem: ring.NewMappedWindow(mem), Transport: transport, Session: sess}
	d.serve(ctx, e, &r, resp)
}

// runWorkers serves non-inline jobs until the work queue is closed; a job
// that yields (Request.Yield) lets its worker serve, right there, another
// pair's lone job.
func (d *Dispatcher) runWorkers(ctx context.Context, wg *sync.WaitGroup) {
	for i := 0; i < d.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			yield := d.yielder(ctx) // made once: not an allocation per job
			for {
				j := d.work.pop()
				if j == nil {
					return
				}
				d.runJob(ctx, j, yield)
				// Workers are as many as Go's Ps: under a flood they would
				// hold every P until the runtime preempts them (10 ms), and
				// the poller that takes other pairs' work would wait for one.
				runtime.Gosched()
			}
		}()
	}
}

// maxDetached bounds the detached handlers running at once.
const maxDetached = 256

// detach runs a Detached handler's job on a goroutine of its own and hands
// it to the poller when done; false when maxDetached already run.
func (d *Dispatcher) detach(ctx context.Context, j *job) bool {
	if d.detached.Add(1) > maxDetached {
		d.detached.Add(-1)
		return false
	}
	d.detachedWG.Add(1)
	go func() {
		defer d.detachedWG.Done()
		defer d.detached.Add(-1)
		region := j.agent.Region()
		if d.trace.On() {
			j.req.start = mono.Now()
		}
		if err := region.CatchFault(func() { d.call(ctx, region, j.e, &j.req, &j.resp) }); err != nil {
			j.resp = wire.Desc{Op: j.resp.Op, Tag: j.resp.Tag, Status: wire.StatusUnavailable}
			d.lost.Store(true)
		}
		d.finish(j.e, &j.req, &j.resp, j.t0)
		d.done <- j
		if r := d.ring; r != nil {
			region.CatchFault(r) //nolint:errcheck // a lost region is the poller's to find
		}
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}()
	return true
}

// waitDetached waits up to d for the detached handlers still running
// (their services were stopped, which ends them); false if some are not
// done by then.
func (d *Dispatcher) waitDetached(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { d.detachedWG.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// yielder returns Request.Yield for a worker's jobs: yield with itself.
func (d *Dispatcher) yielder(ctx context.Context) func(*job) {
	var yield func(*job)
	yield = func(j *job) { d.yield(ctx, j, yield) }
	return yield
}

// yield is Request.Yield on a worker (yield itself) for j: it serves,
// before j goes on, a lone job of another pair or the next of a pair of
// short jobs (workQueue.preempt): one queued already, then one the poller
// queues while this goroutine lets the others have the P. The poller,
// which takes that job from the rings, could otherwise run only when j
// ends (or the runtime preempts it, after 10 ms) where workers hold every
// P (an agent on one core has one); and a job queued before the slice
// ended is not kept waiting behind the poller's own pass (a wake of a
// sleeping host is a system call of tens of microseconds on a virtualised
// core). The job served here yields in turn, so a pair's lone request
// waits for one slice also while another lone job (a pair sending one
// costly descriptor at a time) runs inside a flood's; nesting goes no
// deeper than there are pairs, since each level is a pair that had
// nothing running.
func (d *Dispatcher) yield(ctx context.Context, j *job, yield func(*job)) {
	j.slices++
	if nj := d.work.endSlice(j); nj != nil {
		d.runJob(ctx, nj, yield)
	}
	runtime.Gosched()
	if nj := d.work.preempt(j); nj != nil {
		d.runJob(ctx, nj, yield)
		// Let the poller publish its completion now, not after j's
		// next slice (where workers hold every P).
		runtime.Gosched()
	}
}

// runJob serves one job on a worker and hands it to the poller; yield is
// what the handler's Request.Yield does. A job whose accesses to the region
// fault (its file was truncated) completes with StatusUnavailable and
// marks the region lost for the poller.
func (d *Dispatcher) runJob(ctx context.Context, j *job, yield func(*job)) {
	region := j.agent.Region()
	j.req.yield, j.req.job = yield, j
	if d.trace.On() {
		j.req.start = mono.Now()
	}
	if err := region.CatchFault(func() { d.call(ctx, region, j.e, &j.req, &j.resp) }); err != nil {
		j.resp = wire.Desc{Op: j.resp.Op, Tag: j.resp.Tag, Status: wire.StatusUnavailable}
		d.lost.Store(true)
	}
	j.req.yield, j.req.job = nil, nil
	d.finish(j.e, &j.req, &j.resp, j.t0)
	d.waits.Observe(j.waited.Seconds())
	d.work.done(j.q.Index(), j.slices)
	d.done <- j // the poller's from here on
	if r := d.ring; r != nil {
		region.CatchFault(r) //nolint:errcheck // a lost region is the poller's to find
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// housekeepEvery is how often the poller runs lease housekeeping while busy;
// an idle poller sleeping on the doorbell housekeeps every idleHousekeep:
// often enough for hosts, which take an agent whose heartbeat stands still
// for 2 s for dead, and for the agent's own health check (2 s); seldom
// enough that an idle agent costs next to nothing (each wake-up also keeps
// Go's sysmon polling for a while).
const (
	housekeepEvery = 10 * time.Millisecond
	idleHousekeep  = 500 * time.Millisecond
)

// RunShm polls every queue pair of a until ctx ends, storing the time of
// each housekeeping pass in beat (the agent's health check). It is the
// only goroutine touching a's queue pairs. On return, work taken but not
// done has been completed or dropped with its queue pair, and the workers
// have returned; it returns the agent side it served last (a, or the one
// a rebuilt region got).
//
// Every access to the region is guarded (ring.Region.CatchFault): when the
// region's file is cut short under the mapping, or an access faults, the
// agent does not die of SIGBUS. It drops the queued work, lets running
// work finish, restores the file's size and formats the region again with
// the next generation (ring.Agent.Rebuild); hosts see the new generation
// and attach again.
func (d *Dispatcher) RunShm(ctx context.Context, a *ring.Agent, beat *atomic.Int64) *ring.Agent {
	l := &shmLoop{d: d, in: make([]ring.Incoming, 32), beat: beat, oneP: runtime.GOMAXPROCS(0) == 1}
	l.use(a)
	if d.doorbell {
		// Hosts share our kernel: sleep in it until rung, housekeeping at
		// least every idleHousekeep.
		l.w.MaxSleep = idleHousekeep
		l.w.Sleep = func(t time.Duration) {
			l.a.SleepOnDoorbell(t, func() bool {
				if len(d.done) > 0 {
					return true
				}
				for _, q := range l.qps {
					if q.HasWork() {
						return true
					}
				}
				return false
			})
		}
		d.ring = func() { d.shm.Load().Ring() }
	} else {
		l.w.Wake = d.wake
	}
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	d.runWorkers(wctx, &wg)
	defer func() {
		stopWorkers()
		d.work.close()
		wg.Wait()
	}()
	for iter := 0; ; iter++ {
		if ctx.Err() != nil {
			if err := l.a.Region().CatchFault(l.drain); err != nil {
				d.log.Warn("stopping: region lost while draining", "err", err)
			}
			return l.a
		}
		err := l.a.Region().CatchFault(func() { l.step(ctx, iter) })
		if err == nil && d.lost.Load() {
			err = fmt.Errorf("a worker's access faulted: %w", ring.ErrRegionLost)
		}
		if err == nil && l.checkSize {
			l.checkSize = false
			if l.a.Lost() {
				err = fmt.Errorf("%s was cut short under the mapping: %w", l.a.Region().Path(), ring.ErrRegionLost)
			}
		}
		if err != nil {
			l.rebuild(ctx, err)
		}
	}
}

// shmLoop is RunShm's state: the agent side it serves (replaced when the
// region is rebuilt) and the poller's bookkeeping.
type shmLoop struct {
	d           *Dispatcher
	a           *ring.Agent
	qps         []*ring.AgentQP
	touched     []bool
	sessions    pairSessions
	in          []ring.Incoming
	w           ring.Waiter
	beat        *atomic.Int64
	last        time.Time
	withWorkers int         // jobs handed to workers and not yet completed
	busyTimer   *time.Timer // park's
	oneP        bool        // GOMAXPROCS is 1: Handler.InlineAlone applies
	checkSize   bool        // housekeeping ran: look at the file's size
	// The response and request of the descriptor in hand: kept here, not
	// on the stack, where handing them to a handler would move them to
	// the heap for every descriptor.
	resp wire.Desc
	req  Request
	// The scatter-gather list of the descriptor in hand, as inline read
	// and decoded it (raw: a copy, where the window is not mapped).
	sglRaw [wire.MaxSGL * wire.SpanSize]byte
	sglBuf [wire.MaxSGL]wire.Span
}

func (l *shmLoop) use(a *ring.Agent) {
	l.a, l.qps = a, a.QueuePairs()
	l.touched = make([]bool, len(l.qps))
	l.sessions.use(&l.d.sessions, a)
	l.d.shm.Store(a)
}

// step is one pass of the poller: completions from workers, new work from
// every pair, publication, housekeeping when due, and the back-off.
func (l *shmLoop) step(ctx context.Context, iter int) {
	d := l.d
	busy, pushed := false, false
	// Completions from workers.
completions:
	for {
		select {
		case j := <-d.done:
			if j.agent == l.a { // else a pair of a region since rebuilt
				j.q.Complete(&j.resp)
				l.touched[j.q.Index()] = true
			}
			d.putJob(j)
			l.withWorkers--
			busy = true
		default:
			break completions
		}
	}
	for i, q := range l.qps {
		n := q.Take(l.in)
		for k := 0; k < n; k++ {
			busy = true
			l.touched[i] = true
			in := &l.in[k]
			resp := &l.resp
			e := d.begin(in, resp)
			if e == nil {
				q.Complete(resp)
				continue
			}
			if sgl, long, ok := l.inline(&e.h, &in.Desc, q.Window()); ok {
				l.req = Request{Desc: in.Desc, Mem: q.Window(), Transport: "shm", Session: l.sessions.of[i], sgl: sgl}
				t0 := d.run(ctx, l.a.Region(), e, &l.req, resp)
				q.Complete(resp)
				if long {
					// The host may be waiting for this one to submit
					// more: let it see it before the next is served.
					q.Publish()
					l.touched[i] = false
				}
				// The op's metrics after its completion: a host that
				// waits for it need not wait for them too (some 0.1 µs
				// after a 1 MiB stripe, whose coding has evicted them
				// from the core's caches, and as much again for the EC
				// handler's own).
				d.finish(e, &l.req, resp, t0)
				continue
			}
			j := d.jobs.Get().(*job)
			*j = job{q: q, agent: l.a, e: e, req: Request{Desc: in.Desc, Mem: q.Window(), Transport: "shm", Session: l.sessions.of[i]}, resp: *resp, t0: mono.Now()}
			if e.h.Detached {
				if !d.detach(ctx, j) {
					d.putJob(j)
					resp.Status = wire.StatusBusy
					q.Complete(resp)
					continue
				}
				l.withWorkers++
				continue
			}
			d.work.push(j)
			l.withWorkers++
			pushed = true
			if j.lone {
				// Its pair's only job: let a worker at the end of a
				// slice take it now (Request.Yield), before this pass
				// goes on taking and publishing other pairs' work.
				runtime.Gosched()
			}
		}
	}
	for i, t := range l.touched {
		if t {
			l.qps[i].Publish()
			l.touched[i] = false
		}
	}
	// Housekeeping is due by the clock, read on every eighth pass while
	// the poller spins, every pass once it yields or sleeps, and every
	// 64th while busy. A spinning pass is 0.1-0.2 µs, of which time.Now
	// was 50 ns on kvm-clock, and a submission waits half a pass on
	// average to be seen.
	if !busy && (iter%8 == 0 || !l.w.Spinning()) || iter%64 == 0 {
		if now := time.Now(); now.Sub(l.last) >= housekeepEvery {
			l.sessions.changed(&d.sessions, d.housekeep(l.a, now))
			l.beat.Store(now.UnixNano())
			l.last = now
			l.checkSize = true
		}
	}
	if pushed {
		// Let a worker start now even when this goroutine holds the only
		// P free (GOMAXPROCS 1, an agent pinned to one core): otherwise it
		// waits until the poller's next sleep is noticed by the runtime,
		// up to milliseconds after it began.
		runtime.Gosched()
	}
	switch {
	case busy:
		l.w.Reset()
	case d.doorbell && l.withWorkers >= busyWorkersToSleep:
		// Workers hold the cores: park until one finishes or a slice's
		// time has passed, then look at the rings again. Parking hands
		// this goroutine's P to a runnable worker at once; sleeping on the
		// doorbell (a system call) would keep it until Go's monitor takes
		// it back, milliseconds later on a machine that was idle, and a
		// worker, or the pair that waits for one, would wait as long.
		l.park()
	default:
		l.w.Wait()
	}
}

// busyLook is how often a poller whose workers hold the cores looks at the
// rings: about one slice (YieldEvery) of CRC, so that a pair's lone
// request reaches the work queue within the slice it would wait anyway.
const busyLook = 20 * time.Microsecond

// park waits, without holding a P, until a worker finishes a job or
// busyLook has passed.
func (l *shmLoop) park() {
	if l.busyTimer == nil {
		l.busyTimer = time.NewTimer(busyLook)
	} else {
		l.busyTimer.Reset(busyLook)
	}
	select {
	case <-l.d.wake:
		l.busyTimer.Stop()
	case <-l.busyTimer.C:
	}
}

// rebuild replaces a lost region's agent side with a freshly formatted
// one. Queued jobs are dropped; running ones finish into the abandoned
// pairs (nothing is written for them). It returns when the region is
// served again, or ctx ends.
func (l *shmLoop) rebuild(ctx context.Context, cause error) {
	d := l.d
	old := l.a.Generation()
	d.limited.Log(slog.LevelWarn, "region lost: formatting it again", "err", cause, "generation", old)
	for _, j := range d.work.drop() {
		d.putJob(j)
		l.withWorkers--
	}
	deadline := time.After(5 * time.Second)
wait:
	for l.withWorkers > 0 {
		select {
		case j := <-d.done:
			d.putJob(j)
			l.withWorkers--
		case <-deadline:
			// Left to finish into the abandoned pairs (step skips them).
			d.log.Warn("rebuilding the region with work still running", "jobs", l.withWorkers)
			break wait
		case <-ctx.Done():
			return
		}
	}
	for {
		a, err := l.a.Rebuild()
		if err == nil {
			l.use(a)
			d.lost.Store(false)
			d.rebuilds.Add(1)
			l.last = time.Time{}
			if d.onRebuild != nil {
				d.onRebuild(a.Generation())
			}
			d.limited.Log(slog.LevelWarn, "region formatted again", "generation", a.Generation(), "was", old)
			return
		}
		d.limited.Log(slog.LevelError, "region lost and not yet rebuilt", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// busyWorkersToSleep is the number of jobs with workers at which the poller
// stops spinning and parks (shmLoop.park): enough to keep every other core
// busy.
var busyWorkersToSleep = max(1, runtime.NumCPU()-1)

// inline says whether a request for h runs on the poller: h is Inline,
// or the request names at most h.InlineMax bytes (h.InlineAlone with one
// P); long says it runs inline for InlineAlone. A scatter-gather list is
// read and decoded for that, once: sgl is what it named, which the
// handler then serves (Request.SGL). A list that does not decode goes to
// a worker, whose handler reads it again and fails.
func (l *shmLoop) inline(h *Handler, d *wire.Desc, mem ring.Accessor) (sgl []wire.Span, long, ok bool) {
	most := h.InlineMax
	if l.oneP {
		most = max(most, h.InlineAlone)
	}
	switch {
	case h.Inline:
		return nil, false, true
	case most == 0:
		return nil, false, false
	case d.Flags&wire.FlagSGL == 0:
		var n uint64
		for _, s := range d.SpanList() {
			n += uint64(s.Len)
		}
		return nil, n > h.InlineMax && n <= most, n <= most
	case d.NSpan == 0 || uint64(d.Spans[0].Len) > uint64(len(l.sglRaw)):
		return nil, false, false
	}
	spans, st := readSGL(mem, d.Spans[0], l.sglRaw[:], l.sglBuf[:])
	if st != wire.StatusOK {
		return nil, false, false
	}
	var n uint64
	for _, s := range spans {
		n += uint64(s.Len)
	}
	return spans, n > h.InlineMax && n <= most, n <= most
}

func (d *Dispatcher) putJob(j *job) {
	*j = job{}
	d.jobs.Put(j)
}

// drain waits (bounded) for work in the hands of workers so that no
// completion is written after the region is marked stopped.
func (l *shmLoop) drain() {
	d := l.d
	deadline := time.After(5 * time.Second)
	for {
		inflight := uint64(0)
		for _, q := range l.qps {
			inflight += q.InFlight()
		}
		if inflight == 0 {
			return
		}
		select {
		case j := <-d.done:
			if j.agent == l.a {
				j.q.Complete(&j.resp)
				j.q.Publish()
			}
			d.putJob(j)
		case <-deadline:
			d.log.Warn("stopping with work in flight", "descriptors", inflight)
			return
		}
	}
}

func (d *Dispatcher) housekeep(a *ring.Agent, now time.Time) (changed []*ring.AgentQP) {
	changed = a.Housekeep(now)
	for _, q := range changed {
		st, why := q.State()
		pid, _ := q.Holder()
		d.limited.Log(slog.LevelInfo, "queue pair", "index", q.Index(), "state", st.String(), "pid", pid, "reason", why)
	}
	// Into the slice the last snapshot but one used: readers copy under
	// d.mu, so a snapshot a hundred times a second allocates nothing.
	snaps := d.spareSnaps[:0]
	for _, q := range a.QueuePairs() {
		st, why := q.State()
		pid, start := q.Holder()
		faults, fences := q.Counters()
		n, showed := q.Repairs()
		snaps = append(snaps, api.QueuePair{Index: q.Index(), State: st.String(), PID: pid, StartTicks: start,
			Reason: why, InFlight: q.InFlight(), Faults: faults, Fences: fences, Repairs: n, RegionShowed: showed})
	}
	d.mu.Lock()
	d.snaps, d.spareSnaps = snaps, d.snaps
	d.headerRepairs = a.HeaderRepairs()
	d.mu.Unlock()
	return changed
}

// LoneWaitMax returns the longest a request waited for a worker while it
// was its queue pair's only work: what fair sharing bounds to one slice of
// another pair's work (plus the scheduling of the machine).
func (d *Dispatcher) LoneWaitMax() time.Duration { return d.work.loneWait() }

// LoneWaitSlices returns the most slices of other requests' work that
// passed while a request waited for a worker as its queue pair's only
// work: the bound fair sharing keeps (one) in units of work, which the
// machine's stalls of the agent's cores do not change.
func (d *Dispatcher) LoneWaitSlices() uint64 { return d.work.loneWaitSlices() }

// RingCounters returns, over the agent's life (rebuilt regions included):
// faults, fences, header repairs, state-word repairs, and how often the
// region was rebuilt.
func (d *Dispatcher) RingCounters() (faults, fences, headerRepairs, stateRepairs, rebuilds uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range d.snaps {
		faults += q.Faults
		fences += q.Fences
		stateRepairs += q.Repairs
	}
	return faults, fences, d.headerRepairs, stateRepairs, d.rebuilds.Load()
}

// QueuePairs returns the last housekeeping snapshot of the queue pairs.
func (d *Dispatcher) QueuePairs() []api.QueuePair {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]api.QueuePair(nil), d.snaps...)
}

// OpCounts returns per-op counters, sorted by op name, plus the count of
// descriptors rejected before reaching a handler (as op "rejected").
func (d *Dispatcher) OpCounts() []api.OpCount {
	out := make([]api.OpCount, 0, d.handlers.n+1)
	for _, e := range d.handlers.all() {
		out = append(out, api.OpCount{Op: e.op.String(), Count: e.ops.Load(), Errors: e.errs.Load()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	return append(out, api.OpCount{Op: "rejected", Count: d.badOps.Load(), Errors: d.badOps.Load()})
}
