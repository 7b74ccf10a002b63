package resp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hecsys/hec/shared/accept"

	"golang.org/x/sys/unix"
)

// The front end is an epoll event loop, one per usable core, as in Redis:
// a loop reads every ready client, runs the commands that cannot wait (GET
// and friends) straight away, then writes every reply of the round. One
// read and one write per client per round, no goroutine switch per
// request, and idle clients hold no buffers.
//
// A command that waits (writes wait for the committer, except Async SETs
// the store takes from its cache; SCAN, DBSIZE and INFO walk the store)
// makes its client busy: the loop stops watching it
// and a worker goroutine runs its buffered requests (pipelined SETs queued
// together) and hands it back through an eventfd.
//
// Under load the loop polls epoll without sleeping for a few microseconds
// before it blocks, yielding to other goroutines in between: waking a
// sleeping core costs more than the poll.

const (
	readSize  = 64 << 10
	spinFor   = 50 * time.Microsecond
	maxEvents = 256
)

type loop struct {
	s        *Server
	stats    []cmdStats // by command.idx
	ctx      context.Context
	ep       int
	epf      *os.File           // ep in Go's poller: the loop blocks there, holding no thread
	epc      syscall.RawConn    // epf's
	deadline bool               // epf has a read deadline
	readyNow func(uintptr) bool // lp.readyFn
	ready    int                // events readyNow took
	wake     int                // eventfd: new clients, clients handed back, stop
	clients  []*client          // by descriptor
	rbuf     []byte
	replies  [][]byte // reply buffers of clients with nothing left to write, for the next ones
	evs      []unix.EpollEvent
	dirty    []*client // have replies to write this round
	busy     int       // clients with a worker, or parked: Close waits for them
	stalled  int       // clients whose replies wait for EPOLLOUT
	checked  time.Time // stalled clients last checked against WriteTimeout

	mu       sync.Mutex // guards what other goroutines hand the loop
	incoming []int
	back     []*client
	stop     bool
	woken    bool
}

func newLoop(ctx context.Context, s *Server) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("resp: epoll: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("resp: eventfd: %w", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, fmt.Errorf("resp: epoll add: %w", err)
	}
	// The loop sleeps in Go's poller, on its epoll descriptor (readable
	// when it has events), not in epoll_wait: a goroutine blocked in a
	// system call holds its thread and the runtime's scheduler, which
	// the runtime's monitor thread must take back for the committer, on
	// the core they share (kv's logSyncer says what that cost).
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, fmt.Errorf("resp: epoll: %w", err)
	}
	epf := os.NewFile(uintptr(ep), "epoll")
	epc, err := epf.SyscallConn()
	if err != nil {
		epf.Close()
		unix.Close(wake)
		return nil, fmt.Errorf("resp: epoll: %w", err)
	}
	lp := &loop{s: s, stats: make([]cmdStats, len(commandTable)+1), ctx: ctx, ep: ep, epf: epf, epc: epc, wake: wake, rbuf: make([]byte, readSize),
		evs: make([]unix.EpollEvent, maxEvents)}
	lp.readyNow = lp.readyFn
	return lp, nil
}

// signalLocked wakes the loop once per batch of news.
// commandStats is INFO commandstats: each command's runs and refusals on
// every loop, for the commands run since the start.
func (s *Server) commandStats() string {
	var b strings.Builder
	for _, cmd := range commandTable {
		var calls, rejected uint64
		for _, lp := range s.loops {
			if cmd.idx < len(lp.stats) {
				calls += lp.stats[cmd.idx].calls.Load()
				rejected += lp.stats[cmd.idx].rejected.Load()
			}
		}
		if calls > 0 {
			fmt.Fprintf(&b, "cmdstat_%s:calls=%d,rejected_calls=%d\r\n", cmd.lower, calls, rejected)
		}
	}
	return b.String()
}

