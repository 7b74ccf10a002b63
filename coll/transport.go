package coll

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/shared/bufpool"
	"github.com/hecsys/hec/shared/trace"
)

// Transport carries one communicator's messages between its ranks. Messages
// from one rank to another arrive in the order sent; every rank issues the
// same collectives in the same order, so a receiver always knows what comes
// next and checks it by its sequence number.
type Transport interface {
	// Rank is this process's rank, Size the number of ranks.
	Rank() int
	Size() int
	// Send sends b to rank to as one message tagged seq (SeqBits bits; the
	// communicator numbers its collectives). It returns once b
	// may be reused; it blocks while the receiver does not keep up.
	Send(ctx context.Context, to int, seq uint32, b []byte) error
	// Recv returns the next message from rank from. It fails with a
	// *RankError when that rank is declared dead (silent for the
	// deadline while this rank waits on it), with ErrAborted when another
	// rank abandoned the communicator, or when ctx ends.
	Recv(ctx context.Context, from int) (Msg, error)
	// Abort tells every rank that the communicator's work is abandoned
	// and fails this rank's own waits; reason names the cause.
	Abort(reason string)
}

// SeqBits is how many bits of a collective's sequence number messages
// carry.
const SeqBits = 24

// Msg is one received message. Release returns its buffer: Data must not be
// used after.
type Msg struct {
	Seq  uint32
	Data []byte
	buf  *[]byte // from pool; nil when not pooled
}

// Release returns the message's buffer to its pool.
func (m Msg) Release() {
	if m.buf != nil {
		bufpool.Put(m.buf)
	}
}

// Sink is where a receive puts a message: reduced into Dst, or copied.
// With Src set, a reduction writes Src op message into Dst (out of place:
// Src is the caller's send buffer, Dst its recv).
type Sink struct {
	Seq    uint32
	Dst    []byte
	Src    []byte
	DType  DType
	Op     Op
	Reduce bool

	trace *sinkTrace // while the communicator records: its reductions' spans
}

// sinkTrace is what a collective's spans with one peer are recorded
// under: its sends, a receive and the receive's reductions.
type sinkTrace struct {
	rec            *trace.Recorder
	id, name, peer string
}

// add records stage, of bytes, from t0 to now; err fails it.
func (t *sinkTrace) add(stage string, bytes int, t0 time.Time, err error) {
	s := trace.Span{ID: t.id, Name: t.name, Stage: stage, Start: t0.UnixNano(), Dur: int64(time.Since(t0)),
		Bytes: int64(bytes), Peer: t.peer}
	if err != nil {
		s.Status = "failed"
	}
	t.rec.Add(s)
}

// Apply checks that data (message seq from rank from) is what the sink
// waits for, and puts it there.
func (s *Sink) Apply(from int, seq uint32, data []byte) error {
	if seq != s.Seq {
		return fmt.Errorf("%w: rank %d sent a message of collective #%d during #%d (are the ranks calling the same collectives in the same order?)",
			ErrProtocol, from, seq, s.Seq)
	}
	if len(data) != len(s.Dst) {
		return fmt.Errorf("%w: rank %d sent %d bytes where %d were due (do the ranks agree on the count?)",
			ErrProtocol, from, len(data), len(s.Dst))
	}
	if s.Reduce {
		var t0 time.Time
		if s.trace != nil {
			t0 = time.Now()
		}
		var err error
		if s.Src != nil {
			err = ReduceTo(s.Dst, s.Src, data, s.DType, s.Op)
		} else {
			err = Reduce(s.Dst, data, s.DType, s.Op)
		}
		if s.trace != nil {
			s.trace.add(trace.StageReduce, len(data), t0, nil)
		}
		return err
	}
	copy(s.Dst, data)
	return nil
}

// A DirectReceiver is a Transport that puts messages straight into their
// destinations when their receives were posted before they arrived: one
// pass over the bytes, on the core that just read them, instead of a copy
// into a buffer and a second pass.
type DirectReceiver interface {
	// RecvPlan receives the next len(sinks) messages from rank from into
	// sinks, in order. Every receive is posted at once, so each message is
	// applied by the connection's reader as it arrives, without waking the
	// caller in between. start, when not nil, runs on the caller's
	// goroutine once they are posted and before it waits (the sends the
	// messages answer). filled(k), when not nil, runs on the caller's
	// goroutine, in order, once sinks[k] holds its message (a ring
	// forwards it there). Errors are Recv's, or a sink's Apply's.
	RecvPlan(ctx context.Context, from int, sinks []Sink, start func(), filled func(k int)) error
}

