package peer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hecsys/hec/test/testutil"
)

var testKey = []byte("0123456789abcdef-cluster-key")

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Type: TypeData, Length: 12345, Sender: 7, Flags: FlagLast, Epoch: 1<<40 + 3, Comm: 99, Seq: 5}
	var b [HeaderSize]byte
	h.Put(b[:])
	got, err := ParseHeader(b[:])
	if err != nil || got != h {
		t.Fatalf("%+v %v, want %+v", got, err, h)
	}
	bad := []struct {
		name string
		mut  func(b []byte)
	}{
		{"magic", func(b []byte) { b[0] = 0 }},
		{"version", func(b []byte) { b[2] = 9 }},
		{"type 0", func(b []byte) { b[3] = 0 }},
		{"type past the last", func(b []byte) { b[3] = byte(maxType) + 1 }},
		{"length", func(b []byte) { b[7] = 0xff }},
	}
	for _, tt := range bad {
		c := b
		tt.mut(c[:])
		if _, err := ParseHeader(c[:]); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	if _, err := ParseHeader(b[:10]); !errors.Is(err, ErrFrame) {
		t.Errorf("short: %v", err)
	}
}

func FuzzParseHeader(f *testing.F) {
	var b [HeaderSize]byte
	(&Header{Type: TypePing, Length: 8, Sender: 1, Seq: 1}).Put(b[:])
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHeader(data)
		if err != nil {
			return
		}
		if h.Length > MaxPayload || h.Type == 0 || h.Type > maxType {
			t.Fatalf("accepted %+v", h)
		}
		var out [HeaderSize]byte
		h.Put(out[:])
		if !bytes.Equal(out[:], data[:HeaderSize]) {
			t.Fatalf("round trip differs")
		}
	})
}

// connPair is two ends of an authenticated connection over TCP loopback.
func connPair(t testing.TB) (dialer, listener *Conn) {
	t.Helper()
	return connPairVia(t, nil)
}

// connPairVia is connPair, the dialer connecting through relay when it is
// not nil: relay gets the listener's address and returns the one to dial.
func connPairVia(t testing.TB, relay func(target string) string) (dialer, listener *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := Handshake(nc, testKey, 2, false, time.Now().Add(5*time.Second))
		ch <- res{c, err}
	}()
	addr := ln.Addr().String()
	if relay != nil {
		addr = relay(addr)
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Handshake(nc, testKey, 1, true, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { d.Close(); r.c.Close() })
	return d, r.c
}

// FuzzRecv feeds arbitrary bytes to an authenticated connection: errors,
// never a panic, never a frame accepted without its tag.
func FuzzRecv(f *testing.F) {
	f.Add([]byte{8, 0, 0, 0, 0x45, 0x48, 1, 2})
	f.Add(bytes.Repeat([]byte{0xff}, 80))
	mac, _ := sessionMAC(testKey, "x", []byte("n1"), []byte("n2"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, headerOnly := range []bool{false, true} {
			c := &Conn{local: 2, remote: 1, recvMAC: mac, headerOnly: headerOnly, br: bufio.NewReader(bytes.NewReader(data))}
			if _, _, err := c.Recv(); err == nil {
				t.Fatalf("accepted a frame no one authenticated (headers only: %v)", headerOnly)
			}
		}
	})
}

// tcpRelay is a process in the middle on loopback: it passes bytes both
// ways between the dialer and target and, once flip is set, changes the
// byte at that offset (counted from then) of what the dialer sends.
type tcpRelay struct {
	ln   net.Listener
	flip atomic.Int64 // offset+1 of the byte to change; 0: none
}

func newRelay(t testing.TB) *tcpRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &tcpRelay{ln: ln}
}

func (r *tcpRelay) to(target string) string {
	go func() {
		a, err := r.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", target)
		if err != nil {
			a.Close()
			return
		}
		go func() { io.Copy(a, b); a.Close() }()
		buf := make([]byte, 1)
		var seen int64
		for {
			if _, err := a.Read(buf); err != nil {
				b.Close()
				return
			}
			if f := r.flip.Load(); f > 0 {
				if seen++; seen == f {
					buf[0] ^= 0x20
				}
			}
			if _, err := b.Write(buf); err != nil {
				return
			}
		}
	}()
	return r.ln.Addr().String()
}

