package dpu

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/dpu/handoff"
	"github.com/hecsys/hec/dpu/handoff/shm"
	"github.com/hecsys/hec/dpu/lockfile"
	"github.com/hecsys/hec/shared/api"
)

// Version is the agent's version, set at link time
// (-ldflags "-X github.com/hecsys/hec/dpu.Version=...").
var Version = "dev"

// Agent is hecd: the core (the dispatcher, the handoff's transports, the
// management API and metrics, the lifecycle) and the services it
// composes.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	disp *Dispatcher

	services []Service
	envs     []*Env // one per service, same order
	shared   Shared
	mux      *Mux
	guard    *mgmtGuard
	mgmtTLS  *tls.Config // nil: plain HTTP
	registry *prometheus.Registry

	started time.Time
	gen     atomic.Uint32
	region  *shm.Transport // nil: --shm off
	ready   atomic.Bool
	readyCh chan struct{}
	failed  chan error // Env.Fail: a service cannot go on

	core    []api.Service // the core's rows: shm, tcp, mgmt
	coreEnv *Env          // the core's listeners (the TCP handoff)

	// PowerOff, when set before Run, serves POST /v1/poweroff (hecd as the
	// child of process 1 asks it to power the machine off).
	PowerOff func()

	mu       sync.Mutex
	profile  *api.Profile
	platform *api.Platform
	rails    []api.Rail
}

// New checks cfg and returns an agent ready to Run.
func New(cfg Config, log *slog.Logger) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := NewDispatcher(log, cfg.Agent.Workers)
	d.doorbell = *cfg.Agent.Doorbell
	return &Agent{cfg: cfg, log: log, disp: d, readyCh: make(chan struct{}), failed: make(chan error, 1), services: cfg.services()}, nil
}

// Dispatcher returns the dispatcher, for ops registered outside a service
// (tests).
func (a *Agent) Dispatcher() *Dispatcher { return a.disp }

// Generation returns the generation of the current run (0 before Run).
func (a *Agent) Generation() uint32 { return a.gen.Load() }

// Ready is closed once the agent serves everything it was configured for.
func (a *Agent) Ready() <-chan struct{} { return a.readyCh }

// Addr returns the address a service or transport listens on (useful
// with port 0).
func (a *Agent) Addr(name string) string {
	for _, s := range a.serviceRows() {
		if s.Name == name {
			return s.Addr
		}
	}
	return ""
}

func (a *Agent) serviceRows() []api.Service {
	a.mu.Lock()
	rows := append([]api.Service(nil), a.core...)
	a.mu.Unlock()
	for i := range rows {
		if rows[i].Name == "tcp" && a.coreEnv != nil {
			rows[i].Stopped = a.coreEnv.stoppedWhy()
		}
	}
	for i, s := range a.services {
		row := s.Status()
		if i < len(a.envs) && a.envs[i] != nil {
			row.Stopped = a.envs[i].stoppedWhy()
		}
		rows = append(rows, row)
	}
	return rows
}

// Status returns what GET /v1/status serves.
func (a *Agent) Status() api.Status {
	st := api.Status{Version: Version, PID: os.Getpid(), Started: a.started, UptimeSec: time.Since(a.started).Seconds(),
		Generation: a.Generation(), Ready: a.isReady() == nil, StateDir: a.cfg.Agent.StateDir,
		Services: a.serviceRows(), QueuePairs: a.disp.QueuePairs(), Ops: a.disp.OpCounts(), Rails: a.Rails()}
	a.mu.Lock()
	st.Platform, st.Profile = a.platform, a.profile
	a.mu.Unlock()
	st.Access = api.Access{Token: a.shared.Token != "", TokenFile: a.cfg.Agent.TokenFile,
		MgmtTLS: a.mgmtTLS != nil, MgmtClientCerts: a.mgmtTLS != nil && a.mgmtTLS.ClientCAs != nil,
		MgmtOpen: a.cfg.Agent.mgmtOpen(), Insecure: a.shared.insecureListeners()}
	if a.cfg.Agent.Shm != Off && a.region != nil {
		g := a.region.Geometry()
		st.Region = a.cfg.Agent.Shm
		st.RegionSize, _ = g.Size()
		st.WindowSize = g.WindowSize
	}
	for _, s := range a.services {
		if f, ok := s.(StatusFiller); ok {
			f.FillStatus(&st)
		}
	}
	return st
}

// SetProfile records the DPU profile hecd applied, for /v1/status.
func (a *Agent) SetProfile(p *api.Profile) {
	a.mu.Lock()
	a.profile = p
	a.mu.Unlock()
}

