package dpu

import (
	"sync"

	"github.com/hecsys/hec/dpu/handoff"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/trace"
)

// Session names the host session a request came from: one lease of a
// queue pair (shm) or one connection (tcp). A service that keeps state
// for a host — a communicator it joined — binds it to the session and
// drops it when the session ends, so that a host that died or closed
// leaves nothing behind that its successor would trip on. Zero is no
// session (a request served outside a transport, in tests).
type Session = handoff.Session

// sessions numbers sessions, keeps where each comes from (its origin,
// as the host names it too: trace.Origin, trace.TCPOrigin) and tells the
// services that asked when one ends.
type sessions struct {
	mu      sync.Mutex
	last    Session
	origins map[Session]string
	hooks   []func(Session)
}

// begin returns a new session from origin.
func (s *sessions) begin(origin string) Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last++
	if s.origins == nil {
		s.origins = map[Session]string{}
	}
	s.origins[s.last] = origin
	return s.last
}

// origin is where session x came from ("" once it ended).
func (s *sessions) origin(x Session) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.origins[x]
}

// end tells every hook that session x ended. Hooks run on the caller's
// goroutine (the poller's, for shm): they must not block.
func (s *sessions) end(x Session) {
	if x == 0 {
		return
	}
	s.mu.Lock()
	hooks := s.hooks
	delete(s.origins, x)
	s.mu.Unlock()
	for _, h := range hooks {
		h(x)
	}
}

// OnSessionEnd has f called, without blocking, whenever a host session
// ends: its queue pair was fenced (released, its holder died or went
// silent) or the region was formatted again, or its connection closed.
func (d *Dispatcher) OnSessionEnd(f func(Session)) {
	d.sessions.mu.Lock()
	d.sessions.hooks = append(d.sessions.hooks, f)
	d.sessions.mu.Unlock()
}

// pairSessions follows the sessions of a region's queue pairs: a pair that
// becomes active begins one, a pair fenced ends it. Only the poller uses
// it.
type pairSessions struct {
	of []Session // by pair index
}

// use starts following the pairs of a (a region new or formatted again):
// the sessions of the pairs before end.
func (p *pairSessions) use(s *sessions, a *ring.Agent) {
	for _, x := range p.of {
		s.end(x)
	}
	p.of = make([]Session, len(a.QueuePairs()))
	for i, q := range a.QueuePairs() {
		if st, _ := q.State(); st == ring.QPActive || st == ring.QPFaulted {
			p.of[i] = s.begin(qpOrigin(q))
		}
	}
}

// changed notes the pairs whose state housekeeping changed.
func (p *pairSessions) changed(s *sessions, qs []*ring.AgentQP) {
	for _, q := range qs {
		i := q.Index()
		if i >= len(p.of) {
			continue
		}
		switch st, _ := q.State(); st {
		case ring.QPActive, ring.QPFaulted:
			if p.of[i] == 0 { // a new lease (a faulted pair reset goes on)
				p.of[i] = s.begin(qpOrigin(q))
			}
		default:
			s.end(p.of[i])
			p.of[i] = 0
		}
	}
}

// qpOrigin names a queue pair's session as its holder names it.
func qpOrigin(q *ring.AgentQP) string {
	pid, _ := q.Holder()
	return trace.Origin(pid, q.Index())
}
