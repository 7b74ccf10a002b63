package coll

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/shared/peer"
)

// Bounds on what peers can make an endpoint hold.
const (
	// MaxBuffered bounds the bytes one communicator holds from its peers
	// before they are received: more means a peer sends what nobody
	// asked for, and the communicator is aborted.
	MaxBuffered = 1 << 30
	// maxEarly bounds the bytes held for communicators not joined yet (a
	// rank that starts before this one), all together.
	maxEarly = 256 << 20
)

// Endpoint routes one peer node's collective frames (TypeData, TypeAbort)
// to its communicators, by communicator id and epoch. Frames that arrive
// before this node joins their communicator are held (up to a bound) until
// it does.
type Endpoint struct {
	node *peer.Node

	mu         sync.Mutex
	comms      map[commKey]*PeerTransport
	early      map[commKey][]earlyFrame
	earlyBytes int
	aborts     map[commKey]keptAbort // aborts of communicators not joined yet
	gone       map[commKey]*tomb     // communicators forgotten (Forget) and not joined again
	joining    map[commKey]bool      // communicators taking their held frames (Join)

	// Dropped counts frames refused: from a non-member, over a bound.
	Dropped atomic.Uint64
}

type commKey struct{ comm, epoch uint64 }

// keptAbort is an abort of a communicator this node has not joined yet.
type keptAbort struct {
	why    string
	origin int // the rank where it began; -1 where the sender did not say
	from   uint32
}

// An abort frame names the rank where the abort began (its first reason):
// Flags holds that rank plus one above its low byte, zero where unknown.
// A rank does not take an abort that began with itself, told back to it:
// it knew first, and a communicator it joined anew (a job restarted with
// the same id and epoch) must not be aborted by the job that is gone.
func abortFlags(origin int) uint32 {
	if origin < 0 {
		return 0
	}
	return uint32(origin+1) << 8
}

func abortOrigin(h peer.Header) int { return int(h.Flags>>8) - 1 }

// tomb is what a forgotten communicator answers the frames of collectives
// its rank never reached: an abort, once to each sender.
type tomb struct {
	next uint32 // the first sequence number the rank did not reach
	rank int    // the forgotten rank
	why  string
	told map[uint32]bool
}

// maxGone bounds the forgotten communicators an endpoint remembers.
const maxGone = 4096

type earlyFrame struct {
	from uint32
	seq  uint32
	b    []byte
}

// NewEndpoint serves node's data and abort frames. The node must not have
// other handlers of those types.
func NewEndpoint(node *peer.Node) *Endpoint {
	e := &Endpoint{node: node, comms: map[commKey]*PeerTransport{}, early: map[commKey][]earlyFrame{},
		aborts: map[commKey]keptAbort{}, gone: map[commKey]*tomb{}, joining: map[commKey]bool{}}
	node.Handle(peer.TypeData, e.serveData)
	node.Handle(peer.TypeAbort, e.serveAbort)
	return e
}

// Node is the endpoint's peer node.
func (e *Endpoint) Node() *peer.Node { return e.node }

func (e *Endpoint) serveData(from uint32, h peer.Header, payload []byte) {
	k := commKey{h.Comm, h.Epoch}
	seq := h.Flags >> 8
	e.mu.Lock()
	t := e.comms[k]
	if g := e.gone[k]; t == nil && g != nil && seqAhead(seq, g.next) {
		// A collective the forgotten rank never reached: its sender
		// waits on this rank, which will not come.
		tell := !g.told[from]
		g.told[from] = true
		e.mu.Unlock()
		e.Dropped.Add(1)
		if tell {
			go e.tellAbort(from, h.Comm, h.Epoch, g.rank, g.why)
		}
		return
	}
	if t == nil {
		if e.earlyBytes+len(payload) > maxEarly || len(e.early) > 4096 {
			e.mu.Unlock()
			e.Dropped.Add(1)
			go e.tellAbort(from, h.Comm, h.Epoch, -1, "too much data for communicators not joined yet")
			return
		}
		e.early[k] = append(e.early[k], earlyFrame{from: from, seq: seq, b: append([]byte(nil), payload...)})
		e.earlyBytes += len(payload)
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	t.deliver(from, seq, payload)
}

func (e *Endpoint) serveAbort(from uint32, h peer.Header, payload []byte) {
	why := string(payload[:min(len(payload), 1024)])
	k := commKey{h.Comm, h.Epoch}
	e.mu.Lock()
	t := e.comms[k]
	if t == nil && e.gone[k] == nil && len(e.aborts) < 4096 {
		// Kept for a rank that joins later; not for a communicator this
		// rank forgot, whose abort concerns the job that is gone, not one
		// restarted with the same id and epoch.
		e.aborts[k] = keptAbort{why: why, origin: abortOrigin(h), from: from}
	}
	e.mu.Unlock()
	if t != nil {
		t.abortedBy(why, abortOrigin(h), from)
	}
}

// tellAbort sends node to an abort of comm that began at rank origin (-1:
// not known).
func (e *Endpoint) tellAbort(to uint32, comm, epoch uint64, origin int, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.node.Deadline())
	defer cancel()
	e.node.Send(ctx, to, peer.Header{Type: peer.TypeAbort, Comm: comm, Epoch: epoch, Flags: abortFlags(origin)}, []byte(why))
}

