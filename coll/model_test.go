package coll

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"
)

// TestFitRecoversTheModel: times made by the model from a known α and
// rate give them back, for every communicator size.
func TestFitRecoversTheModel(t *testing.T) {
	for p := 2; p <= 8; p++ {
		for _, tt := range []struct {
			alpha time.Duration
			rate  float64
		}{
			{200 * time.Microsecond, 1.4e9},
			{5 * time.Microsecond, 12e9},
			{2 * time.Millisecond, 25e6}, // a slow link
		} {
			t.Run(fmt.Sprintf("p%d/%v/%g", p, tt.alpha, tt.rate), func(t *testing.T) {
				c := &Comm{size: p, cfg: Config{Chunk: 512 << 10, Alpha: tt.alpha, Rate: tt.rate}}
				ring, tree := c.ringTime(calibBytes), c.treeTime(calibBytes)
				alpha, rate, ok := c.fit(calibBytes, ring, tree)
				if !ok || math.Abs(float64(alpha-tt.alpha)) > float64(tt.alpha)*1e-6 || math.Abs(rate-tt.rate) > tt.rate*1e-6 {
					t.Fatalf("fit(%v, %v) = %v, %g, %v; want %v, %g", ring, tree, alpha, rate, ok, tt.alpha, tt.rate)
				}
			})
		}
	}
}

func TestFitRejectsWhatNoModelGives(t *testing.T) {
	c := &Comm{size: 4, cfg: Config{Chunk: 512 << 10}}
	for _, tt := range []struct {
		name       string
		ring, tree float64
		ok         bool
	}{
		{"zero times", 0, 0, false},
		{"NaN", math.NaN(), 1e-3, false},
		{"ring over 3× tree (p = 4: more than latency alone explains)", 10e-3, 1e-3, false},
		{"ring 2.5× tree: mostly latency", 2.5e-3, 1e-3, true},
		{"tree far slower: α would be negative, taken as none", 1e-3, 10e-3, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			alpha, rate, ok := c.fit(calibBytes, tt.ring, tt.tree)
			if ok != tt.ok || ok && (alpha <= 0 || !(rate > 0) || math.IsInf(rate, 0)) {
				t.Fatalf("fit = %v, %g, %v; want ok %v with α > 0 and a finite rate > 0", alpha, rate, ok, tt.ok)
			}
		})
	}
}

// TestCalibrationChoosesAlike: a communicator left to choose measures its
// links at its first collective that chooses; every rank then holds the
// same model (so chooses alike at every size), and the collectives
// around the measurement give exact results. A model given, or an
// algorithm forced, is not measured.
func TestCalibrationChoosesAlike(t *testing.T) {
	sizes := []int{8, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20}
	for n := 2; n <= 5; n++ {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			type seen struct {
				alpha time.Duration
				rate  float64
				picks []Algorithm
			}
			got := make([]seen, n)
			errs := onRanks(t, n, Config{}, func(c *Comm) error {
				ctx := context.Background()
				buf := make([]byte, 4*1001)
				for i := range 1001 {
					binary.LittleEndian.PutUint32(buf[4*i:], uint32(c.Rank()+i))
				}
				if err := c.AllReduce(ctx, buf, buf, Int32, Sum); err != nil {
					return err
				}
				for i := range 1001 {
					if want := float64(n*i + n*(n-1)/2); element(buf, Int32, i) != want {
						return fmt.Errorf("element %d = %v, want %v", i, element(buf, Int32, i), want)
					}
				}
				if err := c.Broadcast(ctx, buf, Int32, n-1); err != nil {
					return err
				}
				if !c.calibrated {
					return fmt.Errorf("not calibrated after an allreduce and a broadcast")
				}
				s := &got[c.Rank()]
				s.alpha, s.rate = c.Model()
				for _, sz := range sizes {
					s.picks = append(s.picks, c.Choose(sz))
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			// In one process the times may admit no model (the race
			// detector slows ranks unevenly): the defaults then stay, on
			// every rank alike.
			if got[0].alpha <= 0 || !(got[0].rate > 0) {
				t.Fatalf("rank 0's model after calibration: α %v, rate %g", got[0].alpha, got[0].rate)
			}
			for r := 1; r < n; r++ {
				if got[r].alpha != got[0].alpha || got[r].rate != got[0].rate || fmt.Sprint(got[r].picks) != fmt.Sprint(got[0].picks) {
					t.Fatalf("rank %d: α %v rate %g picks %v; rank 0: α %v rate %g picks %v",
						r, got[r].alpha, got[r].rate, got[r].picks, got[0].alpha, got[0].rate, got[0].picks)
				}
			}
			t.Logf("α %v, rate %.3g B/s; picks at %v: %v", got[0].alpha, got[0].rate, sizes, got[0].picks)
		})
	}
	for _, tt := range []struct {
		name  string
		cfg   Config
		alpha time.Duration
		rate  float64
	}{
		{"given", Config{Alpha: time.Millisecond, Rate: 5e8}, time.Millisecond, 5e8},
		{"forced", Config{Algorithm: Ring}, 50 * time.Microsecond, 1e9},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := onRanks(t, 3, tt.cfg, func(c *Comm) error {
				buf := make([]byte, 64)
				if err := c.AllReduce(context.Background(), buf, buf, Float32, Sum); err != nil {
					return err
				}
				if a, r := c.Model(); a != tt.alpha || r != tt.rate {
					return fmt.Errorf("model α %v rate %g, want %v %g", a, r, tt.alpha, tt.rate)
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
		})
	}
}
