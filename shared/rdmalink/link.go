package rdmalink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
	"unsafe"

	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/verbs"
)

// Config sizes a Link. Both ends must agree on SlotSize (a message longer
// than the receiver's slot fails the connection).
type Config struct {
	Slots    int           // receives posted, and sends in flight (default 64)
	SlotSize int           // the longest message (default 256)
	MaxSleep time.Duration // the poller's longest sleep without a completion (default 20 ms: how soon it sees Close)
	// OnMessage takes each message received, on the poller's goroutine:
	// b is valid until it returns (with Hold: until Repost), and it must
	// not block on the link.
	OnMessage func(b []byte)
	// Hold keeps each message's receive slot until the taker calls
	// Repost: a peer that sends faster than it is read finds no receive
	// posted, and its NIC waits and retries (flow control without
	// credits).
	Hold bool
}

// QueueDepth is the send queue a connection for a Link of cfg needs when
// each message may follow up to perMessage READs or WRITEs: pass it to
// verbs.Dial and Accept.
func QueueDepth(cfg Config, perMessage int) int {
	cfg.defaults()
	return cfg.Slots * (perMessage + 1)
}

func (c *Config) defaults() {
	if c.Slots <= 0 {
		c.Slots = 64
	}
	if c.SlotSize <= 0 {
		c.SlotSize = 256
	}
	if c.MaxSleep <= 0 {
		c.MaxSleep = 20 * time.Millisecond
	}
}

// Work-request ids: their kind in the top bits.
const (
	kindRecv = 0
	kindSend = 1
	kindRDMA = 2
	kindMask = 3 << 62
)

func id(kind, n uint64) uint64 { return kind<<62 | n }

// Link is a message link over one connection. Send and Do are safe for
// concurrent use.
type Link struct {
	conn    *verbs.Conn
	cfg     Config
	slots   *verbs.Region // receive slots, then send slots
	regions []*verbs.Region

	mu      sync.Mutex
	free    []int // send slots
	waits   map[uint64]chan error
	seq     uint64
	freed   chan struct{} // a send slot freed (capacity 1)
	done    chan struct{} // closed when the link ends
	err     error
	cancel  context.CancelFunc
	stopped sync.WaitGroup
	closed  bool // Close began: no more sends
}

// linger bounds how long Close waits for the messages sent before it to
// be taken by the peer (a peer that reads nothing would hold it up).
const linger = time.Second

// ErrClosed is why a link closed here ended.
var ErrClosed = errors.New("rdmalink: closed")

// New runs a link on conn: it registers the slots, posts the receives
// and starts the poller. The link owns conn from now on (Close closes
// it), also when New fails.
func New(conn *verbs.Conn, cfg Config) (*Link, error) {
	cfg.defaults()
	l := &Link{conn: conn, cfg: cfg, waits: map[uint64]chan error{}, freed: make(chan struct{}, 1),
		done: make(chan struct{})}
	var err error
	if l.slots, err = conn.Device.Register(2 * cfg.Slots * cfg.SlotSize); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rdmalink: message slots: %w", err)
	}
	for i := range cfg.Slots {
		if err := conn.QP.PostRecv(l.slots, i*cfg.SlotSize, cfg.SlotSize, id(kindRecv, uint64(i))); err != nil {
			l.slots.Close()
			conn.Close()
			return nil, fmt.Errorf("rdmalink: post receive: %w", err)
		}
		l.free = append(l.free, i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.stopped.Add(2)
	go func() { defer l.stopped.Done(); l.poll(ctx) }()
	go func() {
		defer l.stopped.Done()
		if conn.WaitDisconnected(ctx) == nil {
			l.fail(io.EOF)
		}
	}()
	return l, nil
}

// Register registers a region of size bytes on the link's device, for
// Do's work requests; the link closes it.
func (l *Link) Register(size int) (*verbs.Region, error) {
	r, err := l.conn.Device.Register(size)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.regions = append(l.regions, r)
	l.mu.Unlock()
	return r, nil
}

// Closed reports whether Close was called.
func (l *Link) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Done is closed when the link has ended; Err says why.
func (l *Link) Done() <-chan struct{} { return l.done }

// Err is why the link ended: io.EOF when the peer disconnected, ErrClosed
// after Close, a work request's failure otherwise; nil while it runs.
func (l *Link) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// fail ends the link with err (the first reason stays).
func (l *Link) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	close(l.done)
	for k, ch := range l.waits {
		ch <- err
		delete(l.waits, k)
	}
}

