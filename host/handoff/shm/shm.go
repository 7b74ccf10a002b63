package shm

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// Transport runs ops over one leased queue pair of a shared region.
type Transport struct {
	path string
	o    handoff.Options

	mu      sync.Mutex // guards all below
	region  *ring.Region
	ino     uint64
	h       *ring.Host
	qp      *ring.HostQP
	win     []byte
	arena   *ring.Allocator
	pending []*handoff.Call // by slot (tag & 0xffff)
	slots   []uint16        // free slots
	seq     uint64
	broken  error // non-nil while detached: the retryable status
	lost    bool  // an access to the region faulted: not touched until attached again
	prefer  int
	origin  string // the leased pair's, for traces (trace.Origin)
	descs   []wire.Desc
	cq      []wire.Desc
	closed  bool
	old     []*ring.Region // mappings kept alive for buffers handed out before a re-map

	agentBeat ring.BeatWatch // the agent's heartbeat in the pair's block, judged on the looks this host took

	bellRings atomic.Bool // a ring of the agent's was seen to end a sleep: its rings reach this kernel
	// longSleeps: the last wait of a call of this class (sleepClass)
	// that slept slept heldSleep or more, so the next one's first sleep
	// is not held (heldSleep).
	longSleeps [sleepClasses]atomic.Bool

	stop chan struct{}
	wg   sync.WaitGroup
	// sleeps is held (shared) by a waiter sleeping on the region's
	// completion bell, and for good by Close before it unmaps the region.
	sleeps sync.RWMutex
}

// Dial leases a queue pair of the region at path (the agent must be
// running) and keeps the lease alive until Close.
func Dial(ctx context.Context, path string, o handoff.Options) (*Transport, error) {
	t := &Transport{path: path, o: o, prefer: -1, stop: make(chan struct{})}
	t.mu.Lock()
	// A header something scribbled on is repaired by the agent within a
	// housekeeping period: a refusal for that reason is tried again for a
	// while before Dial gives up.
	deadline := time.Now().Add(repairWait)
	var err error
	for {
		err = t.guardedAttach(ctx)
		if err == nil || !errors.Is(err, ring.ErrNotFormatted) && !errors.Is(err, ring.ErrGeometry) && !errors.Is(err, ring.ErrRegionLost) ||
			ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	t.wg.Add(1)
	go t.heartbeat()
	return t, nil
}

// repairWait is how long Dial retries a region whose header is not (yet)
// one a running agent would write: the agent repairs its header at least
// every half second.
const repairWait = 1500 * time.Millisecond

// guardedAttach is attach with a fault on the mapping (the region's file
// cut short) turned into ring.ErrRegionLost. With t.mu held.
func (t *Transport) guardedAttach(ctx context.Context) error {
	var err error
	if ferr := t.catch(func() { err = t.attach(ctx) }); ferr != nil {
		return ferr
	}
	return err
}

// catch runs fn, which touches the region, with faults on the mapping
// caught: anyone who may write the region file can truncate it, and an
// access past its end would kill the application with SIGBUS. What was in
// flight fails with the retryable StatusRestarted and the next call
// attaches again (the agent restores and re-formats the region). Buffers
// from Alloc are the application's to touch: a fault there is not caught.
// With t.mu held.
func (t *Transport) catch(fn func()) error {
	r := t.region
	if r == nil {
		fn()
		return nil
	}
	err := r.CatchFault(fn)
	if err != nil {
		t.lose(err)
	}
	return err
}

// lose detaches without touching the region (it faulted): calls in flight
// fail with StatusRestarted; the next call re-attaches. With t.mu held.
func (t *Transport) lose(err error) {
	t.lost = true
	t.detach(wire.StatusRestarted, err)
}

func fileIno(path string) (uint64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino, nil
	}
	return 0, nil
}

