package dpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// maxColls bounds the communicators one agent keeps for its hosts.
const maxColls = 256

// defaultCollStall ends a collective that has received nothing for this long:
// its peers' agents are alive (else the peer layer's deadline would have
// ended it sooner) but some rank's host never called it. Long, since
// ranks legitimately arrive at different times (an application's uneven
// work); bounded, so the queue pair of a host that died meanwhile is not
// held for ever.
const defaultCollStall = time.Minute

// collService runs collectives for hosts (the DPU rail): a host hands its
// buffer over the handoff, this agent runs the collective with the other
// ranks' agents over the peer layer, reducing in its own memory, and
// writes the result back.
type collService struct {
	ep     *coll.Endpoint
	models string // the communicators' measured models, kept per topology (coll.Config.ModelFile)
	trace  *trace.Recorder

	mu    sync.Mutex
	comms map[uint64]*collComm
	// dropping are the communicators whose host went away, being closed
	// (sessionEnded): until one is, its id cannot be joined again (its
	// transport holds the id), and a join of it is answered StatusBusy,
	// which the host library tries again.
	dropping map[uint64]bool
	dropHook atomic.Pointer[func(id uint64)] // tests: runs before a drop closes the communicator

	stall    time.Duration // defaultCollStall; tests shorten it
	runs     *prometheus.CounterVec
	bytes    prometheus.Counter
	failures prometheus.Counter
	dropped  prometheus.Counter
	joined   atomic.Int64
}

// collComm is one communicator and the agent-private buffers its
// collectives run on (one at a time, in their hosts' order: turns).
type collComm struct {
	mu         sync.Mutex
	t          *coll.PeerTransport
	c          *coll.Comm
	send, recv []byte
	owner      Session // the host session that joined it
	turns      collTurns
}

// maxCollAhead bounds how far ahead of the collective to run next a
// host's sequence number may be: more is a host out of step (or one that
// wrapped around), refused at once rather than waited for.
const maxCollAhead = 1 << 16

// errCommClosed ends the collectives waiting on a communicator that was
// left, joined again or lost its host.
var errCommClosed = errors.New("the communicator was left, joined again, or its host went away")

// collTurns runs a communicator's collectives in the order their host
// numbered them (wire.CollArgs's sequence number): descriptors of several
// collectives in flight may reach their handlers in any order, and each
// rank's agent must run them in the one order every rank issued them, or
// their messages would pair across collectives.
type collTurns struct {
	mu      sync.Mutex
	next    uint32 // the sequence number whose turn it is
	busy    bool   // next's run holds the turn
	waiting map[uint32]chan struct{}
	closed  bool
}

// await returns once seq has the turn (release hands it on), or an error
// when seq is not a number this communicator can run, stall passes
// first, ctx ends or the communicator closes.
func (t *collTurns) await(ctx context.Context, seq uint32, stall time.Duration) error {
	t.mu.Lock()
	ahead := (seq - t.next) & wire.CollSeqMask
	_, dup := t.waiting[seq]
	switch {
	case t.closed:
		t.mu.Unlock()
		return errCommClosed
	case ahead >= maxCollAhead:
		t.mu.Unlock()
		return fmt.Errorf("collective #%d is out of order: #%d is the next to run (does the host number its collectives from 1 after the join?)", seq, t.next)
	case dup || (ahead == 0 && t.busy):
		t.mu.Unlock()
		return fmt.Errorf("collective #%d submitted twice", seq)
	case ahead == 0:
		t.busy = true
		t.mu.Unlock()
		return nil
	}
	if t.waiting == nil {
		t.waiting = map[uint32]chan struct{}{}
	}
	ch := make(chan struct{})
	t.waiting[seq] = ch
	next := t.next
	t.mu.Unlock()
	timer := time.NewTimer(stall)
	defer timer.Stop()
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = fmt.Errorf("collective #%d waited %v for #%d, which its host never submitted", seq, stall, next)
	}
	if err == nil {
		t.mu.Lock()
		if t.closed {
			err = errCommClosed
		}
		t.mu.Unlock()
		if err != nil {
			t.release()
		}
		return err
	}
	t.mu.Lock()
	granted := t.waiting[seq] != ch
	delete(t.waiting, seq)
	t.mu.Unlock()
	if granted { // the turn came as it gave up: pass it on
		t.release()
	}
	return err
}