func (lp *loop) signalLocked() {
	if !lp.woken {
		lp.woken = true
		one := uint64(1)
		rawIO(unix.SYS_WRITE, lp.wake, (*[8]byte)(unsafe.Pointer(&one))[:])
	}
}

func (lp *loop) add(fd int) {
	lp.mu.Lock()
	if lp.stop {
		lp.mu.Unlock()
		unix.Close(fd)
		return
	}
	lp.incoming = append(lp.incoming, fd)
	lp.signalLocked()
	lp.mu.Unlock()
}

func (lp *loop) giveBack(c *client) {
	lp.mu.Lock()
	lp.back = append(lp.back, c)
	lp.signalLocked()
	lp.mu.Unlock()
}

func (lp *loop) shutdown() {
	lp.mu.Lock()
	lp.stop = true
	lp.signalLocked()
	lp.mu.Unlock()
}

// Start starts the event loops (one per GOMAXPROCS); ServeConn hands them
// clients. Close stops them.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if len(s.loops) > 0 {
		return nil
	}
	s.started = time.Now()
	s.limits.init()
	s.Limits = s.Limits.withDefaults()
	if s.WriteTimeout == 0 {
		s.WriteTimeout = 30 * time.Second
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	for range runtime.GOMAXPROCS(0) {
		lp, err := newLoop(ctx, s)
		if err != nil {
			for _, lp := range s.loops {
				lp.shutdown()
			}
			s.loops = nil
			return err
		}
		s.loops = append(s.loops, lp)
		s.running.Add(1)
		go func() { defer s.running.Done(); lp.run() }()
	}
	return nil
}

// ServeConn moves conn's socket to an event loop (conn itself is closed:
// the loop serves a descriptor of its own) and returns.
func (s *Server) ServeConn(conn net.Conn) {
	remote := conn.RemoteAddr().String()
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	if len(loops) == 0 {
		conn.Close()
		return
	}
	fd, err := takeFD(conn)
	if err != nil {
		s.Log.Warn("resp: dropping client", "remote", remote, "err", err)
		return
	}
	s.connected.Add(1)
	s.total.Add(1)
	loops[s.next.Add(1)%uint64(len(loops))].add(fd)
}

// Serve starts the loops and accepts clients on ln (package accept: errors
// retried with back-off) until ln is closed. The clients stay served
// until Close.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.Start(ctx); err != nil {
		if errors.Is(err, ErrClosed) {
			return nil
		}
		return err
	}
	return accept.New("resp", ln, s.ServeConn, s.Log).Run()
}

