package coll

import (
	"context"
	"fmt"
	"unsafe"
)

// AllReduce reduces every rank's send with op and leaves the result in
// every rank's recv. send and recv have the same length; they may be the
// same buffer (in place).
func (c *Comm) AllReduce(ctx context.Context, send, recv []byte, dt DType, op Op) error {
	if err := c.check(dt, op, send, recv); err != nil {
		return err
	}
	if len(send) != len(recv) {
		return fmt.Errorf("coll: allreduce of %d bytes into %d", len(send), len(recv))
	}
	return c.run(ctx, "allreduce", len(recv), dt, func() error {
		if c.size == 1 {
			copyIfOther(recv, send)
			return nil
		}
		if err := c.calibrate(ctx); err != nil {
			return err
		}
		src := send // out of place: the first reductions read send
		if overlap(send, recv) {
			copyIfOther(recv, send)
			src = nil
		}
		return c.runChosen(ctx, KindAllReduce, recv, src, dt, op, 0)
	})
}

func copyIfOther(dst, src []byte) {
	if len(dst) > 0 && len(src) > 0 && &dst[0] != &src[0] {
		copy(dst, src)
	}
}

// overlap says whether a and b share any byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// ringPass moves segments of buf around the ring: this rank sends segment
// first, and at step s (n−1 steps) takes the left neighbour's segment
// first−1−s — reduced into its own when reduce, else copied — and passes
// each chunk on to the right as soon as it has it (but the last step's),
// so a chunk's send, the next one's receive and the reduction overlap.
// With src set (an out-of-place reduction) this rank's contributions come
// from src: its first send, and one operand of each reduction, whose
// result is written to buf. buf is then only written, never read first,
// so src need not be copied into it beforehand.
func (c *Comm) ringPass(ctx context.Context, buf, src []byte, dt DType, op Op, reduce bool, first int) error {
	n, r, es := c.size, c.rank, dt.Size()
	count := len(buf) / es
	left, right := mod(r-1, n), mod(r+1, n)
	seg := func(b []byte, i int) []byte {
		if b == nil {
			return nil
		}
		off, l := segment(count, n, mod(i, n), es)
		return b[off : off+l]
	}
	// Every receive of the pass is posted at once, before this rank's
	// first send: no segment is received into twice, nor into while it
	// is being sent.
	sinks, forward := c.sinks[:0], 0
	for s := 0; s < n-1; s++ {
		if s == n-2 {
			forward = len(sinks) // the last step's chunks stay here
		}
		sinks = c.planChunks(sinks, seg(buf, first-1-s), seg(src, first-1-s), dt, op, reduce)
	}
	out := buf
	if src != nil {
		out = src
	}
	return c.recvPlan(ctx, left, sinks, func() { c.sendAll(ctx, right, seg(out, first)) }, func(k int) {
		if k < forward {
			c.send(ctx, right, sinks[k].Dst)
		}
	})
}

// reduceScatterRing reduces buf around the ring so that, at the end, this
// rank holds the full reduction of segment rank (it starts by sending
// segment rank−1).
// With src set, src holds this rank's contribution and buf is written
// (only this rank's segment is whole at the end).
func (c *Comm) reduceScatterRing(ctx context.Context, buf, src []byte, dt DType, op Op) error {
	return c.ringPass(ctx, buf, src, dt, op, true, c.rank-1)
}

// allGatherRing passes segments around the ring: this rank starts holding
// segment rank, and at the end holds them all.
func (c *Comm) allGatherRing(ctx context.Context, buf []byte, dt DType) error {
	return c.ringPass(ctx, buf, nil, dt, 0, false, c.rank)
}

// allReduceRing reduces buf in place, or src into buf when src is set.
func (c *Comm) allReduceRing(ctx context.Context, buf, src []byte, dt DType, op Op) error {
	if err := c.reduceScatterRing(ctx, buf, src, dt, op); err != nil {
		return err
	}
	if err := c.sendFailed(); err != nil {
		return err
	}
	off, l := segment(len(buf)/dt.Size(), c.size, c.rank, dt.Size())
	Finish(buf[off:off+l], dt, op, c.size)
	return c.allGatherRing(ctx, buf, dt)
}

