package host

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/shared/mono"
	"github.com/hecsys/hec/shared/rail"
	"github.com/hecsys/hec/shared/wire"
)

// Where erasure coding runs (WithRails).
const (
	// RailsHost codes in this process only.
	RailsHost = rail.Host
	// RailsDPU codes on the agent only.
	RailsDPU = rail.DPU
	// RailsAuto splits each stripe by columns between this process and
	// the agent so both finish together, by rates calibrated at first use
	// and refined from every op; a rail that does not pay is dropped.
	RailsAuto = rail.Auto
)

// ErrRails is returned for a rails setting EC cannot use.
var ErrRails = errors.New("host: bad rails")

// ECOption configures an EC (Client.EC, NewEC).
type ECOption func(*ecOptions)

type ecOptions struct {
	rails       string
	objective   rail.Objective
	concurrency int
	model       []rail.Rail
	progress    func(done, total int64)
}

// WithObjectProgress calls f as an object's bytes go to or come from the
// agent (Put, Get).
func WithObjectProgress(f func(done, total int64)) ECOption {
	return func(o *ecOptions) { o.progress = f }
}

// WithRails sets where coding runs: RailsHost, RailsDPU or RailsAuto
// (default: RailsAuto with an agent, RailsHost without one).
func WithRails(r string) ECOption { return func(o *ecOptions) { o.rails = r } }

// WithObjective sets what auto plans for: rail.Time (the default), or
// rail.HostCPUTime — the plan with the least on the host among those the
// model puts within 1.1× of the fastest (often the agent alone: freeing
// the host's cores is what the offload is for).
func WithObjective(o rail.Objective) ECOption { return func(e *ecOptions) { e.objective = o } }

// WithHostConcurrency sets the goroutines the host rail codes on (default
// 1: freeing the host's cores is what the offload is for).
func WithHostConcurrency(n int) ECOption { return func(o *ecOptions) { o.concurrency = n } }

// WithModel starts auto from these rails' models (named RailHost and
// RailDPU) instead of a calibration; ops refine them as usual.
func WithModel(rails []rail.Rail) ECOption { return func(o *ecOptions) { o.model = rails } }

// EC is Reed-Solomon coding (package ec: the Cauchy matrix, k data and m
// parity shards) on this process's cores (the host rail) and on the
// agent's (the DPU rail), a stripe split between them by columns. It is
// an ec.ColumnCoder, so ec's streaming and file functions code through
// it. Shards in the client's window (Alloc, or Buffers) are coded by the
// agent in place; others are copied into the window (or sent, over TCP).
// It is safe for concurrent use.
type EC struct {
	c     *Client
	k, m  int
	rails string
	obj   rail.Objective // auto's (WithObjective)
	local *ec.Coder
	// hostWide: the host rail codes on several goroutines
	// (WithHostConcurrency), whose CPU time is not the caller's wall time.
	hostWide bool

	calMu sync.Mutex // one calibration at a time
	mu    sync.Mutex
	est   map[string]*rail.Estimator // auto: the rails' models, once calibrated
	// splitCost is a split's achieved time over its model's prediction,
	// a moving average over the splits so far (1 before any).
	splitCost float64
	// dpuRate is the agent's data bytes per second for each op
	// (rateSlot), a float64's bits, a moving average over the ops so
	// far: how long the next op should take, for its waiter
	// (pieces.submit, without the lock).
	dpuRate  [2]atomic.Uint64
	lastPlan atomic.Pointer[rail.Plan] // onePlan's
	model    atomic.Pointer[ecModel]   // auto's decisions, once calibrated
	spare    atomic.Pointer[ecOp]      // the last op's state, for the next (newECOp)
	stats    ECStats
	progress func(done, total int64)
}

// ECResult is what one EC op did and cost.
type ECResult struct {
	// Plan is the split of the op's columns, in data bytes (k × columns).
	// Its Shares may be those of other results too: read only.
	Plan rail.Plan
	// Bytes is the data coded: k × the shard length.
	Bytes int64
	Took  time.Duration
	// HostCPU is what the op cost the host, the agent's share excepted:
	// the time the calling goroutine held its thread working or spinning
	// (wall time, no system call), then, from the first time it yielded,
	// slept or blocked, this process's CPU time (user and system, every
	// thread); that throughout when the host rail codes on several
	// goroutines (WithHostConcurrency).
	HostCPU time.Duration
}

// HostCPUPerGB is the host CPU-seconds the op cost per GB (1e9 bytes) of
// data coded.
func (r ECResult) HostCPUPerGB() float64 { return perGB(r.HostCPU, r.Bytes) }

func perGB(d time.Duration, n int64) float64 {
	if n <= 0 {
		return 0
	}
	return d.Seconds() / (float64(n) / 1e9)
}

// ECStats sums an EC's ops.
type ECStats struct {
	Ops     int
	Bytes   int64
	Took    time.Duration
	HostCPU time.Duration
	// RailBytes are the data bytes each rail coded.
	RailBytes map[string]int64
}

// HostCPUPerGB is the host CPU-seconds per GB of data over every op.
func (s ECStats) HostCPUPerGB() float64 { return perGB(s.HostCPU, s.Bytes) }

// EC returns erasure coding of k data and m parity shards through this
// client's agent and this process.
func (c *Client) EC(k, m int, opt ...ECOption) (*EC, error) { return NewEC(c, k, m, opt...) }