// Send sends b (at most SlotSize bytes) to the peer's next receive,
// waiting for a free slot until ctx ends.
func (l *Link) Send(ctx context.Context, b []byte) error {
	if len(b) > l.cfg.SlotSize {
		return fmt.Errorf("rdmalink: a message of %d bytes, at most %d", len(b), l.cfg.SlotSize)
	}
	for {
		l.mu.Lock()
		if l.err != nil || l.closed {
			err := l.err
			l.mu.Unlock()
			if err == nil {
				err = ErrClosed
			}
			return err
		}
		if n := len(l.free); n > 0 {
			slot := l.free[n-1]
			l.free = l.free[:n-1]
			off := (l.cfg.Slots + slot) * l.cfg.SlotSize
			copy(l.slots.Buf[off:], b)
			err := l.conn.QP.Post(verbs.Work{Op: verbs.Send, ID: id(kindSend, uint64(slot)), Region: l.slots, Off: off, Len: len(b), Signaled: true})
			if err != nil {
				l.free = append(l.free, slot)
			}
			l.mu.Unlock()
			return err
		}
		l.mu.Unlock()
		select {
		case <-l.freed:
		case <-l.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Post posts w (a READ or WRITE; its ID is the link's) without waiting:
// unsignaled, its failure alone completes, and ends the link. A message
// sent after it on the link reaches the peer after its bytes.
func (l *Link) Post(w verbs.Work) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	l.seq++
	w.ID, w.Signaled = id(kindRDMA, l.seq), false
	return l.conn.QP.Post(w)
}

// Do posts ws (READs or WRITEs; their IDs are the link's) and waits until
// every one completed, ctx ended or the link did.
func (l *Link) Do(ctx context.Context, ws ...verbs.Work) error {
	chs := make([]chan error, 0, len(ws))
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	var perr error
	for _, w := range ws {
		l.seq++
		w.ID, w.Signaled = id(kindRDMA, l.seq), true
		ch := make(chan error, 1)
		if perr = l.conn.QP.Post(w); perr != nil {
			break
		}
		l.waits[w.ID] = ch
		chs = append(chs, ch)
	}
	l.mu.Unlock()
	var first error = perr
	for _, ch := range chs {
		select {
		case err := <-ch:
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return ctx.Err() // the waits are dropped when the link ends
		}
	}
	return first
}

// poll takes completions until ctx ends: it spins a while after the last
// (ring.Waiter's spin), then sleeps in the kernel until the next one
// comes (the completion channel), never yielding in between: on
// soft-RoCE the NIC's work is this machine's kernel's, which a poller
// that keeps its CPU starves.
func (l *Link) poll(ctx context.Context) {
	var w ring.Waiter
	w.SkipYield()
	q := l.conn.QP
	var cs []verbs.Completion
	// took polls and takes what completed: whether anything did, and
	// whether the link goes on.
	took := func() (found, goOn bool) {
		var err error
		if cs, err = q.Poll(cs[:0]); err != nil {
			l.fail(err)
			return false, false
		}
		if len(cs) == 0 {
			return false, true
		}
		w.Reset()
		w.SkipYield()
		for _, c := range cs {
			if !l.complete(c) {
				return true, false
			}
		}
		return true, true
	}
	for ctx.Err() == nil {
		if found, goOn := took(); !goOn {
			return
		} else if found {
			continue
		}
		if !w.Idle() {
			w.Wait()
			continue
		}
		// Arm, look once more (a completion queued before arming makes
		// no event), then sleep until one comes (bounded, to see ctx).
		if err := q.Arm(); err != nil {
			l.fail(err)
			return
		}
		if found, goOn := took(); !goOn {
			return
		} else if found {
			continue
		}
		if _, err := q.WaitEvent(l.cfg.MaxSleep); err != nil {
			l.fail(err)
			return
		}
	}
}

// complete takes one completion; false when the link ended.
func (l *Link) complete(c verbs.Completion) bool {
	n := c.ID &^ kindMask
	switch c.ID >> 62 {
	case kindRecv:
		if c.Err != nil {
			l.fail(fmt.Errorf("rdmalink: receive: %w", c.Err))
			return false
		}
		off := int(n) * l.cfg.SlotSize
		if l.cfg.OnMessage != nil {
			l.cfg.OnMessage(l.slots.Buf[off : off+c.Bytes : off+l.cfg.SlotSize])
		}
		if l.cfg.Hold {
			return true
		}
		if err := l.conn.QP.PostRecv(l.slots, off, l.cfg.SlotSize, c.ID); err != nil {
			l.fail(fmt.Errorf("rdmalink: post receive: %w", err))
			return false
		}
	case kindSend:
		l.mu.Lock()
		l.free = append(l.free, int(n))
		l.mu.Unlock()
		select {
		case l.freed <- struct{}{}:
		default:
		}
		if c.Err != nil {
			l.fail(fmt.Errorf("rdmalink: send: %w", c.Err))
			return false
		}
	case kindRDMA:
		l.mu.Lock()
		ch := l.waits[c.ID]
		delete(l.waits, c.ID)
		l.mu.Unlock()
		if ch != nil {
			ch <- c.Err
		}
		if c.Err != nil {
			l.fail(fmt.Errorf("rdmalink: %w", c.Err))
			return false
		}
	}
	return true
}

// Repost posts again the receive slot of b, a message OnMessage was given
// (with Config.Hold).
func (l *Link) Repost(b []byte) error {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(l.slots.Buf)))
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) - base)
	if off < 0 || off >= l.cfg.Slots*l.cfg.SlotSize || off%l.cfg.SlotSize != 0 {
		return fmt.Errorf("rdmalink: repost of a message not in a receive slot")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if err := l.conn.QP.PostRecv(l.slots, off, l.cfg.SlotSize, id(kindRecv, uint64(off/l.cfg.SlotSize))); err != nil {
		return fmt.Errorf("rdmalink: post receive: %w", err)
	}
	return nil
}