// allReduceRD is recursive doubling: log2(p) exchanges of the whole buffer
// between partners, p the largest power of two not above n; the n−p ranks
// beyond it first fold their buffer into a partner and get the result back
// at the end. With src set (out of place) the first exchange sends src and
// writes src op the partner's into buf: among two ranks, no copy at all.
func (c *Comm) allReduceRD(ctx context.Context, buf, src []byte, dt DType, op Op) error {
	n, r := c.size, c.rank
	p := 1
	for p*2 <= n {
		p *= 2
	}
	rem := n - p
	if r >= p {
		if src == nil {
			src = buf
		}
		c.sendAll(ctx, r-p, src)
		if err := c.sendFailed(); err != nil {
			return err
		}
		return c.recvAll(ctx, r-p, buf, dt, op, false)
	}
	if r < rem {
		if err := c.recvAllTo(ctx, r+p, buf, src, dt, op, nil); err != nil {
			return err
		}
		src = nil
	}
	for mask := 1; mask < p; mask <<= 1 {
		partner := r ^ mask
		out := src
		if out == nil {
			out = c.scratchOf(len(buf))
			copy(out, buf) // what goes out must not change while it does
		}
		if err := c.recvAllTo(ctx, partner, buf, src, dt, op, func() { c.sendAll(ctx, partner, out) }); err != nil {
			return err
		}
		src = nil
		if err := c.sendFailed(); err != nil {
			return err
		}
	}
	Finish(buf, dt, op, n)
	if r < rem {
		c.sendAll(ctx, r+p, buf)
	}
	return nil
}

// recvAllTo receives a buffer's chunks from rank from, reducing each into
// buf's: src op message when src is set, else in place. start, when set,
// runs once the receives are posted (recvPlan's).
func (c *Comm) recvAllTo(ctx context.Context, from int, buf, src []byte, dt DType, op Op, start func()) error {
	return c.recvPlan(ctx, from, c.planChunks(c.sinks[:0], buf, src, dt, op, true), start, nil)
}

// scratchOf returns the communicator's scratch buffer of n bytes, grown
// when needed and kept (no allocation once warm).
func (c *Comm) scratchOf(n int) []byte {
	if cap(c.scratch) < n {
		c.scratch = make([]byte, n)
	}
	return c.scratch[:n]
}

// ReduceScatter reduces every rank's send (Size() blocks of len(recv)
// bytes) and leaves block i of the result in rank i's recv.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv []byte, dt DType, op Op) error {
	if err := c.check(dt, op, send, recv); err != nil {
		return err
	}
	if len(send) != c.size*len(recv) {
		return fmt.Errorf("coll: reducescatter of %d bytes to %d ranks of %d bytes each", len(send), c.size, len(recv))
	}
	return c.run(ctx, "reducescatter", len(send), dt, func() error {
		if c.size == 1 {
			copy(recv, send)
			Finish(recv, dt, op, 1)
			return nil
		}
		work := c.scratchOf(len(send))
		// Blocks are equal, so segment i is block i: rank i ends with it.
		if err := c.reduceScatterRing(ctx, work, send, dt, op); err != nil {
			return err
		}
		copy(recv, work[c.rank*len(recv):])
		Finish(recv, dt, op, c.size)
		return nil
	})
}

// AllGather gathers every rank's send (len(recv)/Size() bytes) into every
// rank's recv, rank i's at block i.
func (c *Comm) AllGather(ctx context.Context, send, recv []byte, dt DType) error {
	if err := c.check(dt, 0, send, recv); err != nil {
		return err
	}
	if len(recv) != c.size*len(send) {
		return fmt.Errorf("coll: allgather of %d bytes from %d ranks into %d", len(send), c.size, len(recv))
	}
	return c.run(ctx, "allgather", len(recv), dt, func() error {
		copy(recv[c.rank*len(send):], send)
		if c.size == 1 {
			return nil
		}
		return c.allGatherRing(ctx, recv, dt)
	})
}

// Broadcast copies root's buf into every rank's buf.
func (c *Comm) Broadcast(ctx context.Context, buf []byte, dt DType, root int) error {
	if err := c.check(dt, 0, buf); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return fmt.Errorf("coll: broadcast from rank %d of %d", root, c.size)
	}
	return c.run(ctx, "broadcast", len(buf), dt, func() error {
		if c.size == 1 {
			return nil
		}
		if err := c.calibrate(ctx); err != nil {
			return err
		}
		return c.runChosen(ctx, KindBroadcast, buf, nil, dt, 0, root)
	})
}

// bcastChain pipelines buf's chunks along root, root+1, ...: each rank
// forwards a chunk as soon as it has it.
func (c *Comm) bcastChain(ctx context.Context, buf []byte, root int) error {
	n := c.size
	vr := mod(c.rank-root, n)
	next, prev := mod(c.rank+1, n), mod(c.rank-1, n)
	if vr == 0 {
		c.sendAll(ctx, next, buf)
		return nil
	}
	sinks := c.planChunks(c.sinks[:0], buf, nil, 0, 0, false)
	return c.recvPlan(ctx, prev, sinks, nil, func(k int) {
		if vr < n-1 {
			c.send(ctx, next, sinks[k].Dst)
		}
	})
}

