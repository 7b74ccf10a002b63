package peer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/shared/accept"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/panics"
	"github.com/hecsys/hec/shared/trace"
)

// Bounds on what peers can make a node hold.
const (
	maxAborted       = 4096 // aborted communicators remembered
	maxSinksPerPeer  = 256  // transfers under way from one peer
	inboundPerMember = 4    // inbound connections per member, plus some
)

func maxInbound(members int) int { return inboundPerMember*members + 16 }

// Errors of a node.
var (
	ErrDead    = errors.New("peer: declared dead")
	ErrUnknown = errors.New("peer: not a member")
	ErrAborted = errors.New("peer: aborted")
)

// Config configures a Node. Zero values take the documented defaults.
type Config struct {
	ID     uint32 // this node's id, not 0
	Listen string // address to accept peers on; "": dial only
	// Listener, when set, is the listener to accept peers on (opened by
	// the caller, who can then report a taken port before anything
	// runs); Listen is then ignored. Run closes it.
	Listener net.Listener
	Peers    map[uint32]string // the members: id → address (may include this node)
	// Dial, when set, connects to a peer's address in place of a TCP
	// dial (the peer links over RDMA: rdmalink.DialStream, with an
	// rdmalink.StreamListener as Listener). The handshake and the frames
	// run on what it returns unchanged.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	Key  []byte // the cluster key, at least 16 bytes
	// Deadline: a peer from which work is pending and that has sent
	// nothing for this long is declared dead (default 2 s). Heartbeats go
	// out every Deadline/4 on an idle connection.
	Deadline time.Duration
	Log      *slog.Logger
	// Trace, while it records, gets the stages of the frames of the ops
	// that go through this node: each frame's seal and write under the op
	// its send's context carries (trace.WithOp: a collective's messages),
	// and every frame of a link test (Transfer) on both ends, its read and
	// open too (trace.LinkID).
	Trace *trace.Recorder
	// Clock is the clock this node answers pings with (default
	// time.Now): a peer's pings measure how far it is ahead of theirs.
	// Tests skew it.
	Clock func() time.Time
}

// Handler serves frames of one type. payload is valid only during the
// call.
type Handler func(from uint32, h Header, payload []byte)

// Node is one member of a cluster: it accepts authenticated connections
// from the others and dials each of them once (its sends to a peer reuse
// that connection; replies come back on the peer's own).
type Node struct {
	cfg Config
	ln  net.Listener
	acc *accept.Loop

	mu       sync.Mutex
	peers    map[uint32]*Peer
	handlers [maxType + 1]Handler
	epochs   map[uint64]uint64
	waiters  map[uint64]chan []byte // pings and acks in flight, by comm
	aborted  map[uint64]string
	closed   bool
	closing  atomic.Bool        // closed, for those that hold a peer's lock (not mu)
	stop     context.CancelFunc // ends Run's goroutines
	wg       sync.WaitGroup

	// Counters of connections and frames refused: AuthFailures counts
	// wrong keys and frames that fail their tag (forged, damaged,
	// replayed, reordered); OldEpoch frames of an older epoch dropped.
	AuthFailures, BadFrames, OldEpoch atomic.Uint64
	// Refused counts connections and transfers refused for exceeding a
	// bound (inbound connections, transfers under way per peer).
	Refused atomic.Uint64
	// Paused counts the liveness passes that found this node had not run
	// for a while (its process stopped or starved, the machine paused).
	Paused atomic.Uint64

	nextComm atomic.Uint64
	sinks    sinks
}

// Peer is what a node knows of one member.
type Peer struct {
	ID   uint32
	Addr string

	mu      sync.Mutex
	out     *Conn
	dialing chan struct{}
	dead    string // why it was declared dead; "" while alive

	lastHeard, lastSent                          atomic.Int64 // unix nanos
	pending                                      atomic.Int64
	beating                                      atomic.Bool // a heartbeat to it is on its way
	SentBytes, RecvBytes, SentFrames, RecvFrames atomic.Uint64
	rtt                                          atomic.Int64
	clock                                        peerClock
}