// NewEC is Client.EC; with a nil client, only RailsHost is possible.
func NewEC(c *Client, k, m int, opt ...ECOption) (*EC, error) {
	o := ecOptions{rails: RailsAuto, concurrency: 1}
	if c == nil {
		o.rails = RailsHost
	}
	for _, f := range opt {
		f(&o)
	}
	r, err := rail.ParseChoice(o.rails)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRails, err)
	}
	o.rails = r
	switch {
	case c == nil && o.rails != RailsHost:
		return nil, fmt.Errorf("%w: %s needs an agent", ErrRails, o.rails)
	}
	local, err := ec.New(k, m, ec.WithConcurrency(o.concurrency))
	if err != nil {
		return nil, err
	}
	e := &EC{c: c, k: k, m: m, rails: o.rails, obj: o.objective, local: local, hostWide: o.concurrency > 1, splitCost: 1,
		stats: ECStats{RailBytes: map[string]int64{}}, progress: o.progress}
	if o.model != nil {
		e.setModel(o.model)
	}
	return e, nil
}

func (e *EC) setModel(rails []rail.Rail) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.est = map[string]*rail.Estimator{}
	for _, r := range rails {
		// The median of the latest five rates: the machine a stripe is
		// coded on changes from one second to the next (other work, a
		// core given to another guest), and a window of nine still held
		// the ops of a state that had passed.
		e.est[r.Name] = rail.NewEstimator(r, 1.0/3)
	}
	e.model.Store(e.newModel(rails))
}

// ecModel is the model auto decides by, and its last decision: a stream
// of ops of one size pays a lookup for its plan, made again only when
// the size changes or the model moves (refreshModel).
type ecModel struct {
	rails []rail.Rail
	cost  float64
	last  atomic.Pointer[rail.Plan] // the plan of the last size decided
}

// modelMoves is how far a rail's rate, or the split's cost, moves from
// what auto's decisions were made from before they are made again.
const modelMoves = 0.05

// newModel is auto's decisions for rails at the split cost learnt so far
// (e.mu held).
func (e *EC) newModel(rails []rail.Rail) *ecModel {
	return &ecModel{rails: rails, cost: max(e.splitCost, 1)}
}

// plan is md's plan for an op of size data bytes: the last one, for the
// same size, or the one the model makes for the objective (the split
// where it gains enough at the learnt cost, the least on the host within
// rail.ObjectiveSlack of the fastest for host-cpu), kept as the last.
func (e *EC) plan(md *ecModel, size int64) rail.Plan {
	if p := md.last.Load(); p != nil && p.Size == size {
		return *p
	}
	p := rail.SplitIfGain(md.rails, size, int64(e.k)*ec.Align, autoMinGain, md.cost)
	if e.obj == rail.HostCPUTime {
		p = rail.LeastHostCPU(p, md.rails, size)
	}
	md.last.Store(&p)
	return p
}

// refreshModel starts auto's decisions again from the model where it
// has moved by more than modelMoves since they were made (e.mu held): an
// op's call pays a lookup, and the decisions follow the rails within a
// few ops. An op that moved nothing allocates nothing here.
func (e *EC) refreshModel() {
	old := e.model.Load()
	if old == nil {
		return
	}
	moved := func(a, b float64) bool { return math.Abs(a/b-1) > modelMoves }
	stale := moved(max(e.splitCost, 1), old.cost)
	for _, r := range old.rails {
		if est := e.est[r.Name]; est != nil && !stale {
			stale = moved(est.Rail().Rate, r.Rate)
		}
	}
	if !stale {
		return
	}
	rails := make([]rail.Rail, 0, len(old.rails))
	for _, r := range old.rails {
		if est := e.est[r.Name]; est != nil {
			rails = append(rails, est.Rail())
		}
	}
	e.model.Store(e.newModel(rails))
}

// Rails is where the EC codes (RailsHost, RailsDPU or RailsAuto).
func (e *EC) Rails() string { return e.rails }

// SIMD is the vector path of the host rail's kernels.
func (e *EC) SIMD() ec.SIMD { return e.local.SIMD() }

// Stats returns the sums over every op so far.
func (e *EC) Stats() ECStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.RailBytes = make(map[string]int64, len(e.stats.RailBytes))
	for k, v := range e.stats.RailBytes {
		s.RailBytes[k] = v
	}
	return s
}

// Encode computes the m parity shards of shards (k+m of one length).
func (e *EC) Encode(ctx context.Context, shards [][]byte) (ECResult, error) {
	if len(shards) != e.k+e.m {
		return ECResult{}, fmt.Errorf("host: ec encode of %d shards with %d+%d: %w", len(shards), e.k, e.m, ec.ErrShardCount)
	}
	return e.encode(ctx, shards[:e.k], shards[e.k:])
}

// EncodeColumns is Encode with data and parity apart (ec.ColumnCoder).
func (e *EC) EncodeColumns(ctx context.Context, data, parity [][]byte) error {
	_, err := e.encode(ctx, data, parity)
	return err
}

// Reconstruct fills the missing shards (nil or empty; one with room, cap
// ≥ the shard length, is written in place) from k present ones; with
// dataOnly, only the data shards.
func (e *EC) Reconstruct(ctx context.Context, shards [][]byte, dataOnly bool) (ECResult, error) {
	return e.reconstruct(ctx, shards, dataOnly)
}

