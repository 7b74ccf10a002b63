package rail

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Saved is a table as a file keeps it: the rails' models and what the
// table was made with, and each band that tuning decided, so that a job
// of the same topology starts where the last one ended instead of
// measuring again.
type Saved struct {
	Rails     []SavedRail `json:"rails"`
	Align     int64       `json:"align"`
	MinGain   float64     `json:"min_gain"`
	Cost      float64     `json:"cost"`
	Objective string      `json:"objective"`
	Tuned     []SavedBand `json:"tuned,omitempty"`
}

// SavedRail is one rail's model.
type SavedRail struct {
	Name    string  `json:"name"`
	Kind    string  `json:"kind"`
	AlphaNS int64   `json:"alpha_ns"`
	Rate    float64 `json:"rate_bytes_per_s"`
}

// SavedBand is a band tuning decided: the plan it measured fastest, at
// the size it measured, and what it measured.
type SavedBand struct {
	Size       int64        `json:"size"`
	Shares     []SavedShare `json:"shares"`
	MeasuredNS int64        `json:"measured_ns"`
	Why        string       `json:"why"`
}

// SavedShare is one rail's bytes of a tuned plan.
type SavedShare struct {
	Rail  string `json:"rail"`
	Bytes int64  `json:"bytes"`
}

// Save is t as a file keeps it.
func (t *Table) Save() Saved {
	s := Saved{Align: t.align, MinGain: t.minGain, Cost: t.cost, Objective: t.obj.String()}
	for _, r := range t.rails {
		s.Rails = append(s.Rails, SavedRail{Name: r.Name, Kind: r.Kind.String(), AlphaNS: int64(r.Alpha), Rate: r.Rate})
	}
	for k := range t.bands {
		b := &t.bands[k]
		if b.pinned == "" {
			continue
		}
		sb := SavedBand{Size: b.plan.Size, MeasuredNS: int64(b.measured()), Why: b.pinned}
		for _, sh := range b.plan.Shares {
			sb.Shares = append(sb.Shares, SavedShare{Rail: sh.Rail, Bytes: sh.Bytes})
		}
		s.Tuned = append(s.Tuned, sb)
	}
	return s
}

// ErrSaved is returned for a saved table that no table gives.
var ErrSaved = errors.New("rail: saved table")

// Load makes the table s keeps, checking everything in it: a file is
// read from disk, and a damaged one must be measured over, not obeyed.
func Load(s Saved) (*Table, error) {
	bad := func(f string, a ...any) (*Table, error) {
		return nil, fmt.Errorf("%w: %s", ErrSaved, fmt.Sprintf(f, a...))
	}
	obj, err := ParseObjective(s.Objective)
	if err != nil {
		return bad("%v", err)
	}
	if len(s.Rails) == 0 || len(s.Rails) > 16 {
		return bad("%d rails", len(s.Rails))
	}
	if !(s.Cost >= 1) || math.IsInf(s.Cost, 0) || !(s.MinGain >= 0) || s.MinGain > NoSplit || s.Align < 1 || s.Align > 1<<20 {
		return bad("cost %v, least gain %v, align %d", s.Cost, s.MinGain, s.Align)
	}
	rails := make([]Rail, len(s.Rails))
	for i, r := range s.Rails {
		k, ok := kindNamed(r.Kind)
		if r.Name == "" || !ok || r.AlphaNS < 0 || !(r.Rate > 0) || math.IsInf(r.Rate, 0) {
			return bad("rail %q (%s): α %d ns, rate %v", r.Name, r.Kind, r.AlphaNS, r.Rate)
		}
		rails[i] = Rail{Name: r.Name, Kind: k, Alpha: time.Duration(r.AlphaNS), Rate: r.Rate}
	}
	t := NewTable(rails, s.Align, s.MinGain, s.Cost, obj)
	for _, b := range s.Tuned {
		p := Plan{Size: b.Size, Predicted: time.Duration(b.MeasuredNS)}
		var sum int64
		for _, sh := range b.Shares {
			r := t.railNamed(sh.Rail)
			if r.Name == "" || sh.Bytes <= 0 || sh.Bytes > b.Size-sum {
				return bad("band of %d bytes: share of %d bytes on %q", b.Size, sh.Bytes, sh.Rail)
			}
			p.Shares = append(p.Shares, Share{Rail: r.Name, Kind: r.Kind, Offset: sum, Bytes: sh.Bytes})
			sum += sh.Bytes
		}
		if b.Size <= 0 || sum != b.Size || b.MeasuredNS <= 0 || (len(p.Shares) > 1 && s.MinGain >= NoSplit) {
			return bad("band of %d bytes: shares of %d bytes, measured %d ns", b.Size, sum, b.MeasuredNS)
		}
		p.BestOne = t.bands[bandOf(b.Size)].plan.BestOne
		t = t.Pin(b.Size, p, b.Why)
	}
	return t, nil
}

// kindNamed is the Kind whose String is s.
func kindNamed(s string) (Kind, bool) {
	for k := HostCPU; k <= NetworkPath; k++ {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}