// NewNode checks cfg and returns a node; Run starts it.
func NewNode(cfg Config) (*Node, error) {
	if cfg.ID == 0 {
		return nil, errors.New("peer: node id 0")
	}
	if len(cfg.Key) < 16 {
		return nil, fmt.Errorf("peer: cluster key of %d bytes: want at least 16", len(cfg.Key))
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, peers: map[uint32]*Peer{}, epochs: map[uint64]uint64{}, waiters: map[uint64]chan []byte{},
		aborted: map[uint64]string{}}
	n.nextComm.Store(rand.Uint64() >> 1)
	n.SetPeers(cfg.Peers)
	n.handlers[TypePing] = n.servePing
	n.sinks.m, n.sinks.perSender = map[sinkKey]*sink{}, map[uint32]int{}
	return n, nil
}

// ID is this node's id.
func (n *Node) ID() uint32 { return n.cfg.ID }

// Deadline is how long a peer that owes work may stay silent before it is
// declared dead.
func (n *Node) Deadline() time.Duration { return n.cfg.Deadline }

// Addr is the listener's address once Run has started it.
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ln == nil {
		return ""
	}
	return n.ln.Addr().String()
}

// SetPeers replaces the member set (a static list, or what a membership
// service reports). Peers that left are disconnected.
func (n *Node) SetPeers(members map[uint32]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, p := range n.peers {
		if addr, ok := members[id]; !ok || addr != p.Addr {
			p.mu.Lock()
			if p.out != nil {
				p.out.Close()
				p.out = nil
			}
			p.mu.Unlock()
			delete(n.peers, id)
		}
	}
	for id, addr := range members {
		if id == n.cfg.ID {
			continue
		}
		if _, ok := n.peers[id]; !ok {
			n.peers[id] = &Peer{ID: id, Addr: addr}
		}
	}
}

// Handle serves frames of type t (Data, Abort, Ack, Pong... Ping is served).
func (n *Node) Handle(t Type, h Handler) {
	n.mu.Lock()
	n.handlers[t] = h
	n.mu.Unlock()
}

// SetEpoch sets comm's current epoch: frames of older ones are dropped.
func (n *Node) SetEpoch(comm, epoch uint64) {
	n.mu.Lock()
	n.epochs[comm] = epoch
	n.mu.Unlock()
}

// Run accepts peers (when Listen is set) and keeps liveness until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	n.stop = stop
	n.mu.Unlock()
	ln := n.cfg.Listener
	if ln == nil && n.cfg.Listen != "" {
		var err error
		if ln, err = net.Listen("tcp", n.cfg.Listen); err != nil {
			return fmt.Errorf("peer listen: %w", err)
		}
	}
	if ln != nil {
		acc := accept.New("peer", ln, n.serveInbound, n.cfg.Log)
		n.mu.Lock()
		n.ln, n.acc = ln, acc
		n.mu.Unlock()
		n.wg.Add(1)
		go func() { defer n.wg.Done(); acc.Run() }()
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.watch(ctx) }()
	<-ctx.Done()
	n.Close()
	return nil
}

// Close stops the node and closes its connections.
func (n *Node) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	n.closing.Store(true)
	if n.stop != nil {
		n.stop()
	}
	acc := n.acc
	for _, p := range n.peers {
		p.mu.Lock()
		if p.out != nil {
			p.out.Close()
		}
		p.mu.Unlock()
	}
	for _, w := range n.waiters {
		close(w)
	}
	n.waiters = map[uint64]chan []byte{}
	n.mu.Unlock()
	if acc != nil {
		acc.Close() // the listener and every inbound connection
	}
	n.wg.Wait()
}