// ReconstructColumns is Reconstruct (ec.ColumnCoder).
func (e *EC) ReconstructColumns(ctx context.Context, shards [][]byte, dataOnly bool) error {
	_, err := e.reconstruct(ctx, shards, dataOnly)
	return err
}

// Buffers hands streaming (ec.WithBuffers) its round buffer in the
// client's window, so that the agent codes it in place; nil (ordinary
// memory) when there is no window or no room.
func (e *EC) Buffers(n int) ([]byte, func()) {
	if e.c == nil || e.rails == RailsHost || n > e.c.WindowSize()/2 {
		return nil, nil
	}
	b, err := e.c.Alloc(n)
	if err != nil || !e.c.t.InWindow(b) {
		return nil, nil
	}
	return b, func() { e.c.Free(b) }
}

// Chunk is the column width a streaming round should have for the k+m
// shards of a round to fit half the window (at most 1 MiB, at least 4
// KiB: ec.WithChunk).
func (e *EC) Chunk() int {
	c := 1 << 20
	if e.c != nil && e.rails != RailsHost {
		c = min(c, e.c.WindowSize()/2/(e.k+e.m))
	}
	return max(c/ec.Align*ec.Align, 4096)
}

// cpuMeter measures the host CPU time one op costs. While the op's
// goroutine only works and spins (waiting for an agent that answers
// within the waiter's spin), it holds its thread all along, and its CPU
// time is its wall time: no system call is made, where two getrusage
// calls cost 4–5 µs here, as much as the agent's whole handoff of a
// 64 KiB stripe. Once it first yields, sleeps or blocks (park), the rest
// is this process's CPU time (getrusage: user and system, every thread),
// read then and at the end. It is not safe for concurrent use: one op,
// one goroutine.
type cpuMeter struct {
	start  time.Time
	parked bool
	spun   time.Duration // from start to the park
	base   time.Duration // the process's CPU time at the park
}

// park is called before the op's goroutine first gives up its thread.
func (m *cpuMeter) park() {
	if m == nil || m.parked {
		return
	}
	m.parked, m.spun, m.base = true, time.Since(m.start), cpuTime()
}

// LeaveSpin is park (ring.Waiter's Leave).
func (m *cpuMeter) LeaveSpin() { m.park() }

// totalAt is the op's CPU time so far, spent the wall time since its
// start (read by the caller, who needs it too).
func (m *cpuMeter) totalAt(spent time.Duration) time.Duration {
	if !m.parked {
		return spent
	}
	return m.spun + cpuTime() - m.base
}

// cpuTime reads the process's CPU clock (a variable: tests count reads).
var cpuTime = processCPU

// processCPU is this process's CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stripeWidth checks that every shard given has one length w > 0.
func stripeWidth(groups ...[][]byte) (int, error) {
	w := -1
	for _, g := range groups {
		for _, s := range g {
			if w < 0 {
				w = len(s)
			}
			if len(s) != w || w == 0 {
				return 0, fmt.Errorf("host: ec shards of %d and %d bytes: %w", w, len(s), ec.ErrShardSize)
			}
		}
	}
	return w, nil
}

// share is one rail's columns of an op.
// split plans an op over w columns; cost is the split cost the
// prediction was multiplied by (1 for one rail).
func (e *EC) split(ctx context.Context, w int) (rail.Plan, float64, error) {
	size := int64(e.k) * int64(w)
	plan, cost := rail.Plan{}, 1.0
	switch e.rails {
	case RailsHost, RailsDPU:
		plan = e.onePlan(size)
	default:
		md := e.model.Load()
		if md == nil {
			if _, err := e.Calibrate(ctx, false); err != nil {
				return plan, 1, err
			}
			md = e.model.Load()
		}
		plan, cost = e.plan(md, size), md.cost
	}
	return plan, cost, nil
}

// onePlan is the plan of an op of size data bytes on the one rail e codes
// on: the last one made, when it was for that size, so that a stream of
// ops of one size allocates no plans (the results share it: read only).
func (e *EC) onePlan(size int64) rail.Plan {
	if p := e.lastPlan.Load(); p != nil && p.Size == size {
		return *p
	}
	p := &rail.Plan{Size: size, BestOne: e.rails, Shares: []rail.Share{{Rail: e.rails, Kind: railKind(e.rails), Bytes: size}}}
	e.lastPlan.Store(p)
	return *p
}

// railKind is the resource a rail of EC's runs on.
func railKind(name string) rail.Kind {
	if name == RailDPU {
		return rail.DPUCores
	}
	return rail.HostCPU
}

// hostPiece is the data the host rail codes between two looks at the
// agent's completions.
const hostPiece = 256 << 10

