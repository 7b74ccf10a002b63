package rail

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestSplitFinishesTogether(t *testing.T) {
	tests := []struct {
		name  string
		rails []Rail
		size  int64
		used  int
	}{
		{"equal rails", []Rail{{Name: "a", Rate: 1e9}, {Name: "b", Rate: 1e9}}, 1 << 30, 2},
		{"host 10x faster than dpu", []Rail{{Name: "host", Rate: 10e9, Alpha: time.Microsecond}, {Name: "dpu", Rate: 1e9, Alpha: 5 * time.Microsecond}}, 256 << 20, 2},
		{"fixed cost does not pay", []Rail{{Name: "host", Rate: 10e9}, {Name: "gpu", Rate: 100e9, Alpha: time.Second}}, 1 << 20, 1},
		{"dead rail", []Rail{{Name: "host", Rate: 1e9}, {Name: "broken", Rate: 0}}, 1 << 20, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Split(tt.rails, tt.size, 64)
			if len(p.Shares) != tt.used {
				t.Fatalf("%d rails used, want %d:\n%s", len(p.Shares), tt.used, p.Explain())
			}
			var sum int64
			for _, s := range p.Shares {
				sum += s.Bytes
				if d := math.Abs(float64(s.Predicted - p.Predicted)); len(p.Shares) > 1 && d > 0.01*float64(p.Predicted) {
					t.Errorf("share %s ends at %v, plan at %v", s.Rail, s.Predicted, p.Predicted)
				}
			}
			if sum != tt.size {
				t.Fatalf("shares add to %d, want %d", sum, tt.size)
			}
			if p.Predicted > p.BestTime {
				t.Fatalf("plan %v slower than best single rail %v", p.Predicted, p.BestTime)
			}
		})
	}
}

// TestSplitProperties: random rails and sizes — shares cover the size
// exactly, in order; the plan is never worse than the best single rail; all
// rails used end within 1% (plus alignment) of each other.
func TestSplitProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		n := 1 + rng.IntN(5)
		var rails []Rail
		for j := 0; j < n; j++ {
			rails = append(rails, Rail{Name: string(rune('a' + j)), Rate: 1e6 + rng.Float64()*2e10,
				Alpha: time.Duration(rng.IntN(2000)) * time.Microsecond})
		}
		size := int64(1 + rng.IntN(1<<30))
		p := Split(rails, size, 1)
		var off int64
		for _, s := range p.Shares {
			if s.Offset != off || s.Bytes <= 0 {
				t.Fatalf("case %d: gap or empty share: %+v", i, p.Shares)
			}
			off += s.Bytes
		}
		if off != size {
			t.Fatalf("case %d: covered %d of %d", i, off, size)
		}
		if p.Predicted > p.BestTime+time.Microsecond {
			t.Fatalf("case %d: plan %v worse than best single %v\n%s", i, p.Predicted, p.BestTime, p.Explain())
		}
		for _, s := range p.Shares {
			if len(p.Shares) > 1 && float64(p.Predicted-s.Predicted) > 0.01*float64(p.Predicted)+float64(2*time.Microsecond) {
				t.Fatalf("case %d: %s ends at %v, plan at %v\n%s", i, s.Rail, s.Predicted, p.Predicted, p.Explain())
			}
		}
	}
}

// TestSplitStableUnderNoise: 1% noise in the rates moves shares by little.
func TestSplitStableUnderNoise(t *testing.T) {
	base := []Rail{{Name: "host", Rate: 8e9, Alpha: 2 * time.Microsecond}, {Name: "dpu", Rate: 2e9, Alpha: 10 * time.Microsecond}}
	p0 := Split(base, 256<<20, 4096)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100; i++ {
		noisy := append([]Rail(nil), base...)
		for j := range noisy {
			noisy[j].Rate *= 1 + (rng.Float64()-0.5)*0.02
		}
		p := Split(noisy, 256<<20, 4096)
		for j := range p.Shares {
			if d := math.Abs(float64(p.Shares[j].Bytes-p0.Shares[j].Bytes)) / float64(p0.Size); d > 0.02 {
				t.Fatalf("1%% noise moved %s's share by %.1f%% of the size", p.Shares[j].Rail, 100*d)
			}
		}
	}
}

// TestEstimatorShiftsWork: a rail observed slowing down gets less work.
func TestEstimatorShiftsWork(t *testing.T) {
	host := Rail{Name: "host", Rate: 4e9}
	dpu := NewEstimator(Rail{Name: "dpu", Kind: DPUCores, Rate: 4e9, Alpha: 5 * time.Microsecond}, 0.3)
	before := Split([]Rail{host, dpu.Rail()}, 1<<30, 1).Shares[1].Bytes
	for i := 0; i < 20; i++ { // the DPU got busy: a quarter of its rate
		dpu.Observe(1<<20, 5*time.Microsecond+time.Duration(float64(1<<20)/1e9*1e9))
	}
	after := Split([]Rail{host, dpu.Rail()}, 1<<30, 1)
	if got := after.Shares[1].Bytes; got >= before*6/10 {
		t.Fatalf("busy dpu share %d, was %d:\n%s", got, before, after.Explain())
	}
	if c := dpu.Rail().Confidence; c <= 0.9 {
		t.Fatalf("confidence %v after 20 observations", c)
	}
}

