package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/mono"
	"github.com/hecsys/hec/shared/rail"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// Rail names used by the multi-rail operations (shared/rail's).
const (
	RailHost = rail.Host
	RailDPU  = rail.DPU
)

// CalibrateChecksum measures, now, the two checksum rails on data like
// sample — pass (a prefix of) the buffer to be checksummed: in the window
// it measures the agent's zero-copy path, elsewhere the staged one. The
// host rail is crc32c in this process on one core; the agent's fixed cost
// α comes from tiny ops, its rate from passes over sample net of α, for at
// least 100 ms each, moving through sample in 16 MiB pieces. nil sample:
// 16 MiB in the window.
func (c *Client) CalibrateChecksum(ctx context.Context, sample []byte) ([]rail.Rail, error) {
	if sample == nil {
		buf, err := c.Alloc(16 << 20)
		if err != nil {
			buf = make([]byte, 16<<20) // TCP, or a full window: staged, and measured as such
		} else {
			defer c.Free(buf)
		}
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		sample = buf
	}
	if len(sample) < 4096 {
		return nil, fmt.Errorf("host: calibrate on %d bytes: want at least 4 KiB: %w", len(sample), wire.StatusBadArg)
	}
	// Each rate over at least 100 ms: an agent under a CPU quota (a DPU
	// profile, a busy DPU) runs short bursts at full speed.
	const minTime = 100 * time.Millisecond
	// Passes move through sample in pieces: passes over one piece again
	// and again would measure a cache, not the memory an op reads.
	piece := min(len(sample), 16<<20)
	pieceAt := func(pass int) []byte {
		n := len(sample) / piece
		off := (pass % n) * piece
		return sample[off : off+piece]
	}
	hostRate, _ := rail.TimeRate(piece, minTime, func(pass int) error { crc32c.Checksum(pieceAt(pass)); return nil })
	alpha := time.Duration(1<<63 - 1)
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		if _, err := c.Checksum(ctx, sample[:64]); err != nil {
			return nil, fmt.Errorf("calibrate the agent rail: %w", err)
		}
		alpha = min(alpha, time.Since(t0))
	}
	agentRate, err := rail.TimeRate(piece, minTime, func(pass int) error { _, err := c.Checksum(ctx, pieceAt(pass)); return err })
	if err != nil {
		return nil, fmt.Errorf("calibrate the agent rail: %w", err)
	}
	agent := time.Duration(float64(piece) / agentRate * float64(time.Second))
	net := max(agent-alpha, time.Microsecond)
	return []rail.Rail{
		{Name: RailHost, Kind: rail.HostCPU, Rate: hostRate, Confidence: 0.5},
		{Name: RailDPU, Kind: rail.DPUCores, Alpha: alpha, Rate: float64(piece) / net.Seconds(), Confidence: 0.5},
	}, nil
}

// ChecksumSplit computes the CRC-32C of b with the planner's split across
// rails (RailHost computed here, RailDPU by the agent), all at once, and
// combines the parts exactly: the result equals a single-rail checksum.
func (c *Client) ChecksumSplit(ctx context.Context, b []byte, rails []rail.Rail) (uint32, rail.Plan, error) {
	crc, plan, _, err := c.checksumSplit(ctx, b, rails)
	return crc, plan, err
}

// checksumSplit is ChecksumSplit that also returns how long each share took.
func (c *Client) checksumSplit(ctx context.Context, b []byte, rails []rail.Rail) (uint32, rail.Plan, []time.Duration, error) {
	plan := rail.Split(rails, int64(len(b)), 4096)
	parts := make([]uint32, len(plan.Shares))
	at := func(off int64) *uint32 { // the part of the share at off
		i, _ := slices.BinarySearchFunc(plan.Shares, off, func(s rail.Share, off int64) int { return cmp.Compare(s.Offset, off) })
		return &parts[i]
	}
	runners := rail.Runners{RailHost: hostChecksum{c: c, b: b, at: at}}
	if c.t.InWindow(b) {
		// Submitted before the host share runs and waited for after it:
		// no goroutine of ours competes with the host share for its core.
		runners[RailDPU] = agentChecksum{c: c, b: b, at: at}
	} else {
		runners[RailDPU] = rail.RunnerFunc(func(ctx context.Context, off, n int64) (err error) {
			*at(off), err = c.Checksum(ctx, b[off:off+n])
			return err
		})
	}
	took := make([]time.Duration, len(plan.Shares))
	t0 := mono.Now()
	err := rail.ExecuteTo(ctx, plan, runners, t0, took)
	c.traceShares(wire.OpChecksum.String(), plan, t0, took)
	if errors.Is(err, rail.ErrNoRunner) {
		return 0, plan, nil, fmt.Errorf("host: checksum: %w: %w", err, wire.StatusUnsupported)
	}
	if err != nil {
		return 0, plan, nil, err
	}
	var crc uint32
	for i, s := range plan.Shares {
		if i == 0 {
			crc = parts[0]
			continue
		}
		crc = crc32c.Combine(crc, parts[i], s.Bytes)
	}
	return crc, plan, took, nil
}