// Close ends the link: once the messages sent before it have been taken
// by the peer (for at most a second: linger), the poller stops and the
// queue pair, the regions and the connection are released (the peer sees
// a disconnection).
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.drain()
	l.fail(ErrClosed)
	l.cancel()
	l.stopped.Wait()
	// The queue pair goes before the memory it may still touch, and both
	// before the protection domain (the connection's).
	l.conn.QP.Close()
	for _, r := range l.regions {
		r.Close()
	}
	l.slots.Close()
	return l.conn.Close()
}

// drain waits, up to linger, for every send slot to be free: what was
// sent has been received (a reliable connection completes a send once the
// peer acknowledged it).
func (l *Link) drain() {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(linger)
	for {
		l.mu.Lock()
		idle := len(l.free) == l.cfg.Slots || l.err != nil
		l.mu.Unlock()
		if idle || time.Now().After(deadline) {
			return
		}
		select {
		case <-l.done:
		case <-tick.C:
		}
	}
}

// Messages is the handshake's view of a link: Write sends one message,
// Read reads the messages taken (given to Take) as one stream. A
// handshake written for a stream (wire.AuthHost, wire.AuthAgent) runs on
// it when each Write of one side is read whole by the other.
type Messages struct {
	L       *Link
	Ctx     context.Context
	In      <-chan []byte // the messages received, each a copy
	pending []byte
}

func (m *Messages) Write(b []byte) (int, error) {
	if err := m.L.Send(m.Ctx, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (m *Messages) Read(p []byte) (int, error) {
	for len(m.pending) == 0 {
		select {
		case b := <-m.In:
			m.pending = b
		case <-m.L.Done():
			return 0, m.L.Err()
		case <-m.Ctx.Done():
			return 0, m.Ctx.Err()
		}
	}
	n := copy(p, m.pending)
	m.pending = m.pending[n:]
	return n, nil
}