// takeFD moves an accepted connection's socket out of Go's poller into a
// non-blocking descriptor of our own.
func takeFD(conn net.Conn) (int, error) {
	defer conn.Close()
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("resp: %T has no descriptor", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("resp: dup: %w", derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Close disconnects every client and waits for the loops and workers.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	loops := s.loops
	s.mu.Unlock()
	for _, lp := range loops {
		lp.shutdown()
	}
	s.running.Wait()
}

func (lp *loop) run() {
	defer func() {
		for _, c := range lp.clients {
			if c != nil {
				lp.closeClient(c)
			}
		}
		unix.Close(lp.wake)
		lp.epf.Close()
	}()
	for {
		n := lp.poll()
		stop := false
		for _, ev := range lp.evs[:n] {
			if ev.Fd == int32(lp.wake) {
				stop = lp.news()
				continue
			}
			c := lp.client(ev.Fd)
			if c == nil || c.busy {
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 && c.wrote < c.w.Len() {
				if lp.writeOut(c) {
					lp.process(c, c.in) // go on with held-back requests
					lp.markDirty(c)
				}
				continue
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				lp.readFrom(c)
			}
		}
		lp.flush()
		if stop && lp.busy == 0 {
			return
		}
		if lp.stalled > 0 {
			lp.dropStalled()
		}
	}
}

// poll waits for events: a short spin of non-blocking polls first, then a
// wait in Go's poller (with a deadline while stalled clients need
// watching).
func (lp *loop) poll() int {
	var until time.Time
	for i := 0; ; i++ {
		if n := lp.epollNow(); n > 0 {
			return n
		}
		if i%8 == 0 {
			now := time.Now()
			if i == 0 {
				until = now.Add(spinFor)
			} else if now.After(until) {
				break
			}
		}
		runtime.Gosched()
	}
	if lp.stalled > 0 {
		lp.epf.SetReadDeadline(time.Now().Add(time.Second))
		lp.deadline = true
	} else if lp.deadline {
		lp.epf.SetReadDeadline(time.Time{})
		lp.deadline = false
	}
	lp.ready = 0
	lp.epc.Read(lp.readyNow)
	return lp.ready // 0: the deadline passed
}

// readyFn is what the poller calls when the epoll descriptor is readable
// (and once before it waits): it takes the events into lp.ready. Made
// once (newLoop), so that a wait allocates nothing.
func (lp *loop) readyFn(uintptr) bool {
	lp.ready = lp.epollNow()
	return lp.ready > 0
}

// epollNow returns the events ready now, without waiting.
func (lp *loop) epollNow() int {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(lp.ep), uintptr(unsafe.Pointer(&lp.evs[0])),
		uintptr(len(lp.evs)), 0, 0, 0)
	if e != 0 {
		return 0
	}
	return int(r)
}

// news takes new clients and clients handed back by workers; it reports
// whether the server is closing.
func (lp *loop) news() bool {
	var b [8]byte
	rawIO(unix.SYS_READ, lp.wake, b[:])
	lp.mu.Lock()
	incoming, back, stop := lp.incoming, lp.back, lp.stop
	lp.incoming, lp.back, lp.woken = nil, nil, false
	lp.mu.Unlock()
	for _, fd := range incoming {
		if stop {
			unix.Close(fd)
			lp.s.connected.Add(-1)
			continue
		}
		c := &client{s: lp.s, lp: lp, fd: fd, id: lp.s.ids.Add(1), authed: lp.s.Password == ""}
		if sa, err := unix.Getpeername(fd); err == nil {
			c.remote = sockaddrString(sa)
		}
		if sa, err := unix.Getsockname(fd); err == nil {
			c.local = sockaddrString(sa)
		}
		if err := unix.EpollCtl(lp.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			unix.Close(fd)
			lp.s.connected.Add(-1)
			continue
		}
		lp.s.registry.add(c) // once served: closeClient removes it
		if fd >= len(lp.clients) {
			lp.clients = append(lp.clients, make([]*client, fd+1-len(lp.clients))...)
		}
		lp.clients[fd] = c
	}
	for _, c := range back {
		if c.parked {
			if lp.client(int32(c.fd)) != c {
				c.parked = false // closed while parked
				lp.busy--
				c.drain()
				continue
			}
			lp.unpark(c)
			continue
		}
		c.busy = false
		lp.busy--
		if stop {
			continue // closed with the rest on the way out
		}
		if err := unix.EpollCtl(lp.ep, unix.EPOLL_CTL_ADD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.fd)}); err != nil {
			lp.closeClient(c)
			continue
		}
		lp.process(c, c.in)
		lp.markDirty(c)
	}
	return stop
}

func sockaddrString(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return (&net.TCPAddr{IP: a.Addr[:], Port: a.Port}).String()
	case *unix.SockaddrInet6:
		return (&net.TCPAddr{IP: a.Addr[:], Port: a.Port}).String()
	case *unix.SockaddrUnix:
		return a.Name
	}
	return "?"
}

func (lp *loop) readFrom(c *client) {
	n, err := rawIO(unix.SYS_READ, c.fd, lp.rbuf)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if n <= 0 {
		lp.closeClient(c) // EOF or error; its queued writes were drained already
		return
	}
	c.seen.active.Store(time.Now().UnixNano())
	data := lp.rbuf[:n]
	if len(c.in) > 0 || c.parked {
		c.in = append(c.in, data...)
		data = c.in
	}
	if c.parked {
		if len(c.in) > 4*readSize && !c.inOff {
			c.inOff = true // enough held: stop reading until the commit
			unix.EpollCtl(lp.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Fd: int32(c.fd)})
		}
		return
	}
	lp.process(c, data)
	lp.markDirty(c)
}

