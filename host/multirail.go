package host

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/shared/durable"
	"github.com/hecsys/hec/shared/mono"
	"github.com/hecsys/hec/shared/rail"
)

// MultiRail runs each collective where the planner's table for its kind
// (rail.Table) puts its size: on the host rail (a communicator among the
// host processes, coll.Open), on the DPU rail (the agents, DPUComm), or
// split between them, both at once (rail.Execute: the DPU rail's share
// handed to the agents first, the host rail's run by the caller). Only
// collectives whose buffers cut into one range per rail split (allreduce,
// broadcast, reduce); the others run on the rail their table picks.
// Calibrate makes allreduce's table from each rail's measured α and rate
// and from what running both at once measured to cost; the other kinds'
// tables are measured the same way at their first call after it. Until
// then every collective runs on the DPU rail. The call itself is a
// lookup: nothing is timed on the way. Every rank makes the same calls in
// the same order, and takes rank 0's tables.
type MultiRail struct {
	Host *coll.Comm
	DPU  *DPUComm
	// Objective is what the plans are chosen for (set before Calibrate):
	// time, or the least host CPU within 10 % of the fastest.
	Objective rail.Objective
	// TableFile and Topology (set before Calibrate) keep the tables, tuned
	// bands included, per topology and kind: rank 0's file holds them, and
	// a MultiRail of the same topology takes them instead of measuring.
	// Topology names what the rails' times depend on (where the ranks and
	// agents are, the links between them); empty: nothing is kept.
	TableFile, Topology string
	// Fresh has Calibrate measure even where TableFile keeps a table for
	// the topology (and keep what it measures in its place).
	Fresh bool

	tables  [coll.KindBarrier + 1]atomic.Pointer[rail.Table]
	kept    [coll.KindBarrier + 1]atomic.Bool // the table came from TableFile
	calSize int                               // Calibrate's size: 0 until it

	mu     sync.Mutex
	trials map[trialKey]*trial // while tuning
}

// trialKey names a size band of one kind of collective.
type trialKey struct {
	kind coll.Kind
	band int
}

// trial is one size band's online tuning: its candidates, tried by the
// band's first collectives, each tuneRounds times in a row (the first of
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
// until Calibrate. After it, the first collectives of each kind and size
// band try the plans the model cannot tell apart (rail.Table.Candidates:
// each rail alone, the split) in turn, and the band keeps the one
// measured fastest on the slowest rank — agreed on by one more allreduce
// among the host processes when the band's trials end, at the same call
// on every rank.
func NewMultiRail(h *coll.Comm, d *DPUComm) *MultiRail {
	return &MultiRail{Host: h, DPU: d}
}

// railsAlign is the split's granularity: 64 bytes, whole elements of
// every type and a cache line each side.
const railsAlign = 64

// splits says whether kind k's buffers cut into one byte range per rail,
// each range a collective of its own: an element's result depends on
// that element alone, and every rank's buffers are alike (a root's recv
// aside).
func splits(k coll.Kind) bool {
	return k == coll.KindAllReduce || k == coll.KindBroadcast || k == coll.KindReduce
}

// Size is a collective's size for the tables: nccl-tests' (coll.Kind.Sizes),
// the longer of its buffers.
func Size(send, recv []byte) int { return max(len(send), len(recv)) }

// Calibrate times each rail alone on an allreduce of a few bytes (α) and
// of size bytes (the rate), the rails taking turns so that whatever else
// the machine does at the time weighs on both alike, after an untimed run
// of each; and then both at once on the split the model makes for size
// bytes: the ratio of that time to the model's prediction is the cost of
// running the rails together — above 1 where they share cores or memory
// bandwidth, as the host processes and the agents of one machine do.
// Each time is the slowest rank's best of calibrationRounds. Rank 0's
// figures make the table that every rank takes; it is returned. With a
// TableFile that holds this topology's allreduce table, that table is
// taken instead, tuned bands and all. Calibrate forgets what earlier
// tuning measured, and the other kinds' tables (measured again at their
// next call). With kinds, it measures those (allreduce where none is
// named) and returns the first one's table.
func (m *MultiRail) Calibrate(ctx context.Context, size int, kinds ...coll.Kind) (*rail.Table, error) {
	m.mu.Lock()
	m.trials = nil
	for k := range m.tables {
		m.tables[k].Store(nil)
		m.kept[k].Store(false)
	}
	unit := railsAlign * m.Host.Size() // whole blocks of every kind
	m.calSize = max(size, 1<<20) / unit * unit
	m.mu.Unlock()
	if len(kinds) == 0 {
		kinds = []coll.Kind{coll.KindAllReduce}
	}
	var first *rail.Table
	for _, k := range kinds {
		if !k.Valid() {
			return nil, fmt.Errorf("host: calibrating the rails for %v", k)
		}
		t, err := m.calibrate(ctx, k)
		if err != nil {
			return nil, err
		}
		if first == nil {
			first = t
		}
	}
	return first, nil
}