// attach maps the region (again, if the file was replaced), checks its
// header and leases a queue pair, preferring the one held before. Called
// with t.mu held.
func (t *Transport) attach(ctx context.Context) error {
	ino, err := fileIno(t.path)
	if err != nil {
		return fmt.Errorf("region %s: %w (is hecd running?)", t.path, err)
	}
	if t.region == nil || ino != t.ino {
		r, err := ring.Map(t.path, 0, false)
		if err != nil {
			return err
		}
		if t.region != nil {
			t.old = append(t.old, t.region)
		}
		t.region, t.ino = r, ino
	}
	h, err := ring.Attach(t.region)
	if err != nil {
		return err
	}
	if t.h != nil && h.Geometry() != t.h.Geometry() {
		// The layout changed under the same file: remap so the mapping
		// covers it (buffers of the old window stay mapped, and are copied).
		r, err := ring.Map(t.path, 0, false)
		if err != nil {
			return err
		}
		t.old = append(t.old, t.region)
		t.region = r
		if h, err = ring.Attach(r); err != nil {
			return err
		}
	}
	h.SetAgentTimeout(t.o.AgentTimeout)
	qp, err := h.Lease(ctx, t.prefer)
	if err != nil {
		return err
	}
	sameWindow := t.qp != nil && qp.Index() == t.qp.Index() && len(t.win) == len(qp.Window()) &&
		unsafe.SliceData(t.win) == unsafe.SliceData(qp.Window())
	t.h, t.qp = h, qp
	t.origin = trace.Origin(uint32(os.Getpid()), qp.Index())
	if !sameWindow {
		t.win = qp.Window()
		t.arena = ring.NewAllocator(uint64(len(t.win)))
	}
	t.prefer = qp.Index()
	n := qp.Entries()
	if len(t.pending) != n {
		t.pending = make([]*handoff.Call, n)
		t.slots = t.slots[:0]
		for i := n - 1; i >= 0; i-- {
			t.slots = append(t.slots, uint16(i))
		}
		t.descs = make([]wire.Desc, n)
		t.cq = make([]wire.Desc, n)
	}
	t.broken, t.lost = nil, false
	// A look seconds late (this process did not run) counts for half the
	// timeout at most: the agent, on this machine, most likely did not
	// run either.
	t.agentBeat = ring.BeatWatch{Timeout: t.o.AgentTimeout, MaxGap: t.o.AgentTimeout / 2}
	t.agentBeat.Reset(time.Now(), qp.AgentHeartbeat())
	return nil
}

func (t *Transport) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.qp == nil {
		return fmt.Sprintf("shm://%s (detached)", t.path)
	}
	return fmt.Sprintf("shm://%s queue pair %d, window %d KiB, generation %d", t.path, t.qp.Index(), len(t.win)>>10, t.h.Generation())
}

func (t *Transport) Window() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.win)
}

// offset returns b's offset in the current window, if b lies in it.
func (t *Transport) offset(b []byte) (uint64, bool) { return handoff.WindowOffset(t.win, b) }

func (t *Transport) InWindow(b []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.offset(b)
	return ok
}

// windowRuns returns in and out each as one slice of the window, when
// every buffer lies in the window and each starts where the one before it
// in its group ends (a stripe's shards in one buffer, as ec lays them
// out): an op then names each group with one span, where a list would
// cost the agent one more read of this side's writes.
func (t *Transport) WindowRuns(in, out [][]byte) (inRun, outRun []byte, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if inRun, ok = t.run(in); ok {
		outRun, ok = t.run(out)
	}
	return inRun, outRun, ok
}

// run is windowRuns of one group. With t.mu held.
func (t *Transport) run(bufs [][]byte) ([]byte, bool) { return handoff.WindowRun(t.win, bufs) }

func (t *Transport) WindowSGL(list []byte, bufs [][]byte) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range bufs {
		off, ok := t.offset(b)
		if !ok {
			return nil, false
		}
		list = wire.AppendSGL(list, []wire.Span{{Off: uint32(off), Len: uint32(len(b))}})
	}
	return list, true
}

func (t *Transport) Alloc(n int) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.arena == nil {
		return nil, t.broken
	}
	off, err := t.arena.Alloc(uint64(n))
	if err != nil {
		return nil, err
	}
	return t.win[off : off+uint64(n) : off+uint64(n)], nil
}

func (t *Transport) Free(b []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	off, ok := t.offset(b)
	if !ok {
		return errors.New("host: free of a buffer not from this client's window (after a re-attach to another queue pair, old buffers are no longer in the window)")
	}
	return t.arena.Free(off)
}