// release ends the turn of the collective running and hands it to the
// next one's waiting run, if any.
func (t *collTurns) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next = (t.next + 1) & wire.CollSeqMask
	if ch, ok := t.waiting[t.next]; ok {
		delete(t.waiting, t.next)
		close(ch) // busy stays: the turn is that run's
		return
	}
	t.busy = false
}

// active reports whether a collective runs or waits for its turn.
func (t *collTurns) active() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.busy || len(t.waiting) > 0
}

// close fails every collective waiting for its turn, and those to come.
func (t *collTurns) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for seq, ch := range t.waiting {
		delete(t.waiting, seq)
		close(ch)
	}
}

// buffers returns the send and recv buffers of a run over spans of mem.
// Where the window is mapped (shared memory, or a TCP frame's payload) and
// the spans are one (in place) or apart, they are the window's own bytes
// (direct): no copy in, no copy out. The pair's window is not leased to
// another process before the descriptor completes (a fence waits for the
// work in flight), so writing it during the run is as safe as at the end;
// a host that changes its buffers meanwhile gets a wrong result, as it
// would by sending wrong data. Otherwise (a staged window, spans that
// partly overlap) the run works on the agent's copies, which the caller
// fills from send and writes back to recv.
func (c *collComm) buffers(mem ring.Accessor, sendSp, recvSp wire.Span) (send, recv []byte, direct bool) {
	sv, sok := mem.View(sendSp)
	rv, rok := mem.View(recvSp)
	apart := sendSp.End() <= uint64(recvSp.Off) || recvSp.End() <= uint64(sendSp.Off)
	if sok && rok && (sendSp == recvSp || apart) {
		return sv, rv, true
	}
	if cap(c.recv) < int(recvSp.Len) {
		c.recv = make([]byte, recvSp.Len)
	}
	if cap(c.send) < int(sendSp.Len) {
		c.send = make([]byte, sendSp.Len)
	}
	return c.send[:sendSp.Len], c.recv[:recvSp.Len], false
}

func newCollService() *collService {
	return &collService{comms: map[uint64]*collComm{}, dropping: map[uint64]bool{}, stall: defaultCollStall}
}

func (s *collService) Name() string { return "coll" }

func (s *collService) Open(_ context.Context, env *Env) error {
	if env.StateDir != "" {
		s.models = filepath.Join(env.StateDir, "coll-models.json")
	}
	if env.Shared != nil && env.Shared.Peer != nil {
		s.ep = coll.NewEndpoint(env.Shared.Peer)
	}
	s.trace = env.Dispatcher.Trace()
	s.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hec_coll_ops_total",
		Help: "Collectives this agent ran for its hosts, by collective."}, []string{"collective"})
	s.bytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "hec_coll_bytes_total",
		Help: "Bytes of host buffers this agent's collectives took in."})
	s.failures = prometheus.NewCounter(prometheus.CounterOpts{Name: "hec_coll_failures_total",
		Help: "Collectives that failed (a rank died or stalled, the ranks disagreed)."})
	s.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "hec_coll_dropped_total",
		Help: "Communicators dropped because the host session that joined them ended without leaving (it died, released its queue pair or closed its connection)."})
	env.Metrics.MustRegister(s.runs, s.bytes, s.failures, s.dropped)
	d := env.Dispatcher
	d.OnSessionEnd(s.sessionEnded)
	d.Handle(wire.OpCollJoin, Handler{Inline: true, Serve: s.serveJoin})
	d.Handle(wire.OpCollRun, Handler{Detached: true, Serve: s.serveRun})
	d.Handle(wire.OpCollLeave, Handler{Inline: true, Serve: s.serveLeave})
	return nil
}

