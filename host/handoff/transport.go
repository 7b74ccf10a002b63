package handoff

import (
	"context"
	"net"
	"time"
)

// Transport carries a client's ops to one agent. It is safe for
// concurrent use.
type Transport interface {
	// Alloc returns n bytes handed to the agent without a copy where the
	// transport has a window (wrapping ring.ErrNoSpace when it is full),
	// ordinary memory otherwise.
	Alloc(n int) ([]byte, error)
	// Free returns a buffer from Alloc.
	Free(b []byte) error
	// Submit hands calls over in order (one doorbell or write where
	// they fit), each initialised (Call.Init) and checked against
	// Window. Each is completed exactly once (Call.Complete), by the
	// agent's answer or a failure. An error means the calls from the
	// first one not handed over on were not; a call handed over may
	// still be failed later.
	Submit(ctx context.Context, calls []*Call) error
	// Wait returns when c is done or ctx ends.
	Wait(ctx context.Context, c *Call) error
	// Close fails the calls in flight (ErrClosed) and releases the
	// connection.
	Close() error
	// Window is the largest buffer one op may name.
	Window() int
	// InWindow reports whether b is handed over without a copy (in the
	// shared window); such buffers need no chunking.
	InWindow(b []byte) bool
	// WindowSGL appends to list the scatter-gather list naming bufs
	// (each one's offset in the window and length), when every one lies
	// there and the agent takes lists over this transport.
	WindowSGL(list []byte, bufs [][]byte) ([]byte, bool)
	// WindowRuns returns in and out each as one span of the window, when
	// their buffers lie there back to back.
	WindowRuns(in, out [][]byte) (inRun, outRun []byte, ok bool)
	// String describes the connection (transport, queue pair, window).
	String() string
}

// Poller is a Transport whose completions a caller busy with other work
// can reap in passing (shared memory: completions are read from the ring
// by whoever looks).
type Poller interface {
	// Poll reaps completions now, if no other goroutine is at it.
	Poll()
}

// Options are what a transport is dialled with; each takes the fields
// that apply to it.
type Options struct {
	// Token is the operator's token, which an agent that has one asks
	// for on a connection (tcp, rdma).
	Token string
	// Dial connects a stream (tcp; nil: net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// AttachWait bounds how long a detached shared-memory transport
	// waits for its agent to come back.
	AttachWait time.Duration
	// AgentTimeout is how long the agent may show no sign of life
	// before ops in flight fail with wire.StatusUnavailable.
	AgentTimeout time.Duration
	// Heartbeat is how often a shared-memory transport beats its lease
	// and looks at the agent's heartbeat.
	Heartbeat time.Duration
	// OnCancelWake, when set, runs at the end of the wake a sleeping
	// wait gets when its context ends (shm; tests).
	OnCancelWake func()
}

// Defaults returns o with its unset durations set: AttachWait 5 s,
// AgentTimeout 2 s, Heartbeat 250 ms.
func (o Options) Defaults() Options {
	for _, f := range []struct {
		d   *time.Duration
		def time.Duration
	}{{&o.AttachWait, 5 * time.Second}, {&o.AgentTimeout, 2 * time.Second}, {&o.Heartbeat, 250 * time.Millisecond}} {
		if *f.d <= 0 {
			*f.d = f.def
		}
	}
	return o
}

// Dialer dials a transport to where (a path or HOST:PORT, as its scheme
// names).
type Dialer func(ctx context.Context, where string, o Options) (Transport, error)