// serveInbound reads one peer's frames until its connection ends. A frame
// that fails its tag or sequence ends the connection: nothing after it can
// be trusted.
func (n *Node) serveInbound(nc net.Conn) {
	n.mu.Lock()
	closed, members := n.closed, len(n.peers)
	n.mu.Unlock()
	if closed {
		return
	}
	if n.acc.Conns() > maxInbound(members) {
		n.Refused.Add(1) // more connections than members could make: someone is flooding
		return
	}
	c, err := Handshake(nc, n.cfg.Key, n.cfg.ID, false, time.Now().Add(n.cfg.Deadline))
	if err != nil {
		n.refused(err)
		n.cfg.Log.Warn("peer: refused a connection", "remote", nc.RemoteAddr().String(), "err", err)
		return
	}
	p := n.peer(c.Remote())
	if p == nil {
		n.cfg.Log.Warn("peer: connection from a node not in the member set", "node", c.Remote())
		return
	}
	c.rec = n.cfg.Trace
	p.mu.Lock()
	p.dead = "" // a new connection is a new incarnation
	p.mu.Unlock()
	yielded := time.Now()
	p.lastHeard.Store(yielded.UnixNano())
	for {
		h, payload, err := c.Recv()
		if err != nil {
			n.refused(err)
			if p.pending.Load() > 0 {
				n.declareDead(p, "connection lost: "+err.Error())
			}
			return
		}
		now := time.Now() // one clock read a frame: heard, and the yield below
		p.lastHeard.Store(now.UnixNano())
		p.RecvFrames.Add(1)
		p.RecvBytes.Add(uint64(HeaderSize + len(payload) + TagSize))
		if c.recvTimes.ok && h.Type == TypeData && h.Flags&FlagSink != 0 {
			op, size := trace.Op{ID: trace.LinkID(p.ID, h.Comm), Name: trace.NameLink}, frameSize(len(payload))
			c.record(op, trace.StageRead, c.recvTimes.read, c.recvTimes.readEnd, size, nil)
			c.record(op, trace.StageOpen, c.recvTimes.readEnd, c.recvTimes.openEnd, size, nil)
		}
		n.deliver(p, h, payload)
		// Let what the frames made runnable run. While the peer sends
		// faster than this loop takes frames, Recv never blocks, and on
		// a process with one P (GOMAXPROCS 1: a rank or an agent bound
		// to its core) nothing else would run until the runtime
		// preempted this goroutine, 10 ms on: not the goroutine a frame
		// woke, nor this node's own sends. A 16 MiB allreduce between
		// two ranks then took 17-23 ms in a few iterations of every
		// sixty, where the others took 5-7 ms. Not after every frame:
		// each yield also runs whatever else waits (an agent's poller),
		// and a 1 MiB allreduce among four agents on two cores, of many
		// small frames, took a sixth longer so.
		if now.Sub(yielded) >= recvYieldEvery {
			runtime.Gosched()
			yielded = now
		}
	}
}

// recvYieldEvery is how long a connection's reader takes frames before it
// lets other goroutines run.
const recvYieldEvery = 100 * time.Microsecond

func (n *Node) refused(err error) {
	switch {
	case errors.Is(err, ErrAuth):
		n.AuthFailures.Add(1)
	case errors.Is(err, ErrFrame):
		n.BadFrames.Add(1)
	}
}

