package dpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/hecsys/hec/dpu/handoff"
	"github.com/hecsys/hec/dpu/handoff/shm"
	"github.com/hecsys/hec/dpu/handoff/tcp"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// handoffTransports are the transports the agent serves the handoff over
// (package handoff and one package each), opened in this order once the
// services are open, each where the configuration asks for it: a new
// transport is a line here. open returns a nil transport where it is not
// asked for; its error stops the agent (it names the flag). env is where
// a transport that stops for good says so (nil: the agent stops). The
// region is formatted last, once everything else that can fail is held.
var handoffTransports = []struct {
	name string
	open func(a *Agent) (t handoff.Transport, env *Env, err error)
}{
	{"tcp", openTCP},
	{"rdma", openRDMA},
	{"shm", openShm},
}

// openShm formats the region that Run locked (--shm), with a generation
// past every one this state directory saw; the dispatcher serves its
// rings (handoffServer.ServeRings).
func openShm(a *Agent) (handoff.Transport, *Env, error) {
	c := a.cfg.Agent
	if a.region == nil {
		return nil, nil, nil
	}
	gen, err := a.region.Format(a.gen.Load())
	if err != nil {
		var size *shm.SizeError
		if errors.As(err, &size) {
			return nil, nil, fmt.Errorf("--region-size %d: %w", size.Size, size.Err)
		}
		return nil, nil, fmt.Errorf("--shm %s: %w", c.Shm, err)
	}
	a.gen.Store(gen)
	a.disp.onRebuild = func(gen uint32) {
		a.gen.Store(gen)
		if err := a.storeGeneration(gen); err != nil {
			a.log.Warn("region rebuilt: generation not stored", "generation", gen, "err", err)
		}
	}
	g := a.region.Geometry()
	a.addCore(api.Service{Name: "shm", Addr: c.Shm, Served: true,
		Note: fmt.Sprintf("%d queue pairs × %d KiB windows", g.QueuePairs, g.WindowSize>>10)})
	return a.region, nil, nil
}

// openTCP listens for the handoff over TCP (--tcp).
func openTCP(a *Agent) (handoff.Transport, *Env, error) {
	c := a.cfg.Agent
	if c.TCP == Off {
		return nil, nil, nil
	}
	env := a.coreEnv
	ln, err := env.Listen("tcp", c.TCP)
	if err != nil {
		return nil, nil, err
	}
	t := tcp.New(ln, a.log)
	env.mu.Lock()
	env.loops = append(env.loops, t.Loop()) // hec_accept_retries_total{listener="tcp"}
	env.mu.Unlock()
	a.shared.SetAddr("tcp", t.Addr())
	a.addCore(api.Service{Name: "tcp", Addr: t.Addr(), Served: true})
	return t, env, nil
}

// openRDMA listens for the handoff over RDMA (--rdma-listen): the rdma
// service's, which reports it.
func openRDMA(a *Agent) (handoff.Transport, *Env, error) {
	for i, s := range a.services {
		if r, ok := s.(*rdmaService); ok {
			t, err := r.openHandoff(a.envs[i])
			if t == nil || err != nil {
				return nil, nil, err
			}
			return t, a.envs[i], nil
		}
	}
	return nil, nil, nil
}

// handoffServer is the agent as its transports see it.
type handoffServer struct{ a *Agent }

var _ handoff.RingServer = handoffServer{}

func (s handoffServer) Begin(origin string) Session { return s.a.disp.sessions.begin(origin) }
func (s handoffServer) End(x Session)               { s.a.disp.sessions.end(x) }
func (s handoffServer) Token() string               { return s.a.shared.Token }
func (s handoffServer) MaxFrame() int               { return s.a.cfg.Agent.MaxFrame }

func (s handoffServer) Serve(ctx context.Context, transport string, sess Session, req *wire.Desc, mem []byte, resp *wire.Desc) {
	s.a.disp.ServeIn(ctx, transport, sess, req, mem, resp)
}

func (s handoffServer) ServeRings(ctx context.Context, ra *ring.Agent, beat *atomic.Int64) *ring.Agent {
	return s.a.disp.RunShm(ctx, ra, beat)
}

func (s handoffServer) Warn(msg string, args ...any) {
	s.a.disp.limited.Log(slog.LevelWarn, msg, args...)
}