// ensure re-attaches a detached transport, waiting (bounded by ctx and the
// attach wait) for an agent to come back. Called with t.mu held.
func (t *Transport) ensure(ctx context.Context) error {
	if t.closed {
		return handoff.ErrClosed
	}
	if t.broken == nil {
		return nil
	}
	deadline := time.Now().Add(t.o.AttachWait)
	var w ring.Waiter
	for {
		err := t.guardedAttach(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("re-attach to %s: %v: %w", t.path, err, wire.StatusUnavailable)
		}
		t.mu.Unlock()
		w.Wait()
		if w.Idle() {
			time.Sleep(10 * time.Millisecond)
		}
		t.mu.Lock()
		if t.closed {
			return handoff.ErrClosed
		}
	}
}

// detach fails every call in flight with status (retryable for restarts,
// stops and fences) and marks the transport for re-attach. With t.mu held.
func (t *Transport) detach(status wire.Status, why error) {
	for i, c := range t.pending {
		if c != nil {
			c.Complete(handoff.Result{Status: status}, fmt.Errorf("host: %s in flight: %v: %w", c.Req.Op, why, status))
			t.pending[i] = nil
			t.slots = append(t.slots, uint16(i))
		}
	}
	if t.qp != nil && !t.lost {
		if t.bellRings.Load() {
			t.catch(t.qp.WakeSleepers) //nolint:errcheck // a lost region is found by the next reap
		}
		if status != wire.StatusFaulted {
			t.qp.Release()
		}
	}
	t.broken = status
}

// submit places calls in the ring, staging inputs that are not in the
// window, and rings the doorbell once per batch that fits.
func (t *Transport) Submit(ctx context.Context, calls []*handoff.Call) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w ring.Waiter
	for len(calls) > 0 {
		if err := t.ensure(ctx); err != nil {
			return err
		}
		n := 0
		var err error
		if ferr := t.catch(func() { n, err = t.fill(calls) }); ferr != nil {
			return fmt.Errorf("host: submit: %v: %w", ferr, wire.StatusRestarted)
		}
		if err != nil {
			return err
		}
		if n > 0 {
			calls = calls[n:]
			w.Reset()
			continue
		}
		// No room: reap completions and back off.
		t.reap()
		if err := ctx.Err(); err != nil {
			return err
		}
		t.mu.Unlock()
		w.Wait()
		t.mu.Lock()
	}
	return nil
}

// fill prepares as many of calls as the ring and the window have room for
// and submits them with one store; it returns how many. With t.mu held.
func (t *Transport) fill(calls []*handoff.Call) (int, error) {
	n := 0
	for n < len(calls) && n < t.qp.Room() && len(t.slots) > 0 {
		d, err := t.prepare(calls[n])
		if errors.Is(err, ring.ErrNoSpace) && n == 0 && t.inflight() > 0 {
			break // wait for completions to free staging space
		}
		if err != nil {
			if n == 0 {
				return 0, err
			}
			break
		}
		t.descs[n] = d
		n++
	}
	if n > 0 {
		t.qp.Submit(t.descs[:n])
	}
	return n, nil
}

func (t *Transport) inflight() int {
	return len(t.pending) - len(t.slots)
}

// prepare assigns a slot and builds the descriptor; inputs outside the
// window are copied into staging buffers in it.
func (t *Transport) prepare(c *handoff.Call) (wire.Desc, error) {
	d, err := handoff.WindowDesc(c, t.win, t.arena)
	if err != nil {
		return d, err
	}
	slot := t.slots[len(t.slots)-1]
	t.slots = t.slots[:len(t.slots)-1]
	t.seq++
	d.Tag = t.seq<<16 | uint64(slot)
	c.Submitted(d.Tag, t.origin)
	t.pending[slot] = c
	return d, nil
}

func (t *Transport) unstage(c *handoff.Call) { handoff.Unstage(c, t.arena) }

// reap polls completions and completes their calls. With t.mu held.
func (t *Transport) reap() {
	if t.broken != nil || t.qp == nil {
		return
	}
	t.catch(t.reapRing) //nolint:errcheck // a lost region detached the calls
}

