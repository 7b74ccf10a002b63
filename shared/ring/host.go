package ring

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hecsys/hec/shared/wire"
)

// ErrNoQueuePair is returned by Lease when every queue pair is taken.
var ErrNoQueuePair = errors.New("ring: no free queue pair")

// ErrAgentSilent says the agent's heartbeat stood still for the host's
// agent timeout while a lease waited for it: the agent died without
// marking its region (SIGKILL), or is stalled past the timeout.
var ErrAgentSilent = errors.New("ring: agent heartbeat stood still")

// DefaultAgentTimeout is how long a heartbeat of the agent may stand still
// before a host takes the agent for dead: the agent housekeeps at least
// every 500 ms, even idle.
const DefaultAgentTimeout = 2 * time.Second

// Host is a host process's view of a region formatted by an agent. Its
// geometry was read and checked once, at Attach.
type Host struct {
	r   *Region
	l   layout
	gen uint32

	agentTimeout time.Duration // SetAgentTimeout
}

// Attach reads and checks the header of a region formatted by a running
// agent. Every geometry field is checked against the layout it implies and
// against the mapping, since the region is shared with other processes.
func Attach(r *Region) (*Host, error) {
	if r.word(hMagic).Load() != Magic || r.word(hState).Load() != agentReady {
		return nil, fmt.Errorf("attach %s: %w", r.path, ErrNotFormatted)
	}
	if v := r.u32(hVersion); v != Version {
		return nil, fmt.Errorf("attach %s: layout version %d, want %d: %w", r.path, v, Version, ErrVersion)
	}
	g := Geometry{
		QueuePairs: int(r.u32(hQPs)),
		Entries:    int(r.u32(hEntries)),
		WindowSize: r.word(hWindow).Load(),
	}
	l, err := newLayout(g)
	if err != nil {
		return nil, fmt.Errorf("attach %s: header: %w", r.path, err)
	}
	if r.u32(hBlockSize) != qpBlockSize || r.word(hQPTable).Load() != l.qpTable ||
		r.word(hRings).Load() != l.rings || r.word(hArena).Load() != l.arena ||
		r.word(hRegion).Load() != l.size {
		return nil, fmt.Errorf("attach %s: header offsets disagree with its geometry: %w", r.path, ErrGeometry)
	}
	if l.size > r.Len() {
		return nil, fmt.Errorf("attach %s: region needs %d bytes, mapped %d: %w", r.path, l.size, r.Len(), ErrGeometry)
	}
	gen := uint32(r.word(hGeneration).Load())
	// The agent writes its generation into every pair's state word too: a
	// header generation no pair carries was scribbled (the agent repairs
	// it within a housekeeping period).
	if st := r.word(l.block(0) + qState).Load(); stateGen(st) != gen {
		return nil, fmt.Errorf("attach %s: header generation %d, queue pair 0 says %d: %w", r.path, gen, stateGen(st), ErrNotFormatted)
	}
	return &Host{r: r, l: l, gen: gen, agentTimeout: DefaultAgentTimeout}, nil
}

// SetAgentTimeout sets how long the agent's heartbeat may stand still while
// Lease waits for it to bind a pair (DefaultAgentTimeout).
func (h *Host) SetAgentTimeout(d time.Duration) {
	if d > 0 {
		h.agentTimeout = d
	}
}

// Geometry returns the region's geometry as read at Attach.
func (h *Host) Geometry() Geometry { return h.l.Geometry }

// Generation returns the agent generation seen at Attach.
func (h *Host) Generation() uint32 { return h.gen }

// AgentHeartbeat returns the agent's heartbeat counter in the header; it
// advances while the agent runs. An attached client watches its own pair's
// copy instead (HostQP.AgentHeartbeat).
func (h *Host) AgentHeartbeat() uint64 { return h.r.word(hHeartbeat).Load() }

// AgentStopped reports whether the agent marked the region as not served,
// or formatted it again (a new generation).
func (h *Host) AgentStopped() bool {
	return h.r.word(hState).Load() != agentReady || uint32(h.r.word(hGeneration).Load()) != h.gen
}

