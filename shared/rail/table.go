package rail

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// Table is the planner's decision for every size, made once from the
// rails' models so that an operation's call pays a lookup and nothing
// else: no timing, no solving. Sizes fall in bands of a power of two
// ((2^(k-1), 2^k] bytes); each band holds the plan SplitIfGain makes at
// the band's middle (2^(k-½) bytes), with the measured cost of running
// the rails at once — where they share cores or memory bandwidth that
// cost eats the split's gain, and the band runs on its best rail alone.
type Table struct {
	rails   []Rail
	align   int64
	minGain float64
	cost    float64
	obj     Objective
	bands   [maxBand + 1]band
}

// NoSplit is the least gain that keeps every band on one rail: a split
// never gains all of the best rail's time. It is for operations whose
// buffers do not cut into one range per rail (an allgather's blocks).
const NoSplit = 1.0

// Objective is what a plan is chosen for.
type Objective int

const (
	// Time: the fastest plan.
	Time Objective = iota
	// HostCPUTime: the plan that leaves the host's cores the most free
	// (the least on HostCPU rails) among those within ObjectiveSlack of
	// the fastest — often the point of a DPU.
	HostCPUTime
)

// ObjectiveSlack is how much slower than the fastest plan HostCPUTime
// accepts.
const ObjectiveSlack = 1.1

func (o Objective) String() string {
	if o == HostCPUTime {
		return "host-cpu"
	}
	return "time"
}

// ParseObjective parses an --objective flag: time or host-cpu.
func ParseObjective(s string) (Objective, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "time":
		return Time, nil
	case "host-cpu":
		return HostCPUTime, nil
	}
	return Time, fmt.Errorf("rail: objective %q (want time or host-cpu)", s)
}

// Choose is the index of the plan among plans (with times, measured or
// predicted, in the same order) that objective o picks; a split pays
// margin (0.05: 5 %) over a single rail, the plan whose time varies most.
func Choose(o Objective, plans []Plan, times []time.Duration, margin float64) int {
	score := func(i int) float64 {
		if len(plans[i].Shares) > 1 {
			return float64(times[i]) * (1 + margin)
		}
		return float64(times[i])
	}
	win := 0
	for i := range plans {
		if score(i) < score(win) {
			win = i
		}
	}
	if o != HostCPUTime {
		return win
	}
	for i := range plans {
		if score(i) <= ObjectiveSlack*score(win) && hostBytes(plans[i]) < hostBytes(plans[win]) {
			win = i
		}
	}
	return win
}

// hostBytes is the part of p on HostCPU rails.
func hostBytes(p Plan) int64 {
	var n int64
	for _, s := range p.Shares {
		if s.Kind == HostCPU {
			n += s.Bytes
		}
	}
	return n
}

// maxBand is the largest band: sizes above 2^maxBand use it.
const maxBand = 40

// band is a size band's decision: the plan at the band's middle (one
// rail alone, or a split whose proportions every size of the band takes).
type band struct {
	plan   Plan
	pinned string // set by Pin: the measurements that chose it
}

// measured is what a pinned band's plan measured at its size (Pin takes
// the plan's Predicted as that), 0 where the model decided.
func (b *band) measured() time.Duration {
	if b.pinned == "" {
		return 0
	}
	return b.plan.Predicted
}

// NewTable decides every band from rails (each with its α and rate),
// shares aligned to align bytes, a split kept only where it gains at
// least minGain over the best single rail once its model time is
// multiplied by cost (≥ 1: measured time of the rails run at once over
// the model's prediction for it).
// With objective HostCPUTime, a band runs on the plan that uses the host
// least among those within ObjectiveSlack of the fastest.
func NewTable(rails []Rail, align int64, minGain, cost float64, objective Objective) *Table {
	t := &Table{rails: append([]Rail(nil), rails...), align: max(align, 1), minGain: minGain, cost: max(cost, 1), obj: objective}
	for k := range t.bands {
		mid := max(int64(math.Round(math.Exp2(float64(k)-0.5))), 1)
		p := SplitIfGain(t.rails, mid, 1, minGain, t.cost)
		if objective == HostCPUTime {
			p = LeastHostCPU(p, t.rails, mid)
		}
		t.bands[k].plan = p
	}
	return t
}

