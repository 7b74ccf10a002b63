package rail

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is what a rail is.
type Kind int

const (
	HostCPU Kind = iota
	DPUCores
	XDP
	GPU
	NetworkPath
)

func (k Kind) String() string {
	switch k {
	case HostCPU:
		return "host-cpu"
	case DPUCores:
		return "dpu-cores"
	case XDP:
		return "xdp"
	case GPU:
		return "gpu"
	case NetworkPath:
		return "network"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Rail is a place that can take a share of an operation, with its cost
// model.
type Rail struct {
	Name       string
	Kind       Kind
	Alpha      time.Duration // fixed cost of one operation on this rail
	Rate       float64       // bytes per second once started (1/β)
	Confidence float64       // 0..1: how much the estimate is trusted (informational)
}

// Time returns the model's time for n bytes on r.
func (r Rail) Time(n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return r.Alpha + time.Duration(float64(n)/r.Rate*float64(time.Second))
}

// Share is one rail's part of a plan.
type Share struct {
	Rail      string
	Kind      Kind
	Offset    int64
	Bytes     int64
	Predicted time.Duration
}

// Plan is how an operation of Size bytes is split.
type Plan struct {
	Size      int64
	Shares    []Share
	Predicted time.Duration // when the last share finishes, under the model
	BestOne   string        // the best single rail
	BestTime  time.Duration // its time alone
	Dropped   []string      // rails left out, with why
}

// Explain says what the plan does and why, in one line per rail.
func (p Plan) Explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d bytes in %v (best single rail %s: %v)\n", p.Size, p.Predicted.Round(time.Microsecond), p.BestOne, p.BestTime.Round(time.Microsecond))
	for _, s := range p.Shares {
		fmt.Fprintf(&b, "  %-12s %5.1f%%  %d bytes  ends at %v\n", s.Rail, 100*float64(s.Bytes)/float64(max(p.Size, 1)), s.Bytes, s.Predicted.Round(time.Microsecond))
	}
	for _, d := range p.Dropped {
		fmt.Fprintf(&b, "  dropped %s\n", d)
	}
	return b.String()
}

// Split returns the plan that makes every rail used finish together for an
// operation of size bytes, with shares rounded to multiples of align (0 or
// 1: bytes). Rails with a non-positive rate are dropped.
func Split(rails []Rail, size int64, align int64) Plan {
	p := Plan{Size: size}
	if align < 1 {
		align = 1
	}
	var usable []Rail
	for _, r := range rails {
		if r.Rate <= 0 || math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || r.Alpha < 0 {
			p.Dropped = append(p.Dropped, fmt.Sprintf("%s: no usable rate", r.Name))
			continue
		}
		usable = append(usable, r)
		if t := r.Time(size); p.BestOne == "" || t < p.BestTime {
			p.BestOne, p.BestTime = r.Name, t
		}
	}
	if len(usable) == 0 || size <= 0 {
		return p
	}
	sort.SliceStable(usable, func(i, j int) bool { return usable[i].Alpha < usable[j].Alpha })
	// Water-filling: take rails in order of fixed cost while the next
	// one's α is below the common finishing time of those taken.
	var sumRate, sumRateAlpha, t float64
	k := 0
	for k < len(usable) {
		r := usable[k]
		a := r.Alpha.Seconds()
		if k > 0 && a >= t {
			break
		}
		sumRate += r.Rate
		sumRateAlpha += r.Rate * a
		t = (float64(size) + sumRateAlpha) / sumRate
		k++
	}
	for _, r := range usable[k:] {
		p.Dropped = append(p.Dropped, fmt.Sprintf("%s: fixed cost %v does not pay before %v", r.Name, r.Alpha, time.Duration(t*1e9).Round(time.Microsecond)))
	}
	// Shares b_i = r_i (t - α_i), aligned; the last rail takes the rest.
	used := usable[:k]
	var off int64
	for i, r := range used {
		b := int64(r.Rate * (t - r.Alpha.Seconds()))
		b = b / align * align
		if i == len(used)-1 || off+b > size {
			b = size - off
		}
		if b <= 0 {
			p.Dropped = append(p.Dropped, fmt.Sprintf("%s: share rounds to nothing", r.Name))
			continue
		}
		s := Share{Rail: r.Name, Kind: r.Kind, Offset: off, Bytes: b, Predicted: r.Time(b)}
		p.Shares = append(p.Shares, s)
		p.Predicted = max(p.Predicted, s.Predicted)
		off += b
	}
	return p
}

// Estimator keeps a rail's model fresh from observed completions: the
// rate is the median of the latest observed rates (the calibration
// counting as the first), so that ops an outside cause slowed — the first
// after an idle spell, on a cold cache and a core that had clocked down;
// one a collection or a preemption stretched — do not drag the model below
// what the rail's ops take, as they did in a moving average, while a rail
// that really slowed down is followed within half the window.
type Estimator struct {
	mu     sync.Mutex
	rail   Rail
	recent []float64 // the latest rates, oldest first
	sorted []float64 // scratch for the median
	window int
	n      int
}

// NewEstimator starts from a calibrated rail; weight (0..1, default 0.2)
// is how fast observations move the rate, as a moving average's weight:
// the median is taken over the latest 2/weight − 1 observations (9 for
// 0.2), the span of such an average.
func NewEstimator(r Rail, weight float64) *Estimator {
	if weight <= 0 || weight > 1 {
		weight = 0.2
	}
	window := max(1, int(2/weight)-1)
	recent := make([]float64, 0, window)
	if r.Rate > 0 {
		recent = append(recent, r.Rate)
	}
	return &Estimator{rail: r, recent: recent, sorted: make([]float64, 0, window), window: window}
}

// Observe records that n bytes took d on the rail: the rate net of the
// fixed cost joins the window the median is taken over.
func (e *Estimator) Observe(n int64, d time.Duration) {
	if n <= 0 || d <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	net := d - e.rail.Alpha
	if net <= 0 {
		net = d / 2 // faster than the fixed cost says: trust half
	}
	if len(e.recent) == e.window {
		e.recent = append(e.recent[:0], e.recent[1:]...)
	}
	e.recent = append(e.recent, float64(n)/net.Seconds())
	e.sorted = append(e.sorted[:0], e.recent...)
	e.rail.Rate = Median(e.sorted)
	e.n++
	e.rail.Confidence = 1 - 1/float64(e.n+1)
}

// Median is the middle of s (the mean of the middle two for an even
// count); it sorts s.
func Median(s []float64) float64 {
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Rail returns the current model.
func (e *Estimator) Rail() Rail {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rail
}

// SplitIfGain is Split for an operation that may as well run on one rail:
// the plan's split time is the model's times cost (≥ 1: what running the
// rails at once has cost so far over their model — rails that stream the
// same memory slow each other, which no single rail's model sees), and
// when that gains less than minGain (0.10: 10 %) over the best single
// rail, the plan runs on that rail alone and Dropped says why. Rails far
// apart, the common case, are planned without Split's work.
func SplitIfGain(rails []Rail, size, align int64, minGain, cost float64) Plan {
	cost = max(cost, 1e-9)
	// The ideal split: every usable rail finishing together, nothing
	// rounded. When even that does not gain enough, no split will.
	var best Rail
	var bestT time.Duration
	var sumR, sumRA float64
	for _, r := range rails {
		if r.Rate <= 0 || math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || r.Alpha < 0 {
			return splitIfGain(rails, size, align, minGain, cost)
		}
		if t := r.Time(size); bestT == 0 || t < bestT {
			best, bestT = r, t
		}
		sumR += r.Rate
		sumRA += r.Rate * r.Alpha.Seconds()
	}
	if size <= 0 || bestT == 0 {
		return Split(rails, size, align)
	}
	if ideal := (float64(size) + sumRA) / sumR * cost; 1-ideal/bestT.Seconds() < minGain {
		return onOne(best, size, bestT, noSplitPays)
	}
	return splitIfGain(rails, size, align, minGain, cost)
}

// noSplitPays is why SplitIfGain ran an operation on one rail without
// planning a split (the figures are in the plan: BestTime, and the rails).
const noSplitPays = "split: even all rails finishing together would not gain enough over the best alone"

func splitIfGain(rails []Rail, size, align int64, minGain, cost float64) Plan {
	p := Split(rails, size, align)
	if len(p.Shares) < 2 {
		return p
	}
	p.Predicted = time.Duration(float64(p.Predicted) * cost)
	gain := 1 - p.Predicted.Seconds()/p.BestTime.Seconds()
	if gain >= minGain {
		return p
	}
	why := fmt.Sprintf("split: would gain %.0f%% over %s alone, less than the %.0f%% the model's error can take away", 100*gain, p.BestOne, 100*minGain)
	if cost > 1.05 {
		why += fmt.Sprintf(" (splits have taken %.2f× their model's time)", cost)
	}
	for _, r := range rails {
		if r.Name == p.BestOne {
			return onOne(r, size, p.BestTime, why)
		}
	}
	return p
}

// onOne is the plan that runs size bytes on r alone in t.
func onOne(r Rail, size int64, t time.Duration, why string) Plan {
	return Plan{Size: size, BestOne: r.Name, BestTime: t, Predicted: t,
		Shares: []Share{{Rail: r.Name, Kind: r.Kind, Bytes: size, Predicted: t}}, Dropped: []string{why}}
}