func (n *Node) deliver(p *Peer, h Header, payload []byte) {
	n.mu.Lock()
	if cur, ok := n.epochs[h.Comm]; ok && h.Epoch < cur {
		n.mu.Unlock()
		n.OldEpoch.Add(1)
		return
	}
	handler := n.handlers[h.Type]
	var waiter chan []byte
	switch h.Type {
	case TypePong, TypeAck, TypeReply:
		waiter = n.waiters[h.Comm]
		delete(n.waiters, h.Comm)
	case TypeAbort:
		if len(n.aborted) >= maxAborted {
			clear(n.aborted) // a bounded memory of aborts; waiters were woken already
		}
		n.aborted[h.Comm] = string(payload)
		if w, ok := n.waiters[h.Comm]; ok {
			close(w)
			delete(n.waiters, h.Comm)
		}
	}
	n.mu.Unlock()
	if waiter != nil {
		waiter <- append([]byte(nil), payload...)
	}
	if h.Type == TypeData && h.Flags&FlagSink != 0 {
		n.serveSink(p.ID, h, payload)
		return
	}
	if handler != nil {
		n.call(handler, p.ID, h, payload)
	}
}

// call runs a message's handler; a panic in it drops that message alone
// (counted and logged: shared/panics), and the connection goes on with
// the peer's next ones. A request dropped so is answered by no reply: its
// sender's deadline fails it.
func (n *Node) call(handler Handler, from uint32, h Header, payload []byte) {
	defer func() {
		if v := recover(); v != nil {
			panics.Recovered(n.cfg.Log, "peer/"+h.Type.String(), v) //nolint:errcheck // the message is dropped
		}
	}()
	handler(from, h, payload)
}

func (n *Node) peer(id uint32) *Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.peers[id]
}

// conn returns the connection this node sends to p on, dialing it once;
// ErrClosed once the node is closed.
func (n *Node) conn(ctx context.Context, p *Peer) (*Conn, error) {
	for {
		if n.closing.Load() {
			return nil, ErrClosed
		}
		p.mu.Lock()
		if p.out != nil {
			c := p.out
			p.mu.Unlock()
			return c, nil
		}
		if p.dialing == nil {
			p.dialing = make(chan struct{})
			p.mu.Unlock()
			c, err := n.dial(ctx, p)
			p.mu.Lock()
			close(p.dialing)
			p.dialing = nil
			if err == nil && n.closing.Load() {
				// Close may have passed this peer while the dial was
				// under way: it would never close this connection.
				c.Close()
				c, err = nil, ErrClosed
			}
			if err == nil {
				p.out = c
			}
			p.mu.Unlock()
			return c, err
		}
		wait := p.dialing
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (n *Node) dial(ctx context.Context, p *Peer) (*Conn, error) {
	var nc net.Conn
	var err error
	if n.cfg.Dial != nil {
		dctx, cancel := context.WithTimeout(ctx, n.cfg.Deadline)
		nc, err = n.cfg.Dial(dctx, p.Addr)
		cancel()
	} else {
		d := net.Dialer{Timeout: n.cfg.Deadline}
		nc, err = d.DialContext(ctx, "tcp", p.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("peer: dial node %d at %s: %w", p.ID, p.Addr, err)
	}
	deadline := time.Now().Add(n.cfg.Deadline)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c, err := Handshake(nc, n.cfg.Key, n.cfg.ID, true, deadline)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("peer: node %d at %s: %w", p.ID, p.Addr, err)
	}
	if c.Remote() != p.ID {
		nc.Close()
		return nil, fmt.Errorf("peer: %s answered as node %d, not %d", p.Addr, c.Remote(), p.ID)
	}
	c.SetStall(n.cfg.Deadline) // a peer that reads nothing for the deadline is gone
	c.rec = n.cfg.Trace
	if h := testHookDialed; h != nil {
		h()
	}
	// Drain what the peer sends back on our connection (nothing, today):
	// reading also notices it closing. Not once Close has begun: its
	// wait for the node's goroutines may be under way.
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		c.Close()
		return nil, ErrClosed
	}
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		for {
			if _, _, err := c.Recv(); err != nil {
				p.mu.Lock()
				if p.out == c {
					p.out = nil
				}
				p.mu.Unlock()
				c.Close()
				return
			}
		}
	}()
	return c, nil
}

// testHookDialed, when set, runs in dial once a connection is made.
var testHookDialed func()