// Tuned says whether a collective of kind k and size bytes (Size's) runs
// where its table decided, no tuning left to try in its band.
func (m *MultiRail) Tuned(k coll.Kind, size int) bool {
	t := m.TableFor(k)
	return t != nil && (k == coll.KindBarrier || t.Pinned(int64(size)))
}

// calibrate makes kind k's table (Calibrate's, for any kind), or takes
// the one TableFile keeps.
func (m *MultiRail) calibrate(ctx context.Context, k coll.Kind) (*rail.Table, error) {
	tab, err := m.loadTable(ctx, k)
	if err != nil {
		return nil, err
	}
	m.kept[k].Store(tab != nil)
	if tab == nil {
		if tab, err = m.measure(ctx, k); err != nil {
			return nil, err
		}
		m.saveTable(k, tab)
	}
	m.tables[k].Store(tab)
	return tab, nil
}

// measure times the rails on kind k (Calibrate says how) and makes its
// table from rank 0's figures.
func (m *MultiRail) measure(ctx context.Context, k coll.Kind) (*rail.Table, error) {
	size := m.calSize
	rails := []rail.Rail{{Name: rail.Host, Kind: rail.HostCPU}, {Name: rail.DPU, Kind: rail.DPUCores}}
	var plans []rail.Plan // each rail alone at a few bytes and at size
	small := int64(railsAlign * m.Host.Size())
	for _, r := range rails {
		for _, n := range []int64{small, int64(size)} {
			plans = append(plans, rail.Plan{Size: n, Shares: []rail.Share{{Rail: r.Name, Kind: r.Kind, Bytes: n}}})
		}
	}
	t, err := m.slowest(ctx, k, plans)
	if err != nil {
		return nil, fmt.Errorf("host: calibrating the rails for %v: %w", k, err)
	}
	for i := range rails {
		lo, hi := t[2*i], t[2*i+1]
		rails[i].Alpha, rails[i].Rate = lo, float64(size)/max((hi-lo).Seconds(), 1e-9)
	}
	cost, minGain := 1.0, autoMinGain
	if !splits(k) {
		minGain = rail.NoSplit
	} else if split := rail.Split(rails, int64(size), railsAlign); len(split.Shares) > 1 {
		both, err := m.slowest(ctx, k, []rail.Plan{split})
		if err != nil {
			return nil, fmt.Errorf("host: calibrating both rails at once for %v: %w", k, err)
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
	return rail.NewTable(rails, railsAlign, minGain, f(len(fig)-8), m.Objective), nil
}

// Table is allreduce's table, made by the last Calibrate (nil before one).
func (m *MultiRail) Table() *rail.Table { return m.tables[coll.KindAllReduce].Load() }

// TableFor is kind k's table (nil before its first call after Calibrate).
func (m *MultiRail) TableFor(k coll.Kind) *rail.Table {
	if !k.Valid() {
		return nil
	}
	return m.tables[k].Load()
}

// Kept says whether kind k's table was taken from TableFile, not measured.
func (m *MultiRail) Kept(k coll.Kind) bool { return k.Valid() && m.kept[k].Load() }

// Plan is where an allreduce of size bytes runs.
func (m *MultiRail) Plan(size int) rail.Plan { return m.PlanFor(coll.KindAllReduce, size) }

// PlanFor is where a collective of kind k and size bytes (Size's) runs.
func (m *MultiRail) PlanFor(k coll.Kind, size int) rail.Plan {
	t := m.TableFor(k)
	switch {
	case t == nil:
		return rail.Plan{Size: int64(size), BestOne: rail.DPU,
			Shares: []rail.Share{{Rail: rail.DPU, Kind: rail.DPUCores, Bytes: int64(size)}}}
	case k != coll.KindBarrier:
		return t.Lookup(int64(size))
	}
	p := t.Lookup(1) // a barrier has no bytes: the rail of the least α
	p.Size = 0
	for i := range p.Shares {
		p.Shares[i].Bytes = 0
	}
	return p
}

// calibrationRounds is how many times Calibrate runs each plan.
const calibrationRounds = 5

// slowest runs each plan of kind k once untimed and then
// calibrationRounds times, the plans taking turns, each run started
// together on every rank (a barrier), and returns each plan's best time
// on the slowest rank.
func (m *MultiRail) slowest(ctx context.Context, k coll.Kind, plans []rail.Plan) ([]time.Duration, error) {
	best := make([]float64, len(plans))
	var most int64
	for i, p := range plans {
		best[i], most = math.MaxFloat64, max(most, p.Size)
	}
	// One pair of buffers for every plan: what is left for the collector
	// to free is left in the job's first collectives.
	sn, rn := k.Sizes(int(most), m.Host.Size())
	send, recv := make([]byte, sn), make([]byte, rn)
	for round := -1; round < calibrationRounds; round++ {
		for i, p := range plans {
			if err := m.Host.Barrier(ctx); err != nil {
				return nil, err
			}
			sn, rn := k.Sizes(int(p.Size), m.Host.Size())
			t0 := time.Now()
			if err := m.execute(ctx, k, p, send[:sn], recv[:rn], coll.Float32, coll.Sum, 0); err != nil {
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

// collShare is one collective's buffers and arguments, the rails'
// runners of its shares: a share is bytes [off, off+n) of every buffer
// (a kind that splits), recv empty where the caller's is (a reduce off
// its root).
type collShare struct {
	m          *MultiRail
	k          coll.Kind
	send, recv []byte
	dt         coll.DType
	op         coll.Op
	root       int
}

func part(b []byte, off, n int64) []byte {
	if len(b) == 0 {
		return b
	}
	return b[off : off+n]
}

// hostShare is the host rail's runner: the collective on the share, by
// this process.
type hostShare struct{ *collShare }

func (h hostShare) Run(ctx context.Context, off, n int64) error {
	return h.m.Host.Run(ctx, h.k, part(h.send, off, n), part(h.recv, off, n), h.dt, h.op, h.root)
}

// dpuShare is the DPU rail's runner, a rail.Starter: the share is handed
// to the agents and runs while the host rail's share runs here.
type dpuShare struct{ *collShare }

func (d dpuShare) Run(ctx context.Context, off, n int64) error {
	st, err := d.Start(ctx, off, n)
	if err != nil {
		return err
	}
	return st.Wait()
}

func (d dpuShare) Start(ctx context.Context, off, n int64) (rail.Started, error) {
	o, err := d.m.DPU.Start(ctx, d.k, part(d.send, off, n), part(d.recv, off, n), d.dt, d.op, d.root)
	if err != nil {
		return nil, err
	}
	return startedColl{o: o, ctx: ctx}, nil
}

// startedColl is a DPU-rail share under way.
type startedColl struct {
	o   *CollOp
	ctx context.Context
}

func (s startedColl) Done() bool {
	select {
	case <-s.o.Done():
		return true
	default:
		return false
	}
}

func (s startedColl) Wait() error { return s.o.Wait(s.ctx) }

// AllReduce reduces send into recv with op where the table puts its size,
// or, while its size band is being tuned, on the band's next candidate.
func (m *MultiRail) AllReduce(ctx context.Context, send, recv []byte, dt coll.DType, op coll.Op) error {
	return m.Run(ctx, coll.KindAllReduce, send, recv, dt, op, 0)
}

// Run runs collective k (send, recv, op and root as coll.Comm.Run takes
// them) where its table puts its size, or, while its size band is being
// tuned, on the band's next candidate. The first call of a kind after
// Calibrate measures the rails for it (every rank makes it: collectives
// are called in one order).
func (m *MultiRail) Run(ctx context.Context, k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) error {
	switch {
	case !k.Valid() || !dt.Valid():
		return fmt.Errorf("host: multi-rail %v of %v", k, dt)
	case k == coll.KindAllReduce && (len(send) != len(recv) || len(send)%dt.Size() != 0):
		return fmt.Errorf("host: multi-rail allreduce of %d bytes of %v into %d", len(send), dt, len(recv))
	}
	if m.TableFor(k) == nil && m.calibrated() {
		if _, err := m.calibrate(ctx, k); err != nil {
			return err
		}
	}
	size := Size(send, recv)
	tr, c := m.trialFor(k, size)
	if tr == nil {
		return m.execute(ctx, k, m.PlanFor(k, size), send, recv, dt, op, root)
	}
	t0 := time.Now()
	if err := m.execute(ctx, k, tr.cands[c].Scale(int64(size), railsAlign), send, recv, dt, op, root); err != nil {
		return err
	}
	return m.record(ctx, k, size, tr, c, time.Since(t0))
}

// calibrated says whether Calibrate has run.
func (m *MultiRail) calibrated() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calSize > 0
}

// execute runs one collective by plan p.
func (m *MultiRail) execute(ctx context.Context, k coll.Kind, p rail.Plan, send, recv []byte, dt coll.DType, op coll.Op, root int) error {
	if len(p.Shares) <= 1 { // no runners, no goroutine
		if len(p.Shares) == 1 && p.Shares[0].Rail == rail.Host {
			return m.Host.Run(ctx, k, send, recv, dt, op, root)
		}
		return m.DPU.Run(ctx, k, send, recv, dt, op, root)
	}
	if !splits(k) {
		return fmt.Errorf("host: multi-rail %v: a %v does not split across rails", k, k)
	}
	for _, s := range p.Shares {
		if s.Offset%int64(dt.Size()) != 0 {
			return fmt.Errorf("host: multi-rail %v: a share at byte %d splits a %v", k, s.Offset, dt)
		}
	}
	c := &collShare{m: m, k: k, send: send, recv: recv, dt: dt, op: op, root: root}
	t0, took := mono.Now(), make([]time.Duration, len(p.Shares))
	err := rail.ExecuteTo(ctx, p, rail.Runners{rail.Host: hostShare{c}, rail.DPU: dpuShare{c}}, t0, took)
	m.DPU.c.traceShares(k.String(), p, t0, took)
	return err
}

// trialFor is the tuning of size's band of kind k and the candidate this
// call tries, or nil where the band is decided (or nothing is
// calibrated).
func (m *MultiRail) trialFor(k coll.Kind, size int) (*trial, int) {
	t := m.TableFor(k)
	if t == nil || k == coll.KindBarrier || t.Pinned(int64(size)) {
		return nil, 0 // a barrier has no bytes to try rails on: α decides
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := trialKey{k, rail.Band(int64(size))}
	tr := m.trials[key]
	if tr == nil {
		// One candidate is timed too: what it measured is the band's
		// prediction, where the model's (its α a best time) runs short.
		cands := t.Candidates(int64(size), tuneMargin)
		tr = &trial{cands: cands, times: make([][]float64, len(cands))}
		if m.trials == nil {
			m.trials = map[trialKey]*trial{}
		}
		m.trials[key] = tr
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
// alone by splitMargin, with its mean time (the slowest rank's) as the
// band's prediction.
func (m *MultiRail) record(ctx context.Context, k coll.Kind, size int, tr *trial, c int, d time.Duration) error {
	m.mu.Lock()
	if (tr.calls-1)%tuneRounds != 0 { // the first of a row warms it up
		tr.times[c] = append(tr.times[c], d.Seconds())
	}
	last := tr.calls >= tuneRounds*len(tr.cands)
	m.mu.Unlock()
	if !last {
		return nil
	}
	// Each candidate's median (what chooses: a split's times spread the
	// most, and its best is the one the job will rarely see) and mean
	// (what the band predicts: a run of collectives takes the mean each).
	nc := len(tr.cands)
	all := make([]float64, 2*nc)
	for i, ts := range tr.times {
		all[i] = rail.Median(append([]float64(nil), ts...))
		for _, t := range ts {
			all[nc+i] += t / float64(max(len(ts), 1))
		}
	}
	if err := m.maxOver(ctx, all); err != nil {
		return fmt.Errorf("host: agreeing on the tuning of %d-byte %vs: %w", size, k, err)
	}
	times, means := all[:nc], all[nc:]
	took := make([]time.Duration, len(times))
	var why []string
	for i, t := range times {
		took[i] = time.Duration(t * float64(time.Second))
		why = append(why, fmt.Sprintf("%s %v (model %v)", rail.Words(tr.cands[i]),
			took[i].Round(time.Microsecond), tr.cands[i].Predicted.Round(time.Microsecond)))
	}
	win := rail.Choose(m.Objective, tr.cands, took, splitMargin)
	chosen := tr.cands[win].Scale(int64(size), railsAlign)
	chosen.Predicted = time.Duration(means[win] * float64(time.Second))
	m.mu.Lock()
	key := trialKey{k, rail.Band(int64(size))}
	if m.trials[key] != tr { // forgotten by a Calibrate meanwhile
		m.mu.Unlock()
		return nil
	}
	tab := m.tables[k].Load().Pin(int64(size), chosen, strings.Join(why, ", "))
	m.tables[k].Store(tab)
	delete(m.trials, key)
	m.mu.Unlock()
	m.saveTable(k, tab)
	return nil
}

// Tune runs collectives of kind k and each size (on scratch buffers,
// float32 sums, root 0) until the tuning of its band has decided it, as a
// job's first collectives would; every rank must call it with the same
// kind and sizes.
func (m *MultiRail) Tune(ctx context.Context, k coll.Kind, sizes ...int) error {
	p, unit := m.Host.Size(), 4*m.Host.Size()
	most := unit
	for _, n := range sizes {
		most = max(most, n)
	}
	sn, rn := k.Sizes(most, p)
	send, recv := make([]byte, sn), make([]byte, rn) // one pair for every size
	for _, n := range sizes {
		n = max(n, unit) / unit * unit
		if k == coll.KindBarrier {
			break // nothing to tune: α decides (PlanFor)
		}
		sn, rn := k.Sizes(n, p)
		for i := 0; !m.Tuned(k, n); i++ {
			if i > 16*tuneRounds {
				return fmt.Errorf("host: tuning %d-byte %vs did not settle", n, k)
			}
			if err := m.Run(ctx, k, send[:sn], recv[:rn], coll.Float32, coll.Sum, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// storedTables is TableFile's content: tables by entry (tableKey).
type storedTables map[string]rail.Saved

// tableKey is kind k's entry in TableFile: the topology, the kind, the
// objective and the rank count.
func (m *MultiRail) tableKey(k coll.Kind) string {
	return fmt.Sprintf("%s|ranks=%d|%v|objective=%v", m.Topology, m.Host.Size(), k, m.Objective)
}

// loadTable has every rank take rank 0's kept table for kind k (nil: none
// kept, or none that loads): rank 0 reads TableFile and broadcasts what
// it found, its length first. Every rank runs it, whether or not its own
// MultiRail names a file, so that ranks configured apart still make the
// same collectives.
func (m *MultiRail) loadTable(ctx context.Context, k coll.Kind) (*rail.Table, error) {
	var msg []byte
	if m.Host.Rank() == 0 && m.TableFile != "" && m.Topology != "" && !m.Fresh {
		if s, ok := readTables(m.TableFile)[m.tableKey(k)]; ok {
			if _, err := rail.Load(s); err == nil {
				msg, _ = json.Marshal(s) // loaded: plain values
			}
		}
	}
	n := make([]byte, 8)
	binary.LittleEndian.PutUint64(n, uint64(len(msg)))
	if err := m.Host.Broadcast(ctx, n, coll.Int64, 0); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n)
	if size == 0 {
		return nil, nil
	}
	if size > 1<<20 {
		return nil, fmt.Errorf("host: rank 0's kept %v table of %d bytes", k, size)
	}
	if m.Host.Rank() != 0 {
		msg = make([]byte, size)
	}
	if err := m.Host.Broadcast(ctx, msg, coll.Uint8, 0); err != nil {
		return nil, err
	}
	var s rail.Saved
	if err := json.Unmarshal(msg, &s); err != nil {
		return nil, fmt.Errorf("host: rank 0's kept %v table: %w", k, err)
	}
	return rail.Load(s) // rank 0 loaded it: every rank does
}

// saveTable keeps kind k's table in TableFile (rank 0's): failing to
// keep it costs a measurement next time, nothing else.
func (m *MultiRail) saveTable(k coll.Kind, t *rail.Table) {
	if m.Host.Rank() != 0 || m.TableFile == "" || m.Topology == "" {
		return
	}
	all := readTables(m.TableFile)
	all[m.tableKey(k)] = t.Save()
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return
	}
	os.MkdirAll(filepath.Dir(m.TableFile), 0o755) //nolint:errcheck // WriteFile says
	durable.WriteFile(m.TableFile, b, 0o644)      //nolint:errcheck // measured again next time
}

// readTables reads a table file; a missing or damaged one is empty.
func readTables(path string) storedTables {
	all := storedTables{}
	if b, err := os.ReadFile(path); err == nil {
		json.Unmarshal(b, &all) //nolint:errcheck // a damaged file is measured over
	}
	return all
}