// Errors of a communicator.
var (
	// ErrAborted: a rank abandoned the communicator (its reason follows).
	ErrAborted = errors.New("coll: communicator aborted")
	// ErrProtocol: a rank sent what the collective does not expect (a
	// different collective, a different size): the ranks disagree.
	ErrProtocol = errors.New("coll: ranks disagree")
	// ErrClosed: the communicator was closed.
	ErrClosed = errors.New("coll: communicator closed")
)

// RankError says that a rank failed: declared dead, or gone.
type RankError struct {
	Rank int
	Node uint32 // its peer-layer id, when it has one
	Why  string
}

func (e *RankError) Error() string {
	if e.Node != 0 {
		return fmt.Sprintf("coll: rank %d (node %d) failed: %s", e.Rank, e.Node, e.Why)
	}
	return fmt.Sprintf("coll: rank %d failed: %s", e.Rank, e.Why)
}

// mailbox holds one sender's messages in order until they are received,
// or the plan of receives posted before they came.
type mailbox struct {
	mu     sync.Mutex
	q      []Msg // q[head:] are waiting; the backing array is kept
	head   int
	bytes  int
	notify chan struct{} // capacity 1: something arrived

	// The plan: plan[filled:] wait for the next messages, in order.
	plan     []Sink
	filled   int
	errAt    int           // the sink whose Apply failed (with planErr)
	planErr  error         // the first Apply that failed
	draining bool          // the poster applies queued messages to the plan
	busy     bool          // the deliverer applies a message to plan[filled]
	progress chan struct{} // capacity 1: a planned sink was filled
	idle     chan struct{} // capacity 1: busy went false

	heard atomic.Uint32 // the latest collective number a message came of (0: none)
}

// hear notes a message of collective seq.
func (m *mailbox) hear(seq uint32) {
	if h := m.heard.Load(); h == 0 || seqAhead(seq, h) {
		m.heard.Store(seq) // one deliverer per sender: no lost update
	}
}

// heardOf is, by sender, the number of the last collective each was heard
// at (the flight recorder's Status.Heard).
func heardOf(boxes []*mailbox) []uint32 {
	out := make([]uint32, len(boxes))
	for i, b := range boxes {
		out[i] = b.heard.Load()
	}
	return out
}

