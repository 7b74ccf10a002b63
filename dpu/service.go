package dpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/kv"
	"github.com/hecsys/hec/shared/accept"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/peer"
)

// A Service is one thing the agent serves: the kv store, a front end of
// it, the peer layer, the XDP fast path. The agent opens every service
// before it touches the region (Open takes what can fail: listeners,
// files), then starts them in order, and stops them in reverse order once
// the transports have stopped, waiting for every goroutine a service
// started with Env.Go before the next one stops.
type Service interface {
	// Name names the service in the status, the metrics and the log.
	Name() string
	// Open takes the service's resources without serving: listeners
	// (Env.Listen names the flag in its errors), files, the store. An
	// error stops the agent before anything is served. Open may register
	// handoff ops, routes and metrics, and set Shared pieces.
	Open(ctx context.Context, env *Env) error
	// Start serves, on goroutines started with env.Go. ctx ends when the
	// agent stops.
	Start(ctx context.Context, env *Env) error
	// Stop ends what Open and Start began: it closes listeners and
	// connections so the service's goroutines return, and releases its
	// resources once they have. It is called once, whether or not Start
	// ran, and only after Open succeeded.
	Stop()
	// Status is the service's row in /v1/status.
	Status() api.Service
}

// StatusFiller is a Service that adds to /v1/status beyond its row.
type StatusFiller interface {
	FillStatus(st *api.Status)
}

// Env is what a service gets from the agent.
type Env struct {
	Log        *slog.Logger
	Dispatcher *Dispatcher           // register handoff ops in Open
	Mux        *Mux                  // register management routes in Open
	Metrics    prometheus.Registerer // register collectors in Open
	StateDir   string
	Shared     *Shared
	Version    string

	name    string
	fail    func(error) // the agent's: stop with this error
	wg      sync.WaitGroup
	stopped atomic.Pointer[string] // why a listener stopped serving for good
	mu      sync.Mutex
	loops   []*accept.Loop
}

// Fail tells the agent that the service cannot go on (its state may be
// inconsistent after a bug): the agent stops, and Run returns err, so its
// supervisor (hecd supervise, process 1) starts it again. It does not
// block.
func (e *Env) Fail(err error) {
	if e.fail != nil {
		e.fail(fmt.Errorf("%s: %w", e.name, err))
	}
}

// Go runs f on a goroutine the agent waits for before it stops the next
// service and unmaps the region.
func (e *Env) Go(f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// Listen opens a TCP listener for the address given by --flag. Its error
// names the flag and says when the port is taken.
func (e *Env) Listen(flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenError(flag, addr, err)
	}
	return ln, nil
}

// ListenPacket opens a UDP socket for the address given by --flag.
func (e *Env) ListenPacket(flag, addr string) (net.PacketConn, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, listenError(flag, addr, err)
	}
	return pc, nil
}

func listenError(flag, addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("--%s %s: the port is taken (another program, or another hecd, listens there): %w", flag, addr, err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("--%s %s: no interface of this machine has that address: %w", flag, addr, err)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("--%s %s: not allowed to bind that port: %w", flag, addr, err)
	}
	return fmt.Errorf("--%s %s: %w", flag, addr, err)
}

// Serve accepts connections on ln and hands each to handle on a goroutine
// of its own (package accept: accept errors are retried with back-off and
// counted in hec_accept_retries_total). A listener that stops for good
// marks the service stopped: the agent is then not ready, and /v1/status
// says why. Stop ends it with the returned loop's Close.
func (e *Env) Serve(ln net.Listener, handle func(net.Conn)) *accept.Loop {
	l := accept.New(e.name, ln, handle, e.Log)
	e.mu.Lock()
	e.loops = append(e.loops, l)
	e.mu.Unlock()
	e.Go(func() {
		if err := l.Run(); err != nil {
			e.Stopped(err)
		}
	})
	return l
}

// Stopped records that the service has stopped serving for good, and why.
func (e *Env) Stopped(err error) {
	msg := err.Error()
	e.stopped.Store(&msg)
	e.Log.Error("service stopped serving", "service", e.name, "err", err)
}

func (e *Env) stoppedWhy() string {
	if p := e.stopped.Load(); p != nil {
		return *p
	}
	return ""
}

// acceptRetries sums the retries of the service's accept loops; false
// when it has none.
func (e *Env) acceptRetries() (uint64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n uint64
	for _, l := range e.loops {
		n += l.Retries()
	}
	return n, len(e.loops) > 0
}

// Shared holds what services share. A service that provides a piece sets
// it in Open; services after it in the list use it.
type Shared struct {
	// Store is the kv store (set by the kv service).
	Store *kv.Store
	// Peer is the peer layer's node (set by the peer service; nil when
	// off).
	Peer *peer.Node

	// Token is the operator's bearer token ("" when none is configured);
	// Insecure, the operator's leave to serve beyond loopback without
	// credentials. Both are set before any service opens.
	Token    string
	Insecure bool
	// MgmtCerts: the management API admits clients by certificate
	// (mutual TLS).
	MgmtCerts bool

	mu       sync.Mutex
	addrs    map[string]string
	insecure []string // listeners served beyond loopback without credentials

	written atomic.Pointer[func(key []byte)]
	seenGET atomic.Pointer[func(key []byte)]
}

// SetAddr records the address a service listens on.
func (s *Shared) SetAddr(service, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addrs == nil {
		s.addrs = map[string]string{}
	}
	s.addrs[service] = addr
}

// Addr is the address a service listens on ("" when it does not).
func (s *Shared) Addr(service string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[service]
}

// OnWrite sets the function the store calls with every key a write may
// have changed, once visible and before it is acknowledged
// (kv.WithWriteHook); nil removes it.
func (s *Shared) OnWrite(f func(key []byte)) { s.written.Store(&f) }

// Written calls the OnWrite function, if any.
func (s *Shared) Written(key []byte) {
	if f := s.written.Load(); f != nil && *f != nil {
		(*f)(key)
	}
}

// OnGETSeen sets the function told of every GET that reaches user space
// over UDP (the XDP fast path's hot-key admission); nil removes it.
func (s *Shared) OnGETSeen(f func(key []byte)) { s.seenGET.Store(&f) }

// GETSeen calls the OnGETSeen function, if any.
func (s *Shared) GETSeen(key []byte) {
	if f := s.seenGET.Load(); f != nil && *f != nil {
		(*f)(key)
	}
}
