package coll

import (
	"context"
	"encoding/binary"
	"math"
	"math/bits"
	"time"

	"github.com/hecsys/hec/shared/rail"
)

// The α–β model that picks an algorithm (Choose) starts from
// Config.Alpha and Config.Rate. Unless those are given, or an algorithm
// is forced, a communicator measures its own links at its first
// collective that chooses (AllReduce, Broadcast, Reduce): allreduces of
// calibBytes by the ring and by recursive doubling, calibRuns of each in
// turn after one untimed of each, and fits α and the rate to the slowest
// rank's median times. Every rank fits the same numbers, so every rank
// chooses alike. On the two-vCPU machine this was written on, four ranks
// with an agent each measured α at 0.16 ms, three times the default:
// recursive doubling, which the measured model picks for a 1 MiB
// allreduce, took 1.8-2.0 ms where the ring, which the defaults picked,
// took 2.0-2.4 ms (six alternations).
const (
	calibBytes = 256 << 10
	calibRuns  = 5
)

// ringTime and treeTime are the model's times for an allreduce of n bytes.
func (c *Comm) ringTime(n int) float64 {
	a, b := c.ringCoeffs(n)
	return a*c.cfg.Alpha.Seconds() + b/c.cfg.Rate
}

func (c *Comm) treeTime(n int) float64 {
	a, b := c.treeCoeffs(n)
	return a*c.cfg.Alpha.Seconds() + b/c.cfg.Rate
}

// ringCoeffs are the ring's messages in sequence (α's factor) and bytes
// over each link (the rate's divisor) for an allreduce of n bytes: 2(p−1)
// steps, plus the pipeline's fill where a segment is several chunks.
func (c *Comm) ringCoeffs(n int) (msgs, bytes float64) {
	p := float64(c.size)
	chunks := max(1, float64(n)/p/float64(c.cfg.Chunk))
	return 2*(p-1) + chunks - 1, 2 * (p - 1) / p * float64(n)
}

// treeCoeffs are recursive doubling's: log2 p steps of the whole buffer,
// two more where p is not a power of two.
func (c *Comm) treeCoeffs(n int) (msgs, bytes float64) {
	steps := float64(bits.Len(uint(c.size - 1)))
	if c.size&(c.size-1) != 0 {
		steps += 2
	}
	return steps, steps * float64(n)
}

// Choose returns the algorithm an allreduce of n bytes uses.
func (c *Comm) Choose(n int) Algorithm {
	if c.cfg.Algorithm != Auto {
		return c.cfg.Algorithm
	}
	if c.treeTime(n) < c.ringTime(n) {
		return Tree
	}
	return Ring
}

// Model returns the α and rate (bytes per second) Choose uses: the
// configured ones, or what the communicator measured (calibrate).
func (c *Comm) Model() (alpha time.Duration, rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.Alpha, c.cfg.Rate
}

// calibrate measures the model on the communicator's first collective
// that chooses an algorithm (with c.mu held, inside run). Its
// allreduces are numbered as collectives of their own, and so is the
// caller's after them: every rank numbers alike.
func (c *Comm) calibrate(ctx context.Context) error {
	if c.calibrated {
		return nil
	}
	c.calibrated = true
	buf := make([]byte, calibBytes)
	var ring, tree []float64
	for i := -1; i < calibRuns; i++ {
		for _, alg := range [2]Algorithm{Ring, Tree} {
			if i%2 != 0 {
				alg = Ring + Tree - alg // the other first, every other round
			}
			c.nextSeq()
			t0 := time.Now()
			var err error
			if alg == Tree {
				err = c.allReduceRD(ctx, buf, nil, Float32, Sum)
			} else {
				err = c.allReduceRing(ctx, buf, nil, Float32, Sum)
			}
			if err != nil {
				return err
			}
			if i < 0 {
				continue
			}
			if d := time.Since(t0).Seconds(); alg == Tree {
				tree = append(tree, d)
			} else {
				ring = append(ring, d)
			}
		}
	}
	// The slowest rank's: what every collective waits for, and the same
	// numbers on every rank.
	agreed := make([]byte, 16)
	binary.LittleEndian.PutUint64(agreed, math.Float64bits(rail.Median(ring)))
	binary.LittleEndian.PutUint64(agreed[8:], math.Float64bits(rail.Median(tree)))
	c.nextSeq()
	if err := c.allReduceRD(ctx, agreed, nil, Float64, Max); err != nil {
		return err
	}
	c.nextSeq()
	tr := math.Float64frombits(binary.LittleEndian.Uint64(agreed))
	tt := math.Float64frombits(binary.LittleEndian.Uint64(agreed[8:]))
	if alpha, rate, ok := c.fit(calibBytes, tr, tt); ok {
		c.cfg.Alpha, c.cfg.Rate = alpha, rate
	}
	return nil
}

// fit solves the model for α and the rate from an allreduce of n bytes
// that took ring seconds by the ring and tree by recursive doubling; ok
// is false where the times admit no model with a positive rate (the
// defaults then stay). A negative α, from noise, is taken as none.
func (c *Comm) fit(n int, ring, tree float64) (alpha time.Duration, rate float64, ok bool) {
	a1, b1 := c.ringCoeffs(n)
	a2, b2 := c.treeCoeffs(n)
	det := a1*b2 - a2*b1
	if det == 0 || !(ring > 0) || !(tree > 0) {
		return 0, 0, false
	}
	al := (ring*b2 - tree*b1) / det
	inv := (a1*tree - a2*ring) / det // seconds per byte
	if al < 0 {
		al, inv = 0, tree/b2
	}
	if !(inv > 0) || math.IsInf(inv, 0) {
		return 0, 0, false
	}
	return max(time.Duration(math.Round(al*float64(time.Second))), time.Nanosecond), 1 / inv, true
}