// Send sends one frame to peer to, dialing its connection on first use.
// It blocks while the peer does not keep up (back-pressure), up to ctx's
// deadline.
func (n *Node) Send(ctx context.Context, to uint32, h Header, payload []byte) error {
	p := n.peer(to)
	if p == nil {
		return fmt.Errorf("%w: node %d", ErrUnknown, to)
	}
	c, err := n.conn(ctx, p)
	if err != nil {
		return err
	}
	if err := c.Send(ctx, h, payload); err != nil {
		if errors.Is(err, ErrStalled) {
			// Silent while work is pending on it, as a peer that sends
			// nothing while we wait on it.
			n.declareDead(p, err.Error())
			return fmt.Errorf("peer: send to node %d: %w", to, err)
		}
		if errors.Is(err, ErrNotSent) {
			// The connection is intact (a heartbeat that waited behind
			// a transfer's frames, say): closing it would lose the
			// frames others have in flight on it.
			return fmt.Errorf("peer: send to node %d: %w", to, err)
		}
		p.mu.Lock()
		if p.out == c {
			p.out = nil
		}
		p.mu.Unlock()
		c.Close()
		return fmt.Errorf("peer: send to node %d: %w", to, err)
	}
	p.lastSent.Store(time.Now().UnixNano())
	p.SentFrames.Add(1)
	p.SentBytes.Add(uint64(HeaderSize + len(payload) + TagSize))
	return nil
}

// Expect records that work is pending on peer id (a reply, the rest of a
// transfer) until the returned func is called: while it is, silence
// longer than the deadline declares the peer dead.
func (n *Node) Expect(id uint32) (done func()) {
	p := n.peer(id)
	if p == nil {
		return func() {}
	}
	if p.pending.Add(1) == 1 {
		// Silence counts from now, not from before the work began.
		if last := p.lastHeard.Load(); time.Since(time.Unix(0, last)) > n.cfg.Deadline/2 {
			p.lastHeard.Store(time.Now().UnixNano())
		}
	}
	var once sync.Once
	return func() { once.Do(func() { p.pending.Add(-1) }) }
}