func (a *Agent) healthy() error {
	if a.region == nil {
		return nil
	}
	if last := a.region.LastBeat(); time.Since(last) > 2*time.Second {
		return fmt.Errorf("dispatcher stalled: last housekeeping %v ago", time.Since(last).Round(time.Millisecond))
	}
	return nil
}

// isReady says why the agent is not ready: starting, stopping, or a
// listener that stopped for good.
func (a *Agent) isReady() error {
	if !a.ready.Load() {
		return errors.New("not ready")
	}
	for _, row := range a.serviceRows() {
		if row.Stopped != "" {
			return fmt.Errorf("%s stopped serving: %s", row.Name, row.Stopped)
		}
	}
	return nil
}

func (a *Agent) addCore(s api.Service) {
	a.mu.Lock()
	a.core = append(a.core, s)
	a.mu.Unlock()
}

// nextGeneration reads the generation kept in the state directory and
// returns the next one, so generations grow across restarts even when the
// region file was removed.
func (a *Agent) nextGeneration() (uint32, error) {
	path := filepath.Join(a.cfg.Agent.StateDir, "generation")
	var prev uint64
	if b, err := os.ReadFile(path); err == nil {
		prev, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("--state-dir %s: read generation: %w", a.cfg.Agent.StateDir, err)
	}
	return uint32(prev) + 1, nil
}

