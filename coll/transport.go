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

// mailbox holds one sender's messages in order until they are received.
type mailbox struct {
	mu     sync.Mutex
	q      []Msg // q[head:] are waiting; the backing array is kept
	head   int
	bytes  int
	notify chan struct{} // capacity 1: something arrived
}

func newMailbox() *mailbox { return &mailbox{notify: make(chan struct{}, 1)} }

// push copies b in and returns the bytes now waiting.
func (m *mailbox) push(seq uint32, b []byte) int {
	buf := pool.get(len(b))
	copy(*buf, b)
	m.mu.Lock()
	m.q = append(m.q, Msg{Seq: seq, Data: *buf, buf: buf})
	m.bytes += len(b)
	n := m.bytes
	m.mu.Unlock()
	select {
	case m.notify <- struct{}{}:
	default:
	}
	return n
}

func (m *mailbox) pop() (Msg, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
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