// Dead reports why peer id was declared dead, or "" while it is alive.
func (n *Node) Dead(id uint32) string {
	p := n.peer(id)
	if p == nil {
		return "not a member"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// creditPause moves the last-heard time on by lost, no further than now,
// unless a frame was heard meanwhile (the reader's time is newer).
func (p *Peer) creditPause(now time.Time, lost time.Duration) {
	last := p.lastHeard.Load()
	moved := min(last+int64(lost), now.UnixNano())
	if h := testHookCredit; h != nil {
		h()
	}
	p.lastHeard.CompareAndSwap(last, moved)
}

// testHookCredit, when set, runs in creditPause between its load and its
// swap, where a reader may store a frame's time.
var testHookCredit func()

func (n *Node) declareDead(p *Peer, why string) {
	p.mu.Lock()
	if p.dead != "" {
		p.mu.Unlock()
		return
	}
	p.dead = why
	if p.out != nil {
		p.out.Close()
		p.out = nil
	}
	p.mu.Unlock()
	n.dropSinks(p.ID)
	n.cfg.Log.Warn("peer: declared dead", "node", p.ID, "why", why)
}

// watch sends heartbeats on idle connections and declares dead the
// peers that owe work and have gone silent.
//
// Silence is counted only while this node runs: a pass that comes late
// (the process was stopped or starved, the machine paused) moves every
// peer's last-heard time on by the time lost. The peers may not have run
// either, and what they did send may still be unread in the sockets.
func (n *Node) watch(ctx context.Context) {
	every := n.cfg.Deadline / 8
	tick := time.NewTicker(every)
	defer tick.Stop()
	prev := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		lost := now.Sub(prev) - every
		prev = now
		n.mu.Lock()
		peers := make([]*Peer, 0, len(n.peers))
		for _, p := range n.peers {
			peers = append(peers, p)
		}
		n.mu.Unlock()
		if lost > every {
			n.Paused.Add(1)
			if lost >= n.cfg.Deadline/2 { // not every late pass of a loaded machine
				n.cfg.Log.Warn("peer: this node did not run for a while; silence meanwhile is not held against peers", "lost", lost.Round(time.Millisecond))
			}
			for _, p := range peers {
				p.creditPause(now, lost)
			}
		}
		for _, p := range peers {
			p.mu.Lock()
			connected, dead := p.out != nil, p.dead != ""
			busy := connected && p.out.Sending() // frames on their way say as much as a heartbeat
			p.mu.Unlock()
			// Heartbeats to peers we send to, and to peers that talk to us
			// (one may be waiting on us while we only receive).
			heard := now.Sub(time.Unix(0, p.lastHeard.Load())) < n.cfg.Deadline
			if (connected || heard) && !dead && !busy && now.Sub(time.Unix(0, p.lastSent.Load())) > n.cfg.Deadline/4 &&
				p.beating.CompareAndSwap(false, true) {
				// Each on its own goroutine: a peer that does not answer
				// (stopped, its buffers full, a dial that hangs) must not
				// hold up the heartbeats the others wait for.
				n.wg.Add(1)
				go func() {
					defer n.wg.Done()
					defer p.beating.Store(false)
					hctx, cancel := context.WithTimeout(ctx, n.cfg.Deadline/4)
					n.Send(hctx, p.ID, Header{Type: TypeHeartbeat}, nil)
					cancel()
				}()
			}
			if !dead && p.pending.Load() > 0 {
				if silent := now.Sub(time.Unix(0, p.lastHeard.Load())); silent > n.cfg.Deadline {
					n.declareDead(p, fmt.Sprintf("nothing heard for %v with work pending", silent.Round(time.Millisecond)))
				}
			}
		}
	}
}

// NewComm returns a communicator id not used before by this node.
func (n *Node) NewComm() uint64 { return n.nextComm.Add(1) }

// wait registers a waiter for a Pong or Ack on comm.
func (n *Node) waiter(comm uint64) chan []byte {
	ch := make(chan []byte, 1)
	n.mu.Lock()
	n.waiters[comm] = ch
	n.mu.Unlock()
	return ch
}

func (n *Node) dropWaiter(comm uint64) {
	n.mu.Lock()
	delete(n.waiters, comm)
	n.mu.Unlock()
}

// await waits for a waiter's frame, the peer's death, or ctx.
func (n *Node) await(ctx context.Context, to uint32, comm uint64, ch chan []byte) ([]byte, error) {
	tick := time.NewTicker(n.cfg.Deadline / 8)
	defer tick.Stop()
	for {
		select {
		case b, ok := <-ch:
			if !ok {
				n.mu.Lock()
				why := n.aborted[comm]
				n.mu.Unlock()
				return nil, fmt.Errorf("%w: %s", ErrAborted, why)
			}
			return b, nil
		case <-tick.C:
			if why := n.Dead(to); why != "" {
				n.dropWaiter(comm)
				return nil, fmt.Errorf("%w: node %d: %s", ErrDead, to, why)
			}
		case <-ctx.Done():
			n.dropWaiter(comm)
			return nil, ctx.Err()
		}
	}
}

func (n *Node) servePing(from uint32, h Header, payload []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Deadline)
	defer cancel()
	if len(payload) == pingSize {
		// A Ping's: its sender's clock, answered with this node's.
		var b [pongSize]byte
		copy(b[:], payload)
		binary.LittleEndian.PutUint64(b[pingSize:], uint64(n.now().UnixNano()))
		payload = b[:]
	}
	n.Send(ctx, from, Header{Type: TypePong, Comm: h.Comm, Epoch: h.Epoch}, payload)
}