func (t *Transport) reapRing() {
	n, err := t.qp.Poll(t.cq)
	for _, d := range t.cq[:n] {
		slot := int(d.Tag & 0xffff)
		if slot >= len(t.pending) || t.pending[slot] == nil || t.pending[slot].Tag() != d.Tag {
			continue // not ours: a completion we no longer wait for
		}
		c := t.pending[slot]
		t.pending[slot] = nil
		t.slots = append(t.slots, uint16(slot))
		res := handoff.WindowResult(c, &d, t.win)
		t.unstage(c)
		c.Complete(res, nil)
	}
	if n > 0 && t.bellRings.Load() {
		// Another goroutine may sleep on the bell for a call just
		// completed here, until the next ring.
		t.qp.WakeSleepers()
	}
	if err != nil {
		t.fail(err)
	}
}

// fail handles a queue pair that stopped serving.
func (t *Transport) fail(err error) {
	var st wire.Status
	if !errors.As(err, &st) {
		st = wire.StatusUnavailable
	}
	if st == wire.StatusFaulted {
		// Our own indices went wrong (or something scribbled on them):
		// what was in flight is lost; reset the pair and go on.
		t.detach(wire.StatusFaulted, err)
		if rerr := t.qp.Reset(context.Background()); rerr == nil {
			t.broken = nil
		}
		return
	}
	t.detach(st, err)
}

// poll reaps completions now, if no other goroutine is at it.
func (t *Transport) Poll() {
	if t.mu.TryLock() {
		t.reap()
		t.mu.Unlock()
	}
}

// deepQueue is the number of calls in flight above which a waiter goes
// from spinning straight to sleeping.
const deepQueue = 8

// bellSleep bounds a sleep on a completion bell whose rings are known to
// reach this process: it ends with the ring, and this is only the look a
// waiter takes if a ring were lost. Each wake-up costs the host tens of
// microseconds of CPU on a virtual machine (a wake by timer, the
// scheduler, the Go runtime handing the P back), which the Waiter's
// doubling sleeps of 20 µs to 1 ms paid over and over in every long op.
const bellSleep = 50 * time.Millisecond

// heldSleep is how long a wait's first sleep on the bell keeps its P
// (ring.HostQP.SleepForCompletion), while the last wait of a call like
// it (sleepClass) slept less than that: a collective or an EC op that
// ends within it costs one wake-up, not the P's hand-off and Go's monitor
// polling every 20 µs until it is idle again (on a virtual machine, more
// of a 1 MiB collective's host CPU than all the rest). Another goroutine,
// or a timer on that P (a context's deadline), waits at most this long
// for it; a collection that stops the world gets it at once. Longer
// sleeps are not held: the monitor, which sees the P busy, would poll
// through the held part, and the hand-off comes anyway. Nor where this
// process runs an agent too (ring.AgentHere), which may need the P; nor
// where the agent's rings do not reach this kernel (an agent in a VM),
// whose sleeps are short timed looks. 3 ms covers a 1 MiB allreduce of
// four ranks on the DPU rail of `make bench`'s two-vCPU machine (1.6-2.4
// ms): in four alternations of 600 calls, its host CPU per call was
// 0.125-0.129 ms with 1 ms held, and 0.075-0.092 ms in three of four
// runs (0.124 in the fourth) with 3 ms.
const heldSleep = 3 * time.Millisecond

// sleepClasses is how many classes of calls the waits' hold is decided
// for apart (sleepClass).
const sleepClasses = 64

// sleepClass is the class of calls like c, whose waits have slept about
// as long: the same op, arguments (a collective's kind and type, an EC
// shape) and bytes within a factor of two, hashed into sleepClasses
// slots. A barrier between 1 MiB allreduces that take 2 ms then has its
// first sleep held, and the allreduces not: by the last wait alone each
// would get the other's.
func sleepClass(c *handoff.Call) int {
	n := 0
	for _, b := range c.Req.In {
		n += len(b)
	}
	for _, b := range c.Req.Out {
		n += len(b)
	}
	arg := c.Req.Arg1
	if c.Req.Op == wire.OpCollRun {
		arg &^= wire.CollSeqMask << 40 // a collective's number is not its class
	}
	h := (uint64(c.Req.Op)<<8 | uint64(bits.Len(uint(n)))) * 0x9e3779b97f4a7c15
	h ^= arg * 0xc2b2ae3d27d4eb4f
	return int(h >> 58) // the top 6 bits: sleepClasses
}