// bcastTree is a binomial tree rooted at root.
func (c *Comm) bcastTree(ctx context.Context, buf []byte, root int) error {
	n := c.size
	vr := mod(c.rank-root, n)
	mask := 1
	for mask < n {
		if vr&mask != 0 {
			if err := c.recvAll(ctx, mod(c.rank-mask, n), buf, 0, 0, false); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < n {
			c.sendAll(ctx, mod(c.rank+mask, n), buf)
		}
	}
	return nil
}

// Reduce reduces every rank's send into root's recv (recv is ignored on
// the other ranks and may be nil there).
func (c *Comm) Reduce(ctx context.Context, send, recv []byte, dt DType, op Op, root int) error {
	if err := c.check(dt, op, send); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return fmt.Errorf("coll: reduce to rank %d of %d", root, c.size)
	}
	if c.rank == root && len(recv) != len(send) {
		return fmt.Errorf("coll: reduce of %d bytes into %d", len(send), len(recv))
	}
	return c.run(ctx, "reduce", len(send), dt, func() error {
		if err := c.calibrate(ctx); err != nil {
			return err
		}
		work := c.scratchOf(len(send))
		if c.size == 1 {
			copy(work, send)
		} else if err := c.runChosen(ctx, KindReduce, work, send, dt, op, root); err != nil {
			return err
		}
		if c.rank == root {
			copy(recv, work)
			Finish(recv, dt, op, c.size)
		}
		return nil
	})
}

// reduceRing: a reduce-scatter leaves segment i reduced on rank i, and each
// rank sends its segment to root. src holds this rank's contribution
// (buf is only written).
func (c *Comm) reduceRing(ctx context.Context, buf, src []byte, dt DType, op Op, root int) error {
	if err := c.reduceScatterRing(ctx, buf, src, dt, op); err != nil {
		return err
	}
	es := dt.Size()
	count := len(buf) / es
	if c.rank != root {
		off, l := segment(count, c.size, c.rank, es)
		c.sendAll(ctx, root, buf[off:off+l])
		return nil
	}
	for i := range c.size {
		if i == root {
			continue
		}
		off, l := segment(count, c.size, i, es)
		if err := c.recvAll(ctx, i, buf[off:off+l], dt, op, false); err != nil {
			return err
		}
	}
	return nil
}

// reduceTree is a binomial tree towards root.
func (c *Comm) reduceTree(ctx context.Context, buf []byte, dt DType, op Op, root int) error {
	n := c.size
	vr := mod(c.rank-root, n)
	for mask := 1; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			c.sendAll(ctx, mod(c.rank-mask, n), buf)
			return nil
		}
		if vr+mask < n {
			if err := c.recvAll(ctx, mod(c.rank+mask, n), buf, dt, op, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// AllToAll sends block j of send (Size() blocks of equal length) to rank
// j, which gets it in block i of its recv, i being the sender's rank.
func (c *Comm) AllToAll(ctx context.Context, send, recv []byte, dt DType) error {
	if err := c.check(dt, 0, send, recv); err != nil {
		return err
	}
	if len(send) != len(recv) || len(send)%(c.size*dt.Size()) != 0 {
		return fmt.Errorf("coll: alltoall of %d bytes into %d: want equal sizes of %d blocks of whole elements", len(send), len(recv), c.size)
	}
	blk := len(send) / c.size
	return c.run(ctx, "alltoall", len(send), dt, func() error {
		copy(recv[c.rank*blk:(c.rank+1)*blk], send[c.rank*blk:])
		for s := 1; s < c.size; s++ {
			to := mod(c.rank+s, c.size)
			c.sendAll(ctx, to, send[to*blk:(to+1)*blk])
		}
		for s := 1; s < c.size; s++ {
			from := mod(c.rank-s, c.size)
			if err := c.recvAll(ctx, from, recv[from*blk:(from+1)*blk], 0, 0, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// Barrier returns once every rank has entered it (dissemination:
// ceil(log2 n) rounds of one empty message).
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, "barrier", 0, Uint8, func() error {
		for k := 1; k < c.size; k <<= 1 {
			c.send(ctx, mod(c.rank+k, c.size), nil)
			if err := c.recv(ctx, mod(c.rank-k, c.size), nil, 0, 0, false); err != nil {
				return err
			}
		}
		return nil
	})
}