// On a direct loopback connection frames' tags cover their headers only;
// through a relay, the two sides see different ends and the tags cover
// payloads again: a byte the relay changes fails the frame.
func TestLoopbackTagsAndARelay(t *testing.T) {
	payload := []byte("a payload worth protecting, past its header")
	d, l := connPair(t)
	if d.PayloadSealed() || l.PayloadSealed() {
		t.Fatalf("direct loopback: payloads sealed (dialer %v, listener %v), want headers only", d.PayloadSealed(), l.PayloadSealed())
	}
	if err := d.Send(context.Background(), Header{Type: TypeData, Comm: 1}, payload); err != nil {
		t.Fatal(err)
	}
	if _, p, err := l.Recv(); err != nil || !bytes.Equal(p, payload) {
		t.Fatalf("direct: %q %v", p, err)
	}

	r := newRelay(t)
	d, l = connPairVia(t, r.to)
	if !d.PayloadSealed() || !l.PayloadSealed() {
		t.Fatalf("through a relay: payloads not sealed (dialer %v, listener %v)", d.PayloadSealed(), l.PayloadSealed())
	}
	if err := d.Send(context.Background(), Header{Type: TypeData, Comm: 1}, payload); err != nil {
		t.Fatal(err)
	}
	if _, p, err := l.Recv(); err != nil || !bytes.Equal(p, payload) {
		t.Fatalf("through the relay, untouched: %q %v", p, err)
	}
	r.flip.Store(prefixSize + HeaderSize + 10) // a payload byte of the next frame
	if err := d.Send(context.Background(), Header{Type: TypeData, Comm: 1}, payload); err != nil {
		t.Fatal(err)
	}
	if _, p, err := l.Recv(); !errors.Is(err, ErrAuth) {
		t.Fatalf("a payload byte changed by the relay: %q %v, want %v", p, err, ErrAuth)
	}
}