// process runs the complete requests in data (which is c.in, or the read
// buffer) until one must wait, the replies grow past the limit or data
// runs out; what is left is kept in c.in.
func (lp *loop) process(c *client, data []byte) {
	defer c.contain("resp/loop")
	if c.parked {
		c.in = append(c.in[:0], data...)
		return // goes on when its SETs are committed
	}
	if c.w.buf == nil && len(lp.replies) > 0 {
		c.w.buf = lp.replies[len(lp.replies)-1]
		lp.replies = lp.replies[:len(lp.replies)-1]
	}
	lim := lp.s.Limits
	for !c.quit && !c.closing && c.w.Len()-c.wrote < lim.ReplyBuffer {
		args, used, err := c.parser.Parse(data, lim, c.args)
		if err != nil {
			c.protocolError(err)
			data = nil
			break
		}
		if used == 0 {
			break
		}
		c.args = args[:0]
		if len(args) == 0 {
			data = data[used:]
			continue
		}
		cmd := lookup(args[0])
		if cmd != nil {
			c.seen.lastCmd.Store(&cmd.lower)
		}
		isSet := cmd == cmdSet && c.authed && !c.tx.multi && c.replying()
		var so setArgs
		if isSet {
			so = parseSet(args)
		}
		switch {
		case isSet && len(c.pending) == 0 && c.setNoWait(args, &so):
		case isSet && c.queueSet(args, &so):
		case len(c.pending) > 0 && cmd == cmdGet && c.authed && !c.tx.multi && len(args) == 2 && c.getBehind(args[1]):
		case len(c.pending) > 0:
			// Anything else waits for the queued SETs: it may read them,
			// and its reply comes after theirs.
			lp.park(c, data)
			return
		case !c.authed || isSet || (cmd != nil && !cmd.runsOnLoop()):
			if isSet {
				// The worker's first request: parsed already. A copy, so
				// that so stays on the stack of every other request.
				handed := so
				c.handed = &handed
			}
			lp.handOff(c, data)
			return
		default:
			c.exec(lp.ctx, cmd, args)
		}
		data = data[used:]
		lp.s.commands.Add(1)
	}
	if len(c.pending) > 0 {
		lp.park(c, data)
		return
	}
	c.in = append(c.in[:0], data...)
	if len(c.in) == 0 && cap(c.in) > readSize {
		c.in = nil // idle clients hold little
	}
}

// park keeps c, with its requests from data on, until its queued SETs are
// committed: the last one's notification hands it back to the loop. Its
// socket is still read, up to a bound, so a pipelining client is not
// stalled by the kernel's buffers; its requests wait.
func (lp *loop) park(c *client, data []byte) {
	c.in = append(c.in[:0], data...)
	c.parked = true
	lp.busy++ // Close waits for the commit, as for a worker
	c.pending[len(c.pending)-1].Notify(func() { lp.giveBack(c) })
}

// unpark writes the replies of c's committed SETs and goes on with its
// requests.
func (lp *loop) unpark(c *client) {
	c.parked = false
	lp.busy--
	c.drain() // all committed: writes of one client commit in order
	if c.inOff {
		c.inOff = false
		if err := unix.EpollCtl(lp.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.fd)}); err != nil {
			lp.closeClient(c)
			return
		}
	}
	lp.process(c, c.in)
	lp.markDirty(c)
}

// handOff gives c, with its requests from data on, to a worker.
func (lp *loop) handOff(c *client, data []byte) {
	c.in = append(c.in[:0], data...)
	// Not watched while busy: the worker owns it.
	if err := unix.EpollCtl(lp.ep, unix.EPOLL_CTL_DEL, c.fd, nil); err != nil {
		lp.closeClient(c)
		return
	}
	c.busy = true
	lp.busy++
	lp.s.running.Add(1)
	go func() {
		defer lp.s.running.Done()
		c.runBlocking(lp.ctx)
		lp.giveBack(c)
	}()
}