func (s *collService) Start(context.Context, *Env) error { return nil }

func (s *collService) Stop() {
	s.mu.Lock()
	comms := s.comms
	s.comms = map[uint64]*collComm{}
	s.mu.Unlock()
	for _, c := range comms {
		c.close("")
	}
}

// Comms is every communicator's flight recorder (GET /v1/coll), by id.
func (s *collService) Comms() []api.CollComm {
	s.mu.Lock()
	comms := make([]*collComm, 0, len(s.comms))
	for _, c := range s.comms {
		comms = append(comms, c)
	}
	s.mu.Unlock()
	out := make([]api.CollComm, 0, len(comms))
	for _, c := range comms {
		st := c.c.Status()
		cc := api.CollComm{Comm: c.t.Comm(), Epoch: c.t.Epoch(), Rank: st.Rank, Size: st.Size, Nodes: c.t.Nodes(),
			Calls: st.Calls, Started: st.Started, Completed: st.Completed, Heard: st.Heard, Broken: st.Broken}
		for _, r := range st.Recent {
			cc.Recent = append(cc.Recent, api.CollRecord{Seq: r.Seq, Kind: r.Kind, Bytes: r.Bytes, DType: r.DType.String(),
				State: r.State.String(), Messages: r.Messages, Enqueued: r.Enqueued, Started: r.Started, Ended: r.Ended, Err: r.Err})
		}
		out = append(out, cc)
	}
	slices.SortFunc(out, func(a, b api.CollComm) int { return cmp.Compare(a.Comm, b.Comm) })
	return out
}

func (s *collService) Status() api.Service {
	if s.ep == nil {
		return api.Service{Name: "coll", Note: "off: needs the peer layer (--peer)"}
	}
	return api.Service{Name: "coll", Served: true, Note: fmt.Sprintf("%d communicators", s.joined.Load())}
}

// close drops the communicator: the collectives waiting for their turn
// fail, the one running ends (its transport closes), and the peer layer
// forgets it, so that the same id and epoch can be joined again. With a
// reason the other ranks' agents are told too (Abort), and fail theirs
// at once, naming it.
func (c *collComm) close(reason string) {
	c.turns.close()
	if reason != "" {
		c.t.Abort(reason)
	}
	c.t.Close()
	c.mu.Lock() // after the collective running on it, if any
	defer c.mu.Unlock()
	c.c.Close()
}

var errNoPeerLayer = errors.New("collectives need the peer layer: start hecd with --peer and --peers")

