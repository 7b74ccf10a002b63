package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/shared/rail"
)

// MultiRail runs each allreduce where the planner's table (rail.Table)
// puts its size: on the host rail (a communicator among the host
// processes, coll.Open), on the DPU rail (the agents, DPUComm), or split
// between them, both at once (rail.Execute). Calibrate makes the table
// from each rail's measured α and rate and from what running both at once
// measured to cost; until then every allreduce runs on the DPU rail. The
// call itself is a lookup: nothing is timed on the way. Every rank makes
// the same calls in the same order, and takes rank 0's table.
type MultiRail struct {
	Host *coll.Comm
	DPU  *DPUComm
	// Objective is what the plans are chosen for (set before Calibrate):
	// time, or the least host CPU within 10 % of the fastest.
	Objective rail.Objective

	table atomic.Pointer[rail.Table]

	mu     sync.Mutex
	trials map[int]*trial // by size band (rail.Band), while tuning
}

// trial is one size band's online tuning: its candidates, tried by the
// band's first allreduces, each tuneRounds times in a row (the first of
// them untimed: a rail's first call after another rail's runs colder
// than the job's will), and each one's times on this rank so far.
type trial struct {
	cands []rail.Plan
	times [][]float64 // seconds, by candidate
	calls int
}

// tuneRounds is how many times the tuning tries each candidate: each is
// judged by its median, not its best — rails that share cores make a
// split's times spread, and its best is the one the job will rarely see
// (rail.Choose picks, by the objective).
const tuneRounds = 6

// splitMargin is how much faster than the best rail alone a split must
// have measured to be kept: it is the plan whose time varies the most.
const splitMargin = 0.05

// tuneMargin: candidates the model puts within this factor of the best
// are tried (rail.Table.Candidates).
const tuneMargin = 1.5

// NewMultiRail returns a MultiRail that runs everything on the DPU rail
// until Calibrate. After it, the first allreduces of each size band try
// the plans the model cannot tell apart (rail.Table.Candidates: each rail
// alone, the split) in turn, and the band keeps the one measured fastest
// on the slowest rank — agreed on by one more allreduce among the host
// processes when the band's trials end, at the same call on every rank.
func NewMultiRail(h *coll.Comm, d *DPUComm) *MultiRail {
	return &MultiRail{Host: h, DPU: d}
}

// railsAlign is the split's granularity: 64 bytes, whole elements of
// every type and a cache line each side.
const railsAlign = 64

// Calibrate times each rail alone on an allreduce of a few bytes (α) and
// of size bytes (the rate), the rails taking turns so that whatever else
// the machine does at the time weighs on both alike, after an untimed run
// of each; and then both at once on the split the model makes for size
// bytes: the ratio of that time to the model's prediction is the cost of
// running the rails together — above 1 where they share cores or memory
// bandwidth, as the host processes and the agents of one machine do.
// Each time is the slowest rank's best of calibrationRounds. Rank 0's
// figures make the table that every rank takes; it is returned. Calibrate
// forgets what earlier tuning measured.
func (m *MultiRail) Calibrate(ctx context.Context, size int) (*rail.Table, error) {
	size = max(size, 1<<20) &^ (railsAlign - 1)
	rails := []rail.Rail{{Name: rail.Host, Kind: rail.HostCPU}, {Name: rail.DPU, Kind: rail.DPUCores}}
	var plans []rail.Plan // each rail alone at 64 bytes and at size
	for _, r := range rails {
		for _, n := range []int64{64, int64(size)} {
			plans = append(plans, rail.Plan{Size: n, Shares: []rail.Share{{Rail: r.Name, Kind: r.Kind, Bytes: n}}})
		}
	}
	t, err := m.slowest(ctx, plans)
	if err != nil {
		return nil, fmt.Errorf("host: calibrating the rails: %w", err)
	}
	for i := range rails {
		small, large := t[2*i], t[2*i+1]
		rails[i].Alpha, rails[i].Rate = small, float64(size)/max((large-small).Seconds(), 1e-9)
	}
	cost := 1.0
	if split := rail.Split(rails, int64(size), railsAlign); len(split.Shares) > 1 {
		both, err := m.slowest(ctx, []rail.Plan{split})
		if err != nil {
			return nil, fmt.Errorf("host: calibrating both rails at once: %w", err)
		}
		cost = max(1, both[0].Seconds()/split.Predicted.Seconds())
	}
	// Rank 0's figures, for every rank: α, rate of each rail, the cost.
	fig := make([]byte, 8*(2*len(rails)+1))
	if m.Host.Rank() == 0 {
		for i, r := range rails {
			binary.LittleEndian.PutUint64(fig[16*i:], math.Float64bits(r.Alpha.Seconds()))
			binary.LittleEndian.PutUint64(fig[16*i+8:], math.Float64bits(r.Rate))
		}
		binary.LittleEndian.PutUint64(fig[len(fig)-8:], math.Float64bits(cost))
	}
	if err := m.Host.Broadcast(ctx, fig, coll.Float64, 0); err != nil {
		return nil, err
	}
	f := func(off int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(fig[off:])) }
	for i := range rails {
		rails[i].Alpha = time.Duration(f(16*i) * float64(time.Second))
		rails[i].Rate = f(16*i + 8)
	}
	tab := rail.NewTable(rails, railsAlign, autoMinGain, f(len(fig)-8), m.Objective)
	m.mu.Lock()
	m.trials = nil
	m.table.Store(tab)
	m.mu.Unlock()
	return tab, nil
}

