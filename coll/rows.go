package coll

import (
	"context"
	"math/bits"
)

// terms are an algorithm's cost for one collective in the model's units:
// messages one after another (each costs α), bytes over the busiest link
// (each costs β, 1/Config.Rate) and bytes reduced by the busiest rank
// (each costs γ, 1/Config.ReduceRate). The model's time is their sum.
type terms struct{ msgs, bytes, reduced float64 }

// row is one algorithm for one kind of collective: a row of the cost
// model, which Choose compares with the kind's other rows, and its
// implementation. run gets the buffer the result ends in (buf), this
// rank's contribution where it is elsewhere (src: nil when in buf), and
// the root. Adding an algorithm is a row here and its implementation in
// a file of its own.
type row struct {
	kind Kind
	alg  Algorithm
	cost func(c *Comm, n int) terms
	run  func(c *Comm, ctx context.Context, buf, src []byte, dt DType, op Op, root int) error
}

// rows are every algorithm of every kind that chooses one.
var rows = []row{
	{KindAllReduce, Ring, ringAllReduceCost, func(c *Comm, ctx context.Context, buf, src []byte, dt DType, op Op, _ int) error {
		return c.allReduceRing(ctx, buf, src, dt, op)
	}},
	{KindAllReduce, Tree, rdAllReduceCost, func(c *Comm, ctx context.Context, buf, src []byte, dt DType, op Op, _ int) error {
		return c.allReduceRD(ctx, buf, src, dt, op)
	}},
	{KindAllReduce, HalvingDoubling, hdAllReduceCost, func(c *Comm, ctx context.Context, buf, src []byte, dt DType, op Op, _ int) error {
		return c.allReduceHD(ctx, buf, src, dt, op)
	}},
	{KindBroadcast, Ring, chainBcastCost, func(c *Comm, ctx context.Context, buf, _ []byte, _ DType, _ Op, root int) error {
		return c.bcastChain(ctx, buf, root)
	}},
	{KindBroadcast, Tree, treeCost(false), func(c *Comm, ctx context.Context, buf, _ []byte, _ DType, _ Op, root int) error {
		return c.bcastTree(ctx, buf, root)
	}},
	{KindReduce, Ring, ringReduceCost, func(c *Comm, ctx context.Context, buf, src []byte, dt DType, op Op, root int) error {
		return c.reduceRing(ctx, buf, src, dt, op, root)
	}},
	{KindReduce, Tree, treeCost(true), func(c *Comm, ctx context.Context, buf, src []byte, dt DType, op Op, root int) error {
		copy(buf, src)
		return c.reduceTree(ctx, buf, dt, op, root)
	}},
}

// rowOf is kind's row for algorithm a, or nil.
func rowOf(kind Kind, a Algorithm) *row {
	for i := range rows {
		if rows[i].kind == kind && rows[i].alg == a {
			return &rows[i]
		}
	}
	return nil
}

// seconds is the model's time for t.
func (c *Comm) seconds(t terms) float64 {
	s := t.msgs*c.cfg.Alpha.Seconds() + t.bytes/c.cfg.Rate
	if c.cfg.ReduceRate > 0 {
		s += t.reduced / c.cfg.ReduceRate
	}
	return s
}

// Choose returns the algorithm a collective of kind on n bytes uses: the
// forced one where it has it, else its cheapest row under the model.
func (c *Comm) Choose(kind Kind, n int) Algorithm {
	if c.cfg.Algorithm != Auto && rowOf(kind, c.cfg.Algorithm) != nil {
		return c.cfg.Algorithm
	}
	best, bestT := Algorithm(0), 0.0
	for i := range rows {
		if r := &rows[i]; r.kind == kind {
			if t := c.seconds(r.cost(c, n)); best == 0 || t < bestT {
				best, bestT = r.alg, t
			}
		}
	}
	if best == 0 {
		return Ring
	}
	return best
}

// runChosen runs the collective of kind by the algorithm Choose picks.
func (c *Comm) runChosen(ctx context.Context, kind Kind, buf, src []byte, dt DType, op Op, root int) error {
	return rowOf(kind, c.Choose(kind, len(buf))).run(c, ctx, buf, src, dt, op, root)
}

// log2Up is ⌈log2 p⌉.
func log2Up(p int) float64 { return float64(bits.Len(uint(p - 1))) }

// fold is what recursive doubling and halving-doubling pay where p is not
// a power of two: the ranks beyond the largest power of two send their
// buffer in and get the result back (two messages of n bytes, one
// reduction of n).
func fold(p, n int) terms {
	if p&(p-1) == 0 {
		return terms{}
	}
	return terms{2, 2 * float64(n), float64(n)}
}

// ringAllReduceCost: 2(p−1) steps, plus the pipeline's fill where a
// segment is several chunks; 2(p−1)/p of the buffer over each link, and
// (p−1)/p of it reduced on each rank.
func ringAllReduceCost(c *Comm, n int) terms {
	p := float64(c.size)
	chunks := max(1, float64(n)/p/float64(c.cfg.Chunk))
	return terms{2*(p-1) + chunks - 1, 2 * (p - 1) / p * float64(n), (p - 1) / p * float64(n)}
}

// rdAllReduceCost: log2 p exchanges of the whole buffer.
func rdAllReduceCost(c *Comm, n int) terms {
	steps := float64(bits.Len(uint(c.size)) - 1) // log2 of the largest power of two ≤ p
	f := fold(c.size, n)
	return terms{steps + f.msgs, steps*float64(n) + f.bytes, steps*float64(n) + f.reduced}
}

// hdAllReduceCost: a reduce-scatter by recursive halving and an allgather
// by recursive doubling: 2 log2 p messages, the ring's bytes.
func hdAllReduceCost(c *Comm, n int) terms {
	q := 1 << (bits.Len(uint(c.size)) - 1)
	steps := float64(bits.Len(uint(q)) - 1)
	f := fold(c.size, n)
	frac := float64(q-1) / float64(q)
	return terms{2*steps + f.msgs, 2*frac*float64(n) + f.bytes, frac*float64(n) + f.reduced}
}

// chainBcastCost: p−1 hops, pipelined by chunks; the buffer over each link.
func chainBcastCost(c *Comm, n int) terms {
	chunks := max(1, float64(n)/float64(c.cfg.Chunk))
	return terms{float64(c.size-1) + chunks - 1, float64(n), 0}
}

// ringReduceCost: a ring reduce-scatter, then every segment to root —
// the ring allreduce's messages and bytes, the gather in place of the
// allgather.
var ringReduceCost = ringAllReduceCost

// treeCost: a binomial tree, ⌈log2 p⌉ sends of the whole buffer on the
// root's link (reducing each where reduce).
func treeCost(reduce bool) func(c *Comm, n int) terms {
	return func(c *Comm, n int) terms {
		s := log2Up(c.size)
		t := terms{s, s * float64(n), 0}
		if reduce {
			t.reduced = t.bytes
		}
		return t
	}
}