// A Ping carries its sender's clock; the Pong echoes it and adds the
// responder's, read as it answered.
const pingSize, pongSize = 8, 16

// now reads this node's clock (Config.Clock).
func (n *Node) now() time.Time {
	if n.cfg.Clock != nil {
		return n.cfg.Clock()
	}
	return time.Now()
}

// clockSamples is how many of a peer's latest round trips its clock
// offset is taken from: the one of the shortest round trip.
const clockSamples = 8

// peerClock is what the pings to a peer measured of its clock.
type peerClock struct {
	mu      sync.Mutex
	samples [clockSamples]struct{ offset, rtt time.Duration }
	n       int // samples taken
}

// add keeps one round trip's measure.
func (c *peerClock) add(offset, rtt time.Duration) {
	c.mu.Lock()
	c.samples[c.n%clockSamples].offset, c.samples[c.n%clockSamples].rtt = offset, rtt
	c.n++
	c.mu.Unlock()
}

// best returns the offset of the shortest of the latest round trips, and
// that round trip (the offset is within half of it); ok is false before
// any.
func (c *peerClock) best() (offset, rtt time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range min(c.n, clockSamples) {
		if s := c.samples[i]; !ok || s.rtt < rtt {
			offset, rtt, ok = s.offset, s.rtt, true
		}
	}
	return offset, rtt, ok
}

// Clock returns how far peer id's clock is ahead of this node's, as the
// shortest of the latest pings to it measured (NTP's way: its clock when
// it answered against the middle of the round trip), and that round trip,
// which bounds the error to half of it; ok is false before any ping.
func (n *Node) Clock(id uint32) (offset, rtt time.Duration, ok bool) {
	p := n.peer(id)
	if p == nil {
		return 0, 0, false
	}
	return p.clock.best()
}

// Ping measures one round trip to peer to.
func (n *Node) Ping(ctx context.Context, to uint32) (time.Duration, error) {
	comm := n.NewComm()
	ch := n.waiter(comm)
	done := n.Expect(to)
	defer done()
	var b [pingSize]byte
	t0, mine := time.Now(), n.now() // the round trip's start; this node's clock then
	binary.LittleEndian.PutUint64(b[:], uint64(mine.UnixNano()))
	if err := n.Send(ctx, to, Header{Type: TypePing, Comm: comm}, b[:]); err != nil {
		n.dropWaiter(comm)
		return 0, err
	}
	pong, err := n.await(ctx, to, comm, ch)
	if err != nil {
		return 0, err
	}
	rtt := time.Since(t0)
	if p := n.peer(to); p != nil {
		p.rtt.Store(int64(rtt))
		if len(pong) == pongSize && [pingSize]byte(pong) == b {
			theirs := time.Unix(0, int64(binary.LittleEndian.Uint64(pong[pingSize:])))
			p.clock.add(theirs.Sub(mine.Add(rtt/2)), rtt)
		}
	}
	return rtt, nil
}

// Call sends a request to peer to and returns its reply: the peer's
// TypeRequest handler answers with Reply. A peer declared dead, or ctx,
// ends the wait.
func (n *Node) Call(ctx context.Context, to uint32, payload []byte) ([]byte, error) {
	return n.request(ctx, to, 0, payload)
}

// CallTraced is Call of a request that belongs to the traced op id (at
// most MaxTraceID bytes): the peer's handler reads the id with Traced and
// may record its work under it. A request that would pass MaxPayload with
// the id goes without it.
func (n *Node) CallTraced(ctx context.Context, to uint32, id string, payload []byte) ([]byte, error) {
	if id == "" || len(id) > MaxTraceID || 1+len(id)+len(payload) > MaxPayload {
		return n.request(ctx, to, 0, payload)
	}
	b := make([]byte, 0, 1+len(id)+len(payload))
	b = append(append(append(b, byte(len(id))), id...), payload...)
	return n.request(ctx, to, FlagTraced, b)
}