// A Hello whose loopback binding was changed on the way fails its MAC.
func TestHelloBindingAuthenticated(t *testing.T) {
	r := newRelay(t)
	r.flip.Store(HeaderSize + nonceSize + 2) // in the dialer's binding
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer nc.Close()
		_, err = Handshake(nc, testKey, 2, false, time.Now().Add(5*time.Second))
		errc <- err
	}()
	nc, err := net.Dial("tcp", r.to(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	go Handshake(nc, testKey, 1, true, time.Now().Add(5*time.Second))
	if err := <-errc; !errors.Is(err, ErrAuth) {
		t.Fatalf("listener: %v, want %v", err, ErrAuth)
	}
}

func TestConnFramesAndTamper(t *testing.T) {
	d, l := connPair(t)
	payload := bytes.Repeat([]byte("x"), 100000)
	go func() {
		for i := 0; i < 3; i++ {
			d.Send(context.Background(), Header{Type: TypeData, Comm: 5, Epoch: 1}, payload[:1000*i])
		}
	}()
	for i := 0; i < 3; i++ {
		h, p, err := l.Recv()
		if err != nil || h.Seq != uint64(i+1) || len(p) != 1000*i || h.Sender != 1 || h.Comm != 5 {
			t.Fatalf("frame %d: %+v %d %v", i, h, len(p), err)
		}
	}
	// Steady state: no allocation per frame (a 4 KiB frame fits the
	// socket's buffer, so one goroutine can send and then receive it).
	allocs := testing.AllocsPerRun(100, func() {
		d.Send(context.Background(), Header{Type: TypeData}, payload[:4096])
		l.Recv()
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per frame sent and received", allocs)
	}
}

// bufConn is a net.Conn that only collects what is written.
type bufConn struct {
	net.Conn
	buf bytes.Buffer
}

func (b *bufConn) Write(p []byte) (int, error)      { return b.buf.Write(p) }
func (b *bufConn) SetWriteDeadline(time.Time) error { return nil }

// Any byte of a frame changed on the wire fails it.
func TestTamperedFramesFail(t *testing.T) {
	mac, _ := sessionMAC(testKey, "x", []byte("n1"), []byte("n2"))
	w := &bufConn{}
	sender := &Conn{nc: w, local: 1, remote: 2, sendMAC: mac}
	sender.Send(context.Background(), Header{Type: TypeData, Comm: 3, Epoch: 4}, []byte("a payload worth protecting"))
	frame := w.buf.Bytes()
	recv := func(b []byte) error {
		c := &Conn{local: 2, remote: 1, recvMAC: mac, br: bufio.NewReader(bytes.NewReader(b))}
		_, _, err := c.Recv()
		return err
	}
	if err := recv(frame); err != nil {
		t.Fatalf("untouched frame: %v", err)
	}
	for i := prefixSize; i < len(frame); i++ { // the length prefix changes what is read: a short read
		b := bytes.Clone(frame)
		b[i] ^= 0x20
		if err := recv(b); !errors.Is(err, ErrAuth) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
}

func TestWrongKeyRejected(t *testing.T) {
	a := startNode(t, 1, testKey, nil)
	b := startNode(t, 2, []byte("another key, same length ok!"), nil)
	link(a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.Ping(ctx, 2); !errors.Is(err, ErrAuth) {
		t.Fatalf("ping with the wrong key: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "condition", func() bool { return b.AuthFailures.Load() > 0 })
}

// recorder keeps what is written to a connection.
type recorder struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.buf.Write(p)
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func TestReplayAndOldEpochDropped(t *testing.T) {
	b := startNode(t, 2, testKey, map[uint32]string{1: "127.0.0.1:1"})
	var got sync.Map
	b.Handle(TypeData, func(from uint32, h Header, p []byte) { got.Store(string(p), h.Epoch) })
	b.SetEpoch(9, 5)

	dialAs1 := func() (*Conn, *recorder) {
		nc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{Conn: nc}
		c, err := Handshake(rec, testKey, 1, true, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		rec.buf.Reset() // keep frames only, not the hello
		rec.mu.Unlock()
		return c, rec
	}
	c, rec := dialAs1()
	c.Send(context.Background(), Header{Type: TypeData, Comm: 9, Epoch: 4}, []byte("old epoch"))
	c.Send(context.Background(), Header{Type: TypeData, Comm: 9, Epoch: 5}, []byte("current"))
	testutil.WaitFor(t, 10*time.Second, "condition", func() bool { _, ok := got.Load("current"); return ok })
	if _, ok := got.Load("old epoch"); ok || b.OldEpoch.Load() != 1 {
		t.Fatalf("old-epoch frame delivered (dropped %d)", b.OldEpoch.Load())
	}
	frames := rec.buf.Bytes()
	// The same frames again on the same connection: out of sequence.
	rec.Conn.Write(frames)
	testutil.WaitFor(t, 10*time.Second, "condition", func() bool { return b.AuthFailures.Load() == 1 })
	// On a new connection: the session keys differ, the tags fail.
	c2, rec2 := dialAs1()
	_ = c2
	rec2.Conn.Write(frames)
	testutil.WaitFor(t, 10*time.Second, "condition", func() bool { return b.AuthFailures.Load() == 2 })
	n := 0
	got.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d distinct frames delivered, want 1", n)
	}

	// A peer that opens transfers without end is bounded.
	c3, _ := dialAs1()
	for i := 0; i < maxSinksPerPeer+10; i++ {
		c3.Send(context.Background(), Header{Type: TypeData, Comm: uint64(1000 + i), Flags: FlagSink}, []byte("x"))
	}
	testutil.WaitFor(t, 10*time.Second, "condition", func() bool { return b.Refused.Load() == 10 })
}

func TestPingTransferAbort(t *testing.T) {
	nodes := cluster(t, 3, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			if rtt, err := a.Ping(ctx, b.ID()); err != nil || rtt <= 0 {
				t.Fatalf("ping %d→%d: %v %v", a.ID(), b.ID(), rtt, err)
			}
		}
	}
	const total = 64 << 20
	d, err := nodes[0].Transfer(ctx, 2, total, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("64 MiB node 1 → 2 in %v: %.2f GB/s", d, total/d.Seconds()/1e9)
	st := nodes[1].Peers()
	if st[0].ID != 1 || st[0].RecvBytes < total {
		t.Fatalf("node 2's view of node 1: %+v", st[0])
	}
	// An abort reaches every member and fails a wait on it.
	comm := nodes[0].NewComm()
	ch := nodes[1].waiter(comm)
	nodes[0].Abort(ctx, comm, 1, "test says stop")
	if _, err := nodes[1].await(ctx, 1, comm, ch); !errors.Is(err, ErrAborted) {
		t.Fatalf("wait on an aborted communicator: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "condition", func() bool { return nodes[2].Aborted(comm) == "test says stop" })
}

// A slow transfer that keeps moving is not declared dead; a sender that
// stops (SIGSTOP) or is killed (SIGKILL) mid-transfer is, within the
// deadline.
func TestLiveness(t *testing.T) {
	const deadline = 600 * time.Millisecond
	recv := startNodeDeadline(t, 2, testKey, map[uint32]string{1: "127.0.0.1:1"}, deadline)
	t.Run("slow but moving", func(t *testing.T) {
		send := startNodeDeadline(t, 1, testKey, map[uint32]string{2: recv.Addr()}, deadline)
		recv.SetPeers(map[uint32]string{1: send.Addr()})
		defer recv.SetPeers(map[uint32]string{1: "127.0.0.1:1"})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// 12 frames, one every deadline/2: 3 deadlines long in all.
		if _, err := send.Transfer(ctx, 2, 12<<10, 1<<10, deadline/2); err != nil {
			t.Fatal(err)
		}
		if why := recv.Dead(1); why != "" {
			t.Fatalf("a moving transfer was declared dead: %s", why)
		}
		send.Close()
	})
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			// Under qemu-user (arm64 tests on x86) HEC_TEST_EXEC names the
			// emulator: the binary cannot be executed directly.
			argv := append(strings.Fields(os.Getenv("HEC_TEST_EXEC")), os.Args[0], "-test.run=^TestSenderHelper$")
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "HEC_PEER_HELPER="+recv.Addr())
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			// Wait until the helper's transfer is under way.
			buf := make([]byte, 64)
			n, _ := out.Read(buf)
			if !strings.Contains(string(buf[:n]), "sending") {
				t.Fatalf("helper said %q", buf[:n])
			}
			testutil.WaitFor(t, 10*time.Second, "condition", func() bool { return recv.Dead(1) == "" && recv.Peers()[0].Pending > 0 })
			t0 := time.Now()
			cmd.Process.Signal(sig)
			testutil.WaitFor(t, 10*time.Second, "condition", func() bool { return recv.Dead(1) != "" })
			took := time.Since(t0)
			t.Logf("%s: declared dead after %v: %s", sig, took.Round(time.Millisecond), recv.Dead(1))
			// The semantics, not a speed: dead once the deadline passed in
			// silence (watched every deadline/8), with room for a loaded
			// machine's scheduling.
			if took > 3*deadline {
				t.Fatalf("declared dead after %v, deadline %v", took, deadline)
			}
		})
	}
}

// TestSenderHelper is the sender process of TestLiveness.
func TestSenderHelper(t *testing.T) {
	addr := os.Getenv("HEC_PEER_HELPER")
	if addr == "" {
		t.Skip("helper process of TestLiveness")
	}
	n, err := NewNode(Config{ID: 1, Key: testKey, Peers: map[uint32]string{2: addr}, Deadline: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	go n.Run(ctx)
	// A first frame, then one every 50 ms for a long while.
	go func() {
		time.Sleep(200 * time.Millisecond)
		fmt.Println("sending")
	}()
	n.Transfer(ctx, 2, 1<<30, 1<<10, 50*time.Millisecond)
}

// TestAFrameWakesItsWaiterAtOnce: on a process with one P, a goroutine
// that a frame makes runnable runs within a few more frames (the reader
// yields every recvYieldEvery), also while the peer (another process)
// sends faster than this node takes its frames, so that the connection
// always has more to read. Frames 200, 500 and 800 each wake one, once
// the stream is in full flow.
func TestAFrameWakesItsWaiterAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("streams frames from a helper process")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	recv := startNode(t, 2, testKey, map[uint32]string{1: "127.0.0.1:1"})
	wakeAt := []int64{200, 500, 800}
	var frames atomic.Int64
	woken, ranAt := make([]chan struct{}, len(wakeAt)), make(chan int64, len(wakeAt))
	for i := range woken {
		woken[i] = make(chan struct{})
		go func() { <-woken[i]; ranAt <- frames.Load() - wakeAt[i] }()
	}
	recv.Handle(TypeData, func(_ uint32, h Header, _ []byte) {
		if i := slices.Index(wakeAt, frames.Add(1)); i >= 0 {
			close(woken[i])
		}
		// Taking a frame costs more than sending one: the sender keeps
		// the connection full.
		for t0 := time.Now(); time.Since(t0) < 50*time.Microsecond; {
		}
	})
	argv := append(strings.Fields(os.Getenv("HEC_TEST_EXEC")), os.Args[0], "-test.run=^TestStreamHelper$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HEC_PEER_HELPER="+recv.Addr())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for range wakeAt {
		select {
		case n := <-ranAt:
			// Without the reader's yields it ran once the runtime
			// preempted the loop (10 ms: 140-180 frames here) or the
			// connection ran dry.
			t.Logf("a woken goroutine ran %d frames after the one that woke it", n)
			if n > 8 {
				t.Errorf("a goroutine made runnable by a frame ran only %d frames later", n)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d frames came, %d needed", frames.Load(), wakeAt[len(wakeAt)-1])
		}
	}
}

// TestStreamHelper is the sender process of TestAFrameWakesItsWaiterAtOnce:
// 64 KiB frames, back to back, for up to ten seconds.
func TestStreamHelper(t *testing.T) {
	addr := os.Getenv("HEC_PEER_HELPER")
	if addr == "" {
		t.Skip("helper process of TestAFrameWakesItsWaiterAtOnce")
	}
	n, err := NewNode(Config{ID: 1, Key: testKey, Peers: map[uint32]string{2: addr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go n.Run(ctx)
	payload := make([]byte, 64<<10)
	for ctx.Err() == nil {
		if err := n.Send(ctx, 2, Header{Type: TypeData, Comm: 1}, payload); err != nil {
			return
		}
	}
}

func startNode(t testing.TB, id uint32, key []byte, peers map[uint32]string) *Node {
	return startNodeDeadline(t, id, key, peers, time.Second)
}

func startNodeDeadline(t testing.TB, id uint32, key []byte, peers map[uint32]string, deadline time.Duration) *Node {
	t.Helper()
	return startNodeWith(t, Config{ID: id, Listen: "127.0.0.1:0", Key: key, Peers: peers, Deadline: deadline})
}

func startNodeWith(t testing.TB, cfg Config) *Node {
	t.Helper()
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.WaitFor(t, 10*time.Second, "condition", func() bool { return n.Addr() != "" })
	return n
}

// link makes a and b members of each other.
func link(a, b *Node) {
	a.SetPeers(map[uint32]string{b.ID(): b.Addr()})
	b.SetPeers(map[uint32]string{a.ID(): a.Addr()})
}

func cluster(t *testing.T, k int, deadline time.Duration) []*Node {
	var nodes []*Node
	members := map[uint32]string{}
	for i := 1; i <= k; i++ {
		n := startNodeDeadline(t, uint32(i), testKey, nil, deadline)
		nodes = append(nodes, n)
		members[uint32(i)] = n.Addr()
	}
	for _, n := range nodes {
		n.SetPeers(members)
	}
	return nodes
}

// stallConn is a connection whose writes time out, writing nothing,
// while stalled: a socket the peer has stopped draining.
type stallConn struct {
	net.Conn
	stalled atomic.Bool
}

func (c *stallConn) Write(p []byte) (int, error) {
	if c.stalled.Load() {
		return 0, os.ErrDeadlineExceeded
	}
	return c.Conn.Write(p)
}

// TestSendPastItsDeadlineKeepsConn: a frame none of which could be
// written by its deadline (a heartbeat while the peer is slow to read) is
// not sent, says so with ErrNotSent, and leaves the connection good: the
// next frame arrives, in sequence. (It used to count the frame as sent, so
// the next one failed its tag as out of sequence — and the node closed
// the connection under a transfer, whose frames were lost.)
func TestSendPastItsDeadlineKeepsConn(t *testing.T) {
	d, l := connPair(t)
	sc := &stallConn{Conn: d.nc}
	d.nc = sc
	sc.stalled.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := d.Send(ctx, Header{Type: TypeHeartbeat}, nil)
	if !errors.Is(err, ErrNotSent) {
		t.Fatalf("a heartbeat into a stalled socket: %v, want ErrNotSent", err)
	}
	sc.stalled.Store(false)
	go d.Send(context.Background(), Header{Type: TypeData, Comm: 2}, []byte("after"))
	h, p, err := l.Recv()
	if err != nil || h.Comm != 2 || string(p) != "after" {
		t.Fatalf("the frame after one not sent: %+v %q %v", h, p, err)
	}
}

// TestCallReply: a request reaches the peer's handler and its reply comes
// back to the caller; calls to a peer that stops answering fail once it
// is declared dead, not after the caller's whole deadline.
func TestCallReply(t *testing.T) {
	nodes := cluster(t, 2, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if got := nodes[0].Members(); !slices.Equal(got, []uint32{1, 2}) {
		t.Fatalf("members %v", got)
	}
	hold := make(chan struct{})
	nodes[1].Handle(TypeRequest, func(from uint32, h Header, payload []byte) {
		if string(payload) == "hold" {
			go func() { <-hold }() // never answered
			return
		}
		b := append([]byte("re: "), payload...)
		go nodes[1].Reply(context.Background(), from, h, b)
	})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Sprintf("call %d", i)
			b, err := nodes[0].Call(ctx, 2, []byte(msg))
			if err != nil || string(b) != "re: "+msg {
				t.Errorf("call %d: %q %v", i, b, err)
			}
		}()
	}
	wg.Wait()
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if _, err := nodes[0].Call(short, 2, []byte("hold")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an unanswered call: %v", err)
	}
	close(hold)
	nodes[1].Close()
	t0 := time.Now()
	if _, err := nodes[0].Call(ctx, 2, []byte("x")); err == nil {
		t.Fatal("a call to a closed node answered")
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("a call to a closed node took %v", d)
	}
}

// TestCallTraced: a traced request reaches the handler with its op's id
// (Traced), an untraced one without; the request's bytes are the same
// either way, and one too large for the id goes without it.
func TestCallTraced(t *testing.T) {
	nodes := cluster(t, 2, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodes[1].Handle(TypeRequest, func(from uint32, h Header, payload []byte) {
		id, req, err := Traced(h, payload)
		b := []byte(fmt.Sprintf("%q %d %v", id, len(req), err))
		go nodes[1].Reply(context.Background(), from, h, b)
	})
	long := strings.Repeat("i", MaxTraceID+1)
	for _, c := range []struct {
		id   string
		size int
		want string
	}{
		{"pid 7 qp 0 tag 1f", 100, `"pid 7 qp 0 tag 1f" 100 <nil>`},
		{"", 100, `"" 100 <nil>`},
		{"x", 0, `"x" 0 <nil>`},
		{long, 10, `"" 10 <nil>`},                                     // too long an id: none
		{"pid 7", MaxPayload, fmt.Sprintf(`"" %d <nil>`, MaxPayload)}, // no room for it
	} {
		b, err := nodes[0].CallTraced(ctx, 2, c.id, make([]byte, c.size))
		if err != nil || string(b) != c.want {
			t.Errorf("CallTraced(%.20q, %d bytes): %s, %v; want %s", c.id, c.size, b, err, c.want)
		}
	}
}

// FuzzTraced: whatever a traced request's payload, Traced returns an id
// and a request within it, or an error.
func FuzzTraced(f *testing.F) {
	f.Add([]byte{3, 'a', 'b', 'c', 1, 2})
	f.Add([]byte{})
	f.Add([]byte{200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, req, err := Traced(Header{Type: TypeRequest, Flags: FlagTraced}, b)
		if err != nil {
			return
		}
		if 1+len(id)+len(req) != len(b) || len(id) > MaxTraceID {
			t.Fatalf("%d bytes: id of %d, request of %d", len(b), len(id), len(req))
		}
	})
}

// TestSendToStalledReader: a frame's send fails once the peer has taken
// none of its bytes for the node's deadline, and the peer is declared
// dead — a peer stopped (SIGSTOP)
// while a large transfer to it is under way fills the sockets' buffers
// and then reads nothing — and a peer that reads slowly, but reads, never
// fails one. (A send used to wait for its caller's own deadline, however
// long: a collective of 64 MiB to a stopped rank failed after 7 s with a
// deadline of 1 s.) A send blocked on a stalled reader ends when its
// context is cancelled.
func TestSendToStalledReader(t *testing.T) {
	const deadline = 300 * time.Millisecond
	frame := make([]byte, 1<<20)
	t.Run("slow but reading", func(t *testing.T) {
		nodes := cluster(t, 2, deadline)
		nodes[1].Handle(TypeData, func(uint32, Header, []byte) { time.Sleep(deadline / 3) })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// 40 frames at 3 per deadline: 4 deadlines and more once the
		// buffers are full.
		for i := range 40 {
			if err := nodes[0].Send(ctx, 2, Header{Type: TypeData, Comm: 1}, frame); err != nil {
				t.Fatalf("frame %d to a slow reader: %v", i, err)
			}
		}
	})
	t.Run("stalled", func(t *testing.T) {
		nodes := cluster(t, 2, deadline)
		stall := make(chan struct{})
		defer close(stall)
		nodes[1].Handle(TypeData, func(uint32, Header, []byte) { <-stall })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range 1000 { // at most 1 GiB: the buffers hold far less
			t0 := time.Now()
			err := nodes[0].Send(ctx, 2, Header{Type: TypeData, Comm: 1}, frame)
			if err == nil {
				continue
			}
			took := time.Since(t0)
			t.Logf("frame %d failed after %v: %v", i, took.Round(time.Millisecond), err)
			// The semantics, not a speed: the deadline in silence, after
			// what the stopped side's kernel still takes (a trickle for
			// a second or two, seen on loopback), with room for a loaded
			// machine's scheduling — far from the context's minute.
			if took > 20*deadline {
				t.Fatalf("frame %d to a stalled reader failed after %v (deadline %v): %v", i, took, deadline, err)
			}
			if !errors.Is(err, ErrStalled) {
				t.Fatalf("frame %d to a stalled reader: %v, want ErrStalled", i, err)
			}
			if nodes[0].Dead(2) == "" {
				t.Fatal("a peer that took nothing for the deadline is not declared dead")
			}
			return
		}
		t.Fatal("1000 frames of 1 MiB sent to a reader that reads nothing")
	})
	t.Run("cancelled", func(t *testing.T) {
		// A deadline far off: only the cancel can end the blocked send.
		nodes := cluster(t, 2, time.Minute)
		stall := make(chan struct{})
		defer close(stall)
		nodes[1].Handle(TypeData, func(uint32, Header, []byte) { <-stall })
		ctx, cancel := context.WithCancel(context.Background())
		var cancelled atomic.Int64
		go func() {
			// Once the sends block: none has finished for a while.
			time.Sleep(2 * time.Second)
			cancelled.Store(time.Now().UnixNano())
			cancel()
		}()
		for i := range 1000 {
			err := nodes[0].Send(ctx, 2, Header{Type: TypeData, Comm: 1}, frame)
			if err == nil {
				continue
			}
			at := cancelled.Load()
			if at == 0 {
				t.Fatalf("frame %d failed before the cancel: %v", i, err)
			}
			took := time.Since(time.Unix(0, at))
			t.Logf("frame %d failed %v after the cancel: %v", i, took.Round(time.Millisecond), err)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("frame %d: %v, want context.Canceled", i, err)
			}
			if took > 20*sendPoll {
				t.Fatalf("frame %d failed %v after its context was cancelled", i, took)
			}
			return
		}
		t.Fatal("1000 frames of 1 MiB sent to a reader that reads nothing")
	})
}

// TestCloseDuringADial: a node closed while one of its dials is under way
// (a heartbeat to a peer that only talks to it, a send) returns from
// Close, and the connection that dial made does not outlive it; a send
// after Close dials nothing. Seen in CI: a dial finished after Close had
// closed the node's connections, and its reader kept Close waiting for
// good.
func TestCloseDuringADial(t *testing.T) {
	for _, after := range []bool{false, true} {
		name := "close during the dial"
		if after {
			name = "send after close"
		}
		t.Run(name, func(t *testing.T) {
			b := startNode(t, 2, testKey, nil)
			a, err := NewNode(Config{ID: 1, Listen: "127.0.0.1:0", Key: testKey, Deadline: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			runDone := make(chan struct{})
			go func() { a.Run(context.Background()); close(runDone) }()
			testutil.WaitFor(t, 10*time.Second, "a listening", func() bool { return a.Addr() != "" })
			link(a, b)
			closed := make(chan struct{})
			if after {
				a.Close()
				close(closed)
			} else {
				testHookDialed = func() {
					go func() { a.Close(); close(closed) }()
					// Close has begun once the node says so; give it the
					// time to pass the connections it closes.
					testutil.WaitFor(t, 10*time.Second, "a closing", func() bool {
						a.mu.Lock()
						defer a.mu.Unlock()
						return a.closed
					})
					time.Sleep(20 * time.Millisecond)
				}
				t.Cleanup(func() { testHookDialed = nil })
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.Send(ctx, 2, Header{Type: TypeHeartbeat}, nil); err == nil {
				t.Error("a send on a closed node succeeded")
			}
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return")
			}
			<-runDone
			testutil.WaitFor(t, 10*time.Second, "b's inbound connection from a closed", func() bool { return b.acc.Conns() == 0 })
		})
	}
}

// TestCreditPause: a liveness pass that finds this node did not run for a
// while moves a peer's last-heard time on by the time lost, never past
// now, and leaves alone a time the reader stored meanwhile.
func TestCreditPause(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name       string
		heard      time.Time
		lost       time.Duration
		storedByRx time.Time // a frame's time, stored between Load and the swap
		want       time.Time
	}{
		{"silence during the pause is not counted", now.Add(-3200 * time.Millisecond), 3 * time.Second, time.Time{}, now.Add(-200 * time.Millisecond)},
		{"silence before the pause still is", now.Add(-5 * time.Second), 3 * time.Second, time.Time{}, now.Add(-2 * time.Second)},
		{"never past now", now.Add(-time.Second), 3 * time.Second, time.Time{}, now},
		{"a frame heard meanwhile stays", now.Add(-3 * time.Second), 3 * time.Second, now.Add(-time.Millisecond), now.Add(-time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Peer
			p.lastHeard.Store(tc.heard.UnixNano())
			if !tc.storedByRx.IsZero() {
				testHookCredit = func() { p.lastHeard.Store(tc.storedByRx.UnixNano()) }
				defer func() { testHookCredit = nil }()
			}
			p.creditPause(now, tc.lost)
			if got := time.Unix(0, p.lastHeard.Load()); !got.Equal(tc.want) {
				t.Fatalf("last heard %v before now, want %v", now.Sub(got), now.Sub(tc.want))
			}
		})
	}
}

// TestProcessPaused stops this whole process — both nodes, the sender
// and its peer's reader — for a few deadlines while a send is blocked on
// full buffers and work is pending on the peer, as when the machine is
// paused: neither the blocked send nor the liveness check may take the
// time lost for the peer's silence. (Both did: the send failed with
// ErrStalled, or the check declared the peer dead, when it ran before the
// reader had taken what the peer sent; seen first as a collective that
// blamed a live rank after a CI machine's stall.)
func TestProcessPaused(t *testing.T) {
	const deadline = 300 * time.Millisecond
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to stop and continue this process")
	}
	frame := make([]byte, 1<<20)
	for round := range 3 {
		nodes := cluster(t, 2, deadline)
		nodes[1].Handle(TypeData, func(uint32, Header, []byte) { time.Sleep(deadline / 3) })
		done := nodes[0].Expect(2)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		pause := exec.Command("sh", "-c", fmt.Sprintf("sleep 0.5; kill -STOP %d; sleep %.1f; kill -CONT %d", os.Getpid(), (4*deadline).Seconds(), os.Getpid()))
		if err := pause.Start(); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		for i := 0; time.Since(t0) < 2*time.Second+4*deadline; i++ {
			if err := nodes[0].Send(ctx, 2, Header{Type: TypeData, Comm: 1}, frame); err != nil {
				t.Fatalf("round %d: frame %d, %v after the start (paused from 0.5 s for %v): %v", round, i, time.Since(t0).Round(time.Millisecond), 4*deadline, err)
			}
		}
		if why := nodes[0].Dead(2); why != "" {
			t.Fatalf("round %d: the peer declared dead: %s", round, why)
		}
		if err := pause.Wait(); err != nil {
			t.Fatal(err)
		}
		if nodes[0].Paused.Load() == 0 {
			t.Fatalf("round %d: the pause went unnoticed", round)
		}
		done()
		cancel()
	}
}

// TestHandlerPanicDropsOneMessage: a handler that panics on one request
// drops that request alone (its caller's deadline fails it); the same
// connection's next requests are answered.
func TestHandlerPanicDropsOneMessage(t *testing.T) {
	nodes := cluster(t, 2, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodes[1].Handle(TypeRequest, func(from uint32, h Header, payload []byte) {
		if string(payload) == "boom" {
			panic("a bug: assignment to entry in nil map")
		}
		go nodes[1].Reply(context.Background(), from, h, append([]byte("re: "), payload...))
	})
	if b, err := nodes[0].Call(ctx, 2, []byte("a")); err != nil || string(b) != "re: a" {
		t.Fatalf("before: %q %v", b, err)
	}
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if _, err := nodes[0].Call(short, 2, []byte("boom")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the request whose handler panicked: %v, want no answer", err)
	}
	if b, err := nodes[0].Call(ctx, 2, []byte("b")); err != nil || string(b) != "re: b" {
		t.Fatalf("after: %q %v", b, err)
	}
}
