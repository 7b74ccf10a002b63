package dpu

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/hecsys/hec/bpf"
	"github.com/hecsys/hec/kv"
	"github.com/hecsys/hec/kv/resp"
	"github.com/hecsys/hec/kv/udp"
	"github.com/hecsys/hec/shared/peer"
	"github.com/hecsys/hec/shared/ring"
)

// Version is the agent's version, set at link time
// (-ldflags "-X github.com/hecsys/hec/dpu.Version=...").
var Version = "dev"

// Agent is hecd: one region, its dispatcher, the TCP handoff listener and
// the management server.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	disp *Dispatcher

	started  time.Time
	gen      atomic.Uint32
	geometry ring.Geometry
	ready    atomic.Bool
	readyCh  chan struct{}
	lastBeat atomic.Int64 // unix nanos of the poller's last housekeeping

	mu       sync.Mutex
	services []Service

	powerOff func() // set by RunInit: POST /v1/poweroff calls it

	peers    *peer.Node // nil: the peer layer is off
	profile  *Applied
	platform *Platform
	rails    []RailRate // under mu

	store *kv.Store
	resp  *resp.Server
	udp   *udp.Server

	xdp     *xdp                         // nil: the XDP fast path is off or failed (xdpNote says why)
	xdpNote string                       // set before the management API serves
	hot     atomic.Pointer[bpf.HotCache] // the hot-GET map every write invalidates; nil: none
}

// Store returns the kv store while the agent runs.
func (a *Agent) Store() *kv.Store { return a.store }

// New checks cfg and returns an agent ready to Run. Services register their
// ops on Dispatcher() before Run.
func New(cfg Config, log *slog.Logger) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := NewDispatcher(log, cfg.Workers)
	d.doorbell = *cfg.Doorbell
	return &Agent{cfg: cfg, log: log, disp: d, readyCh: make(chan struct{})}, nil
}

// Config returns the configuration with defaults filled in.
func (a *Agent) Config() Config { return a.cfg }

// Dispatcher returns the dispatcher, for services to register their ops.
func (a *Agent) Dispatcher() *Dispatcher { return a.disp }

// Generation returns the generation of the current run (0 before Run).
func (a *Agent) Generation() uint32 { return a.gen.Load() }

// Ready is closed once the agent serves everything it was configured for.
func (a *Agent) Ready() <-chan struct{} { return a.readyCh }

// Services lists what was configured and whether it is served.
func (a *Agent) Services() []Service {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Service(nil), a.services...)
}

// Addr returns the address a service listens on (useful with port 0).
func (a *Agent) Addr(name string) string {
	for _, s := range a.Services() {
		if s.Name == name {
			return s.Addr
		}
	}
	return ""
}

func (a *Agent) addService(s Service) {
	a.mu.Lock()
	a.services = append(a.services, s)
	a.mu.Unlock()
}

// Status returns what GET /v1/status serves.
func (a *Agent) Status() Status {
	st := Status{Version: Version, PID: os.Getpid(), Started: a.started, UptimeSec: time.Since(a.started).Seconds(),
		Generation: a.Generation(), StateDir: a.cfg.StateDir, Services: a.Services(),
		QueuePairs: a.disp.QueuePairs(), Ops: a.disp.OpCounts(), Profile: a.profile, Rails: a.Rails()}
	if a.peers != nil {
		st.NodeID, st.Peers = a.cfg.NodeID, a.peers.Peers()
	}
	a.mu.Lock()
	st.Platform = a.platform
	a.mu.Unlock()
	if a.cfg.Shm != Off {
		st.Region = a.cfg.Shm
		st.RegionSize, _ = a.geometry.Size()
		st.WindowSize = a.geometry.WindowSize
	}
	return st
}

func (a *Agent) healthy() error {
	if a.cfg.Shm == Off {
		return nil
	}
	if last := time.Unix(0, a.lastBeat.Load()); time.Since(last) > 2*time.Second {
		return fmt.Errorf("dispatcher stalled: last housekeeping %v ago", time.Since(last).Round(time.Millisecond))
	}
	return nil
}