// Join returns this node's transport in communicator comm at epoch: the
// ranks are nodes, in rank order, this node among them. Frames of older
// epochs of comm are dropped from now on.
func (e *Endpoint) Join(comm, epoch uint64, nodes []uint32) (*PeerTransport, error) {
	me := e.node.ID()
	rank := slices.Index(nodes, me)
	if rank < 0 {
		return nil, fmt.Errorf("coll: node %d is not among the communicator's nodes %v", me, nodes)
	}
	t := &PeerTransport{e: e, comm: comm, epoch: epoch, nodes: slices.Clone(nodes), rank: rank,
		rankOf: map[uint32]int{}, boxes: make([]*mailbox, len(nodes)), abort: make(chan struct{})}
	for i, id := range nodes {
		if _, dup := t.rankOf[id]; dup {
			return nil, fmt.Errorf("coll: node %d twice among the communicator's nodes", id)
		}
		t.rankOf[id] = i
		t.boxes[i] = newMailbox()
	}
	k := commKey{comm, epoch}
	e.node.SetEpoch(comm, epoch)
	e.mu.Lock()
	if e.comms[k] != nil || e.joining[k] {
		e.mu.Unlock()
		return nil, fmt.Errorf("coll: communicator %#x epoch %d joined twice", comm, epoch)
	}
	e.joining[k] = true
	delete(e.gone, k)
	for ek := range e.early {
		if ek.comm == comm && ek.epoch < epoch {
			for _, f := range e.early[ek] {
				e.earlyBytes -= len(f.b)
			}
			delete(e.early, ek)
		}
	}
	// The frames held for the communicator go in first, and it is
	// published only once none is left: until then frames that come are
	// held behind them, so none overtakes another of its sender.
	for {
		early := e.early[k]
		delete(e.early, k)
		if len(early) == 0 {
			break
		}
		for _, f := range early {
			e.earlyBytes -= len(f.b)
		}
		e.mu.Unlock()
		for _, f := range early {
			t.deliver(f.from, f.seq, f.b)
		}
		e.mu.Lock()
	}
	delete(e.joining, k)
	e.comms[k] = t
	kept, wasAborted := e.aborts[k] // until now, an abort was kept there
	delete(e.aborts, k)
	e.mu.Unlock()
	if wasAborted {
		t.abortedBy(kept.why, kept.origin, kept.from)
	}
	return t, nil
}

// PeerTransport is one rank of a communicator whose ranks are peer nodes.
type PeerTransport struct {
	e           *Endpoint
	comm, epoch uint64
	nodes       []uint32
	rank        int
	rankOf      map[uint32]int
	boxes       []*mailbox

	mu     sync.Mutex
	abort  chan struct{}
	why    string // the first abort's reason
	origin int    // the rank where it began
	teller int    // the rank that told it here; -1: it began here
	closed bool
}

func (t *PeerTransport) Rank() int { return t.rank }

// Heard is, by rank, the last collective a message came of (Comm.Status).
func (t *PeerTransport) Heard() []uint32 { return heardOf(t.boxes) }
func (t *PeerTransport) Size() int       { return len(t.nodes) }

// Nodes are the ranks' node ids; Comm and Epoch the communicator's.
func (t *PeerTransport) Nodes() []uint32 { return slices.Clone(t.nodes) }
func (t *PeerTransport) Comm() uint64    { return t.comm }
func (t *PeerTransport) Epoch() uint64   { return t.epoch }

func (t *PeerTransport) deliver(from uint32, seq uint32, b []byte) {
	r, ok := t.rankOf[from]
	if !ok || r == t.rank {
		t.e.Dropped.Add(1)
		return
	}
	if t.boxes[r].deliver(r, seq, b) > MaxBuffered {
		t.Abort(fmt.Sprintf("rank %d (node %d) sent more than %d bytes nobody received", r, from, MaxBuffered))
	}
}