// untrustedSleep bounds one sleep until a call's expected end while the
// agent's rings are not known to reach this process: only its time ends
// it, so ctx's end is seen within this.
const untrustedSleep = 10 * time.Millisecond

func (t *Transport) Wait(ctx context.Context, c *handoff.Call) error {
	var w ring.Waiter
	// Past the spin and yield phases, sleep on the pair's completion bell:
	// the agent wakes us when it publishes. Bounded, for agents that
	// cannot reach this kernel (a VM): the Waiter's short sleeps, doubling,
	// until a ring has been seen to end a sleep; from then on (bellRings)
	// one sleep of bellSleep per wait, ended by the ring, by ctx's end, by
	// a detach or by another goroutine that reaped this call's completion
	// (each rings the bell from this side: WakeSleepers). A sleep that runs
	// out while a completion waits (the ring did not reach us) goes back
	// to the short sleeps. A call whose end is expected (wakeAt) first
	// sleeps until shortly before it and stays awake until shortly after.
	t.mu.Lock()
	qp, r := t.qp, t.region
	deep := t.inflight() > deepQueue
	t.mu.Unlock()
	if m := c.Meter(); m != nil {
		w.Leave = m
	}
	wakeAt, spinTo := c.Expected()
	switch {
	case c.Long() && wakeAt.IsZero():
		// A long op whose end is not known: its completion is not
		// within a spin, and spinning or yielding would only burn a core
		// that the agent (on the same machine) or the application may
		// need. Sleep on the pair's bell at once; the agent rings it.
		w.SleepNow()
	case deep:
		// Many ops ahead of this one: spin for the short ones, then
		// sleep rather than yield.
		w.SkipYield()
	}
	// The sleeper is made when the wait first sleeps: most calls complete
	// while it spins, and pay nothing for it.
	var s *bellSleeper
	defer func() {
		if s != nil {
			s.close()
		}
	}()
	sleeper := func() *bellSleeper {
		if s == nil {
			s = &bellSleeper{t: t, ctx: ctx, c: c, qp: qp, r: r}
			w.Sleep = s.sleepAny
		}
		return s
	}
	if qp != nil && !wakeAt.IsZero() {
		// An op whose end is expected: sleep until shortly before it,
		// then look without sleeping until shortly after; past that, as
		// any long op (the Waiter's spin, then the bell).
		for !c.Done() && ctx.Err() == nil {
			d := time.Until(wakeAt)
			if d <= 0 {
				break
			}
			c.Park()
			sleeper().sleep(d, true)
			t.Poll()
		}
		for !c.Done() && ctx.Err() == nil && time.Now().Before(spinTo) {
			t.Poll()
			runtime.Gosched()
		}
		w.SkipYield()
	}
	for !c.Done() {
		if t.mu.TryLock() {
			t.reap()
			t.mu.Unlock()
			if c.Done() {
				return nil
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if qp != nil && w.Idle() {
			sleeper()
		}
		w.Wait()
	}
	return nil
}

// bellSleeper is how a wait sleeps on its pair's completion bell.
type bellSleeper struct {
	t   *Transport
	ctx context.Context
	c   *handoff.Call
	qp  *ring.HostQP
	r   *ring.Region

	unhook func() bool   // stops the wake on ctx's end
	woken  chan struct{} // closed when the wake on ctx's end is over
	first  time.Time     // when its first sleep began
	class  int           // sleepClass of c, from the first sleep on
}

func (s *bellSleeper) sleepAny(d time.Duration) { s.sleep(d, false) }

func (s *bellSleeper) waiting() bool { return !s.c.Done() }

// sleep sleeps on the bell for d, or (!exact, once the agent's rings are
// known to reach us) until rung.
func (s *bellSleeper) sleep(d time.Duration, exact bool) {
	t := s.t
	if t.bellRings.Load() {
		// The agent's ring ends the sleep, and so does ctx's end: the
		// time is only a bound.
		if !exact {
			d = bellSleep
		}
		if s.unhook == nil {
			s.woken = make(chan struct{})
			s.unhook = context.AfterFunc(s.ctx, func() {
				defer close(s.woken)
				s.r.CatchFault(s.qp.WakeSleepers) //nolint:errcheck // see below
				if h := s.t.o.OnCancelWake; h != nil {
					h()
				}
			})
		}
	} else if exact {
		// Nothing rings on ctx's end: look at it now and then.
		d = min(d, untrustedSleep)
	}
	var how ring.Wake
	// A fault here (the region's file cut short) is found and handled by
	// the next reap.
	var hold time.Duration
	if s.first.IsZero() {
		s.first = time.Now()
		s.class = sleepClass(s.c)
		if t.bellRings.Load() && !t.longSleeps[s.class].Load() && !ring.AgentHere() {
			hold = heldSleep
		}
	}
	// A sleep reads the region's words, which Close unmaps: it holds the
	// transport's sleep lock, which Close takes before it unmaps, and
	// does not start once Close has begun (it fails the calls in flight
	// and wakes their sleepers first).
	if !t.sleeps.TryRLock() {
		return
	}
	s.r.CatchFault(func() { how = s.qp.SleepForCompletion(d, hold, s.waiting) }) //nolint:errcheck // see above
	t.sleeps.RUnlock()
	switch how {
	case ring.WakeRung:
		t.bellRings.Store(true)
	case ring.WakeMissed:
		t.bellRings.Store(false)
	}
}

// close returns after a wake on ctx's end that has started: it reads the
// region, so the wait returns after it, and a Close right after cannot
// unmap the region under it.
func (s *bellSleeper) close() {
	if !s.first.IsZero() {
		s.t.longSleeps[s.class].Store(time.Since(s.first) >= heldSleep)
	}
	if s.unhook != nil && !s.unhook() {
		<-s.woken
	}
}

// heartbeat keeps the lease alive and notices an agent that died without
// saying so (its heartbeat stops): calls in flight then fail with
// StatusUnavailable instead of waiting forever.
func (t *Transport) heartbeat() {
	defer t.wg.Done()
	tick := time.NewTicker(t.o.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case now := <-tick.C:
			t.mu.Lock()
			t.catch(func() { t.tick(now) }) //nolint:errcheck // a lost region detached the calls
			t.mu.Unlock()
		}
	}
}

// BellRings reports whether the agent's ring has been seen to end a
// sleep: its rings reach this kernel, and long waits sleep until the ring.
func (t *Transport) BellRings() bool { return t.bellRings.Load() }

// Detached reports whether the transport has given its agent up (until
// the next op attaches again).
func (t *Transport) Detached() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.broken != nil
}

