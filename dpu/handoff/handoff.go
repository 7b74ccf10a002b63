package handoff

import (
	"context"
	"sync/atomic"

	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// Session is one host's session with the agent (one connection), as the
// agent numbers it: services bind what a host leaves behind to it and
// drop it when the session ends. Zero is no session.
type Session uint64

// Server is the agent as a transport sees it.
type Server interface {
	// Begin starts a host's session; origin is the connection's name as
	// both ends give it (trace ids: trace.TCPOrigin, "rdma ADDR #N").
	Begin(origin string) Session
	// End ends it: services drop what the host left.
	End(Session)
	// Serve serves one descriptor of sess whose memory the transport
	// holds in mem (a stream's payload, the agent's mirror of an RDMA
	// host's window; the descriptor's spans are offsets in it, checked
	// there), filling resp. transport names the transport in the
	// services' Request.
	Serve(ctx context.Context, transport string, sess Session, req *wire.Desc, mem []byte, resp *wire.Desc)
	// Token is the operator's token every host must prove ("" none).
	Token() string
	// MaxFrame bounds a descriptor's inline payload on a stream.
	MaxFrame() int
	// Warn logs at warning level, at a bounded rate (a flood of bad
	// hosts does not flood the log).
	Warn(msg string, args ...any)
}

// RingServer is a Server that serves a region's rings itself: the
// agent's poller, which schedules what it takes from them (small ops
// inline, the rest on workers in fair slices per queue pair). The shm
// transport hands it the region it formatted.
type RingServer interface {
	Server
	// ServeRings polls a's queue pairs until ctx ends, storing the time
	// of each housekeeping pass in beat. A region lost under it (its
	// file cut short, an access that faulted) is formatted again with the
	// next generation: ServeRings returns the agent side it served last,
	// the work it took completed or dropped.
	ServeRings(ctx context.Context, a *ring.Agent, beat *atomic.Int64) *ring.Agent
}

// Transport carries the handoff from hosts over one kind of connection.
type Transport interface {
	// Run accepts hosts and serves each on a goroutine of its own through
	// srv until Close; it returns nil then, or why it stopped for good.
	Run(ctx context.Context, srv Server) error
	// Addr is where hosts reach it (a scheme's address: HOST:PORT).
	Addr() string
	// Close stops accepting, ends every host's connection and waits for
	// their goroutines.
	Close()
}
