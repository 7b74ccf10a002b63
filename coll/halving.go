package coll

import "context"

// allReduceHD is halving-doubling (Rabenseifner's): among the largest
// power of two q of ranks, a reduce-scatter by recursive halving — at
// each step a rank keeps half of its range, sends the other half to the
// partner that keeps it, and reduces the partner's copy of its own half
// in — leaves each rank a reduced 1/q of the buffer; an allgather by
// recursive doubling gives every rank the rest. The ring's bytes in
// 2 log2 q messages instead of 2(p−1). The p−q ranks beyond q fold their
// buffer into a partner first and get the result back at the end, as in
// recursive doubling.
func (c *Comm) allReduceHD(ctx context.Context, buf, src []byte, dt DType, op Op) error {
	n, r, es := c.size, c.rank, dt.Size()
	q := 1
	for q*2 <= n {
		q *= 2
	}
	if src != nil {
		copy(buf, src)
	}
	rem := n - q
	if r >= q {
		c.sendAll(ctx, r-q, buf)
		if err := c.sendFailed(); err != nil {
			return err
		}
		return c.recvAll(ctx, r-q, buf, dt, op, false)
	}
	if r < rem {
		if err := c.recvAll(ctx, r+q, buf, dt, op, true); err != nil {
			return err
		}
	}
	// ranges[k] is this rank's range before the halving step with mask
	// q>>(k+1): the allgather retraces them backwards.
	lo, hi := 0, len(buf)/es // in elements
	var ranges [32][2]int
	steps := 0
	for mask := q >> 1; mask > 0; mask >>= 1 {
		ranges[steps] = [2]int{lo, hi}
		steps++
		partner := r ^ mask
		mid := lo + (hi-lo)/2
		keep, give := [2]int{lo, mid}, [2]int{mid, hi}
		if r&mask != 0 {
			keep, give = give, keep
		}
		out := buf[give[0]*es : give[1]*es] // not written while it goes
		if err := c.recvAllTo(ctx, partner, buf[keep[0]*es:keep[1]*es], nil, dt, op, func() { c.sendAll(ctx, partner, out) }); err != nil {
			return err
		}
		if err := c.sendFailed(); err != nil {
			return err
		}
		lo, hi = keep[0], keep[1]
	}
	Finish(buf[lo*es:hi*es], dt, op, n) // each element once, where it was reduced
	for mask := 1; mask < q; mask <<= 1 {
		steps--
		whole := ranges[steps]
		partner := r ^ mask
		theirs := [2]int{whole[0], lo} // the other half of whole
		if lo == whole[0] {
			theirs = [2]int{hi, whole[1]}
		}
		mine := buf[lo*es : hi*es]
		if err := c.recvPlan(ctx, partner, c.planChunks(c.sinks[:0], buf[theirs[0]*es:theirs[1]*es], nil, 0, 0, false),
			func() { c.sendAll(ctx, partner, mine) }, nil); err != nil {
			return err
		}
		if err := c.sendFailed(); err != nil {
			return err
		}
		lo, hi = whole[0], whole[1]
	}
	if r < rem {
		c.sendAll(ctx, r+q, buf)
	}
	return nil
}
