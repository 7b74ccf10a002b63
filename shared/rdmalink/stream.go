package rdmalink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/hecsys/hec/shared/verbs"
)

// A Stream is a net.Conn over a Link: what is written is sent as messages
// of up to StreamSlotSize bytes, read back in order on the other side. A
// receive slot is posted again once its message has been read, so a
// reader that falls behind holds its writer back in the NIC (it finds no
// receive posted, and retries), not in memory. The peer layer's frames run
// on it unchanged (--peer-transport rdma): its handshake, its keys and its
// deadlines.
type Stream struct {
	l      *Link
	in     chan []byte
	local  net.Addr
	remote net.Addr

	rmu  sync.Mutex // one reader
	cur  []byte     // what is left of the message being read
	slot []byte     // its receive slot, posted again once read
	wmu  sync.Mutex // one writer: messages go out in order

	dmu     sync.Mutex
	rdl     time.Time
	wdl     time.Time
	rdlSet  chan struct{}           // a read deadline changed (capacity 1)
	wchange context.CancelCauseFunc // ends the wait of the Write under way
}

// errDeadlineChanged ends a Write's wait for it to look at its deadline
// again.
var errDeadlineChanged = errors.New("rdmalink: write deadline changed")

// Stream sizes: 32 messages of 64 KiB in flight each way (4 MiB
// registered per connection).
const (
	StreamSlots    = 32
	StreamSlotSize = 64 << 10
)

// StreamMagic opens a stream's connect request and accept reply.
var StreamMagic = []byte("HECS\x01")

// Addr is an RDMA connection's end: IPv4 and port, as the connection
// manager addresses it.
type Addr struct{ netip.AddrPort }

func (Addr) Network() string { return "rdma" }

func streamConfig(s *Stream) Config {
	return Config{Slots: StreamSlots, SlotSize: StreamSlotSize, Hold: true, OnMessage: func(b []byte) { s.in <- b }}
}

func newStream(conn *verbs.Conn, local, remote net.Addr) (*Stream, error) {
	s := &Stream{in: make(chan []byte, StreamSlots), local: local, remote: remote, rdlSet: make(chan struct{}, 1)}
	l, err := New(conn, streamConfig(s))
	if err != nil {
		return nil, err
	}
	s.l = l
	return s, nil
}

// DialStream connects a stream to a StreamListener at addr (IPv4:PORT of
// an RDMA device's interface).
func DialStream(ctx context.Context, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("rdmalink: %q: want IPv4:PORT: %w", addr, err)
	}
	conn, reply, err := verbs.Dial(ctx, ap, StreamMagic, QueueDepth(Config{Slots: StreamSlots}, 0))
	if err != nil {
		return nil, err
	}
	if string(reply) != string(StreamMagic) {
		conn.Close()
		return nil, fmt.Errorf("rdmalink: %s is not a stream listener", addr)
	}
	return newStream(conn, Addr{}, Addr{ap})
}

func (s *Stream) Read(p []byte) (int, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.l.Closed() {
		return 0, net.ErrClosed
	}
	if len(p) == 0 {
		return 0, nil
	}
	for len(s.cur) == 0 {
		if s.slot != nil {
			if err := s.l.Repost(s.slot); err != nil {
				return 0, s.closedErr(err)
			}
			s.slot = nil
		}
		if err := s.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	return n, nil
}

// next waits for the next message, until the read deadline.
func (s *Stream) next() error {
	for {
		select { // what came before the link ended is read first
		case b := <-s.in:
			s.cur, s.slot = b, b
			return nil
		default:
		}
		s.dmu.Lock()
		dl := s.rdl
		s.dmu.Unlock()
		var expire <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			expire = t.C
		}
		select {
		case b := <-s.in:
			s.cur, s.slot = b, b
			return nil
		case <-s.l.Done():
			select {
			case b := <-s.in:
				s.cur, s.slot = b, b
				return nil
			default:
			}
			return s.closedErr(s.l.Err())
		case <-expire:
			return os.ErrDeadlineExceeded
		case <-s.rdlSet:
		}
	}
}