// traceShares records, while this process records, the shares of a
// multi-rail op of kind name that plan split and that began at t0: each
// share from t0 to its end (took, 0 where it failed) beside the planner's
// time for it, under one id.
func (c *Client) traceShares(name string, plan rail.Plan, t0 time.Time, took []time.Duration) {
	if len(plan.Shares) < 2 || !c.tr.On() {
		return
	}
	id := trace.SplitID(os.Getpid(), c.splits.Add(1))
	for i, s := range plan.Shares {
		sp := trace.Span{ID: id, Name: name, Stage: trace.StageShare, Start: t0.UnixNano(), Dur: int64(took[i]),
			Bytes: s.Bytes, Peer: s.Rail, Predicted: int64(s.Predicted)}
		if took[i] == 0 {
			sp.Status = "failed"
		}
		c.tr.Add(sp)
	}
}

// hostChecksum is the host rail's checksum runner: crc32c here, in
// pieces, looking for the agent's completions between them (rail.Piecewise).
type hostChecksum struct {
	c  *Client
	b  []byte
	at func(off int64) *uint32
}

// checksumPiece is how much the host checksums between looks at the
// agent's completions.
const checksumPiece = 2 << 20

func (h hostChecksum) Run(ctx context.Context, off, n int64) error {
	return h.RunPieces(ctx, off, n, func() {})
}

func (h hostChecksum) RunPieces(_ context.Context, off, n int64, between func()) error {
	poller, _ := h.c.t.(handoff.Poller)
	var crc uint32
	for p := off; p < off+n; p += checksumPiece {
		crc = crc32c.Update(crc, h.b[p:min(p+checksumPiece, off+n)])
		if poller != nil {
			poller.Poll()
		}
		between()
	}
	*h.at(off) = crc
	return nil
}

// agentChecksum is the DPU rail's checksum runner for a buffer in the
// window: one op each share, submitted (rail.Starter) and awaited.
type agentChecksum struct {
	c  *Client
	b  []byte
	at func(off int64) *uint32
}

func (a agentChecksum) Run(ctx context.Context, off, n int64) (err error) {
	*a.at(off), err = a.c.Checksum(ctx, a.b[off:off+n])
	return err
}

func (a agentChecksum) Start(ctx context.Context, off, n int64) (rail.Started, error) {
	call, err := a.c.Go(ctx, Request{Op: wire.OpChecksum, In: [][]byte{a.b[off : off+n]}})
	if err != nil {
		return nil, err
	}
	return agentCall{ctx: ctx, c: a.c, call: call, dst: a.at(off)}, nil
}

// agentCall is a submitted checksum share.
type agentCall struct {
	ctx  context.Context
	c    *Client
	call *Call
	dst  *uint32
}

func (a agentCall) Done() bool { return a.call.Done() }

func (a agentCall) Wait() error {
	r, err := a.c.Wait(a.ctx, a.call)
	*a.dst = uint32(r.Arg0)
	return err
}

// ChecksumModel is a multi-rail checksum whose model learns: each split's
// per-rail times refresh the rails' estimates (rail.Estimator), so a rail
// that turns out slower than calibrated — a DPU busy with other work, a
// CPU quota that a short calibration did not feel — gets less next time.
// It is safe for concurrent use.
type ChecksumModel struct {
	c   *Client
	est []*rail.Estimator
}

// NewChecksumModel starts a model from calibrated rails
// (CalibrateChecksum).
func (c *Client) NewChecksumModel(rails []rail.Rail) *ChecksumModel {
	m := &ChecksumModel{c: c}
	for _, r := range rails {
		m.est = append(m.est, rail.NewEstimator(r, 0.2))
	}
	return m
}

// Rails returns the current model.
func (m *ChecksumModel) Rails() []rail.Rail {
	out := make([]rail.Rail, len(m.est))
	for i, e := range m.est {
		out[i] = e.Rail()
	}
	return out
}