// TestEstimatorMedian: the model is what most recent ops take. Ops slowed
// by something outside the rail (a cold start, a preemption: here one in
// three, at a third of the rate) leave it where the others are; a rail
// that slowed for good is followed within half the window.
func TestEstimatorMedian(t *testing.T) {
	const mib = 1 << 20
	at := func(rate float64) time.Duration { return time.Duration(mib / rate * 1e9) }
	slowFrom := func(n int) func(int) float64 { // 8e9, then 2e9 from op n on
		return func(i int) float64 {
			if i >= n {
				return 2e9
			}
			return 8e9
		}
	}
	for _, tc := range []struct {
		name   string
		weight float64 // 0: the default, 0.2 (a window of nine)
		calib  float64
		ops    func(i int) float64 // the rate op i runs at
		n      int
		lo, hi float64 // the model's rate must end in [lo, hi]
	}{
		{"a third of the ops slowed: ignored", 0, 10e9, func(i int) float64 {
			if i%3 == 0 {
				return 10e9 / 3
			}
			return 10e9
		}, 30, 9.5e9, 10.5e9},
		{"a calibration that missed: forgotten", 0, 4e9, func(int) float64 { return 8e9 }, 5, 7.6e9, 8.4e9},
		{"slowed for good: followed in half the window", 0, 8e9, func(int) float64 { return 2e9 }, 5, 1.9e9, 2.1e9},
		{"a window of five: three slow ops of the latest five", 1.0 / 3, 8e9, slowFrom(9), 12, 1.9e9, 2.1e9},
		{"a window of nine: three slow ops of the latest nine", 0, 8e9, slowFrom(9), 12, 7.6e9, 8.4e9},
		{"uncalibrated: the first op is the model", 0, 0, func(int) float64 { return 3e9 }, 1, 2.9e9, 3.1e9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEstimator(Rail{Name: "dpu", Rate: tc.calib}, tc.weight)
			for i := range tc.n {
				e.Observe(mib, at(tc.ops(i)))
			}
			if got := e.Rail().Rate; got < tc.lo || got > tc.hi {
				t.Fatalf("rate %.3g after %d ops, want %.3g–%.3g", got, tc.n, tc.lo, tc.hi)
			}
		})
	}
}

func TestSplitIfGain(t *testing.T) {
	host := Rail{Name: "host", Kind: HostCPU, Rate: 10e9}
	for _, tc := range []struct {
		name   string
		other  Rail
		cost   float64
		shares int
		why    string
	}{
		{"rails close: split", Rail{Name: "dpu", Kind: DPUCores, Rate: 8e9}, 1, 2, ""},
		{"ten times apart: one rail, no split planned", Rail{Name: "dpu", Kind: DPUCores, Rate: 1e9}, 1, 1, "even all rails"},
		{"close, but splits have cost twice their model", Rail{Name: "dpu", Kind: DPUCores, Rate: 8e9}, 2, 1, "even all rails"},
		{"a fixed cost that eats the gain", Rail{Name: "dpu", Kind: DPUCores, Rate: 8e9, Alpha: 5500 * time.Microsecond}, 1, 1, "even all rails"},
		{"equal rails, splits at 1.5× their model: still pays", Rail{Name: "dpu", Kind: DPUCores, Rate: 10e9}, 1.5, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := SplitIfGain([]Rail{host, tc.other}, 64<<20, 640, 0.10, tc.cost)
			if len(p.Shares) != tc.shares {
				t.Fatalf("%d shares, want %d:\n%s", len(p.Shares), tc.shares, p.Explain())
			}
			var total int64
			for _, s := range p.Shares {
				total += s.Bytes
			}
			if total != 64<<20 {
				t.Fatalf("shares cover %d bytes", total)
			}
			if tc.shares == 1 {
				if p.Shares[0].Rail != "host" || p.Predicted != p.BestTime || len(p.Dropped) == 0 || !strings.Contains(p.Dropped[0], tc.why) {
					t.Fatalf("single-rail plan:\n%s", p.Explain())
				}
				return
			}
			if gain := 1 - p.Predicted.Seconds()/p.BestTime.Seconds(); gain < 0.10 {
				t.Fatalf("split with a gain of %.2f", gain)
			}
		})
	}
}