func (t *PeerTransport) abortSignal() <-chan struct{} { return t.abort }

// aborted aborts t for a reason of this rank's.
func (t *PeerTransport) aborted(why string) { t.abort1(why, t.rank, -1) }

// abortedBy takes an abort node from sent, which began at rank origin
// (-1: the sender's own). One that began here is not taken (abortFlags).
func (t *PeerTransport) abortedBy(why string, origin int, from uint32) {
	teller, ok := t.rankOf[from]
	if !ok {
		return
	}
	if origin < 0 || origin >= len(t.nodes) {
		origin = teller
	}
	if origin == t.rank {
		return
	}
	t.abort1(why, origin, teller)
}

func (t *PeerTransport) abort1(why string, origin, teller int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.why == "" {
		t.why, t.origin, t.teller = why, origin, teller
		if t.why == "" {
			t.why = "no reason given"
		}
		close(t.abort)
	}
}

func (t *PeerTransport) Send(ctx context.Context, to int, seq uint32, b []byte) error {
	if to < 0 || to >= len(t.nodes) || to == t.rank {
		return fmt.Errorf("coll: send to rank %d of %d", to, len(t.nodes))
	}
	select {
	case <-t.abort:
		return fmt.Errorf("%w: %s", ErrAborted, t.why)
	default:
	}
	h := peer.Header{Type: peer.TypeData, Comm: t.comm, Epoch: t.epoch, Flags: (seq & (1<<SeqBits - 1)) << 8}
	if err := t.e.node.Send(ctx, t.nodes[to], h, b); err != nil {
		return t.failed(to, err.Error())
	}
	return nil
}

// abortGrace is how long a rank that lost a peer waits for an abort that
// may be on its way: a rank that failed aborts before it exits, so a peer
// gone for that reason reports the first failure, not the exit.
const abortGrace = 250 * time.Millisecond

func (t *PeerTransport) failed(rank int, why string) error {
	select {
	case <-t.abort:
	case <-time.After(abortGrace):
		return &RankError{Rank: rank, Node: t.nodes[rank], Why: why}
	}
	return fmt.Errorf("%w: %s", ErrAborted, t.why)
}

func (t *PeerTransport) Recv(ctx context.Context, from int) (Msg, error) {
	if from < 0 || from >= len(t.nodes) || from == t.rank {
		return Msg{}, fmt.Errorf("coll: receive from rank %d of %d", from, len(t.nodes))
	}
	box := t.boxes[from]
	if m, ok := box.pop(); ok {
		return m, nil
	}
	id := t.nodes[from]
	done := t.e.node.Expect(id) // silence while we wait declares it dead
	defer done()
	tick := time.NewTicker(t.e.node.Deadline() / 8)
	defer tick.Stop()
	for {
		if m, ok := box.pop(); ok {
			return m, nil
		}
		select {
		case <-box.notify:
		case <-t.abort:
			if m, ok := box.pop(); ok {
				return m, nil
			}
			return Msg{}, fmt.Errorf("%w: %s", ErrAborted, t.why)
		case <-tick.C:
			if why := t.e.node.Dead(id); why != "" {
				return Msg{}, t.failed(from, why)
			}
		case <-ctx.Done():
			return Msg{}, ctx.Err()
		}
	}
}