// Table is the table made by the last Calibrate (nil before one).
func (m *MultiRail) Table() *rail.Table { return m.table.Load() }

// Plan is where an allreduce of size bytes runs.
func (m *MultiRail) Plan(size int) rail.Plan {
	if t := m.table.Load(); t != nil {
		return t.Lookup(int64(size))
	}
	return rail.Plan{Size: int64(size), BestOne: rail.DPU,
		Shares: []rail.Share{{Rail: rail.DPU, Kind: rail.DPUCores, Bytes: int64(size)}}}
}

// calibrationRounds is how many times Calibrate runs each plan.
const calibrationRounds = 5

// slowest runs each plan once untimed and then calibrationRounds times,
// the plans taking turns, each run started together on every rank (a
// barrier), and returns each plan's best time on the slowest rank.
func (m *MultiRail) slowest(ctx context.Context, plans []rail.Plan) ([]time.Duration, error) {
	best := make([]float64, len(plans))
	var most int64
	for i, p := range plans {
		best[i], most = math.MaxFloat64, max(most, p.Size)
	}
	// One pair of buffers for every plan: what is left for the collector
	// to free is left in the job's first collectives.
	send, recv := make([]byte, most), make([]byte, most)
	for round := -1; round < calibrationRounds; round++ {
		for i, p := range plans {
			if err := m.Host.Barrier(ctx); err != nil {
				return nil, err
			}
			t0 := time.Now()
			if _, err := rail.Execute(ctx, p, m.runners(send[:p.Size], recv[:p.Size], coll.Float32, coll.Sum)); err != nil {
				return nil, err
			}
			if round >= 0 {
				best[i] = min(best[i], time.Since(t0).Seconds())
			}
		}
	}
	if err := m.maxOver(ctx, best); err != nil {
		return nil, err
	}
	out := make([]time.Duration, len(best))
	for i, b := range best {
		out[i] = time.Duration(b * float64(time.Second))
	}
	return out, nil
}

// maxOver replaces each of v by its largest value over the ranks.
func (m *MultiRail) maxOver(ctx context.Context, v []float64) error {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	if err := m.Host.AllReduce(ctx, b, b, coll.Float64, coll.Max); err != nil {
		return err
	}
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return nil
}

// runners are the two rails' runners of one allreduce of send into recv.
func (m *MultiRail) runners(send, recv []byte, dt coll.DType, op coll.Op) rail.Runners {
	return rail.Runners{
		rail.Host: rail.RunnerFunc(func(ctx context.Context, off, n int64) error {
			return m.Host.AllReduce(ctx, send[off:off+n], recv[off:off+n], dt, op)
		}),
		rail.DPU: rail.RunnerFunc(func(ctx context.Context, off, n int64) error {
			return m.DPU.AllReduce(ctx, send[off:off+n], recv[off:off+n], dt, op)
		}),
	}
}

// AllReduce reduces send into recv with op where the table puts its size,
// or, while its size band is being tuned, on the band's next candidate.
func (m *MultiRail) AllReduce(ctx context.Context, send, recv []byte, dt coll.DType, op coll.Op) error {
	if len(send) != len(recv) || !dt.Valid() || len(send)%dt.Size() != 0 {
		return fmt.Errorf("host: multi-rail allreduce of %d bytes of %v into %d", len(send), dt, len(recv))
	}
	tr, c := m.trialFor(len(send))
	if tr == nil {
		return m.execute(ctx, m.Plan(len(send)), send, recv, dt, op)
	}
	t0 := time.Now()
	if err := m.execute(ctx, tr.cands[c].Scale(int64(len(send)), railsAlign), send, recv, dt, op); err != nil {
		return err
	}
	return m.record(ctx, len(send), tr, c, time.Since(t0))
}

