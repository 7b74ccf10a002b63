package coll

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"
)

// modelPoints are the calibration's points as the model gives them for
// a communicator of p ranks: every allreduce row at every calibSizes.
func modelPoints(c *Comm) []point {
	var pts []point
	for i := range rows {
		if rows[i].kind == KindAllReduce {
			for _, n := range calibSizes {
				t := rows[i].cost(c, n)
				pts = append(pts, point{t, c.seconds(t)})
			}
		}
	}
	return pts
}

// TestFitRecoversTheModel: times made by the model from a known α, rate
// and reduce rate give them back, for every communicator size, by least
// squares over every allreduce row.
func TestFitRecoversTheModel(t *testing.T) {
	for p := 2; p <= 8; p++ {
		for _, tt := range []struct {
			alpha        time.Duration
			rate, reduce float64
		}{
			{200 * time.Microsecond, 1.4e9, 4e9},
			{5 * time.Microsecond, 12e9, 2e9}, // reductions slower than the link
			{2 * time.Millisecond, 25e6, 0},   // a slow link, reductions free
		} {
			t.Run(fmt.Sprintf("p%d/%v/%g/%g", p, tt.alpha, tt.rate, tt.reduce), func(t *testing.T) {
				c := &Comm{size: p, cfg: Config{Chunk: 512 << 10, Alpha: tt.alpha, Rate: tt.rate, ReduceRate: tt.reduce}}
				alpha, rate, reduce, ok := fit(modelPoints(c))
				near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-6*want }
				if !ok || !near(float64(alpha), float64(tt.alpha)) || !near(rate, tt.rate) || !near(reduce, tt.reduce) {
					t.Fatalf("fit = %v, %g, %g, %v; want %v, %g, %g", alpha, rate, reduce, ok, tt.alpha, tt.rate, tt.reduce)
				}
			})
		}
	}
}

func TestFitRejectsWhatNoModelGives(t *testing.T) {
	c := &Comm{size: 4, cfg: Config{Chunk: 512 << 10, Alpha: 100 * time.Microsecond, Rate: 1e9}}
	good := modelPoints(c)
	scaled := func(f func(i int, p point) float64) []point {
		out := append([]point(nil), good...)
		for i := range out {
			out[i].seconds = f(i, out[i])
		}
		return out
	}
	for _, tt := range []struct {
		name string
		pts  []point
		ok   bool
	}{
		{"zero times", scaled(func(int, point) float64 { return 0 }), false},
		{"NaN", scaled(func(i int, p point) float64 { return map[bool]float64{true: math.NaN(), false: p.seconds}[i == 0] }), false},
		{"the model's times, 20 % noise", scaled(func(i int, p point) float64 { return p.seconds * (1 + 0.2*float64(i%3-1)) }), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			alpha, rate, reduce, ok := fit(tt.pts)
			if ok != tt.ok || ok && (alpha <= 0 || !(rate > 0) || math.IsInf(rate, 0) || reduce < 0) {
				t.Fatalf("fit = %v, %g, %g, %v; want ok %v with α > 0, a finite rate > 0, a reduce rate ≥ 0", alpha, rate, reduce, ok, tt.ok)
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
					s.picks = append(s.picks, c.Choose(KindAllReduce, sz))
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

// TestModelFileKeepsTheFit: a communicator that measured its model leaves
// it in the model file under its topology; the next one of that topology
// takes it without measuring — every rank, though only rank 0's file has
// it — and one of another topology measures and adds its own.
func TestModelFileKeepsTheFit(t *testing.T) {
	file := filepath.Join(t.TempDir(), "coll-models.json")
	type model struct {
		alpha        time.Duration
		rate, reduce float64
	}
	run := func(topology string, file string) []model {
		got := make([]model, 3)
		errs := onRanks(t, 3, Config{ModelFile: file, Topology: topology}, func(c *Comm) error {
			if c.Rank() != 0 {
				c.cfg.ModelFile = "" // only rank 0's is read
			}
			buf := make([]byte, 64)
			if err := c.AllReduce(context.Background(), buf, buf, Float32, Sum); err != nil {
				return err
			}
			a, r := c.Model()
			got[c.Rank()] = model{a, r, c.ReduceRate()}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		return got
	}
	first := run("nodes 1,2,3", file)
	stored := readModels(file)
	if len(stored) != 1 {
		t.Fatalf("model file holds %d entries after one topology, want 1: %v", len(stored), stored)
	}
	for i := range 3 { // the same numbers every time: nothing measured again
		again := run("nodes 1,2,3", file)
		for r, m := range again {
			if m != first[0] {
				t.Fatalf("run %d, rank %d took %+v, want the stored %+v", i, r, m, first[0])
			}
		}
	}
	run("nodes 4,5,6", file)
	if n := len(readModels(file)); n != 2 {
		t.Fatalf("model file holds %d entries after two topologies, want 2", n)
	}
}
