package coll

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
		pool.put(m.buf)
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
		if s.Src != nil {
			return ReduceTo(s.Dst, s.Src, data, s.DType, s.Op)
		}
		return Reduce(s.Dst, data, s.DType, s.Op)
	}
	copy(s.Dst, data)
	return nil
}

// A DirectReceiver is a Transport that puts a message straight into its
// destination when the receive was posted before it arrived: one pass over
// the bytes, on the core that just read them, instead of a copy into a
// buffer and a second pass.
type DirectReceiver interface {
	RecvInto(ctx context.Context, from int, s *Sink) error
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

// bufPool keeps received messages' buffers by power-of-two size class, so a
// communicator in its steady state allocates nothing. Buffers are 8-byte
// aligned (make of 8 bytes or more), as the kernels want.
type bufPool struct{ classes [32]sync.Pool }

var pool bufPool

func sizeClass(n int) int {
	c := 6 // 64 bytes at least
	for 1<<c < n {
		c++
	}
	return c
}

func (p *bufPool) get(n int) *[]byte {
	c := sizeClass(n)
	if c >= len(p.classes) {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *bufPool) put(b *[]byte) {
	c := sizeClass(cap(*b))
	if c < len(p.classes) && 1<<c == cap(*b) {
		p.classes[c].Put(b)
	}
}

// mailbox holds one sender's messages in order until they are received,
// or the one receive posted before its message came.
type mailbox struct {
	mu     sync.Mutex
	q      []Msg // q[head:] are waiting; the backing array is kept
	head   int
	bytes  int
	notify chan struct{} // capacity 1: something arrived
	posted *Sink         // a receive waiting, the queue empty
	done   chan error    // capacity 1: the posted receive was served
}

func newMailbox() *mailbox {
	return &mailbox{notify: make(chan struct{}, 1), done: make(chan error, 1)}
}

// deliver serves the posted receive with b when there is one and nothing
// is queued before b; else it queues a copy. It returns the bytes queued.
func (m *mailbox) deliver(from int, seq uint32, b []byte) int {
	m.mu.Lock()
	if s := m.posted; s != nil && m.head == len(m.q) {
		m.posted = nil
		m.mu.Unlock()
		m.done <- s.Apply(from, seq, b)
		return 0
	}
	// Queue it under the same lock: a receive posted between a check and
	// a later push would wait for a message already queued.
	n := m.pushLocked(seq, b)
	m.mu.Unlock()
	m.wake()
	return n
}

// post posts s, or returns the first queued message when there is one.
func (m *mailbox) post(s *Sink) (Msg, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if msg, ok := m.popLocked(); ok {
		return msg, true
	}
	m.posted = s
	return Msg{}, false
}

// unpost withdraws s; when a delivery has taken it already, it waits for
// that to finish (it must not write into s.Dst after the caller returns).
func (m *mailbox) unpost(s *Sink) {
	m.mu.Lock()
	if m.posted == s {
		m.posted = nil
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	<-m.done
}

// push copies b in and returns the bytes now waiting.
func (m *mailbox) push(seq uint32, b []byte) int {
	m.mu.Lock()
	n := m.pushLocked(seq, b)
	m.mu.Unlock()
	m.wake()
	return n
}

func (m *mailbox) pushLocked(seq uint32, b []byte) int {
	buf := pool.get(len(b))
	copy(*buf, b)
	m.q = append(m.q, Msg{Seq: seq, Data: *buf, buf: buf})
	m.bytes += len(b)
	return m.bytes
}

func (m *mailbox) wake() {
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

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
func (t *LocalTransport) Size() int { return len(t.g.ts) }

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