// ecOp is one op's state and the runners rail.ExecuteTo runs its shares
// on: the host's (coding here, in pieces, looking at the agent's
// completions between them, so each share's time is known) and the
// agent's (a rail.Starter: its pieces submitted at once, awaited after).
// Ops take the EC's spare one, else one from ecOps, and give it back, so
// that an op allocates neither its runners nor its bookkeeping (and, under
// the race detector, where a pool drops items at random, a stream of ops
// on one EC still does not).
type ecOp struct {
	e    *EC
	op   wire.Op // OpECEncode or OpECReconstruct
	w    int     // the stripe's width: the last share's columns end there
	size int64   // k × w
	// The op's shards: encode's data and parity; reconstruct's shards,
	// those it reads (present) and those it rebuilds (want).
	data, parity, shards [][]byte
	present, want        []int

	t0      time.Time
	local   cpuMeter  // the op's meter, unless an agent share's pieces have it
	first   *pieces   // the first agent share's pieces (its meter is the op's)
	ps      []*pieces // every agent share's, to release
	psA     [3]*pieces
	tookA   [3]time.Duration
	failed  bool // a submission failed: its pieces may still be with the transport
	host    ecHostRunner
	dpu     ecDPURunner
	runners rail.Runners
}

var ecOps = sync.Pool{New: func() any {
	o := new(ecOp)
	o.host.o, o.dpu.o = o, o
	o.runners = rail.Runners{RailHost: &o.host, RailDPU: &o.dpu}
	return o
}}

// newECOp returns an op of e's of kind op over w columns, started now.
func (e *EC) newECOp(op wire.Op, w int) *ecOp {
	o := e.spare.Swap(nil) // the op before's, unless another op holds it
	if o == nil {
		o = ecOps.Get().(*ecOp)
	}
	o.e, o.op, o.w, o.size = e, op, w, int64(e.k)*int64(w)
	o.t0 = mono.Now()
	o.local = cpuMeter{start: o.t0}
	o.ps = o.psA[:0]
	return o
}

// release gives o back, with its pieces (unless a submission failed).
func (o *ecOp) release() {
	if !o.failed {
		for _, p := range o.ps {
			p.release()
		}
	}
	e, runners, host, dpu := o.e, o.runners, o.host, o.dpu
	*o = ecOp{runners: runners, host: host, dpu: dpu}
	if !e.spare.CompareAndSwap(nil, o) {
		ecOps.Put(o)
	}
}

// meter is the op's CPU meter.
func (o *ecOp) meter() *cpuMeter {
	if o.first != nil {
		return o.first.meter
	}
	return &o.local
}

// columns is the column range of the share of bytes [off, off+n): the
// last share takes the rest of the stripe.
func (o *ecOp) columns(off, n int64) (c0, c1 int) {
	c0, c1 = int(off/int64(o.e.k)), int((off+n)/int64(o.e.k))
	if off+n >= o.size {
		c1 = o.w
	}
	return c0, c1
}

// ecHostRunner codes a share on this process's cores.
type ecHostRunner struct{ o *ecOp }

func (r *ecHostRunner) Run(ctx context.Context, off, n int64) error {
	return r.RunPieces(ctx, off, n, func() {})
}

// RunPieces codes the share hostPiece of data at a time, polling the
// transport (the agent's completions) and calling between after each.
func (r *ecHostRunner) RunPieces(ctx context.Context, off, n int64, between func()) error {
	o, e := r.o, r.o.e
	if e.hostWide {
		o.meter().park() // other goroutines code too: read the clock from the start
	}
	c0, c1 := o.columns(off, n)
	piece := max(hostPiece/e.k/ec.Align*ec.Align, ec.Align)
	for c := c0; c < c1; c += piece {
		if err := o.code(ctx, c, min(c+piece, c1)); err != nil {
			return err
		}
		if e.c != nil {
			if p, ok := e.c.t.(handoff.Poller); ok {
				p.Poll()
			}
		}
		between()
	}
	return nil
}

// code codes columns c0..c1 on the host.
func (o *ecOp) code(ctx context.Context, c0, c1 int) error {
	if o.op == wire.OpECEncode {
		return o.e.local.EncodeColumns(ctx, columns(c0, c1, o.data), columns(c0, c1, o.parity))
	}
	sub := make([][]byte, len(o.shards))
	for _, i := range o.present {
		sub[i] = o.shards[i][c0:c1:c1]
	}
	for _, i := range o.want {
		sub[i] = o.shards[i][c0:c0:c1]
	}
	return o.e.local.ReconstructSome(sub, o.want)
}

// ecDPURunner has the agent code a share.
type ecDPURunner struct{ o *ecOp }

// Run codes the share on the agent, waiting for it.
func (r *ecDPURunner) Run(ctx context.Context, off, n int64) error {
	st, err := r.Start(ctx, off, n)
	if err != nil {
		return err
	}
	return st.Wait()
}

// Start submits the share's pieces and returns them (rail.Started).
func (r *ecDPURunner) Start(ctx context.Context, off, n int64) (rail.Started, error) {
	o, e := r.o, r.o.e
	var p *pieces
	if o.first == nil {
		p = newPieces(ctx, e, nil)
		p.own.start = o.t0
		o.first = p
	} else {
		p = newPieces(ctx, e, o.first.meter)
	}
	p.t0 = o.t0
	c0, c1 := o.columns(off, n)
	var err error
	if o.op == wire.OpECEncode {
		err = e.dpuEncode(p, o.data, o.parity, c0, c1)
	} else {
		err = e.dpuReconstruct(p, o.shards, o.present, o.want, c0, c1)
	}
	if err != nil {
		o.failed = true // none released: p's own call may still be with the transport
		return nil, err
	}
	o.ps = append(o.ps, p)
	return p, nil
}