// Checksum splits b by the current model, checksums it like ChecksumSplit
// and feeds each share's time back into the model.
func (m *ChecksumModel) Checksum(ctx context.Context, b []byte) (uint32, rail.Plan, error) {
	crc, plan, took, err := m.c.checksumSplit(ctx, b, m.Rails())
	if err != nil {
		return crc, plan, err
	}
	for i, s := range plan.Shares {
		for _, e := range m.est {
			if e.Rail().Name == s.Rail {
				e.Observe(s.Bytes, took[i])
			}
		}
	}
	return crc, plan, nil
}

// Decision says how a one-shot multi-rail operation (ChecksumAuto) ran and
// why: the plan the calibrated model proposed, what was done instead or
// as well, and what that was predicted to take.
type Decision struct {
	Plan      rail.Plan     // the model's split of the whole buffer
	Choice    string        // "split", or the single rail that did the work (after a trial, the rest of it)
	Reason    string        // one sentence
	Predicted time.Duration // the time predicted for what was done
	Trial     int64         // bytes split as a trial before the choice (0: none)
	TrialTook time.Duration // the trial's time
	// Stolen is what of the agent's pieces the host checksummed itself:
	// it reached them before the agent had finished (a buffer in the
	// window: the host never waits for the agent).
	Stolen int64
}

// autoMinGain is the least gain over the best single rail, by the model,
// for which a one-shot operation splits at all: below it the model's own
// error (a calibration of a few hundred ms, rails that disturb each other
// when they run at once) can turn the split into a loss.
const autoMinGain = 0.10

// ChecksumAuto computes the CRC-32C of b once, with rails calibrated for
// this very buffer (CalibrateChecksum(ctx, b): the same placement, mapped
// or staged, and the same chunking), and never by a split the model cannot
// stand behind. With no split the model prefers, or one that gains less
// than autoMinGain, the best single rail does it all. Otherwise, for a
// buffer of 32 MiB or more, the first eighth (at most 32 MiB) is split as
// a trial, in the shape the rest would run: when it did not beat the best
// single rail's prediction for it by 5 %, one rail does the rest; when it
// did, the rest is split. Either way the rest is planned with each rail at
// the slower of its calibrated and trial rates. A buffer in the window
// goes another way (checksumSteal): the host never waits for the agent,
// and takes over a piece of the agent's it reaches unfinished, so the
// host alone is the worst case. The answer equals a single-rail checksum
// whatever is chosen.
func (c *Client) ChecksumAuto(ctx context.Context, b []byte, rails []rail.Rail) (uint32, Decision, error) {
	return c.ChecksumAutoFor(ctx, b, rails, rail.Time)
}