// RecvPlan receives the next len(sinks) messages from rank from into
// sinks: on the connection's reader, as they arrive, when nothing was
// queued before them (DirectReceiver).
func (t *PeerTransport) RecvPlan(ctx context.Context, from int, sinks []Sink, start func(), filled func(k int)) error {
	if from < 0 || from >= len(t.nodes) || from == t.rank {
		return fmt.Errorf("coll: receive from rank %d of %d", from, len(t.nodes))
	}
	box := t.boxes[from]
	box.postPlan(from, sinks)
	defer box.endPlan()
	id := t.nodes[from]
	var (
		done func()
		tick *time.Ticker
		tc   <-chan time.Time
	)
	defer func() {
		if done != nil {
			done()
			tick.Stop()
		}
	}()
	if start != nil {
		// What comes from rank from is awaited while this rank sends: its
		// silence meanwhile declares it dead, however long the sends.
		done = t.e.node.Expect(id)
		tick = time.NewTicker(t.e.node.Deadline() / 8)
		tc = tick.C
		start()
	}
	next := 0
	for {
		n, errAt, err := box.planState()
		if err != nil {
			n = errAt
		}
		for ; next < n; next++ {
			if filled != nil {
				filled(next)
			}
		}
		if err != nil {
			return err
		}
		if next == len(sinks) {
			return nil
		}
		if done == nil { // waiting: silence from now on declares it dead
			done = t.e.node.Expect(id)
			tick = time.NewTicker(t.e.node.Deadline() / 8)
			tc = tick.C
		}
		select {
		case <-box.progress:
		case <-t.abort:
			return fmt.Errorf("%w: %s", ErrAborted, t.why)
		case <-tc:
			if why := t.e.node.Dead(id); why != "" {
				return t.failed(from, why)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Abort fails this rank's waits and tells every other rank, at once, each
// within the node's deadline, why the communicator was first aborted here
// (reason, unless another rank's abort came first: then every rank but
// the one it began at and the one that told it); it returns when the
// aborts are sent (so a process may exit after it) or that deadline
// passed.
func (t *PeerTransport) Abort(reason string) {
	t.aborted(reason)
	t.mu.Lock()
	reason, origin, teller := t.why, t.origin, t.teller // an earlier abort's reason, told on: it names the cause, not this rank's giving up
	t.mu.Unlock()
	var wg sync.WaitGroup
	for r, id := range t.nodes {
		if r != t.rank && r != origin && r != teller && t.e.node.Dead(id) == "" { // the dead would hold us up
			wg.Add(1)
			go func() { defer wg.Done(); t.e.tellAbort(id, t.comm, t.epoch, origin, reason) }()
		}
	}
	wg.Wait()
}

// Pending reports whether another rank's messages wait here to be taken:
// that rank is in a collective this one has not reached.
func (t *PeerTransport) Pending() bool {
	for _, b := range t.boxes {
		if b.waiting() {
			return true
		}
	}
	return false
}

// Close leaves the communicator: its frames are no longer taken, and a
// wait on it (which nothing can satisfy now) fails at once. The other
// ranks are not told: Abort first for that.
func (t *PeerTransport) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	t.mu.Unlock()
	t.aborted("the communicator was closed on this rank")
	t.e.mu.Lock()
	if t.e.comms[commKey{t.comm, t.epoch}] == t {
		delete(t.e.comms, commKey{t.comm, t.epoch})
	}
	t.e.mu.Unlock()
	for _, b := range t.boxes {
		b.drain()
	}
}

// Forget closes t for a rank that is gone (its host died) and has the
// endpoint answer, from now on, each other rank that sends for a
// collective numbered next or later (ones this rank never reached) with
// an abort carrying why, so that it fails now instead of waiting on this
// rank. Frames of earlier numbers, as a job restarted with the same
// communicator and epoch sends, are held as for any communicator not
// joined yet, and joining it again ends the answering. Other ranks'
// messages already waiting here are answered the same way at once.
func (t *PeerTransport) Forget(next uint32, why string) {
	k := commKey{t.comm, t.epoch}
	t.e.mu.Lock()
	if len(t.e.gone) >= maxGone {
		for old := range t.e.gone {
			delete(t.e.gone, old)
			break
		}
	}
	t.e.gone[k] = &tomb{next: next & (1<<SeqBits - 1), rank: t.rank, why: why, told: map[uint32]bool{}}
	if t.e.comms[k] == t {
		delete(t.e.comms, k) // at once with the tomb: no frame falls between
	}
	t.e.mu.Unlock()
	if t.Pending() {
		t.Abort(why)
	}
	t.Close()
}

// seqAhead reports whether sequence number s is next or later, in the
// SeqBits-bit space that wraps.
func seqAhead(s, next uint32) bool {
	return (s-next)&(1<<SeqBits-1) < 1<<(SeqBits-1)
}

// Without returns the transport of the communicator rebuilt without the
// given ranks (the dead ones every survivor was told of), at the next
// epoch: the survivors keep their order and are renumbered. It closes t.
// Every survivor must call it with the same ranks.
func (t *PeerTransport) Without(dead ...int) (*PeerTransport, error) {
	var nodes []uint32
	for r, id := range t.nodes {
		if !slices.Contains(dead, r) {
			nodes = append(nodes, id)
		}
	}
	if !slices.Contains(nodes, t.e.node.ID()) {
		return nil, fmt.Errorf("coll: this rank (%d) is among the ranks left out", t.rank)
	}
	t.Close()
	return t.e.Join(t.comm, t.epoch+1, nodes)
}