// Lease takes a free queue pair, trying prefer first (pass -1 for none), and
// waits until the agent has bound it. A pair another client has just
// released is fenced and freed by the agent's next housekeeping: while
// none is free but one is on its way back, Lease waits for it (up to
// leaseWait, or ctx). It fails with ErrNoQueuePair when none is free.
func (h *Host) Lease(ctx context.Context, prefer int) (*HostQP, error) {
	deadline := time.Now().Add(leaseWait)
	for {
		q, returning, failed, err := h.tryLease(ctx, prefer)
		if q != nil || err != nil {
			return q, err
		}
		if !returning || time.Now().After(deadline) {
			if failed != nil {
				return nil, fmt.Errorf("lease in %s: no pair bound; last: %w", h.r.path, failed)
			}
			return nil, fmt.Errorf("lease in %s (%d pairs): %w", h.r.path, h.l.QueuePairs, ErrNoQueuePair)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lease in %s: %w", h.r.path, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// leaseWait bounds how long Lease waits for a released pair to come back.
const leaseWait = 2 * time.Second

// bindWait bounds how long Lease waits for the agent to bind one pair
// before it gives that pair back and tries the next.
var bindWait = 3 * time.Second

// tryLease is one pass of Lease over the pairs; returning says that none
// was free but one was released and not yet freed by the agent. A pair
// that faults or is not bound in time is given back and the next one
// tried (failed says why the last one did not bind): a pair something
// scribbled on does not fail the lease while another binds. Only a
// restarted or stopped agent ends the pass early, with err.
func (h *Host) tryLease(ctx context.Context, prefer int) (q *HostQP, returning bool, failed, err error) {
	n := h.l.QueuePairs
	pid := uint32(os.Getpid())
	// One watch over the whole pass: the agent writes the same heartbeat
	// into every pair's block, and a dead agent's stands still in all.
	beat := h.agentWatch()
	for k := 0; k < n; k++ {
		i := k
		if prefer >= 0 && prefer < n {
			i = (prefer + k) % n
		}
		q := h.qp(i)
		w := q.word(qLease).Load()
		st := q.word(qState).Load()
		if leasePID(w) == releasedPID || stateState(st) == QPFenced && stateGen(st) == h.gen {
			returning = true
		}
		if leasePID(w) != 0 || stateState(st) != QPFree || stateGen(st) != h.gen {
			continue
		}
		if !q.word(qLease).CompareAndSwap(w, leaseWord(leaseEpoch(w), pid)) {
			continue
		}
		q.lease = leaseWord(leaseEpoch(w), pid)
		q.word(qStart).Store(selfStart())
		q.word(qHeartbeat).Store(1)
		q.ringDoorbell()
		err := q.waitActive(ctx, 0, bindWait, beat)
		if err == nil {
			return q, false, nil, nil
		}
		q.Release()
		err = fmt.Errorf("lease queue pair %d: %w", i, err)
		if errors.Is(err, wire.StatusRestarted) || errors.Is(err, ErrAgentSilent) ||
			errors.Is(err, wire.StatusUnavailable) && h.AgentStopped() || ctx.Err() != nil {
			return nil, false, nil, err
		}
		failed = err
	}
	return nil, returning, failed, nil
}

// agentWatch judges, while a host waits for the agent, whether the agent
// is alive: by the pair's copy of its heartbeat and by the header's.
type agentWatch struct{ pair, header BeatWatch }

func (h *Host) agentWatch() *agentWatch {
	w := BeatWatch{Timeout: h.agentTimeout, MaxGap: h.agentTimeout / 2}
	return &agentWatch{pair: w, header: w}
}

// look records what q shows. Only both heartbeats standing still for the
// timeout make the agent dead (ErrAgentSilent): a host that scribbles on
// one word — the header, or a free pair's copy — does not make others
// give up a live agent. The pair's copy alone standing still gives up
// that pair (another can still bind).
func (w *agentWatch) look(now time.Time, q *HostQP) error {
	still, pairDead := w.pair.Look(now, q.AgentHeartbeat())
	_, headerDead := w.header.Look(now, q.h.AgentHeartbeat())
	switch {
	case pairDead && headerDead:
		return fmt.Errorf("queue pair %d: %w for %v (is the agent running?): %w", q.idx, ErrAgentSilent, still.Round(time.Millisecond), wire.StatusUnavailable)
	case pairDead:
		return fmt.Errorf("queue pair %d: its copy of the agent's heartbeat stood still for %v while the header's moved: %w", q.idx, still.Round(time.Millisecond), wire.StatusUnavailable)
	}
	return nil
}

func (h *Host) qp(i int) *HostQP {
	l := h.l
	return &HostQP{
		h:     h,
		idx:   i,
		block: l.block(i),
		sq:    h.r.mem[l.sq(i) : l.sq(i)+l.ringBytes],
		cq:    h.r.mem[l.cq(i) : l.cq(i)+l.ringBytes],
		win:   h.r.mem[l.window(i) : l.window(i)+l.WindowSize],
		mask:  uint64(l.Entries - 1),
	}
}

// HostQP is a host process's leased queue pair. Submit and Poll are each to
// be called by one goroutine at a time (the rings are single-producer,
// single-consumer); the host library serialises them.
type HostQP struct {
	h      *Host
	idx    int
	block  uint64
	sq, cq []byte
	win    []byte
	mask   uint64
	lease  uint64

	sqTail, cqHead uint64
	resetReq       uint64
	beat           uint64
	fetched        uint64 // Poll's read of the next slot (AgentQP.fetched)
}

func (q *HostQP) word(off uint64) interface {
	Load() uint64
	Store(uint64)
	Add(uint64) uint64
	CompareAndSwap(uint64, uint64) bool
} {
	return q.h.r.word(q.block + off)
}

// Index returns the pair's position in the table.
func (q *HostQP) Index() int { return q.idx }

// Entries returns the ring size.
func (q *HostQP) Entries() int { return int(q.mask + 1) }

// Window returns the pair's arena window, mapped: buffers placed here are
// handed to the agent without a copy.
func (q *HostQP) Window() []byte { return q.win }

// InFlight returns descriptors submitted whose completions were not polled.
func (q *HostQP) InFlight() int { return int(q.sqTail - q.cqHead) }

// Room returns how many descriptors may be submitted now.
func (q *HostQP) Room() int { return int(q.mask+1) - q.InFlight() }

// AgentHeartbeat returns the agent's heartbeat as written into this pair's
// own block: it advances while the agent runs, whatever happens to the
// header or to other pairs.
func (q *HostQP) AgentHeartbeat() uint64 { return q.word(qAgentBeat).Load() }

// Beat advances the holder's heartbeat. The host library calls it from a
// ticker well inside the agent's lease timeout.
func (q *HostQP) Beat() {
	q.beat++
	q.word(qHeartbeat).Store(q.beat + 1)
}

// Check returns nil while the pair is served, and otherwise a wire.Status
// saying why not: StatusRestarted (the agent formatted the region again),
// StatusFaulted, StatusFenced (the lease was taken away), or
// StatusUnavailable (the agent stopped). It reads only the pair's own words,
// so a scribbled header does not disturb a working pair.
func (q *HostQP) Check() error {
	st := q.word(qState).Load()
	switch {
	case stateGen(st) != q.h.gen:
		return wire.StatusRestarted
	case stateState(st) == QPStopped:
		return wire.StatusUnavailable
	case stateState(st) == QPFaulted:
		return wire.StatusFaulted
	case stateState(st) != QPActive || q.word(qLease).Load() != q.lease:
		return wire.StatusFenced
	}
	return nil
}

// Submit writes as many of ds as there is room for into the submission ring
// and publishes them with one store. It returns how many it submitted.
func (q *HostQP) Submit(ds []wire.Desc) int {
	n := min(len(ds), q.Room())
	for i := 0; i < n; i++ {
		ds[i].Marshal(q.sq[((q.sqTail+uint64(i))&q.mask)*descSize:])
	}
	if n > 0 {
		q.sqTail += uint64(n)
		publish(q.h.r.word(q.block+qSQTail), q.sqTail)
		q.ringDoorbell()
	}
	return n
}

// Poll copies up to len(dst) completions into dst and frees their slots. It
// returns wire.StatusFaulted-like errors from Check only when no completion
// is ready, so completions the agent wrote before a fault are not lost.
func (q *HostQP) Poll(dst []wire.Desc) (int, error) {
	// The next completion's slot along with the tail, as the agent's Take
	// reads the next submission's.
	if !raceBuild {
		q.fetched = loadWord(q.cq[(q.cqHead&q.mask)*descSize:])
	}
	tail := q.word(qCQTail).Load()
	if tail < q.cqHead || tail > q.sqTail {
		// A new agent formatted the region (its tail restarts at zero), or
		// the words were scribbled on.
		if err := q.Check(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("poll queue pair %d: completion tail %d outside [%d,%d]: %w", q.idx, tail, q.cqHead, q.sqTail, wire.StatusFaulted)
	}
	n := min(uint64(len(dst)), tail-q.cqHead)
	if n == 0 {
		return 0, q.Check()
	}
	for i := uint64(0); i < n; i++ {
		if err := dst[i].Unmarshal(q.cq[((q.cqHead+i)&q.mask)*descSize:]); err != nil {
			dst[i].Status = wire.StatusInternal
		}
	}
	q.cqHead += n
	q.word(qCQHead).Store(q.cqHead)
	return int(n), nil
}

// Reset asks the agent to reset a faulted pair and waits for it. Whatever was
// in flight is lost: the caller fails those operations.
func (q *HostQP) Reset(ctx context.Context) error {
	q.sqTail, q.cqHead = 0, 0
	q.word(qSQTail).Store(0)
	q.word(qCQHead).Store(0)
	q.resetReq = q.word(qResetReq).Load() + 1
	q.word(qResetReq).Store(q.resetReq)
	q.ringDoorbell()
	if err := q.waitActive(ctx, uint16(q.resetReq), 5*time.Second, nil); err != nil {
		return fmt.Errorf("reset queue pair %d: %w", q.idx, err)
	}
	return nil
}

// waitActive waits (up to limit) for the agent to mark the pair active
// with reset acknowledgement ack. It gives up early when the agent's
// heartbeat stands still for the host's agent timeout, judged by beat
// (nil: a watch of its own; agentWatch.look says how).
func (q *HostQP) waitActive(ctx context.Context, ack uint16, limit time.Duration, beat *agentWatch) error {
	var w Waiter
	now := time.Now()
	deadline := now.Add(limit)
	if beat == nil {
		beat = q.h.agentWatch()
	}
	_ = beat.look(now, q) // the first look starts the watch; one that already ran out says so below
	for {
		st := q.word(qState).Load()
		if stateGen(st) != q.h.gen {
			return wire.StatusRestarted
		}
		if q.word(qLease).Load() != q.lease {
			return fmt.Errorf("queue pair %d: lease taken away: %w", q.idx, wire.StatusFenced)
		}
		if stateAck(st) == ack {
			switch stateState(st) {
			case QPActive:
				return nil
			case QPFaulted:
				return wire.StatusFaulted
			}
		}
		if q.h.r.word(hState).Load() != agentReady {
			return wire.StatusUnavailable
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Now()
		if err := beat.look(now, q); err != nil {
			return err
		}
		if now.After(deadline) {
			return fmt.Errorf("agent did not bind the pair within %v: %w", limit, wire.StatusUnavailable)
		}
		w.Wait()
	}
}

// Release gives the pair back. The agent fences it (drains what is in
// flight) before anyone can take it again.
func (q *HostQP) Release() {
	q.word(qLease).CompareAndSwap(q.lease, leaseWord(leaseEpoch(q.lease), releasedPID))
	q.ringDoorbell()
}