// closedErr is what a Read or Write returns once the link ended: io.EOF
// where the peer disconnected, net.ErrClosed where this side closed.
func (s *Stream) closedErr(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.Is(err, ErrClosed):
		return net.ErrClosed
	}
	return err
}

func (s *Stream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.l.Closed() {
		return 0, net.ErrClosed
	}
	n := 0
	for n < len(p) {
		m := min(len(p)-n, StreamSlotSize)
		err := s.send(p[n : n+m])
		if errors.Is(err, errDeadlineChanged) {
			continue // the same message, under the new deadline
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// send sends one message, until the write deadline (or its change).
func (s *Stream) send(b []byte) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	s.dmu.Lock()
	dl := s.wdl
	s.wchange = cancel
	s.dmu.Unlock()
	defer func() {
		s.dmu.Lock()
		s.wchange = nil
		s.dmu.Unlock()
	}()
	if !dl.IsZero() {
		d := time.Until(dl)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		t := time.AfterFunc(d, func() { cancel(os.ErrDeadlineExceeded) })
		defer t.Stop()
	}
	err := s.l.Send(ctx, b)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx)
	}
	return s.closedErr(err)
}

// Close disconnects: the other side reads io.EOF.
func (s *Stream) Close() error { return s.l.Close() }

func (s *Stream) LocalAddr() net.Addr  { return s.local }
func (s *Stream) RemoteAddr() net.Addr { return s.remote }

func (s *Stream) SetDeadline(t time.Time) error {
	s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

func (s *Stream) SetReadDeadline(t time.Time) error {
	s.dmu.Lock()
	s.rdl = t
	s.dmu.Unlock()
	select {
	case s.rdlSet <- struct{}{}:
	default:
	}
	return nil
}

func (s *Stream) SetWriteDeadline(t time.Time) error {
	s.dmu.Lock()
	s.wdl = t
	if s.wchange != nil {
		s.wchange(errDeadlineChanged)
	}
	s.dmu.Unlock()
	return nil
}

// StreamListener takes streams at an address: a net.Listener.
type StreamListener struct {
	ln     *verbs.Listener
	addr   Addr
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex // held by Accept: Close waits for it
	once   sync.Once
}

// ListenStream listens for streams at addr (IPv4:PORT of an RDMA device's
// interface, or 0.0.0.0:PORT).
func ListenStream(addr string) (*StreamListener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("rdmalink: %q: want IPv4:PORT: %w", addr, err)
	}
	ln, err := verbs.Listen(ap)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &StreamListener{ln: ln, addr: Addr{ap}, ctx: ctx, cancel: cancel}, nil
}

// Accept returns the next stream; requests that are not a stream's are
// refused and skipped. After Close it returns net.ErrClosed.
func (sl *StreamListener) Accept() (net.Conn, error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for {
		if sl.ctx.Err() != nil {
			return nil, net.ErrClosed
		}
		conn, err := sl.ln.Accept(sl.ctx, QueueDepth(Config{Slots: StreamSlots}, 0), func(private []byte) ([]byte, error) {
			if string(private) != string(StreamMagic) {
				return nil, errors.New("not a stream's request")
			}
			return StreamMagic, nil
		})
		if err != nil {
			if sl.ctx.Err() != nil {
				return nil, net.ErrClosed
			}
			time.Sleep(time.Millisecond) // a request refused, or one that did not complete
			continue
		}
		return newStream(conn, sl.addr, Addr{})
	}
}

// Close stops listening; an Accept under way returns net.ErrClosed.
func (sl *StreamListener) Close() error {
	sl.once.Do(func() {
		sl.cancel()
		sl.mu.Lock() // the Accept under way has returned
		sl.ln.Close()
		sl.mu.Unlock()
	})
	return nil
}

func (sl *StreamListener) Addr() net.Addr { return sl.addr }
