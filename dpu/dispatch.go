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
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// Request is what a handler serves: a validated private copy of the
// descriptor, and the memory its spans name.
type Request struct {
	wire.Desc
	// Mem is the queue pair's window (shared memory) or the frame's payload
	// (TCP). Spans in Desc have been checked against Mem.Len().
	Mem ring.Accessor
	// Transport is "shm" or "tcp".
	Transport string
}

// Handler serves one op code.
type Handler struct {
	// Inline handlers are cheap (no large copies or computation): they run
	// on the polling goroutine. Others run on the worker pool.
	Inline bool
	// InlineMax runs a request inline anyway when its spans hold at most
	// this many bytes: handing a small job to a worker costs more (a
	// thread wake-up, tens of microseconds here) than doing it.
	InlineMax uint64
	// Serve fills resp (already carrying Op, Tag and StatusOK) for req. It
	// must not keep req.Mem or views of it after returning.
	Serve func(ctx context.Context, req *Request, resp *wire.Desc)
}

type handlerEntry struct {
	op      wire.Op
	h       Handler
	ops     atomic.Uint64
	errs    atomic.Uint64
	latency prometheus.Observer
}

// Dispatcher routes descriptors from every transport to the handlers that
// services registered.
type Dispatcher struct {
	log      *slog.Logger
	handlers map[wire.Op]*handlerEntry
	latency  *prometheus.HistogramVec
	badOps   atomic.Uint64
	workers  int

	work chan *job
	done chan *job
	wake chan struct{}
	jobs sync.Pool

	// doorbell: sleep on the region's futex doorbell when idle (hosts share
	// the agent's kernel); ring wakes the poller from a worker.
	doorbell bool
	ring     func()

	mu    sync.Mutex
	snaps []api.QueuePair
}

type job struct {
	q    *ring.AgentQP
	e    *handlerEntry
	req  Request
	resp wire.Desc
	t0   time.Time
}

// NewDispatcher returns a dispatcher with the agent's own ops (PING and
// CHECKSUM) registered.
func NewDispatcher(log *slog.Logger, workers int) *Dispatcher {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	d := &Dispatcher{
		log:      log,
		handlers: map[wire.Op]*handlerEntry{},
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hec_op_duration_seconds",
			Help:    "Time the agent spent serving an op, by op (excludes queueing in the rings).",
			Buckets: prometheus.ExponentialBuckets(250e-9, 4, 12),
		}, []string{"op"}),
		workers: workers,
		work:    make(chan *job, 1024),
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
	if _, ok := d.handlers[op]; ok {
		panic(fmt.Sprintf("dpu: op %s registered twice", op))
	}
	d.handlers[op] = &handlerEntry{op: op, h: h, latency: d.latency.WithLabelValues(op.String())}
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
	e := d.handlers[in.Op]
	if e == nil {
		resp.Status = wire.StatusBadOp
		d.badOps.Add(1)
		return nil
	}
	return e
}

func (d *Dispatcher) serve(ctx context.Context, e *handlerEntry, req *Request, resp *wire.Desc) {
	t0 := time.Now()
	e.h.Serve(ctx, req, resp)
	d.finish(e, resp, t0)
}

func (d *Dispatcher) finish(e *handlerEntry, resp *wire.Desc, t0 time.Time) {
	e.latency.Observe(time.Since(t0).Seconds())
	e.ops.Add(1)
	if resp.Status != wire.StatusOK {
		e.errs.Add(1)
	}
}

// ServeFrame serves one request that arrived over a stream transport; the
// payload is its memory.
func (d *Dispatcher) ServeFrame(ctx context.Context, req *wire.Desc, payload []byte, resp *wire.Desc) {
	in := ring.Incoming{Desc: *req, Err: req.Validate(uint64(len(payload)))}
	e := d.begin(&in, resp)
	if e == nil {
		return
	}
	r := Request{Desc: *req, Mem: ring.NewMappedWindow(payload), Transport: "tcp"}
	d.serve(ctx, e, &r, resp)
}

