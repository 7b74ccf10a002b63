package host

import (
	"context"
	"fmt"
	"sync"

	"github.com/hecsys/hec/coll"
)

// Communicator is a rank's communicator on either rail: DPUComm (the
// agents run the collectives) or HostComm (this process runs them with
// the other ranks' processes). Both take collectives asynchronously, from
// any goroutine, and run them in the order Start was called, which must
// be the same on every rank.
type Communicator interface {
	Start(ctx context.Context, k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) (*CollOp, error)
	Run(ctx context.Context, k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) error
	Rank() int
	Size() int
	// Abort gives the communicator up: collectives in flight fail soon on
	// every rank, later ones at once.
	Abort(why error)
	// Leave ends this rank's membership once the collectives in flight
	// are done; collectives started after it fail.
	Leave(ctx context.Context) error
}

var (
	_ Communicator = (*DPUComm)(nil)
	_ Communicator = (*HostComm)(nil)
)

// HostComm is a communicator of host processes among themselves (the
// host rail): coll's algorithms over the peer layer, run by this process,
// one at a time, in the order they were started. Any buffers of any
// length do (nothing is staged: the host rail works on the caller's
// memory).
type HostComm struct {
	g *coll.Group

	mu      sync.Mutex
	queue   []*CollOp
	running bool
	idle    chan struct{} // closed when the runner stops
	broken  error
}

// NewHostComm takes over g, whose communicator is joined: Leave closes it.
func NewHostComm(g *coll.Group) *HostComm { return &HostComm{g: g} }

// Rank is this process's rank; Size the number of ranks.
func (h *HostComm) Rank() int { return h.g.Rank() }
func (h *HostComm) Size() int { return h.g.Size() }

// Start queues a collective and returns at once; it runs after the ones
// started before it. send and recv are the caller's until Done is closed.
func (h *HostComm) Start(ctx context.Context, k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) (*CollOp, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("host: coll: unknown collective %v", k)
	}
	o := &CollOp{ctx: ctx, kind: k, dt: dt, op: op, root: root, send: send, recv: recv, done: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.broken != nil {
		return nil, h.broken
	}
	h.queue = append(h.queue, o)
	if !h.running {
		h.running, h.idle = true, make(chan struct{})
		go h.runQueue()
	}
	return o, nil
}

// Run is Start followed by Wait.
func (h *HostComm) Run(ctx context.Context, k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) error {
	o, err := h.Start(ctx, k, send, recv, dt, op, root)
	if err != nil {
		return err
	}
	<-o.Done()
	return o.Err()
}

// runQueue runs the queued collectives in order until none is left.
func (h *HostComm) runQueue() {
	for {
		h.mu.Lock()
		if len(h.queue) == 0 {
			h.running = false
			close(h.idle)
			h.mu.Unlock()
			return
		}
		o := h.queue[0]
		h.queue[0] = nil
		h.queue = h.queue[1:]
		err := h.broken
		h.mu.Unlock()
		if err == nil {
			if err = h.g.Comm.Run(o.ctx, o.kind, o.send, o.recv, o.dt, o.op, o.root); err != nil {
				// coll aborts the communicator on every rank: later
				// collectives fail at once.
				err = fmt.Errorf("%w: %w", ErrCommBroken, err)
				h.breakOff(err)
			}
		}
		o.err = err
		close(o.done)
	}
}

func (h *HostComm) breakOff(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.broken == nil {
		h.broken = err
	}
}

// Abort gives the communicator up, telling the other ranks.
func (h *HostComm) Abort(why error) {
	h.breakOff(fmt.Errorf("%w: given up: %w", ErrCommBroken, why))
	h.g.Transport.Abort(why.Error())
}

// Leave waits for the collectives in flight (or ctx), then closes this
// rank's peer node.
func (h *HostComm) Leave(ctx context.Context) error {
	h.mu.Lock()
	if h.broken == nil {
		h.broken = fmt.Errorf("%w (it was left)", ErrCommBroken)
	}
	idle, running := h.idle, h.running
	h.mu.Unlock()
	if running {
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("host: coll leave: waiting for the collectives in flight: %w", ctx.Err())
		}
	}
	h.g.Close()
	return nil
}
