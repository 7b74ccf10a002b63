package dpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/ring"
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
	ep *coll.Endpoint

	mu    sync.Mutex
	comms map[uint64]*collComm

	stall    time.Duration // defaultCollStall; tests shorten it
	runs     *prometheus.CounterVec
	bytes    prometheus.Counter
	failures prometheus.Counter
	joined   atomic.Int64
}

// collComm is one communicator and the agent-private buffers its
// collectives run on (one at a time).
type collComm struct {
	mu         sync.Mutex
	t          *coll.PeerTransport
	c          *coll.Comm
	send, recv []byte
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
	return &collService{comms: map[uint64]*collComm{}, stall: defaultCollStall}
}

func (s *collService) Name() string { return "coll" }

func (s *collService) Open(_ context.Context, env *Env) error {
	if env.Shared != nil && env.Shared.Peer != nil {
		s.ep = coll.NewEndpoint(env.Shared.Peer)
	}
	s.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hec_coll_ops_total",
		Help: "Collectives this agent ran for its hosts, by collective."}, []string{"collective"})
	s.bytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "hec_coll_bytes_total",
		Help: "Bytes of host buffers this agent's collectives took in."})
	s.failures = prometheus.NewCounter(prometheus.CounterOpts{Name: "hec_coll_failures_total",
		Help: "Collectives that failed (a rank died or stalled, the ranks disagreed)."})
	env.Metrics.MustRegister(s.runs, s.bytes, s.failures)
	d := env.Dispatcher
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
		c.close()
	}
}

func (s *collService) Status() api.Service {
	if s.ep == nil {
		return api.Service{Name: "coll", Note: "off: needs the peer layer (--peer)"}
	}
	return api.Service{Name: "coll", Served: true, Note: fmt.Sprintf("%d communicators", s.joined.Load())}
}

func (c *collComm) close() {
	c.mu.Lock() // after the collective running on it, if any
	defer c.mu.Unlock()
	c.c.Close()
	c.t.Close()
}

var errNoPeerLayer = errors.New("collectives need the peer layer: start hecd with --peer and --peers")

func (s *collService) serveJoin(_ context.Context, req *Request, resp *wire.Desc) {
	if s.ep == nil {
		failWith(req, resp, wire.StatusUnsupported, errNoPeerLayer)
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
	if alg > coll.Tree || spec.Chunk > coll.MaxChunk {
		failWith(req, resp, wire.StatusBadArg, fmt.Errorf("algorithm %d, chunk %d", spec.Algorithm, spec.Chunk))
		return
	}
	t, err := s.ep.Join(spec.Comm, spec.Epoch, spec.Nodes)
	if err != nil {
		failWith(req, resp, wire.StatusBadArg, err)
		return
	}
	c, err := coll.New(t, coll.Config{Algorithm: alg, Chunk: int(spec.Chunk)})
	if err != nil {
		t.Close()
		failWith(req, resp, wire.StatusBadArg, err)
		return
	}
	s.mu.Lock()
	old := s.comms[spec.Comm]
	if old == nil && len(s.comms) >= maxColls {
		s.mu.Unlock()
		c.Close()
		t.Close()
		failWith(req, resp, wire.StatusBusy, fmt.Errorf("%d communicators joined: leave one first", maxColls))
		return
	}
	s.comms[spec.Comm] = &collComm{t: t, c: c}
	s.joined.Store(int64(len(s.comms)))
	s.mu.Unlock()
	if old != nil {
		go old.close() // it may be running: not on the poller
	}
	resp.Arg0 = uint64(t.Rank())
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
	go c.close()
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

func (s *collService) serveRun(ctx context.Context, req *Request, resp *wire.Desc) {
	s.mu.Lock()
	c := s.comms[req.Arg0]
	s.mu.Unlock()
	if c == nil {
		failWith(req, resp, wire.StatusNotFound, fmt.Errorf("no communicator %#x on this agent: join it first", req.Arg0))
		return
	}
	k, dt, op, root, ok := wire.CollArgsOf(req.Arg1)
	kind, dtype, redop := coll.Kind(k), coll.DType(dt), coll.Op(op)
	if !ok || !kind.Valid() || !dtype.Valid() || (kind.Reduces() && !redop.Valid()) || req.NSpan < 2 {
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
