package coll

import (
	"context"
	"fmt"
)

// Kind names a collective, for callers that pick one at run time (the
// agent serving offloads, hecctl coll bench).
type Kind uint8

const (
	KindAllReduce Kind = iota + 1
	KindReduceScatter
	KindAllGather
	KindBroadcast
	KindReduce
	KindAllToAll
	KindBarrier
	maxKind = KindBarrier
)

var kindNames = [...]string{KindAllReduce: "allreduce", KindReduceScatter: "reducescatter", KindAllGather: "allgather",
	KindBroadcast: "broadcast", KindReduce: "reduce", KindAllToAll: "alltoall", KindBarrier: "barrier"}

func (k Kind) String() string {
	if k >= 1 && k <= maxKind {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is a known collective.
func (k Kind) Valid() bool { return k >= 1 && k <= maxKind }

// ParseKind reads a collective's name.
func ParseKind(s string) (Kind, error) {
	for k := KindAllReduce; k <= maxKind; k++ {
		if s == kindNames[k] {
			return k, nil
		}
	}
	return 0, fmt.Errorf("coll: unknown collective %q (allreduce, reducescatter, allgather, broadcast, reduce, alltoall, barrier)", s)
}

// Reduces reports whether k takes a reduction operator.
func (k Kind) Reduces() bool { return k == KindAllReduce || k == KindReduceScatter || k == KindReduce }

// Sizes returns the lengths of the send and recv buffers of k over n ranks
// when the collective moves size bytes — nccl-tests' size: the buffer of
// AllReduce, Broadcast, Reduce and AllToAll, the gathered (recv) buffer of
// AllGather, the scattered (send) one of ReduceScatter.
func (k Kind) Sizes(size, n int) (send, recv int) {
	switch k {
	case KindReduceScatter:
		return size, size / n
	case KindAllGather:
		return size / n, size
	case KindBarrier:
		return 0, 0
	}
	return size, size
}

// BusFactor turns a collective's algorithm bandwidth (size / time) into
// its bus bandwidth, as nccl-tests does: the fraction of the data every
// link must carry, so that figures compare across rank counts.
func (k Kind) BusFactor(n int) float64 {
	if n <= 1 {
		return 0
	}
	p := float64(n)
	switch k {
	case KindAllReduce:
		return 2 * (p - 1) / p
	case KindReduceScatter, KindAllGather, KindAllToAll:
		return (p - 1) / p
	case KindBroadcast, KindReduce:
		return 1
	}
	return 0
}

// Run runs collective k: send and recv as the method of that name takes
// them (Broadcast works in place in recv, after copying send into it;
// Barrier takes none), op for the reducing ones, root for Broadcast and
// Reduce.
func (c *Comm) Run(ctx context.Context, k Kind, send, recv []byte, dt DType, op Op, root int) error {
	switch k {
	case KindAllReduce:
		return c.AllReduce(ctx, send, recv, dt, op)
	case KindReduceScatter:
		return c.ReduceScatter(ctx, send, recv, dt, op)
	case KindAllGather:
		return c.AllGather(ctx, send, recv, dt)
	case KindBroadcast:
		if len(send) != len(recv) {
			return fmt.Errorf("coll: broadcast of %d bytes into %d", len(send), len(recv))
		}
		copyIfOther(recv, send)
		return c.Broadcast(ctx, recv, dt, root)
	case KindReduce:
		return c.Reduce(ctx, send, recv, dt, op, root)
	case KindAllToAll:
		return c.AllToAll(ctx, send, recv, dt)
	case KindBarrier:
		return c.Barrier(ctx)
	}
	return fmt.Errorf("coll: unknown collective %v", k)
}