func newMailbox() *mailbox {
	return &mailbox{notify: make(chan struct{}, 1), progress: make(chan struct{}, 1), idle: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// deliver applies b to the plan's next sink when one waits and nothing is
// queued before b; else it queues a copy. It returns the bytes queued.
func (m *mailbox) deliver(from int, seq uint32, b []byte) int {
	m.hear(seq)
	m.mu.Lock()
	if m.filled < len(m.plan) && !m.draining && !m.busy && m.head == len(m.q) {
		s := &m.plan[m.filled]
		m.busy = true
		m.mu.Unlock()
		err := s.Apply(from, seq, b)
		m.mu.Lock()
		m.busy = false
		m.fillLocked(err)
		m.mu.Unlock()
		signal(m.progress)
		signal(m.idle)
		return 0
	}
	// Queue it under the same lock: a plan posted between a check and a
	// later push would wait for a message already queued.
	n := m.pushLocked(seq, b)
	m.mu.Unlock()
	m.wake()
	return n
}

func (m *mailbox) fillLocked(err error) {
	if err != nil && m.planErr == nil {
		m.planErr, m.errAt = err, m.filled
	}
	m.filled++
}

// postPlan posts sinks: messages queued already are applied to them here,
// the ones to come by deliver.
func (m *mailbox) postPlan(from int, sinks []Sink) {
	m.mu.Lock()
	m.plan, m.filled, m.planErr, m.draining = sinks, 0, nil, true
	for m.filled < len(m.plan) {
		msg, ok := m.popLocked()
		if !ok {
			break
		}
		// Unlocked while applying: a message that comes meanwhile is
		// queued behind (draining), and taken by this loop in turn.
		m.mu.Unlock()
		err := m.plan[m.filled].Apply(from, msg.Seq, msg.Data)
		msg.Release()
		m.mu.Lock()
		m.fillLocked(err)
	}
	m.draining = false
	m.mu.Unlock()
}

// planState returns how many sinks are filled and, once one failed, which
// and why.
func (m *mailbox) planState() (filled, errAt int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.filled, m.errAt, m.planErr
}

// endPlan withdraws the plan; when a delivery is applying a message to one
// of its sinks, it waits for that to finish (nothing may be written into a
// sink after its receiver returns).
func (m *mailbox) endPlan() {
	m.mu.Lock()
	m.plan = nil
	for m.busy {
		m.mu.Unlock()
		<-m.idle
		m.mu.Lock()
	}
	m.filled, m.planErr = 0, nil
	m.mu.Unlock()
	select { // a stale signal would end the next plan's first wait early
	case <-m.progress:
	default:
	}
}

// push copies b in and returns the bytes now waiting.
func (m *mailbox) push(seq uint32, b []byte) int {
	m.hear(seq)
	m.mu.Lock()
	n := m.pushLocked(seq, b)
	m.mu.Unlock()
	m.wake()
	return n
}

func (m *mailbox) pushLocked(seq uint32, b []byte) int {
	buf := bufpool.Get(len(b))
	copy(*buf, b)
	m.q = append(m.q, Msg{Seq: seq, Data: *buf, buf: buf})
	m.bytes += len(b)
	return m.bytes
}

func (m *mailbox) wake() { signal(m.notify) }

func (m *mailbox) pop() (Msg, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.popLocked()
}

func (m *mailbox) popLocked() (Msg, bool) {
	if m.head == len(m.q) {
		return Msg{}, false
	}
	msg := m.q[m.head]
	m.q[m.head] = Msg{}
	m.head++
	if m.head == len(m.q) {
		m.q, m.head = m.q[:0], 0
	}
	m.bytes -= len(msg.Data)
	return msg, true
}

// waiting reports whether messages wait to be taken.
func (m *mailbox) waiting() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.head < len(m.q)
}

func (m *mailbox) drain() {
	for {
		msg, ok := m.pop()
		if !ok {
			return
		}
		msg.Release()
	}
}

// Local returns the transports of n ranks in this process, joined by
// mailboxes: for tests, and for ranks that share an address space.
// Kill(r) makes rank r's peers see it die.
func Local(n int) []*LocalTransport {
	g := &localGroup{abort: make(chan struct{}), dead: make([]chan struct{}, n)}
	ts := make([]*LocalTransport, n)
	for i := range ts {
		g.dead[i] = make(chan struct{})
		ts[i] = &LocalTransport{g: g, rank: i, boxes: make([]*mailbox, n)}
		for j := range n {
			ts[i].boxes[j] = newMailbox()
		}
	}
	g.ts = ts
	return ts
}

type localGroup struct {
	ts       []*LocalTransport
	mu       sync.Mutex
	abort    chan struct{}
	aborted  string
	dead     []chan struct{}
	deadOnce sync.Map
}

// LocalTransport is one rank of Local.
type LocalTransport struct {
	g     *localGroup
	rank  int
	boxes []*mailbox // by sender
}

func (t *LocalTransport) Rank() int { return t.rank }

// Heard is, by rank, the last collective a message came of (Comm.Status).
func (t *LocalTransport) Heard() []uint32 { return heardOf(t.boxes) }
func (t *LocalTransport) Size() int       { return len(t.g.ts) }

func (t *LocalTransport) Send(ctx context.Context, to int, seq uint32, b []byte) error {
	if to < 0 || to >= len(t.g.ts) {
		return fmt.Errorf("coll: send to rank %d of %d", to, len(t.g.ts))
	}
	select {
	case <-t.g.dead[to]:
		return &RankError{Rank: to, Why: "killed"}
	default:
	}
	t.g.ts[to].boxes[t.rank].push(seq, b)
	return nil
}

func (t *LocalTransport) Recv(ctx context.Context, from int) (Msg, error) {
	box := t.boxes[from]
	for {
		if m, ok := box.pop(); ok {
			return m, nil
		}
		select {
		case <-box.notify:
		case <-t.g.dead[from]:
			if m, ok := box.pop(); ok {
				return m, nil
			}
			return Msg{}, &RankError{Rank: from, Why: "killed"}
		case <-t.g.abort:
			t.g.mu.Lock()
			why := t.g.aborted
			t.g.mu.Unlock()
			return Msg{}, fmt.Errorf("%w: %s", ErrAborted, why)
		case <-ctx.Done():
			return Msg{}, ctx.Err()
		}
	}
}

func (t *LocalTransport) Abort(reason string) {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	if t.g.aborted == "" {
		t.g.aborted = reason
		close(t.g.abort)
	}
}

// Kill makes rank r dead to the others.
func (t *LocalTransport) Kill() {
	if _, loaded := t.g.deadOnce.LoadOrStore(t.rank, true); !loaded {
		close(t.g.dead[t.rank])
	}
}