// LeastHostCPU is, of plan and each rail alone, the one HostCPUTime
// picks for size bytes: the least on the host among those the model puts
// within ObjectiveSlack of the fastest.
func LeastHostCPU(plan Plan, rails []Rail, size int64) Plan {
	plans, times := []Plan{plan}, []time.Duration{plan.Predicted}
	for _, r := range rails {
		if r.Rate > 0 {
			plans, times = append(plans, onOne(r, size, r.Time(size), "")), append(times, r.Time(size))
		}
	}
	return plans[Choose(HostCPUTime, plans, times, 0)]
}

// Objective is what the table's plans were chosen for.
func (t *Table) Objective() Objective { return t.obj }

// Band is the index of size's band: sizes of one band share a decision.
func Band(size int64) int { return bandOf(size) }

// bandOf is the band of size bytes.
func bandOf(size int64) int {
	if size <= 1 {
		return 0
	}
	return min(bits.Len64(uint64(size-1)), maxBand)
}

// Cost is the measured cost of running the rails at once the table was
// made with.
func (t *Table) Cost() float64 { return t.cost }

// Lookup is the plan for size bytes: its band's rail alone, or its band's
// split scaled to size (Plan.Scale). Predicted times are the rails'
// models', a split's times its measured cost; in a band tuning pinned,
// what the plan measured at the band's size, scaled to size as the model
// scales.
func (t *Table) Lookup(size int64) Plan {
	b := &t.bands[bandOf(size)]
	p := b.plan.Scale(size, t.align)
	t.predict(&p)
	if m := b.measured(); m > 0 {
		at := b.plan.Scale(b.plan.Size, t.align)
		if model := t.predict(&at); model > 0 {
			f := float64(m) / float64(model)
			for i := range p.Shares {
				p.Shares[i].Predicted = time.Duration(float64(p.Shares[i].Predicted) * f)
			}
			p.Predicted = time.Duration(float64(p.Predicted) * f)
		}
	}
	if p.BestOne != "" {
		p.BestTime = t.railNamed(p.BestOne).Time(size)
	}
	return p
}

// predict sets p's times by the rails' models (a split's times its
// measured cost) and returns the plan's.
func (t *Table) predict(p *Plan) time.Duration {
	p.Predicted = 0
	for i := range p.Shares {
		s := &p.Shares[i]
		s.Predicted = t.railNamed(s.Rail).Time(s.Bytes)
		if len(p.Shares) > 1 {
			s.Predicted = time.Duration(float64(s.Predicted) * t.cost)
		}
		p.Predicted = max(p.Predicted, s.Predicted)
	}
	return p.Predicted
}

// railNamed is the table's rail of that name (a zero Rail: none).
func (t *Table) railNamed(name string) Rail {
	for _, r := range t.rails {
		if r.Name == name {
			return r
		}
	}
	return Rail{}
}

// Candidates are the plans worth trying for size bytes, because the
// model cannot tell them apart well enough: the band's decision first,
// then each rail alone and the split of all of them (as Split makes it,
// at the table's cost, unless the table never splits), where the model
// puts them within margin (1.5: 50 %) of the best of them.
func (t *Table) Candidates(size int64, margin float64) []Plan {
	first := t.Lookup(size)
	all := []Plan{first}
	for _, r := range t.rails {
		if r.Rate > 0 {
			all = append(all, onOne(r, size, r.Time(size), ""))
		}
	}
	if sp := Split(t.rails, size, t.align); len(sp.Shares) > 1 && t.minGain < NoSplit {
		sp.Predicted = time.Duration(float64(sp.Predicted) * t.cost)
		all = append(all, sp)
	}
	best := first.Predicted
	for _, p := range all {
		if p.Predicted > 0 && (best == 0 || p.Predicted < best) {
			best = p.Predicted
		}
	}
	out := all[:1]
	for _, p := range all[1:] {
		if float64(p.Predicted) <= margin*float64(best) && !slices.ContainsFunc(out, func(q Plan) bool { return sameShares(p, q) }) {
			out = append(out, p)
		}
	}
	return out
}