// runWorkers serves non-inline jobs until ctx ends.
func (d *Dispatcher) runWorkers(ctx context.Context, wg *sync.WaitGroup) {
	for i := 0; i < d.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-d.work:
					j.e.h.Serve(ctx, &j.req, &j.resp)
					d.finish(j.e, &j.resp, j.t0)
					d.done <- j
					if r := d.ring; r != nil {
						r()
					}
					select {
					case d.wake <- struct{}{}:
					default:
					}
				}
			}
		}()
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
// have returned.
func (d *Dispatcher) RunShm(ctx context.Context, a *ring.Agent, beat *atomic.Int64) {
	qps := a.QueuePairs()
	touched := make([]bool, len(qps))
	in := make([]ring.Incoming, 32)
	var w ring.Waiter
	if d.doorbell {
		// Hosts share our kernel: sleep in it until rung, housekeeping at
		// least every idleHousekeep.
		w.MaxSleep = idleHousekeep
		w.Sleep = func(t time.Duration) {
			a.SleepOnDoorbell(t, func() bool {
				if len(d.done) > 0 {
					return true
				}
				for _, q := range qps {
					if q.HasWork() {
						return true
					}
				}
				return false
			})
		}
		d.ring = a.Ring
	} else {
		w.Wake = d.wake
	}
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	d.runWorkers(wctx, &wg)
	defer func() {
		stopWorkers()
		wg.Wait()
	}()
	last := time.Time{}
	withWorkers := 0 // jobs handed to workers and not yet completed
	for iter := 0; ; iter++ {
		if ctx.Err() != nil {
			d.drain(a, touched)
			return
		}
		busy := false
		// Completions from workers.
	completions:
		for {
			select {
			case j := <-d.done:
				j.q.Complete(&j.resp)
				touched[j.q.Index()] = true
				d.putJob(j)
				withWorkers--
				busy = true
			default:
				break completions
			}
		}
		for i, q := range qps {
			n := q.Take(in)
			for k := 0; k < n; k++ {
				busy = true
				touched[i] = true
				var resp wire.Desc
				e := d.begin(&in[k], &resp)
				if e == nil {
					q.Complete(&resp)
					continue
				}
				if e.h.Inline || (e.h.InlineMax > 0 && spanBytes(&in[k].Desc) <= e.h.InlineMax) {
					req := Request{Desc: in[k].Desc, Mem: q.Window(), Transport: "shm"}
					d.serve(ctx, e, &req, &resp)
					q.Complete(&resp)
					continue
				}
				j := d.jobs.Get().(*job)
				*j = job{q: q, e: e, req: Request{Desc: in[k].Desc, Mem: q.Window(), Transport: "shm"}, resp: resp, t0: time.Now()}
				select {
				case d.work <- j:
					withWorkers++
				default: // every worker busy and the queue full: push back
					resp.Status = wire.StatusBusy
					q.Complete(&resp)
					d.putJob(j)
				}
			}
		}
		for i, t := range touched {
			if t {
				qps[i].Publish()
				touched[i] = false
			}
		}
		if !busy || iter%64 == 0 {
			if now := time.Now(); now.Sub(last) >= housekeepEvery {
				d.housekeep(a, now)
				beat.Store(now.UnixNano())
				last = now
			}
		}
		switch {
		case busy:
			w.Reset()
		case d.doorbell && withWorkers >= busyWorkersToSleep:
			// Workers hold the cores: after the usual short spin (small
			// jobs finish within it), sleep until a worker or a host rings
			// rather than yield for a millisecond and steal from them.
			w.SkipYield()
			w.Wait()
		default:
			w.Wait()
		}
	}
}

// busyWorkersToSleep is the number of jobs with workers at which the poller
// stops spinning: enough to keep every other core busy.
var busyWorkersToSleep = max(1, runtime.NumCPU()-1)

// spanBytes is the data a request names (unbounded for a scatter-gather
// list, whose data the list only points to).
func spanBytes(d *wire.Desc) uint64 {
	if d.Flags&wire.FlagSGL != 0 {
		return ^uint64(0)
	}
	var n uint64
	for _, s := range d.SpanList() {
		n += uint64(s.Len)
	}
	return n
}

func (d *Dispatcher) putJob(j *job) {
	*j = job{}
	d.jobs.Put(j)
}

// drain waits (bounded) for work in the hands of workers so that no
// completion is written after the region is marked stopped.
func (d *Dispatcher) drain(a *ring.Agent, touched []bool) {
	deadline := time.After(5 * time.Second)
	for {
		inflight := uint64(0)
		for _, q := range a.QueuePairs() {
			inflight += q.InFlight()
		}
		if inflight == 0 {
			return
		}
		select {
		case j := <-d.done:
			j.q.Complete(&j.resp)
			j.q.Publish()
			d.putJob(j)
		case <-deadline:
			d.log.Warn("stopping with work in flight", "descriptors", inflight)
			return
		}
	}
}

func (d *Dispatcher) housekeep(a *ring.Agent, now time.Time) {
	for _, q := range a.Housekeep(now) {
		st, why := q.State()
		pid, _ := q.Holder()
		d.log.Info("queue pair", "index", q.Index(), "state", st.String(), "pid", pid, "reason", why)
	}
	snaps := make([]api.QueuePair, 0, len(a.QueuePairs()))
	for _, q := range a.QueuePairs() {
		st, why := q.State()
		pid, start := q.Holder()
		faults, fences := q.Counters()
		snaps = append(snaps, api.QueuePair{Index: q.Index(), State: st.String(), PID: pid, StartTicks: start,
			Reason: why, InFlight: q.InFlight(), Faults: faults, Fences: fences})
	}
	d.mu.Lock()
	d.snaps = snaps
	d.mu.Unlock()
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
	out := make([]api.OpCount, 0, len(d.handlers)+1)
	for _, e := range d.handlers {
		out = append(out, api.OpCount{Op: e.op.String(), Count: e.ops.Load(), Errors: e.errs.Load()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	return append(out, api.OpCount{Op: "rejected", Count: d.badOps.Load(), Errors: d.badOps.Load()})
}