// run codes an op's plan through rail.ExecuteTo; each share's time
// refines the model (auto).
func (e *EC) run(ctx context.Context, o *ecOp, plan rail.Plan, cost float64) (ECResult, error) {
	defer o.release()
	res := ECResult{Plan: plan, Bytes: plan.Size}
	took := o.tookA[:]
	if len(plan.Shares) > len(took) {
		took = make([]time.Duration, len(plan.Shares))
	}
	took = took[:len(plan.Shares)]
	err := rail.ExecuteTo(ctx, plan, o.runners, o.t0, took)
	e.c.traceShares(o.op.String(), plan, o.t0, took)
	end := took[0] // one share: its time is the op's (no second read of the clock)
	if len(took) > 1 || err != nil {
		end = time.Since(o.t0)
	}
	res.Took, res.HostCPU = end, o.meter().totalAt(end)
	if err != nil {
		return res, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.Ops++
	e.stats.Bytes += res.Bytes
	e.stats.Took += res.Took
	e.stats.HostCPU += res.HostCPU
	if len(plan.Shares) > 1 && plan.Predicted > 0 {
		// plan.Predicted is the models' time times the cost used.
		model := float64(plan.Predicted) / cost
		e.splitCost = min(max(0.8*e.splitCost+0.2*float64(res.Took)/model, 0.5), 20)
	}
	for i, s := range plan.Shares {
		c0, c1 := o.columns(s.Offset, s.Bytes)
		n := int64(c1-c0) * int64(e.k)
		e.stats.RailBytes[s.Rail] += n
		if s.Rail == RailDPU && took[i] > 0 {
			r := float64(n) / took[i].Seconds()
			if old := e.rate(o.op); old > 0 {
				r = 0.8*old + 0.2*r
			}
			e.dpuRate[rateSlot(o.op)].Store(math.Float64bits(r)) // under e.mu: no update lost
		}
		if est := e.est[s.Rail]; est != nil && e.rails == RailsAuto {
			est.Observe(n, took[i])
		}
	}
	if e.rails == RailsAuto {
		e.refreshModel()
	}
	return res, nil
}

func (e *EC) encode(ctx context.Context, data, parity [][]byte) (ECResult, error) {
	if len(data) != e.k || len(parity) != e.m {
		return ECResult{}, fmt.Errorf("host: ec encode of %d data and %d parity shards with %d+%d: %w", len(data), len(parity), e.k, e.m, ec.ErrShardCount)
	}
	w, err := stripeWidth(data, parity)
	if err != nil {
		return ECResult{}, err
	}
	plan, cost, err := e.split(ctx, w)
	if err != nil {
		return ECResult{Plan: plan}, err
	}
	o := e.newECOp(wire.OpECEncode, w)
	o.data, o.parity = data, parity
	return e.run(ctx, o, plan, cost)
}

// columns returns columns c0..c1 of every shard of the groups, in order.
func columns(c0, c1 int, groups ...[][]byte) [][]byte {
	n := 0
	for _, g := range groups {
		n += len(g)
	}
	return appendColumns(make([][]byte, 0, n), c0, c1, groups...)
}

// appendColumns appends columns c0..c1 of every shard of the groups to
// dst, in order.
func appendColumns(dst [][]byte, c0, c1 int, groups ...[][]byte) [][]byte {
	for _, g := range groups {
		for _, s := range g {
			dst = append(dst, s[c0:c1:c1])
		}
	}
	return dst
}

// inWindowSGL returns the scatter-gather list naming spans, when every
// one lies in the window: in the pieces' room for a list when it fits
// (the transport copies it into the window as the op is submitted).
func (p *pieces) inWindowSGL(spans [][]byte) ([]byte, bool) {
	if len(spans) > wire.MaxSGL {
		return nil, false
	}
	return p.e.c.t.WindowSGL(p.sgl[:0], spans)
}

// submitSGL submits op naming its spans with list (inWindowSGL), for
// bytes of data.
func (p *pieces) submitSGL(op wire.Op, counts uint64, list []byte, bytes int) error {
	p.in1[0] = list
	return p.submit(Request{Op: op, Flags: wire.FlagSGL, Arg0: counts, In: p.in1[:]}, bytes, nil)
}

// pieces is how an agent share too large for one op, or not in the
// window, is sent: column pieces of at most width, up to maxChunksInFl in
// flight.
type pieces struct {
	e     *EC
	ctx   context.Context
	meter *cpuMeter // the op's, told when a wait parks: own, or another's
	own   cpuMeter
	calls []*Call
	after []func(Result) // run on each call's completion, in order
	bufs  [][]byte       // window buffers to free
	next  int            // calls before next are finished
	t0    time.Time      // when the op began (EC.run), if known
	end   time.Time      // when the last call submitted should end

	// Room for the calls of an op in place (one call), its shards' views
	// and its scatter-gather list: no allocations for codes of up to 32
	// shards.
	call0  Call // the first call, done with when the pieces are released
	call1  [1]*Call
	after1 [1]func(Result)
	in1    [1][]byte
	out1   [1][]byte
	cols   [32][]byte
	sgl    [32 * wire.SpanSize]byte
}

// newPieces returns the pieces of one agent share; m is the op's meter,
// nil to have the pieces' own.
func newPieces(ctx context.Context, e *EC, m *cpuMeter) *pieces {
	p := piecesPool.Get().(*pieces)
	*p = pieces{e: e, ctx: ctx, meter: m}
	if m == nil {
		p.meter = &p.own
	}
	p.calls, p.after = p.call1[:0], p.after1[:0]
	return p
}

// piecesPool keeps pieces (a KiB each, with their room for an op's
// views and list) from one op to the next: done with one op, run puts
// its pieces back (release).
var piecesPool = sync.Pool{New: func() any { return new(pieces) }}

// release gives p back to the pool, its calls waited for; nothing may use
// it, or its meter, after. Pieces a submission of which failed are not
// released but left to the collector (EC.run returns at once): the
// transport may still hold their own call (Client.goInto).
func (p *pieces) release() {
	*p = pieces{}
	piecesPool.Put(p)
}

// longOp is the data from which an EC op is expected to take a
// millisecond or more on the agent: its waiter sleeps on the completion
// bell instead of burning the host's core in a yield loop, since freeing
// that core is what the offload is for.
const longOp = 1 << 20

func (p *pieces) submit(req Request, bytes int, after func(Result)) error {
	if len(p.calls)-p.next >= maxChunksInFl {
		if err := p.finish(p.next + 1); err != nil {
			return err
		}
	}
	var call *Call
	if len(p.calls) == 0 {
		// The first (an op in place has no other) is the pieces' own:
		// an op's call is a third of a KiB of memory the core has not
		// touched for a while, if allocated.
		call = &p.call0
		if err := p.e.c.goInto(p.ctx, req, call); err != nil {
			return err
		}
	} else {
		var err error
		if call, err = p.e.c.Go(p.ctx, req); err != nil {
			return err
		}
	}
	call.SetLong(bytes >= longOp)
	if p.meter != nil {
		call.SetMeter(p.meter)
	}
	if rate := p.e.rate(req.Op); rate > 0 {
		now := p.t0 // the first call's submission, near enough
		if len(p.calls) > 0 || now.IsZero() {
			now = mono.Now()
		}
		var wakeAt, spinTo time.Time
		var long bool
		if p.end, wakeAt, spinTo, long = expectEnd(now, p.end, bytes, rate); long {
			call.Expect(wakeAt, spinTo)
		} else {
			call.SetLong(false)
		}
	}
	p.calls, p.after = append(p.calls, call), append(p.after, after)
	return nil
}

// rateSlot is op's slot of EC.dpuRate: encode or reconstruct, the only
// ops pieces submit.
func rateSlot(op wire.Op) int {
	if op == wire.OpECEncode {
		return 0
	}
	return 1
}

// rate is the agent's data bytes per second for op so far (0 before any).
func (e *EC) rate(op wire.Op) float64 {
	return math.Float64frombits(e.dpuRate[rateSlot(op)].Load())
}

// expectEnd is when a call of bytes submitted at now, after calls that
// should end at prev, should end at the agent's rate (bytes per second);
// long says whether its waiter should sleep, and wakeAt and spinTo
// bracket the end it should be awake for. A short wait is spent awake: a
// sleep would cost more than it frees.
func expectEnd(now, prev time.Time, bytes int, rate float64) (end, wakeAt, spinTo time.Time, long bool) {
	end = now
	if prev.After(now) {
		end = prev
	}
	end = end.Add(time.Duration(float64(bytes) / rate * float64(time.Second)))
	wait := end.Sub(now)
	if wait < sleepAhead {
		return end, time.Time{}, time.Time{}, false
	}
	ahead := min(max(wait/4, minAhead), maxAhead)
	return end, end.Add(-ahead), end.Add(ahead), true
}

// A call expected to end sleepAhead or more from now sleeps until shortly
// before: a quarter of the wait before, within [minAhead, maxAhead].
// Shorter waits are spent awake: sleeping would cost more than it frees.
// The margin is wide because the rate is learnt from the host's own view
// of each op, which includes its wake-up when it slept past the end (some
// 120 µs on the 2-vCPU virtual machine this was tuned on, of a 16 MiB
// stripe's 530 µs): a narrower one kept the waiter asleep at the end, and
// so the rate low, for good.
const (
	sleepAhead = 400 * time.Microsecond
	minAhead   = 150 * time.Microsecond
	maxAhead   = 300 * time.Microsecond
)

// finish waits for calls up to n and runs their after functions.
func (p *pieces) finish(n int) error {
	for ; p.next < n; p.next++ {
		r, err := p.e.c.Wait(p.ctx, p.calls[p.next])
		if err != nil {
			return err
		}
		if f := p.after[p.next]; f != nil {
			f(r)
		}
	}
	return nil
}

func (p *pieces) wait() error {
	err := p.finish(len(p.calls))
	if err != nil {
		// Every call must be done before its window buffers are freed and
		// the caller's shards handed back: wait past the caller's
		// deadline (the transport fails the calls of an agent that stops
		// answering, so this ends).
		bg := context.WithoutCancel(p.ctx)
		for _, c := range p.calls[p.next:] {
			p.e.c.Wait(bg, c) //nolint:errcheck // already failing
		}
	}
	for _, b := range p.bufs {
		p.e.c.Free(b)
	}
	p.bufs = nil
	return err
}

// Done and Wait make pieces a rail.Started: an agent share under way.
func (p *pieces) Done() bool  { return p.done() }
func (p *pieces) Wait() error { return p.wait() }

func (p *pieces) done() bool {
	for _, c := range p.calls {
		if !c.Done() {
			return false
		}
	}
	return true
}

// buffer returns n bytes in the window when there is room (ordinary
// memory otherwise: TCP, or a full window, where the transport copies).
func (p *pieces) buffer(n int) []byte {
	if b, err := p.e.c.Alloc(n); err == nil {
		if p.e.c.t.InWindow(b) {
			p.bufs = append(p.bufs, b)
		}
		return b
	}
	return make([]byte, n)
}

// pieceWidth is the columns of one plain op of rows shards: a quarter of
// the window each, so several are in flight.
func (e *EC) pieceWidth(rows int) int {
	return max(e.c.WindowSize()/4/rows/ec.Align*ec.Align, ec.Align)
}

// dpuEncode submits the agent's encode of columns c0..c1 (p.wait awaits
// it): one op naming the shards in place when they are all in the window,
// else pieces copied into window buffers.
func (e *EC) dpuEncode(p *pieces, data, parity [][]byte, c0, c1 int) error {
	counts := wire.ECShards(e.k, e.m)
	if c0 == 0 && c1 == len(data[0]) {
		if in, out, ok := p.e.c.t.WindowRuns(data, parity); ok {
			// The plain form: data and parity each one span.
			p.in1[0], p.out1[0] = in, out
			return p.submit(Request{Op: wire.OpECEncode, Arg0: counts, In: p.in1[:], Out: p.out1[:]}, len(in), nil)
		}
	}
	if list, ok := p.inWindowSGL(appendColumns(p.cols[:0], c0, c1, data, parity)); ok {
		return p.submitSGL(wire.OpECEncode, counts, list, e.k*(c1-c0))
	}
	step := e.pieceWidth(e.k + e.m)
	for c := c0; c < c1; c += step {
		n := min(step, c1-c)
		buf := p.buffer((e.k + e.m) * n)
		for i, d := range data {
			copy(buf[i*n:], d[c:c+n])
		}
		out := buf[e.k*n:]
		at := c
		err := p.submit(Request{Op: wire.OpECEncode, Arg0: counts, In: [][]byte{buf[:e.k*n]}, Out: [][]byte{out}}, e.k*n, func(Result) {
			for j, q := range parity {
				copy(q[at:at+n], out[j*n:(j+1)*n])
			}
		})
		if err != nil {
			p.wait() //nolint:errcheck // already failing
			return err
		}
	}
	return nil
}

// rebuildPlan picks, for a reconstruct, k present shards (data first) and
// the shards to rebuild, giving each of those room of w bytes.
func (e *EC) rebuildPlan(shards [][]byte, dataOnly bool) (present, want []int, w int, err error) {
	if len(shards) != e.k+e.m {
		return nil, nil, 0, fmt.Errorf("host: ec reconstruct of %d shards with %d+%d: %w", len(shards), e.k, e.m, ec.ErrShardCount)
	}
	var have [][]byte
	for i, s := range shards {
		if len(s) != 0 {
			have = append(have, s)
			if len(present) < e.k {
				present = append(present, i)
			}
		} else if i < e.k || !dataOnly {
			want = append(want, i)
		}
	}
	if w, err = stripeWidth(have); err != nil {
		return nil, nil, 0, err
	}
	if len(present) < e.k {
		return nil, nil, 0, fmt.Errorf("host: ec: %d of %d shards present, %d needed: %w", len(have), e.k+e.m, e.k, ec.ErrTooFewShards)
	}
	for _, i := range want {
		if cap(shards[i]) < w {
			shards[i] = make([]byte, w)
		}
		shards[i] = shards[i][:w]
	}
	return present, want, w, nil
}

func (e *EC) reconstruct(ctx context.Context, shards [][]byte, dataOnly bool) (ECResult, error) {
	present, want, w, err := e.rebuildPlan(shards, dataOnly)
	if err != nil || len(want) == 0 {
		return ECResult{}, err
	}
	plan, cost, err := e.split(ctx, w)
	if err != nil {
		return ECResult{Plan: plan}, err
	}
	o := e.newECOp(wire.OpECReconstruct, w)
	o.shards, o.present, o.want = shards, present, want
	return e.run(ctx, o, plan, cost)
}

// dpuReconstruct submits the agent's rebuild of columns c0..c1 of want
// from present.
func (e *EC) dpuReconstruct(p *pieces, shards [][]byte, present, want []int, c0, c1 int) error {
	counts := wire.ECShards(e.k, e.m)
	idx := make([]byte, 0, len(present)+len(want))
	for _, i := range append(append([]int{}, present...), want...) {
		idx = append(idx, byte(i))
	}
	var spans [][]byte
	for _, i := range present {
		spans = append(spans, shards[i][c0:c1:c1])
	}
	for _, i := range want {
		spans = append(spans, shards[i][c0:c1:c1])
	}
	if ib, err := e.c.Alloc(len(idx)); err == nil && e.c.t.InWindow(ib) {
		copy(ib, idx)
		p.bufs = append(p.bufs, ib)
		if list, ok := p.inWindowSGL(append(spans, ib)); ok {
			if err := p.submitSGL(wire.OpECReconstruct, counts, list, len(present)*(c1-c0)); err != nil {
				p.wait() //nolint:errcheck // already failing
				return err
			}
			return nil
		}
	} else if err == nil {
		e.c.Free(ib)
	}
	k, r := len(present), len(want)
	step := e.pieceWidth(k + r)
	for c := c0; c < c1; c += step {
		n := min(step, c1-c)
		buf := p.buffer((k+r)*n + len(idx))
		for j, i := range present {
			copy(buf[j*n:], shards[i][c:c+n])
		}
		out := buf[k*n : (k+r)*n]
		ib := buf[(k+r)*n:]
		copy(ib, idx)
		at := c
		err := p.submit(Request{Op: wire.OpECReconstruct, Arg0: counts, In: [][]byte{buf[:k*n], ib}, Out: [][]byte{out}}, k*n, func(Result) {
			for j, i := range want {
				copy(shards[i][at:at+n], out[j*n:(j+1)*n])
			}
		})
		if err != nil {
			p.wait() //nolint:errcheck // already failing
			return err
		}
	}
	return nil
}

// Calibrate measures the two rails for this code, now when again is set,
// else once (the first auto op calls it): the host rail's rate coding a
// stripe in this process; the agent's from stripes of two widths in the
// window (a worker takes each: its wake-up is part of the fixed cost),
// the median time of each, so that the fixed cost and the rate come
// apart. At least 100 ms each; later ops refine the rates (rail.Estimator).
func (e *EC) Calibrate(ctx context.Context, again bool) ([]rail.Rail, error) {
	e.calMu.Lock()
	defer e.calMu.Unlock()
	if rails := e.Model(); rails != nil && !again {
		return rails, nil
	}
	if e.c == nil {
		return nil, fmt.Errorf("%w: calibrating the dpu rail needs an agent", ErrRails)
	}
	const minTime = 100 * time.Millisecond
	w := max(min(1<<20, e.Chunk()/2)/ec.Align*ec.Align, ec.Align) // beside a streaming round in the window
	stripe := func(b []byte) ([][]byte, [][]byte) {
		for i := range b[:e.k*w] {
			b[i] = byte(i * 7)
		}
		return rows(b, e.k, w), rows(b[e.k*w:], e.m, w)
	}
	hd, hp := stripe(make([]byte, (e.k+e.m)*w))
	hostRate, _ := rail.TimeRate(e.k*w, minTime, func(int) error { return e.local.EncodeColumns(ctx, hd, hp) })
	buf, free := e.Buffers((e.k + e.m) * w)
	if buf == nil {
		buf, free = make([]byte, (e.k+e.m)*w), func() {}
	}
	defer free()
	dd, dp := stripe(buf)
	// agentTime is the mean time of ops coding c columns, over at least
	// minTime/2: a mean, not a median, since an agent under a CPU quota
	// (a DPU profile, a busy DPU) runs some ops at full speed and holds
	// others for the rest of a period, and a stream of ops meets both.
	// The first op, which may wake a sleeping worker, is not counted.
	agentTime := func(c int) (time.Duration, error) {
		var total time.Duration
		n := 0
		for t0 := time.Now(); n < 6 || time.Since(t0) < minTime/2; n++ {
			t1 := time.Now()
			p := newPieces(ctx, e, nil)
			p.meter = nil // a calibration's ops report no CPU: nothing to read
			err := e.dpuEncode(p, dd, dp, 0, c)
			if err == nil {
				err = p.wait()
			}
			if err != nil {
				return 0, fmt.Errorf("calibrate the dpu rail: %w", err)
			}
			if n > 0 {
				total += time.Since(t1)
			}
		}
		return total / time.Duration(n-1), nil
	}
	small := max(w/8/ec.Align*ec.Align, ec.Align)
	t1, err := agentTime(small)
	if err != nil {
		return nil, err
	}
	t2, err := agentTime(w)
	if err != nil {
		return nil, err
	}
	dpu := rail.Rail{Name: RailDPU, Kind: rail.DPUCores, Confidence: 0.5}
	if t2 > t1 && w > small {
		dpu.Rate = float64(e.k*(w-small)) / (t2 - t1).Seconds()
		dpu.Alpha = max(t1-time.Duration(float64(e.k*small)/dpu.Rate*float64(time.Second)), 0)
	} else { // noise hid the difference: all of it rate
		dpu.Rate = float64(e.k*w) / t2.Seconds()
	}
	rails := []rail.Rail{{Name: RailHost, Kind: rail.HostCPU, Rate: hostRate, Confidence: 0.5}, dpu}
	e.setModel(rails)
	return rails, nil
}

// Model returns the rails' current models (nil before calibration).
func (e *EC) Model() []rail.Rail {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.est == nil {
		return nil
	}
	var rails []rail.Rail
	for _, name := range []string{RailHost, RailDPU} {
		if est := e.est[name]; est != nil {
			rails = append(rails, est.Rail())
		}
	}
	return rails
}

// Plan is how an op of shards of w bytes would be split now (calibrating
// first when auto has not yet).
func (e *EC) Plan(ctx context.Context, w int) (rail.Plan, error) {
	plan, _, err := e.split(ctx, w)
	return plan, err
}

// rows cuts b into n rows of w bytes.
func rows(b []byte, n, w int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b[i*w : (i+1)*w : (i+1)*w]
	}
	return out
}
