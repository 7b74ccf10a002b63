package coll

import (
	"context"
	"encoding/binary"
	"math"
	"time"

	"github.com/hecsys/hec/shared/rail"
)

// The model that picks an algorithm (Choose: each algorithm a row of
// rows.go, with its cost in messages, bytes and bytes reduced) starts from
// Config.Alpha, Rate and ReduceRate. Unless those are given, or an
// algorithm is forced, a communicator measures its own links at its first
// collective that chooses (AllReduce, Broadcast, Reduce): allreduces by
// every allreduce row at calibSizes, calibRuns of each in turn after one
// untimed of each, and fits α, the rate and the reduce rate to the
// slowest rank's median times by least squares (relative errors: the
// times span orders of magnitude). Every rank fits the same numbers, so
// every rank chooses alike. With Config.ModelFile, rank 0 keeps the fit
// per topology and a later communicator of the same topology takes it
// without measuring. On the two-vCPU machine this was written on, four
// ranks with an agent each measured α at 0.16 ms, three times the
// default: recursive doubling, which the measured model picks for a 1 MiB
// allreduce, took 1.8-2.0 ms where the ring, which the defaults picked,
// took 2.0-2.4 ms (six alternations).
const calibRuns = 5

// calibSizes are the allreduce sizes the calibration measures: one where
// the messages' fixed cost weighs, one where the bytes do.
var calibSizes = [...]int{4 << 10, 256 << 10}

// Model returns the α and rate (bytes per second) Choose uses: the
// configured ones, or what the communicator measured (calibrate).
func (c *Comm) Model() (alpha time.Duration, rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.Alpha, c.cfg.Rate
}

// ReduceRate is the reduce rate Choose uses (0: reductions free).
func (c *Comm) ReduceRate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.ReduceRate
}

// point is one measured time of an algorithm's collective, in the model's
// terms.
type point struct {
	t       terms
	seconds float64
}

// calibrate measures the model on the communicator's first collective
// that chooses an algorithm (with c.mu held, inside run), or takes rank
// 0's from the model file. Its collectives are numbered as collectives of
// their own, and so is the caller's after them: every rank numbers alike.
func (c *Comm) calibrate(ctx context.Context) error {
	if c.calibrated {
		return nil
	}
	c.calibrated = true
	kind := c.kind // its messages' spans are the calibration's
	c.kind = "calibrate"
	defer func() { c.kind = kind }()
	if ok, err := c.loadModel(ctx); err != nil || ok {
		return err
	}
	var algs []*row
	for i := range rows {
		if rows[i].kind == KindAllReduce {
			algs = append(algs, &rows[i])
		}
	}
	buf := make([]byte, calibSizes[len(calibSizes)-1])
	times := make([][]float64, len(algs)*len(calibSizes))
	for i := -1; i < calibRuns; i++ {
		for j := range algs {
			if i%2 != 0 {
				j = len(algs) - 1 - j // the other order every other round
			}
			for k, n := range calibSizes {
				c.nextSeq()
				t0 := time.Now()
				if err := algs[j].run(c, ctx, buf[:n], nil, Float32, Sum, 0); err != nil {
					return err
				}
				if i >= 0 {
					times[j*len(calibSizes)+k] = append(times[j*len(calibSizes)+k], time.Since(t0).Seconds())
				}
			}
		}
	}
	// The slowest rank's medians: what every collective waits for, and
	// the same numbers on every rank.
	agreed := make([]byte, 8*len(times))
	for i, ts := range times {
		binary.LittleEndian.PutUint64(agreed[8*i:], math.Float64bits(rail.Median(ts)))
	}
	c.nextSeq()
	if err := c.allReduceRD(ctx, agreed, nil, Float64, Max); err != nil {
		return err
	}
	c.nextSeq()
	pts := make([]point, 0, len(times))
	for j, a := range algs {
		for k, n := range calibSizes {
			pts = append(pts, point{a.cost(c, n), math.Float64frombits(binary.LittleEndian.Uint64(agreed[8*(j*len(calibSizes)+k):]))})
		}
	}
	if alpha, rate, reduce, ok := fit(pts); ok {
		c.cfg.Alpha, c.cfg.Rate, c.cfg.ReduceRate = alpha, rate, reduce
		if c.rank == 0 {
			c.saveModel()
		}
	}
	return nil
}

// fit solves for α, the rate and the reduce rate that best explain the
// points (least squares of the relative errors); ok is false where the
// points admit no model with a positive rate (the defaults then stay).
// A parameter that comes out negative — noise, or a term the points
// cannot tell from another — is left out and the rest fitted again:
// first the reductions (reduceRate 0: free), then α (taken as 1 ns).
func fit(pts []point) (alpha time.Duration, rate, reduceRate float64, ok bool) {
	for _, use := range [][3]bool{{true, true, true}, {true, true, false}, {false, true, false}} {
		x, solved := leastSquares(pts, use)
		if !solved || x[0] < 0 || !(x[1] > 0) || x[2] < 0 || math.IsInf(x[1], 0) {
			continue
		}
		if x[2] > 1e-15 { // below a femtosecond a byte: free, as the points see it
			reduceRate = 1 / x[2]
		}
		return max(time.Duration(math.Round(x[0]*float64(time.Second))), time.Nanosecond), 1 / x[1], reduceRate, true
	}
	return 0, 0, 0, false
}

// leastSquares minimises Σ ((t − m·x0 − b·x1 − r·x2) / t)² over the
// parameters marked in use (the others 0), by the normal equations.
func leastSquares(pts []point, use [3]bool) (x [3]float64, ok bool) {
	var idx []int
	for i, u := range use {
		if u {
			idx = append(idx, i)
		}
	}
	k := len(idx)
	// Each term scaled by its largest value: messages count in ones,
	// bytes in millions, and the equations are solved in like units.
	var scale [3]float64
	for _, p := range pts {
		scale[0] = max(scale[0], p.t.msgs)
		scale[1] = max(scale[1], p.t.bytes)
		scale[2] = max(scale[2], p.t.reduced)
	}
	for _, i := range idx {
		if scale[i] == 0 {
			return x, false
		}
	}
	var a [3][4]float64 // the augmented normal equations
	for _, p := range pts {
		if !(p.seconds > 0) || math.IsInf(p.seconds, 0) {
			return x, false
		}
		w := 1 / (p.seconds * p.seconds)
		f := [3]float64{p.t.msgs / scale[0], p.t.bytes / scale[1], p.t.reduced / scale[2]}
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				a[i][j] += w * f[idx[i]] * f[idx[j]]
			}
			a[i][k] += w * f[idx[i]] * p.seconds
		}
	}
	// Gaussian elimination with partial pivoting.
	for col := 0; col < k; col++ {
		piv := col
		for r := col + 1; r < k; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[piv][col]) {
				piv = r
			}
		}
		if math.Abs(a[piv][col]) < 1e-300 {
			return x, false
		}
		a[col], a[piv] = a[piv], a[col]
		for r := 0; r < k; r++ {
			if r == col {
				continue
			}
			f := a[r][col] / a[col][col]
			for cc := col; cc <= k; cc++ {
				a[r][cc] -= f * a[col][cc]
			}
		}
	}
	for i := 0; i < k; i++ {
		x[idx[i]] = a[i][k] / a[i][i] / scale[idx[i]]
	}
	return x, true
}