func (a *Agent) storeGeneration(gen uint32) error {
	path := filepath.Join(a.cfg.Agent.StateDir, "generation")
	if err := writeFileSync(path, []byte(strconv.FormatUint(uint64(gen), 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("--state-dir %s: store generation: %w", a.cfg.Agent.StateDir, err)
	}
	return nil
}

// Run serves until ctx ends, then stops cleanly, and returns nil; or it
// returns why it could not start.
//
// Starting, it takes everything that can fail before it touches the
// region: a lock on the state directory and one on the region file (a
// second agent on either says which pid holds it and leaves it alone),
// the core's listeners, every service's resources (Service.Open) and the
// handoff's other transports. Only then does it format the region (the
// shm transport, last of handoffTransports), start the services in order
// and serve. Stopping, it stops the transports (the region marked stopped
// last of them: hosts fail in-flight work with a retryable status) and
// the management API, stops the services in reverse order, waiting for
// each one's goroutines, and unmaps the region last.
func (a *Agent) Run(ctx context.Context) error {
	a.started = time.Now()
	c := &a.cfg.Agent
	var cleanup []func() // run in reverse on return
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()

	if err := os.MkdirAll(c.StateDir, 0o755); err != nil {
		return fmt.Errorf("--state-dir %s: %w", c.StateDir, err)
	}
	stateLock, err := lockfile.Lock(filepath.Join(c.StateDir, "hecd.lock"), true, 0o644)
	if err != nil {
		return fmt.Errorf("--state-dir %s: %w", c.StateDir, err)
	}
	cleanup = append(cleanup, func() { stateLock.Close() })
	if c.Shm != Off {
		// Only the agent's user (and root) may attach: the region's mode
		// and owner are its access control (shm.Open makes them so).
		region, err := shm.Open(shm.Config{Path: c.Shm, MapExisting: c.MapExisting, Size: c.RegionSize,
			QueuePairs: c.QueuePairs, RingEntries: c.RingEntries, LeaseTimeout: c.LeaseTimeout.Duration,
			CheckPIDs: *c.CheckPIDs, Log: a.log})
		if err != nil {
			return fmt.Errorf("--shm %s: %w", c.Shm, err)
		}
		a.region = region
		// Unmapped, and removed where it was made here, once everything
		// else has stopped (or failed to start).
		cleanup = append(cleanup, region.Release)
	}
	gen, err := a.nextGeneration()
	if err != nil {
		return err
	}
	a.gen.Store(gen)
	if err := a.credentials(); err != nil {
		return err
	}

	// The core's listeners, then every service's resources.
	env := &Env{Log: a.log, StateDir: c.StateDir, Shared: &a.shared, Version: Version, name: "tcp"}
	a.coreEnv = env
	var mgmtLn net.Listener
	if c.Mgmt != Off {
		if mgmtLn, err = env.Listen("mgmt", c.Mgmt); err != nil {
			return err
		}
		cleanup = append(cleanup, func() { mgmtLn.Close() })
		a.shared.SetAddr("mgmt", mgmtLn.Addr().String())
	}
	a.mux = newMux()
	a.registry = prometheus.NewRegistry()
	svcCtx, stopServices := context.WithCancel(context.WithoutCancel(ctx))
	cleanup = append(cleanup, stopServices)
	opened := 0
	cleanup = append(cleanup, func() { a.stopServices(opened) })
	for _, s := range a.services {
		e := &Env{Log: a.log, Dispatcher: a.disp, Mux: a.mux, Metrics: a.registry, StateDir: c.StateDir,
			Shared: &a.shared, Version: Version, name: s.Name(), fail: a.fail}
		a.envs = append(a.envs, e)
		if err := s.Open(svcCtx, e); err != nil {
			return err // it names the flag
		}
		opened++
	}
	// The handoff's transports, the services' resources they may stand
	// on (the rdma service's soft-RoCE links) made, the region last.
	type transport struct {
		handoff.Transport
		env *Env
	}
	var handoffs []transport
	for _, h := range handoffTransports {
		t, tenv, err := h.open(a)
		if err != nil {
			return err
		}
		if t != nil {
			handoffs = append(handoffs, transport{t, tenv})
			cleanup = append(cleanup, t.Close)
		}
	}
	gen = a.gen.Load() // the region's, where it was formatted
	if err := a.storeGeneration(gen); err != nil {
		return err
	}
	for i, s := range a.services {
		if err := s.Start(svcCtx, a.envs[i]); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
	}

	// Serve: the handoff's transports, the management API.
	var transports sync.WaitGroup
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	for _, t := range handoffs {
		transports.Add(1)
		go func() {
			defer transports.Done()
			if err := t.Run(pollCtx, handoffServer{a}); err != nil {
				if t.env == nil {
					a.fail(err) // the region: the agent cannot go on without it
					return
				}
				t.env.Stopped(err)
			}
		}()
	}
	var hs *http.Server
	if mgmtLn != nil {
		hs = &http.Server{Handler: a.mgmtHandler(), ReadHeaderTimeout: 5 * time.Second,
			ErrorLog: log.New(limitedWriter{a.disp.limited, "mgmt: connection error"}, "", 0)}
		a.addCore(api.Service{Name: "mgmt", Addr: mgmtLn.Addr().String(), Served: true})
		transports.Add(1)
		if a.mgmtTLS != nil {
			hs.TLSConfig = a.mgmtTLS
			mgmtLn = tls.NewListener(mgmtLn, a.mgmtTLS)
		}
		go func() { defer transports.Done(); hs.Serve(mgmtLn) }()
	}
	a.ready.Store(true)
	close(a.readyCh)
	a.log.Info("ready", "generation", gen, "region", c.Shm, "tcp", a.Addr("tcp"), "mgmt", a.Addr("mgmt"), "version", Version)
	transports.Add(1)
	go func() { defer transports.Done(); a.background(pollCtx) }()

	var failure error
	select {
	case <-ctx.Done():
	case failure = <-a.failed:
		a.log.Error("a service failed: the agent stops (its supervisor starts it again)", "err", failure)
	}
	a.ready.Store(false)
	a.log.Info("stopping")
	for _, t := range handoffs {
		t.Close()
	}
	stopPoll()
	if hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hs.Shutdown(sctx)
		cancel()
	}
	transports.Wait()
	env.wg.Wait()
	stopServices()
	a.stopServices(opened)
	opened = 0
	// Detached handlers write the region and ring it when done: not
	// after it is unmapped.
	if !a.disp.waitDetached(10 * time.Second) {
		a.log.Warn("stopping with detached requests still running", "requests", a.disp.detached.Load())
	}
	a.log.Info("stopped")
	return failure
}

// fail is Env.Fail: the first error stops Run, which returns it.
func (a *Agent) fail(err error) {
	select {
	case a.failed <- err:
	default: // one is enough
	}
}

// stopServices stops the first n services in reverse order, each after
// the goroutines of those after it have returned.
func (a *Agent) stopServices(n int) {
	for i := n - 1; i >= 0; i-- {
		a.services[i].Stop()
		a.envs[i].wg.Wait()
	}
}

// background finds the platform and keeps the rail rates fresh.
func (a *Agent) background(ctx context.Context) {
	if p, err := DetectPlatform("/"); err == nil {
		a.mu.Lock()
		a.platform = &p
		a.mu.Unlock()
	} else {
		a.log.Warn("platform detection", "err", err)
	}
	if a.cfg.Agent.Shm == Off && a.cfg.Agent.TCP == Off {
		// The rates are for hosts planning a split over the handoff; an
		// agent without one (a RESP or UDP server) would spend a core for
		// 0.4 s, and 32 MiB, each time on rates no one reads.
		return
	}
	a.calibrate(ctx)
}
