package peer

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/hecsys/hec/shared/trace"
)

// FlagSink marks Data frames of a Transfer: the receiver counts and drops
// them, and acknowledges the count when the last arrives.
const FlagSink = 2

var zeros = make([]byte, MaxPayload)

type sinkKey struct {
	from uint32
	comm uint64
}

type sink struct {
	bytes uint64
	done  func()
}

// sinks are the transfers this node is receiving.
type sinks struct {
	mu        sync.Mutex
	m         map[sinkKey]*sink
	perSender map[uint32]int // transfers under way, by sender
}

// serveSink counts a Transfer's frames; while one is under way the sender
// owes this node the rest, so its silence counts against it.
func (n *Node) serveSink(from uint32, h Header, payload []byte) {
	k := sinkKey{from, h.Comm}
	n.sinks.mu.Lock()
	s := n.sinks.m[k]
	if s == nil {
		if n.sinks.perSender[from] >= maxSinksPerPeer {
			n.sinks.mu.Unlock()
			n.Refused.Add(1) // too many transfers under way from one peer: dropped
			return
		}
		s = &sink{done: n.Expect(from)}
		n.sinks.m[k] = s
		n.sinks.perSender[from]++
	}
	s.bytes += uint64(len(payload))
	last := h.Flags&FlagLast != 0
	if last {
		delete(n.sinks.m, k)
		if n.sinks.perSender[from]--; n.sinks.perSender[from] == 0 {
			delete(n.sinks.perSender, from)
		}
	}
	n.sinks.mu.Unlock()
	if !last {
		return
	}
	s.done()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], s.bytes)
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Deadline)
	defer cancel()
	n.Send(ctx, from, Header{Type: TypeAck, Comm: h.Comm, Epoch: h.Epoch}, b[:])
}

// Transfer sends total bytes to peer to in Data frames of frame bytes on a
// new communicator and returns when the peer has acknowledged receiving
// them all: a bulk transfer, and the bandwidth test of hecctl cluster
// ping. pace, when positive, waits that long between frames (a slow
// sender, for tests).
func (n *Node) Transfer(ctx context.Context, to uint32, total int64, frame int, pace time.Duration) (time.Duration, error) {
	if frame <= 0 || frame > MaxPayload {
		frame = 1 << 20
	}
	comm := n.NewComm()
	ch := n.waiter(comm)
	done := n.Expect(to)
	defer done()
	if n.cfg.Trace.On() {
		ctx = trace.WithOp(ctx, trace.Op{ID: trace.LinkID(n.cfg.ID, comm), Name: trace.NameLink})
	}
	t0 := time.Now()
	for sent := int64(0); ; {
		k := int(min(int64(frame), total-sent))
		sent += int64(k)
		flags := uint32(FlagSink)
		if sent >= total {
			flags |= FlagLast
		}
		if err := n.Send(ctx, to, Header{Type: TypeData, Comm: comm, Flags: flags}, zeros[:k]); err != nil {
			n.dropWaiter(comm)
			return 0, err
		}
		if sent >= total {
			break
		}
		if pace > 0 {
			select {
			case <-time.After(pace):
			case <-ctx.Done():
				n.dropWaiter(comm)
				return 0, ctx.Err()
			}
		}
	}
	b, err := n.await(ctx, to, comm, ch)
	if err != nil {
		return 0, err
	}
	if len(b) != 8 || int64(binary.LittleEndian.Uint64(b)) != total {
		return 0, fmt.Errorf("peer: node %d acknowledged %x, want %d bytes", to, b, total)
	}
	return time.Since(t0), nil
}

// dropSinks forgets the transfers under way from a peer declared dead:
// they will not finish, and must not count against its next incarnation.
func (n *Node) dropSinks(from uint32) {
	n.sinks.mu.Lock()
	defer n.sinks.mu.Unlock()
	for k, s := range n.sinks.m {
		if k.from == from {
			s.done()
			delete(n.sinks.m, k)
		}
	}
	delete(n.sinks.perSender, from)
}