func (s *collService) serveJoin(_ context.Context, req *Request, resp *wire.Desc) {
	if s.ep == nil {
		failWith(req, resp, wire.StatusUnsupported, errNoPeerLayer)
		return
	}
	if req.Arg1&wire.CollJoinNodeOnly != 0 {
		resp.Arg0 = uint64(s.ep.Node().ID())
		return
	}
	if req.NSpan < 1 || req.Spans[0].Len > 28+4*wire.MaxCollRanks {
		resp.Status = wire.StatusBadArg
		return
	}
	b := make([]byte, req.Spans[0].Len)
	if req.Mem.ReadAt(b, uint64(req.Spans[0].Off)) != nil {
		resp.Status = wire.StatusBadSpan
		return
	}
	spec, err := wire.ParseCollSpec(b)
	if err != nil {
		failWith(req, resp, wire.StatusBadArg, err)
		return
	}
	alg := coll.Algorithm(spec.Algorithm)
	if !alg.Valid() || spec.Chunk > coll.MaxChunk {
		failWith(req, resp, wire.StatusBadArg, fmt.Errorf("algorithm %d, chunk %d", spec.Algorithm, spec.Chunk))
		return
	}
	// A host that joins a communicator this agent has (a job restarted
	// with the same id, whose old process left it behind) replaces it:
	// the old one is dropped first, so that the peer layer takes the id
	// and epoch again.
	s.mu.Lock()
	if s.dropping[spec.Comm] {
		s.mu.Unlock()
		failWith(req, resp, wire.StatusBusy, fmt.Errorf("communicator %#x: its earlier host went away and it is being dropped: join again", spec.Comm))
		return
	}
	if old := s.comms[spec.Comm]; old != nil {
		delete(s.comms, spec.Comm)
		s.joined.Store(int64(len(s.comms)))
		s.mu.Unlock()
		old.turns.close()
		old.t.Close() // unregisters it now; what runs on it ends
		go old.close("")
	} else {
		s.mu.Unlock()
	}
	t, err := s.ep.Join(spec.Comm, spec.Epoch, spec.Nodes)
	if err != nil {
		failWith(req, resp, wire.StatusBadArg, err)
		return
	}
	c, err := coll.New(t, coll.Config{Algorithm: alg, Chunk: int(spec.Chunk),
		ModelFile: s.models, Topology: fmt.Sprintf("agents %v", spec.Nodes), Trace: s.trace, TraceComm: spec.Comm})
	if err != nil {
		t.Close()
		failWith(req, resp, wire.StatusBadArg, err)
		return
	}
	s.mu.Lock()
	old := s.comms[spec.Comm] // joined meanwhile by another host
	if old == nil && len(s.comms) >= maxColls {
		s.mu.Unlock()
		c.Close()
		t.Close()
		failWith(req, resp, wire.StatusBusy, fmt.Errorf("%d communicators joined: leave one first", maxColls))
		return
	}
	s.comms[spec.Comm] = &collComm{t: t, c: c, owner: req.Session, turns: collTurns{next: 1}}
	s.joined.Store(int64(len(s.comms)))
	s.mu.Unlock()
	if old != nil {
		go old.close("") // it may be running: not on the poller
	}
	resp.Arg0 = uint64(t.Rank())
}

// sessionEnded drops the communicators the ended session joined: its
// host died, released its queue pair or closed its connection without
// leaving them. It runs on the poller: the closing goes on elsewhere.
func (s *collService) sessionEnded(x Session) {
	s.mu.Lock()
	gone := map[uint64]*collComm{}
	for id, c := range s.comms {
		if c.owner == x {
			gone[id] = c
			delete(s.comms, id)
			s.dropping[id] = true
		}
	}
	s.joined.Store(int64(len(s.comms)))
	s.mu.Unlock()
	for id, c := range gone {
		s.dropped.Inc()
		// The other ranks are told now where collectives are in flight
		// (here, or in the other ranks' messages waiting here): they wait
		// on this rank. An idle communicator is forgotten: the peer layer
		// tells each other rank that sends for a collective this rank never
		// reached, while a job restarted with the same id and epoch (whose
		// numbers start again) can join it anew.
		why := fmt.Sprintf("rank %d's host went away (it died or closed its connection without leaving)", c.c.Rank())
		drop := c.forget
		if c.turns.active() || c.t.Pending() {
			drop = c.close
		}
		go func() {
			if h := s.dropHook.Load(); h != nil {
				(*h)(id)
			}
			drop(why)
			s.mu.Lock()
			delete(s.dropping, id)
			s.mu.Unlock()
		}()
	}
}

// forget drops an idle communicator whose host went away (see
// PeerTransport.Forget).
func (c *collComm) forget(why string) {
	c.turns.close()
	c.mu.Lock() // after a collective that started meanwhile, if any
	defer c.mu.Unlock()
	c.t.Forget(c.c.Seq(), why)
	c.c.Close()
}

func (s *collService) serveLeave(_ context.Context, req *Request, resp *wire.Desc) {
	s.mu.Lock()
	c := s.comms[req.Arg0]
	delete(s.comms, req.Arg0)
	s.joined.Store(int64(len(s.comms)))
	s.mu.Unlock()
	if c == nil {
		resp.Status = wire.StatusNotFound
		return
	}
	why := ""
	if req.Arg1&wire.CollLeaveAbort != 0 {
		why = fmt.Sprintf("rank %d's host gave the communicator up (a collective it could not submit or abandoned)", c.c.Rank())
	}
	go c.close(why)
}