// execute runs one allreduce by plan p.
func (m *MultiRail) execute(ctx context.Context, p rail.Plan, send, recv []byte, dt coll.DType, op coll.Op) error {
	if len(p.Shares) == 1 { // no closures, no goroutine
		if p.Shares[0].Rail == rail.Host {
			return m.Host.AllReduce(ctx, send, recv, dt, op)
		}
		return m.DPU.AllReduce(ctx, send, recv, dt, op)
	}
	for _, s := range p.Shares {
		if s.Offset%int64(dt.Size()) != 0 {
			return fmt.Errorf("host: multi-rail allreduce: a share at byte %d splits a %v", s.Offset, dt)
		}
	}
	_, err := rail.Execute(ctx, p, m.runners(send, recv, dt, op))
	return err
}

// trialFor is the tuning of size's band and the candidate this call
// tries, or nil where the band is decided (or nothing is calibrated).
func (m *MultiRail) trialFor(size int) (*trial, int) {
	t := m.table.Load()
	if t == nil || t.Pinned(int64(size)) {
		return nil, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := rail.Band(int64(size))
	tr := m.trials[k]
	if tr == nil {
		cands := t.Candidates(int64(size), tuneMargin)
		if len(cands) < 2 {
			m.table.Store(t.Pin(int64(size), cands[0], "the only candidate the model left"))
			return nil, 0
		}
		tr = &trial{cands: cands, times: make([][]float64, len(cands))}
		if m.trials == nil {
			m.trials = map[int]*trial{}
		}
		m.trials[k] = tr
	}
	if tr.calls >= tuneRounds*len(tr.cands) { // the last trial failed: again
		tr.calls = 0
		for i := range tr.times {
			tr.times[i] = tr.times[i][:0]
		}
	}
	c := tr.calls / tuneRounds // each candidate's trials in a row
	tr.calls++
	return tr, c
}

// record notes candidate c's time d; after the band's last trial, the
// ranks agree on each candidate's time (the slowest rank's median) and
// the band keeps the fastest, a split only where it beat the best rail
// alone by splitMargin.
func (m *MultiRail) record(ctx context.Context, size int, tr *trial, c int, d time.Duration) error {
	m.mu.Lock()
	if (tr.calls-1)%tuneRounds != 0 { // the first of a row warms it up
		tr.times[c] = append(tr.times[c], d.Seconds())
	}
	last := tr.calls >= tuneRounds*len(tr.cands)
	m.mu.Unlock()
	if !last {
		return nil
	}
	times := make([]float64, len(tr.cands))
	for i, ts := range tr.times {
		times[i] = rail.Median(append([]float64(nil), ts...))
	}
	if err := m.maxOver(ctx, times); err != nil {
		return fmt.Errorf("host: agreeing on the tuning of %d-byte allreduces: %w", size, err)
	}
	took := make([]time.Duration, len(times))
	var why []string
	for i, t := range times {
		took[i] = time.Duration(t * float64(time.Second))
		why = append(why, fmt.Sprintf("%s %v (model %v)", rail.Words(tr.cands[i]),
			took[i].Round(time.Microsecond), tr.cands[i].Predicted.Round(time.Microsecond)))
	}
	win := rail.Choose(m.Objective, tr.cands, took, splitMargin)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.trials[rail.Band(int64(size))] == tr { // not forgotten by a Calibrate meanwhile
		m.table.Store(m.table.Load().Pin(int64(size), tr.cands[win], strings.Join(why, ", ")))
		delete(m.trials, rail.Band(int64(size)))
	}
	return nil
}

// Tune runs allreduces of each size (on scratch buffers, float32 sums)
// until the tuning of its band has decided it, as a job's first
// collectives would; every rank must call it with the same sizes.
func (m *MultiRail) Tune(ctx context.Context, sizes ...int) error {
	most := 4
	for _, n := range sizes {
		most = max(most, n)
	}
	scratch := make([]byte, 2*most) // one pair for every size
	for _, n := range sizes {
		n = max(n, 4) &^ 3
		send, recv := scratch[:n], scratch[most:most+n]
		for i := 0; m.table.Load() != nil && !m.table.Load().Pinned(int64(n)); i++ {
			if i > 16*tuneRounds {
				return fmt.Errorf("host: tuning %d-byte allreduces did not settle", n)
			}
			if err := m.AllReduce(ctx, send, recv, coll.Float32, coll.Sum); err != nil {
				return err
			}
		}
	}
	return nil
}