// ChecksumAutoFor is ChecksumAuto for objective o. With rail.HostCPUTime
// the plan is the one that leaves the host's cores the most free among
// those the model puts within rail.ObjectiveSlack of the fastest (the
// agent alone, where it is not much slower: the host then only waits);
// where that is the split, the split runs as ChecksumAuto runs it.
func (c *Client) ChecksumAutoFor(ctx context.Context, b []byte, rails []rail.Rail, o rail.Objective) (uint32, Decision, error) {
	n := int64(len(b))
	plan := rail.Split(rails, n, 4096)
	d := Decision{Plan: plan}
	if o == rail.HostCPUTime {
		if p := rail.LeastHostCPU(plan, rails, n); len(p.Shares) == 1 && len(plan.Shares) > 0 {
			d.Choice, d.Predicted = p.Shares[0].Rail, p.Predicted
			d.Reason = fmt.Sprintf("objective host-cpu: %s alone, predicted %v, leaves the host the most within %.1f× of the fastest plan (%v)",
				d.Choice, p.Predicted.Round(time.Microsecond), rail.ObjectiveSlack, min(plan.Predicted, plan.BestTime).Round(time.Microsecond))
			crc, err := c.checksumOn(ctx, d.Choice, b)
			return crc, d, err
		}
	}
	byName := map[string]rail.Rail{}
	for _, r := range rails {
		byName[r.Name] = r
	}
	single := func(name, reason string, from int64, pred time.Duration) (uint32, Decision, error) {
		d.Choice, d.Reason, d.Predicted = name, reason, pred
		crc, err := c.checksumOn(ctx, name, b[from:])
		return crc, d, err
	}
	if len(plan.Shares) < 2 {
		return single(plan.BestOne, fmt.Sprintf("the model puts all of it on %s", plan.BestOne), 0, plan.BestTime)
	}
	gain := 1 - plan.Predicted.Seconds()/plan.BestTime.Seconds()
	if gain < autoMinGain {
		return single(plan.BestOne, fmt.Sprintf("a split would gain %.0f%% over %s alone by the model, less than the %.0f%% its error can take away",
			100*gain, plan.BestOne, 100*autoMinGain), 0, plan.BestTime)
	}
	if n < 32<<20 {
		crc, p, _, err := c.checksumSplit(ctx, b, rails)
		d.Plan, d.Choice, d.Predicted = p, "split", p.Predicted
		d.Reason = fmt.Sprintf("the model gains %.0f%% over %s alone", 100*gain, plan.BestOne)
		return crc, d, err
	}
	trial := min(n/8, 32<<20) / 4096 * 4096
	if c.t.InWindow(b) {
		return c.checksumSteal(ctx, b, rails, trial, d)
	}
	t0 := time.Now()
	head, tp, took, err := c.checksumSplit(ctx, b[:trial], rails)
	d.Trial, d.TrialTook = trial, time.Since(t0)
	if err != nil {
		return 0, d, err
	}
	cautious := cautiousRates(rails, tp, took)
	bestTrial := byName[plan.BestOne].Time(trial)
	rest := b[trial:]
	var tail uint32
	if d.TrialTook.Seconds() > 0.95*bestTrial.Seconds() {
		// The split did not beat the best single rail: the rest goes to
		// the rail that is faster at those rates.
		one := rail.Split(cautious, int64(len(rest)), 4096)
		d.Choice, d.Predicted = one.BestOne, d.TrialTook+one.BestTime
		d.Reason = fmt.Sprintf("a split of the first %d MiB took %v, %s alone was predicted %v: %s, the faster at the slower of its calibrated and trial rates, does the rest",
			trial>>20, d.TrialTook.Round(time.Microsecond), plan.BestOne, bestTrial.Round(time.Microsecond), one.BestOne)
		if tail, err = c.checksumOn(ctx, one.BestOne, rest); err != nil {
			return 0, d, err
		}
	} else {
		var p rail.Plan
		tail, p, _, err = c.checksumSplit(ctx, rest, cautious)
		if err != nil {
			return 0, d, err
		}
		d.Choice, d.Predicted = "split", d.TrialTook+p.Predicted
		d.Reason = fmt.Sprintf("a split of the first %d MiB took %v against %v for %s alone: the rest is split, each rail at the slower of its calibrated and trial rates",
			trial>>20, d.TrialTook.Round(time.Microsecond), bestTrial.Round(time.Microsecond), plan.BestOne)
	}
	return crc32c.Combine(head, tail, int64(len(rest))), d, nil
}