// nextGeneration reads the generation kept in the state directory and
// stores the next one, so generations grow across restarts even when the
// region file was removed.
func (a *Agent) nextGeneration() (uint32, error) {
	path := filepath.Join(a.cfg.StateDir, "generation")
	var prev uint64
	if b, err := os.ReadFile(path); err == nil {
		prev, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("read generation: %w", err)
	}
	return uint32(prev) + 1, nil
}

func (a *Agent) storeGeneration(gen uint32) error {
	path := filepath.Join(a.cfg.StateDir, "generation")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(uint64(gen), 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("store generation: %w", err)
	}
	return os.Rename(tmp, path)
}

// Run serves until ctx ends, then stops cleanly: the region is marked
// stopped (hosts fail in-flight work with a retryable status and wait for
// the next agent), listeners are closed, in-flight work is drained.
func (a *Agent) Run(ctx context.Context) error {
	a.started = time.Now()
	if err := os.MkdirAll(a.cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	gen, err := a.nextGeneration()
	if err != nil {
		return err
	}
	dur, _ := kv.ParseDurability(a.cfg.KVDurability)
	if a.store, err = kv.Open(filepath.Join(a.cfg.StateDir, "kv"), kv.WithDurability(dur), kv.WithLogger(a.log),
		kv.WithWriteHook(func(key []byte) {
			if h := a.hot.Load(); h != nil {
				h.Invalidate(key)
			}
		})); err != nil {
		return err
	}
	defer a.store.Close()
	registerKVOps(a.disp, a.store)

	var wg sync.WaitGroup
	var closers []func() // listeners to close at shutdown, before waiting
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	var ra *ring.Agent
	var region *ring.Region
	if a.cfg.Shm != Off {
		want := a.cfg.RegionSize
		if a.cfg.MapExisting {
			if region, err = ring.Map(a.cfg.Shm, 0, false); err != nil {
				return err
			}
			defer region.Close()
			want = region.Len()
		}
		g, err := ring.GeometryForSize(want, a.cfg.QueuePairs, a.cfg.RingEntries)
		if err != nil {
			return fmt.Errorf("region geometry: %w", err)
		}
		if !a.cfg.MapExisting {
			size, _ := g.Size()
			if region, err = ring.Map(a.cfg.Shm, size, true); err != nil {
				return err
			}
			defer region.Close()
		}
		ra, err = ring.Format(region, ring.AgentConfig{Geometry: g, LeaseTimeout: a.cfg.LeaseTimeout.Duration,
			CheckPIDs: *a.cfg.CheckPIDs, MinGeneration: gen})
		if err != nil {
			return err
		}
		a.geometry = g
		gen = ra.Generation()
		a.addService(Service{Name: "shm", Addr: a.cfg.Shm, Served: true,
			Note: fmt.Sprintf("%d queue pairs × %d KiB windows", g.QueuePairs, g.WindowSize>>10)})
		a.lastBeat.Store(time.Now().UnixNano())
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.disp.RunShmWithBeat(pollCtx, ra, &a.lastBeat)
		}()
	}
	a.gen.Store(gen)
	if err := a.storeGeneration(gen); err != nil {
		return err
	}

	var tcp *tcpServer
	if a.cfg.TCP != Off {
		ln, err := net.Listen("tcp", a.cfg.TCP)
		if err != nil {
			return fmt.Errorf("tcp handoff listener: %w", err)
		}
		tcp = &tcpServer{a: a, ln: ln, conns: map[net.Conn]struct{}{}}
		a.addService(Service{Name: "tcp", Addr: ln.Addr().String(), Served: true})
		wg.Add(1)
		go func() { defer wg.Done(); tcp.serve(pollCtx) }()
	}
	if a.cfg.Peer != Off {
		stopPeers, err := a.startPeers(pollCtx)
		if err != nil {
			return fmt.Errorf("peer layer: %w", err)
		}
		defer stopPeers()
	} else {
		a.addService(Service{Name: "peer", Addr: Off, Served: false, Note: "off (hecd --peer ADDR --node-id N --cluster-key-file F)"})
	}
	if a.cfg.RESP != Off {
		ln, err := net.Listen("tcp", a.cfg.RESP)
		if err != nil {
			return fmt.Errorf("resp listener: %w", err)
		}
		rs := &resp.Server{Store: a.store, Password: a.cfg.RESPPassword, Log: a.log, Version: Version}
		a.resp = rs
		a.addService(Service{Name: "resp", Addr: ln.Addr().String(), Served: true, Note: "kv, " + a.store.Durability().String()})
		wg.Add(1)
		go func() { defer wg.Done(); rs.Serve(pollCtx, ln) }()
		closers = append(closers, func() { ln.Close(); rs.Close() })
	}
	if a.cfg.XDP != Off {
		x, err := a.startXDP(pollCtx, &wg)
		if err != nil {
			a.xdpNote = err.Error()
			a.log.Error("xdp fast path not served", "iface", a.cfg.XDP, "err", err)
			a.addService(Service{Name: "xdp", Addr: a.cfg.XDP, Served: false, Note: err.Error()})
		} else {
			a.xdp = x
			closers = append(closers, x.close)
			note := x.mode.String() + " mode"
			if x.hot != nil {
				note += ", hot GETs answered in XDP"
			}
			a.addService(Service{Name: "xdp", Addr: a.cfg.XDP, Served: true, Note: note})
		}
	} else {
		a.xdpNote = "off (hecd --xdp IFACE)"
		a.addService(Service{Name: "xdp", Addr: Off, Served: false, Note: a.xdpNote})
	}
	if a.cfg.UDP != Off {
		pc, err := net.ListenPacket("udp", a.cfg.UDP)
		if err != nil {
			return fmt.Errorf("udp listener: %w", err)
		}
		us := &udp.Server{Store: a.store, Log: a.log}
		if a.xdp != nil && a.xdp.hot != nil {
			us.Seen = a.xdp.seenGET
		}
		a.udp = us
		a.addService(Service{Name: "udp", Addr: pc.LocalAddr().String(), Served: true, Note: "memcached-style GET"})
		wg.Add(1)
		go func() { defer wg.Done(); us.Serve(pollCtx, pc) }()
		closers = append(closers, func() { pc.Close() })
	}
	var hs *http.Server
	if a.cfg.Mgmt != Off {
		ln, err := net.Listen("tcp", a.cfg.Mgmt)
		if err != nil {
			if tcp != nil {
				tcp.close()
			}
			return fmt.Errorf("management listener: %w", err)
		}
		hs = &http.Server{Handler: a.mgmtHandler(), ReadHeaderTimeout: 5 * time.Second}
		a.addService(Service{Name: "mgmt", Addr: ln.Addr().String(), Served: true})
		wg.Add(1)
		go func() { defer wg.Done(); hs.Serve(ln) }()
	}
	a.ready.Store(true)
	close(a.readyCh)
	a.log.Info("ready", "generation", gen, "region", a.cfg.Shm, "tcp", a.Addr("tcp"), "mgmt", a.Addr("mgmt"), "version", Version)
	if p, err := DetectPlatform("/"); err == nil {
		a.mu.Lock()
		a.platform = &p
		a.mu.Unlock()
	} else {
		a.log.Warn("platform detection", "err", err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); a.calibrate(pollCtx) }()

	<-ctx.Done()
	a.ready.Store(false)
	a.log.Info("stopping")
	if tcp != nil {
		tcp.close()
	}
	for _, c := range closers {
		c()
	}
	closers = nil
	stopPoll()
	if hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hs.Shutdown(sctx)
		cancel()
	}
	wg.Wait()
	if ra != nil {
		ra.Stop()
	}
	a.log.Info("stopped")
	return nil
}