// FlagTraced, in a request's Flags, says that its payload starts with the
// id of the traced op it belongs to: its length (a byte), then the id.
const FlagTraced = 4

// MaxTraceID bounds a traced request's id.
const MaxTraceID = 255

// Traced splits a request's payload into the id of the traced op it
// belongs to ("" when it carries none) and the request.
func Traced(h Header, payload []byte) (id string, req []byte, err error) {
	if h.Flags&FlagTraced == 0 {
		return "", payload, nil
	}
	if len(payload) < 1 || len(payload) < 1+int(payload[0]) {
		return "", nil, fmt.Errorf("%w: a traced request of %d bytes", ErrFrame, len(payload))
	}
	n := int(payload[0])
	return string(payload[1 : 1+n]), payload[1+n:], nil
}

func (n *Node) request(ctx context.Context, to uint32, flags uint32, payload []byte) ([]byte, error) {
	comm := n.NewComm()
	ch := n.waiter(comm)
	done := n.Expect(to)
	defer done()
	if err := n.Send(ctx, to, Header{Type: TypeRequest, Comm: comm, Flags: flags}, payload); err != nil {
		n.dropWaiter(comm)
		return nil, err
	}
	return n.await(ctx, to, comm, ch)
}

// Reply answers the request h from peer to (in a TypeRequest handler, or
// later).
func (n *Node) Reply(ctx context.Context, to uint32, h Header, payload []byte) error {
	return n.Send(ctx, to, Header{Type: TypeReply, Comm: h.Comm, Epoch: h.Epoch}, payload)
}

// Members returns the ids of every member, this node's included, in order.
func (n *Node) Members() []uint32 {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := make([]uint32, 0, len(n.peers)+1)
	ids = append(ids, n.cfg.ID)
	for id := range n.peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Abort tells every member that comm's work is abandoned, and fails this
// node's waits on it.
func (n *Node) Abort(ctx context.Context, comm, epoch uint64, reason string) {
	n.mu.Lock()
	n.aborted[comm] = reason
	if w, ok := n.waiters[comm]; ok {
		close(w)
		delete(n.waiters, comm)
	}
	ids := make([]uint32, 0, len(n.peers))
	for id := range n.peers {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	for _, id := range ids {
		n.Send(ctx, id, Header{Type: TypeAbort, Comm: comm, Epoch: epoch}, []byte(reason))
	}
}

// Aborted reports why comm was aborted, or "".
func (n *Node) Aborted(comm uint64) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.aborted[comm]
}

// Peers returns every member's status, by id.
func (n *Node) Peers() []api.PeerStatus {
	n.mu.Lock()
	peers := make([]*Peer, 0, len(n.peers))
	for _, p := range n.peers {
		peers = append(peers, p)
	}
	n.mu.Unlock()
	out := make([]api.PeerStatus, 0, len(peers))
	for _, p := range peers {
		p.mu.Lock()
		st := api.PeerStatus{ID: p.ID, Addr: p.Addr, Connected: p.out != nil, Alive: p.dead == "", Dead: p.dead}
		p.mu.Unlock()
		if h := p.lastHeard.Load(); h != 0 {
			st.HeardAgoSec = time.Since(time.Unix(0, h)).Seconds()
		} else {
			st.HeardAgoSec = -1
		}
		st.Pending = p.pending.Load()
		st.SentBytes, st.RecvBytes = p.SentBytes.Load(), p.RecvBytes.Load()
		st.SentFrames, st.RecvFrames = p.SentFrames.Load(), p.RecvFrames.Load()
		st.RTTMicros = float64(p.rtt.Load()) / 1e3
		if off, rtt, ok := p.clock.best(); ok {
			st.ClockOffsetNs, st.ClockRTTNs = int64(off), int64(rtt)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b api.PeerStatus) int { return int(a.ID) - int(b.ID) })
	return out
}