// checksumSteal is ChecksumAuto for a buffer in the window. The host
// checksums it from the front, in pieces, and never waits for the agent;
// the agent gets pieces from the back: first its planned share of the
// trial's bytes, then, once that is done, its share of what is left
// between the two, planned with each rail at the slower of its calibrated
// and measured rates (none when that split would not gain autoMinGain).
// When the host reaches a piece the agent has not finished — an agent
// whose CPU quota ran out, or busy with other work — it checksums that
// piece itself and the agent's answer is not waited for. So the agent
// only ever takes work off the host, and the host alone is the worst
// case: no trial that loses, no split that waits.
func (c *Client) checksumSteal(ctx context.Context, b []byte, rails []rail.Rail, trial int64, d Decision) (uint32, Decision, error) {
	const piece = 2 << 20 // the host's, between looks at the agent's completion
	n := int64(len(b))
	poller, _ := c.t.(handoff.Poller)
	type part struct {
		off, n int64
		crc    uint32
	}
	var (
		lo, hi  = int64(0), n // the host has done [0, lo); the agent's pieces start at hi
		hostCRC uint32
		done    []part // the agent's finished pieces, back to front
		call    *Call  // the agent's piece in flight: [hi, hi+callN)
		callN   int64
		callT0  time.Time
		planned string // what the last plan said, for the reason
	)
	submit := func(size int64) error {
		if size = size / 4096 * 4096; size <= 0 || size > hi-lo {
			return nil
		}
		cl, err := c.Go(ctx, Request{Op: wire.OpChecksum, In: [][]byte{b[hi-size : hi]}})
		if err != nil {
			return err
		}
		call, callN, callT0, hi = cl, size, time.Now(), hi-size
		return nil
	}
	shareOf := func(p rail.Plan, name string) int64 {
		for _, s := range p.Shares {
			if s.Rail == name {
				return s.Bytes
			}
		}
		return 0
	}
	t0 := time.Now()
	tp := rail.Split(rails, trial, 4096)
	if err := submit(shareOf(tp, RailDPU)); err != nil {
		return 0, d, err
	}
	d.Trial, d.Predicted = trial, d.Plan.Predicted
	var agent int64 // what the agent's answers cover
	for {
		if err := ctx.Err(); err != nil {
			return 0, d, err
		}
		if call != nil && call.Done() {
			r, err := c.Wait(ctx, call)
			if err != nil {
				return 0, d, err
			}
			took, first := time.Since(callT0), len(done) == 0
			done = append(done, part{hi, callN, uint32(r.Arg0)})
			agent += callN
			call = nil
			if first {
				// The trial: the host's bytes so far and the agent's
				// piece, each over its time.
				d.TrialTook = time.Since(t0)
				seen := rail.Plan{Shares: []rail.Share{{Rail: RailHost, Bytes: lo}, {Rail: RailDPU, Bytes: callN}}}
				cautious := cautiousRates(rails, seen, []time.Duration{d.TrialTook, took})
				p := rail.SplitIfGain(cautious, hi-lo, 4096, autoMinGain, 1)
				d.Predicted = time.Since(t0) + p.Predicted
				planned = fmt.Sprintf("the agent's share of the first %d MiB took %v: the %d MiB left were planned at the slower of each rail's calibrated and measured rates: %s",
					trial>>20, took.Round(time.Microsecond), (hi-lo)>>20, rail.Words(p))
				if err := submit(shareOf(p, RailDPU)); err != nil {
					return 0, d, err
				}
			}
			continue
		}
		if lo < hi {
			end := min(lo+piece, hi)
			hostCRC = crc32c.Update(hostCRC, b[lo:end])
			lo = end
			if poller != nil {
				poller.Poll()
			}
			continue
		}
		if call != nil {
			// The host has reached the agent's piece in flight: it takes
			// it over rather than wait (the answer, when it comes, is
			// dropped with the call).
			hostCRC = crc32c.Update(hostCRC, b[hi:hi+callN])
			d.Stolen += callN
			lo, hi, call = hi+callN, hi+callN, nil
		}
		break
	}
	crc := hostCRC
	for i := len(done) - 1; i >= 0; i-- {
		if done[i].off != lo {
			return 0, d, fmt.Errorf("host: checksum: pieces do not meet at %d (%d): a bug", lo, done[i].off)
		}
		crc, lo = crc32c.Combine(crc, done[i].crc, done[i].n), lo+done[i].n
	}
	d.Choice = "split"
	if agent == 0 {
		d.Choice = RailHost
	}
	d.Reason = fmt.Sprintf("the host checksummed from the front, the agent from the back (%d MiB)", agent>>20)
	if planned != "" {
		d.Reason += "; " + planned
	}
	if d.Stolen > 0 {
		d.Reason += fmt.Sprintf("; the host took over %d MiB the agent had not finished when it got there", d.Stolen>>20)
	}
	return crc, d, nil
}

// cautiousRates returns the rails a trial split ran on (plan tp, each
// share's time in took), each at the slower of its calibrated rate and the
// rate the trial measured for it (its share's bytes over its time, net of
// the rail's fixed cost): what the rest of the operation is planned with.
// Either can flatter a rail: a model can claim what no rail does, and a
// short trial can run within a CPU quota's burst (a DPU profile's) that
// the whole would exhaust.
func cautiousRates(rails []rail.Rail, tp rail.Plan, took []time.Duration) []rail.Rail {
	out := make([]rail.Rail, 0, len(rails))
	for _, r := range rails {
		for i, s := range tp.Shares {
			if s.Rail == r.Name && took[i] > r.Alpha && s.Bytes > 0 {
				r.Rate = min(r.Rate, float64(s.Bytes)/(took[i]-r.Alpha).Seconds())
			}
		}
		out = append(out, r)
	}
	return out
}

// checksumOn computes the CRC-32C of b on one rail.
func (c *Client) checksumOn(ctx context.Context, name string, b []byte) (uint32, error) {
	switch name {
	case RailHost:
		return crc32c.Checksum(b), nil
	case RailDPU:
		return c.Checksum(ctx, b)
	}
	return 0, fmt.Errorf("host: checksum on rail %q: %w", name, wire.StatusUnsupported)
}