// watchStall cancels ctx when c receives nothing for stall; the returned
// func stops watching.
func watchStall(ctx context.Context, c *coll.Comm, stall time.Duration, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(stall / 10)
		defer tick.Stop()
		last, since := c.Received(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if got := c.Received(); got != last {
					last, since = got, now
				} else if now.Sub(since) >= stall {
					cancel(fmt.Errorf("nothing received for %v: a rank's host has not called the collective", stall))
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// turnOf waits for collective seq's turn on c; an error is the run's.
func (s *collService) turnOf(ctx context.Context, c *collComm, seq uint32) error {
	err := c.turns.await(ctx, seq, s.stall)
	if err != nil && !errors.Is(err, errCommClosed) && ctx.Err() == nil {
		// A collective its host never submitted, or numbered wrong: the
		// ranks are out of step for good. Drop the communicator, so that
		// every rank's next collective fails now, not after the stall.
		c.t.Abort(fmt.Sprintf("agent of rank %d: %v", c.c.Rank(), err))
	}
	return err
}

func (s *collService) serveRun(ctx context.Context, req *Request, resp *wire.Desc) {
	s.mu.Lock()
	c := s.comms[req.Arg0]
	s.mu.Unlock()
	if c == nil {
		failWith(req, resp, wire.StatusNotFound, fmt.Errorf("no communicator %#x on this agent: join it first", req.Arg0))
		return
	}
	k, dt, op, root, seq := wire.CollArgsOf(req.Arg1)
	kind, dtype, redop := coll.Kind(k), coll.DType(dt), coll.Op(op)
	if err := s.turnOf(ctx, c, seq); err != nil {
		failWith(req, resp, wire.StatusBadArg, err)
		return
	}
	defer c.turns.release()
	if !kind.Valid() || !dtype.Valid() || (kind.Reduces() && !redop.Valid()) || req.NSpan < 2 {
		// Its turn is spent all the same: the ranks' collectives stay in step.
		failWith(req, resp, wire.StatusBadArg, fmt.Errorf("collective %v of %v with %v", kind, dtype, redop))
		return
	}
	sendSp, recvSp := req.Spans[0], req.Spans[1]
	c.mu.Lock()
	defer c.mu.Unlock()
	send, recv, direct := c.buffers(req.Mem, sendSp, recvSp)
	if !direct {
		if err := req.Mem.ReadAt(send, uint64(sendSp.Off)); err != nil {
			resp.Status = wire.StatusBadSpan
			return
		}
	}
	if kind == coll.KindBroadcast && int(root) != c.c.Rank() {
		send = recv // only the root's bytes matter
	}
	rctx, cancel := context.WithCancelCause(ctx)
	stopWatch := watchStall(rctx, c.c, s.stall, cancel)
	err := c.c.Run(rctx, kind, send, recv, dtype, redop, int(root))
	stopWatch()
	if cause := context.Cause(rctx); err != nil && cause != nil && cause != ctx.Err() {
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	cancel(nil)
	s.runs.WithLabelValues(kind.String()).Inc()
	s.bytes.Add(float64(sendSp.Len))
	if err != nil {
		s.failures.Inc()
		status := wire.StatusUnavailable // a rank failed: the communicator must be rebuilt
		var re *coll.RankError
		if !errors.As(err, &re) && !errors.Is(err, coll.ErrAborted) && !errors.Is(err, coll.ErrProtocol) {
			status = wire.StatusBadArg
		}
		failWith(req, resp, status, err)
		return
	}
	if !direct {
		if err := req.Mem.WriteAt(recv, uint64(recvSp.Off)); err != nil {
			resp.Status = wire.StatusBadSpan
			return
		}
	}
	resp.NSpan = 1
	resp.Spans[0] = recvSp
}