// SleptLong reports whether the last wait of a call like req (its sleep
// class) slept a held sleep's length or more, so that the next one's
// first sleep is not held.
func (t *Transport) SleptLong(req handoff.Request) bool {
	var c handoff.Call
	c.Req = req
	return t.longSleeps[sleepClass(&c)].Load()
}

// Look takes one of the heartbeat's looks as if the time were now: it
// beats the lease and judges the agent's heartbeat (the transport looks
// every Options.Heartbeat by itself).
func (t *Transport) Look(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.catch(func() { t.tick(now) }) //nolint:errcheck // a lost region detaches
}

// tick beats the lease and watches the agent's heartbeat in the pair's
// own block. With t.mu held.
func (t *Transport) tick(now time.Time) {
	if t.broken != nil || t.qp == nil {
		return
	}
	t.qp.Beat()
	if still, dead := t.agentBeat.Look(now, t.qp.AgentHeartbeat()); dead {
		t.detach(wire.StatusUnavailable, fmt.Errorf("agent heartbeat stood still for %v", still.Round(time.Millisecond)))
	}
	if t.broken == nil {
		if err := t.qp.Check(); err != nil && t.inflight() == 0 {
			t.fail(err)
		}
	}
}

func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	if t.catch(func() { t.detach(wire.StatusClosed, handoff.ErrClosed) }) != nil {
		t.broken = wire.StatusClosed
	}
	close(t.stop)
	t.mu.Unlock()
	t.wg.Wait()
	t.sleeps.Lock() // for good: the sleepers woken above are out
	for _, r := range t.old {
		r.Close()
	}
	return t.region.Close()
}