// sameShares says whether a and b give the same rails the same bytes.
func sameShares(a, b Plan) bool {
	return slices.EqualFunc(a.Shares, b.Shares, func(x, y Share) bool { return x.Rail == y.Rail && x.Bytes == y.Bytes })
}

// Pin returns a copy of t whose band of size runs as p does (its rails,
// in its proportions), with why (the measurements behind it) for Explain;
// p.Predicted is what p measured at p.Size, which Lookup scales.
func (t *Table) Pin(size int64, p Plan, why string) *Table {
	c := *t
	c.bands[bandOf(size)] = band{plan: p, pinned: why}
	return &c
}

// Pinned says whether size's band was decided by measurement (Pin).
func (t *Table) Pinned(size int64) bool { return t.bands[bandOf(size)].pinned != "" }

// Scale is p for size bytes: each share the same fraction of it, aligned
// to align bytes, the last taking the rest.
func (p Plan) Scale(size, align int64) Plan {
	align = max(align, 1)
	out := Plan{Size: size, BestOne: p.BestOne, Shares: make([]Share, 0, len(p.Shares))}
	var off int64
	for i, s := range p.Shares {
		n := int64(float64(s.Bytes)/float64(max(p.Size, 1))*float64(size)) / align * align
		if i == len(p.Shares)-1 || off+n > size {
			n = size - off
		}
		if n <= 0 {
			continue
		}
		s.Offset, s.Bytes = off, n
		out.Shares = append(out.Shares, s)
		off += n
	}
	return out
}

// Explain is one line per run of bands with the same decision: the sizes,
// where they run, and the model's times behind the choice.
func (t *Table) Explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rails run at once cost %.2f× their model; objective %v\n", t.cost, t.obj)
	first := 0 // the first band of the run of bands alike
	for k := 0; k <= maxBand; k++ {
		if k < maxBand && sameDecision(&t.bands[k], &t.bands[k+1]) {
			continue
		}
		sizes := fmt.Sprintf("(%s, %s]", Bytes(int64(1)<<max(first-1, 0)), Bytes(int64(1)<<k))
		switch {
		case first == 0:
			sizes = "≤ " + Bytes(int64(1)<<k)
		case k == maxBand:
			sizes = "> " + Bytes(int64(1)<<(first-1))
		}
		what := "nothing to run on"
		if p := t.bands[k].plan; len(p.Shares) > 0 {
			what = Words(p)
		}
		// The model's times where the run starts: at the middle of its
		// first band.
		at := t.bands[first].plan.Size
		fmt.Fprintf(&b, "  %s: %s (model at %s:", sizes, what, Bytes(at))
		for i, r := range t.rails {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s %s %v", sep, r.Name, r.Time(at).Round(time.Microsecond))
		}
		b.WriteString(")")
		if pin := t.bands[k].pinned; pin != "" {
			fmt.Fprintf(&b, "; measured at %s: %s", Bytes(t.bands[k].plan.Size), pin)
		}
		b.WriteString("\n")
		first = k + 1
	}
	return b.String()
}

func sameDecision(a, b *band) bool {
	// Splits differ by size: each band its own line.
	if a.pinned != "" || b.pinned != "" || len(a.plan.Shares) != len(b.plan.Shares) || len(a.plan.Shares) > 1 {
		return false
	}
	return len(a.plan.Shares) == 0 || a.plan.Shares[0].Rail == b.plan.Shares[0].Rail
}

// Words says a plan's shares in words: "host alone", "host 46%, dpu 54%".
func Words(p Plan) string {
	switch len(p.Shares) {
	case 0:
		return p.BestOne + " alone"
	case 1:
		return p.Shares[0].Rail + " alone"
	}
	var w []string
	for _, s := range p.Shares {
		w = append(w, fmt.Sprintf("%s %.0f%%", s.Rail, 100*float64(s.Bytes)/float64(max(p.Size, 1))))
	}
	return strings.Join(w, ", ")
}

// Bytes is n in the largest binary unit that keeps it whole or above 1
// (B, KiB, MiB, GiB, TiB).
func Bytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, u := float64(n), 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if f == math.Trunc(f) {
		return fmt.Sprintf("%d %s", int64(f), units[u])
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}