func (lp *loop) markDirty(c *client) {
	if !c.busy && (c.w.Len() > c.wrote || c.closing || c.quit) {
		lp.dirty = append(lp.dirty, c)
	}
}

// flush writes the round's replies. A client whose replies are all written
// goes on with requests it had to hold back.
func (lp *loop) flush() {
	for i := 0; i < len(lp.dirty); i++ {
		c := lp.dirty[i]
		lp.dirty[i] = nil
		if c.busy || lp.client(int32(c.fd)) != c || c.stalledSince != (time.Time{}) {
			continue
		}
		if lp.writeOut(c) && len(c.in) > 0 {
			lp.process(c, c.in) // go on with held-back requests
			lp.markDirty(c)
		}
	}
	lp.dirty = lp.dirty[:0]
}

// writeOut writes c's replies and reports whether all are written and c
// is still open; what the socket does not take waits for EPOLLOUT, and c's
// requests wait with it.
func (lp *loop) writeOut(c *client) bool {
	for c.wrote < c.w.Len() {
		n, err := rawIO(unix.SYS_WRITE, c.fd, c.w.buf[c.wrote:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			if c.stalledSince == (time.Time{}) {
				c.stalledSince = time.Now()
				lp.stalled++
				unix.EpollCtl(lp.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLOUT, Fd: int32(c.fd)})
			}
			return false
		}
		if err != nil || n <= 0 {
			lp.closeClient(c)
			return false
		}
		c.wrote += n
	}
	c.wrote = 0
	lp.putReplies(c)
	if c.stalledSince != (time.Time{}) {
		c.stalledSince = time.Time{}
		lp.stalled--
		unix.EpollCtl(lp.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.fd)})
	}
	if c.closing || c.quit {
		lp.closeClient(c)
		return false
	}
	return true
}

// putReplies takes c's written reply buffer back into the loop's
// spares: a thousand clients that each pipeline a few kilobytes of
// replies then hold none between rounds, only the ones of a round do.
func (lp *loop) putReplies(c *client) {
	b := c.w.buf[:0]
	c.w.buf = nil
	if cap(b) > 0 && cap(b) <= readSize && len(lp.replies) < maxEvents {
		lp.replies = append(lp.replies, b)
	}
}

// dropStalled closes clients that have not read their replies for
// WriteTimeout, checking once a second.
func (lp *loop) dropStalled() {
	now := time.Now()
	if now.Sub(lp.checked) < time.Second {
		return
	}
	lp.checked = now
	for _, c := range lp.clients {
		if c != nil && c.stalledSince != (time.Time{}) && now.Sub(c.stalledSince) > lp.s.WriteTimeout {
			lp.s.Log.Warn("resp: dropping a client that does not read its replies", "remote", c.remote)
			lp.closeClient(c)
		}
	}
}

func (lp *loop) closeClient(c *client) {
	if lp.client(int32(c.fd)) != c {
		return
	}
	lp.clients[c.fd] = nil
	lp.s.registry.remove(c) // before the descriptor can be reused
	if c.stalledSince != (time.Time{}) {
		c.stalledSince = time.Time{}
		lp.stalled--
	}
	unix.Close(c.fd)
	lp.s.connected.Add(-1)
}

// client returns the client on descriptor fd, or nil.
func (lp *loop) client(fd int32) *client {
	if fd < 0 || int(fd) >= len(lp.clients) {
		return nil
	}
	return lp.clients[fd]
}

// rawIO reads or writes a non-blocking descriptor without telling the
// scheduler: it never blocks. (A call that tells it wakes the runtime's
// monitor thread when it sleeps, for a millisecond of 20 µs ticks: on
// the core the loop runs on, that was most of its context switches.)
func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
