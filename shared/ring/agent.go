package ring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hecsys/hec/shared/wire"
)

// AgentConfig configures the agent's side of a region. The zero value of
// each field selects its documented default (see withDefaults).
type AgentConfig struct {
	// Geometry of the region to format. Required.
	Geometry Geometry
	// LeaseTimeout is how long a holder's heartbeat may stay unchanged before
	// its pair is fenced. Default 3s.
	LeaseTimeout time.Duration
	// CheckPIDs makes the agent fence a pair whose holder's pid is gone
	// (asked at every housekeeping pass) or was reused (its start time,
	// compared once a second: startCheckEvery). Only meaningful when the
	// agent shares the holders' pid namespace (local emulation); in a VM
	// or on a DPU it must be false.
	CheckPIDs bool
	// MinGeneration is a floor for the new generation, for agents that keep
	// it in their state directory; the region's own previous generation + 1
	// is used when higher.
	MinGeneration uint32
}

// suspectTimeout is the heartbeat staleness that fences a holder whose pid
// exists with another start time than the one it recorded.
const suspectTimeout = 500 * time.Millisecond

func (c AgentConfig) withDefaults() AgentConfig {
	if c.LeaseTimeout <= 0 {
		c.LeaseTimeout = 3 * time.Second
	}
	return c
}

// Agent is the agent's side of a formatted region. Housekeep must be called
// periodically (every 10–100 ms); each AgentQP is driven by one goroutine at
// a time.
type Agent struct {
	r    *Region
	l    layout
	cfg  AgentConfig
	gen  uint32
	beat uint64
	qps  []*AgentQP

	headerRepairs uint64
}

// agentsHere counts the regions this process formatted as their agent.
var agentsHere atomic.Int32

// AgentHere reports whether this process has served a region as its
// agent (tests and examples run one in the process of its hosts): a
// holder must then not keep a P while it waits, since the agent that is
// to complete its op may need it.
func AgentHere() bool { return agentsHere.Load() > 0 }

// Format lays out the region for cfg.Geometry, bumps the generation, and
// publishes the header as ready. Every lease is cleared: hosts attached to a
// previous agent see the generation change and attach again.
func Format(r *Region, cfg AgentConfig) (*Agent, error) {
	cfg = cfg.withDefaults()
	l, err := newLayout(cfg.Geometry)
	if err != nil {
		return nil, fmt.Errorf("format region: %w", err)
	}
	if l.size > r.Len() {
		return nil, fmt.Errorf("format region: geometry needs %d bytes, region has %d: %w", l.size, r.Len(), ErrGeometry)
	}
	a := &Agent{r: r, l: l, cfg: cfg, beat: 1}
	agentsHere.Add(1)
	err = r.CatchFault(func() {
		gen := uint32(1)
		if r.word(hMagic).Load() == Magic {
			gen = uint32(r.word(hGeneration).Load()) + 1
		}
		a.gen = max(gen, cfg.MinGeneration, 1)
		r.word(hState).Store(agentFormatting)
		r.word(hMagic).Store(0)
		clear(r.mem[:hGeneration])
		clear(r.mem[l.qpTable:l.arena]) // control blocks and rings; the arena keeps its bytes
		a.writeHeader()
		a.qps = make([]*AgentQP, l.QueuePairs)
		for i := range a.qps {
			q := &AgentQP{a: a, idx: i, block: l.block(i)}
			q.sq = r.mem[l.sq(i) : l.sq(i)+l.ringBytes]
			q.cq = r.mem[l.cq(i) : l.cq(i)+l.ringBytes]
			q.win = MappedWindow{mem: r.mem[l.window(i) : l.window(i)+l.WindowSize]}
			q.mask = uint64(l.Entries - 1)
			q.publishState()
			q.set(qAgentBeat, a.beat)
			a.qps[i] = q
		}
		r.word(hMagic).Store(Magic)
		r.word(hState).Store(agentReady)
	})
	if err != nil {
		return nil, fmt.Errorf("format region: %w", err)
	}
	return a, nil
}

// writeHeader writes the geometry, the generation and the heartbeat; the
// magic and the state word, which say the header may be trusted, are the
// caller's to write last.
func (a *Agent) writeHeader() {
	r, l := a.r, a.l
	r.setU32(hVersion, Version)
	r.setU32(hQPs, uint32(l.QueuePairs))
	r.setU32(hEntries, uint32(l.Entries))
	r.setU32(hBlockSize, qpBlockSize)
	r.word(hWindow).Store(l.WindowSize)
	r.word(hRegion).Store(l.size)
	r.word(hQPTable).Store(l.qpTable)
	r.word(hRings).Store(l.rings)
	r.word(hArena).Store(l.arena)
	r.word(hGeneration).Store(uint64(a.gen))
	r.word(hHeartbeat).Store(a.beat)
}

// headerIntact compares the header with the agent's own copy of it.
func (a *Agent) headerIntact() bool {
	r, l := a.r, a.l
	return r.word(hMagic).Load() == Magic && r.word(hState).Load() == agentReady &&
		r.u32(hVersion) == Version && r.u32(hQPs) == uint32(l.QueuePairs) &&
		r.u32(hEntries) == uint32(l.Entries) && r.u32(hBlockSize) == qpBlockSize &&
		r.word(hWindow).Load() == l.WindowSize && r.word(hRegion).Load() == l.size &&
		r.word(hQPTable).Load() == l.qpTable && r.word(hRings).Load() == l.rings &&
		r.word(hArena).Load() == l.arena && r.word(hGeneration).Load() == uint64(a.gen)
}

// repairHeader republishes the header from the agent's copy. A host that
// attaches meanwhile sees the state word say "formatting" and tries again.
func (a *Agent) repairHeader() {
	a.r.word(hState).Store(agentFormatting)
	a.writeHeader()
	a.r.word(hMagic).Store(Magic)
	a.r.word(hState).Store(agentReady)
	a.headerRepairs++
}

// Generation returns the generation this agent formatted the region with.
func (a *Agent) Generation() uint32 { return a.gen }

// Geometry returns the geometry the region was formatted with.
func (a *Agent) Geometry() Geometry { return a.l.Geometry }

// QueuePairs returns the queue pairs, indexed like the region's table.
func (a *Agent) QueuePairs() []*AgentQP { return a.qps }

// Stop marks the region and every pair as no longer served. Hosts see it on
// their next poll and fail with the retryable wire.StatusUnavailable.
func (a *Agent) Stop() {
	for _, q := range a.qps {
		q.state = QPStopped
	}
	a.r.CatchFault(func() { //nolint:errcheck // a lost region has no one to tell
		a.r.word(hState).Store(agentStopped)
		for _, q := range a.qps {
			q.publishState()
		}
	})
}

// Lost reports whether the region's file shrank under the mapping (anyone
// who may write the file can truncate it): every access past the new end
// would fault. The agent then rebuilds the region (Rebuild).
func (a *Agent) Lost() bool { return a.r.shrunk() }

// Rebuild abandons this agent's pairs (their completions are no longer
// written), restores the region file's size, and formats the region again
// with the next generation; the new agent side keeps the counters (faults,
// fences, repairs). Hosts see the generation change and attach
// again. Work still in the hands of workers must have finished (or been
// dropped) before: the new agent's pairs share the windows.
func (a *Agent) Rebuild() (*Agent, error) {
	for _, q := range a.qps {
		q.state = QPStopped
	}
	if err := a.r.restore(); err != nil {
		return nil, fmt.Errorf("rebuild region: %w", err)
	}
	cfg := a.cfg
	cfg.MinGeneration = a.gen + 1
	b, err := Format(a.r, cfg)
	if err != nil {
		return nil, err
	}
	// The counters go on from where they were: they count over the
	// agent's life, not one region's.
	b.headerRepairs = a.headerRepairs
	for i, q := range a.qps {
		b.qps[i].faults, b.qps[i].fences, b.qps[i].repairs = q.faults, q.fences, q.repairs
	}
	return b, nil
}

// Region returns the mapping the agent formatted.
func (a *Agent) Region() *Region { return a.r }

// HeaderRepairs returns how often housekeeping found the header differing
// from the agent's copy and wrote it again.
func (a *Agent) HeaderRepairs() uint64 { return a.headerRepairs }

// Housekeep advances the agent's heartbeat and every pair's lease state
// machine: binding new holders, fencing dead or departed ones, finishing
// fences whose in-flight work has drained, and serving reset requests. It
// returns the pairs whose state changed, for logging and metrics.
//
// It also repairs what the agent owns: the header and each pair's state
// word, written again from the agent's own copy wherever the region differs
// (counted in HeaderRepairs and each pair's Repairs). Each pair's block
// carries the agent's heartbeat, so a scribbled header heartbeat does not
// make attached hosts give up.
func (a *Agent) Housekeep(now time.Time) (changed []*AgentQP) {
	a.beat++
	a.r.word(hHeartbeat).Store(a.beat)
	if !a.headerIntact() {
		a.repairHeader()
	}
	for _, q := range a.qps {
		before := q.state
		q.housekeep(now)
		if q.state != before {
			changed = append(changed, q)
		}
		if w, want := q.w(qState), q.stateWord(); w != want {
			q.regionShowed = fmt.Sprintf("state word %#x (%s, generation %d)", w, stateState(w), stateGen(w))
			q.repairs++
			q.publishState()
		}
		q.set(qAgentBeat, a.beat)
	}
	return changed
}

// AgentQP is the agent's side of one queue pair.
type AgentQP struct {
	a     *Agent
	idx   int
	block uint64
	sq    []byte
	cq    []byte
	// fetched is the next slot's first word as Take last read it, only to
	// have its cache line at hand: kept, so the read is not dropped.
	fetched uint64
	win     MappedWindow
	mask    uint64

	state  QPState
	reason string // why the pair last faulted or was fenced

	lease       uint64 // the lease word bound to, while active/faulted
	epoch       uint32 // epoch a free lease carries
	holderStart uint64
	holderBeat  BeatWatch // the holder's heartbeat, judged on the agent's own housekeeping passes
	// startChecked is when the holder's start time was last compared with
	// its pid's (CheckPIDs); zero: at the next pass.
	startChecked time.Time

	sqHead, cqTail         uint64 // ours; published
	seenSQTail, seenCQHead uint64 // host's, last observed
	resetSeen              uint64
	resetAck               uint16
	pending                bool // completions written but cqTail not yet published

	faults, fences uint64
	repairs        uint64
	regionShowed   string // what the region's words said at the last repair
}

// Incoming is a descriptor taken from a submission ring: a private copy,
// decoded and validated against the window. Err is non-nil when it failed to
// decode or validate; it must still be completed (with an error status).
type Incoming struct {
	wire.Desc
	Err error
}

// Index returns the pair's position in the table.
func (q *AgentQP) Index() int { return q.idx }

// State returns the pair's state and, for faulted or fenced pairs, why.
func (q *AgentQP) State() (QPState, string) { return q.state, q.reason }

// Holder returns the pid and start time of the lease holder (0 when free).
func (q *AgentQP) Holder() (pid uint32, start uint64) {
	if q.state == QPFree {
		return 0, 0
	}
	return leasePID(q.lease), q.holderStart
}

// Counters returns how often this pair faulted and was fenced.
func (q *AgentQP) Counters() (faults, fences uint64) { return q.faults, q.fences }

// InFlight returns descriptors taken and not yet completed.
func (q *AgentQP) InFlight() uint64 { return q.sqHead - q.cqTail }

// Window returns the accessor for this pair's arena window.
func (q *AgentQP) Window() *MappedWindow { return &q.win }

func (q *AgentQP) w(off uint64) uint64 { return q.a.r.word(q.block + off).Load() }
func (q *AgentQP) set(off, v uint64)   { q.a.r.word(q.block + off).Store(v) }

func (q *AgentQP) stateWord() uint64 { return stateWord(q.a.gen, q.resetAck, q.state) }

func (q *AgentQP) publishState() { q.set(qState, q.stateWord()) }

// Repairs returns how often housekeeping found the pair's state word
// differing from the agent's view and wrote it again, and what the region
// showed the last time.
func (q *AgentQP) Repairs() (n uint64, showed string) { return q.repairs, q.regionShowed }

func (q *AgentQP) fault(reason string) {
	q.state, q.reason = QPFaulted, reason
	q.faults++
	q.publishState()
}

func (q *AgentQP) fence(reason string) {
	q.state, q.reason = QPFenced, reason
	q.fences++
	q.publishState()
}

func (q *AgentQP) housekeep(now time.Time) {
	switch q.state {
	case QPFree:
		w := q.w(qLease)
		pid := leasePID(w)
		switch {
		case pid == 0:
			if leaseEpoch(w) != q.epoch { // scribbled: restore
				q.a.r.word(q.block+qLease).CompareAndSwap(w, leaseWord(q.epoch, 0))
			}
		case pid == releasedPID:
			// Not a lease a well-behaved host could have taken: fence it,
			// which frees it again with a new epoch.
			q.lease = w
			q.fence(fmt.Sprintf("bad lease word %#x", w))
		default:
			// Bound with whatever epoch the word carries: a host that took
			// a pair whose epoch was scribbled holds a lease all the same
			// (the next free bumps that epoch).
			q.bind(w, now)
		}
	case QPActive, QPFaulted:
		q.checkHolder(now)
		if q.state == QPActive {
			q.checkCQHead()
		}
		if q.state != QPFenced {
			q.checkReset()
		}
	case QPFenced:
		if q.InFlight() == 0 {
			q.free()
		}
	}
}

// bind makes a newly leased pair active. Whatever was left in the pair's
// words (by a former holder or a scribbler) is rewritten first: the
// agent's indices and the host's indices, reset request and sleeping flag,
// so the new holder starts from zero whatever the words said. The holder
// writes nothing but its lease, start time and heartbeat before the pair
// is active.
func (q *AgentQP) bind(w uint64, now time.Time) {
	for _, off := range []uint64{qSQHead, qCQTail, qSQTail, qCQHead, qResetReq, qSleeping} {
		q.set(off, 0)
	}
	q.lease = w
	q.holderStart = q.w(qStart)
	q.startChecked = time.Time{}
	// A pass seconds late (the agent did not run) counts for half the
	// lease timeout at most: the holder, on this machine, most likely did
	// not run either.
	q.holderBeat = BeatWatch{Timeout: q.a.cfg.LeaseTimeout, MaxGap: q.a.cfg.LeaseTimeout / 2}
	q.holderBeat.Reset(now, q.w(qHeartbeat))
	q.sqHead, q.cqTail = 0, 0
	q.seenSQTail, q.seenCQHead = 0, 0
	q.resetSeen, q.resetAck = 0, 0
	q.reason = ""
	q.state = QPActive
	q.publishState()
}

func (q *AgentQP) checkHolder(now time.Time) {
	if w := q.w(qLease); w != q.lease {
		if leasePID(w) == releasedPID && leaseEpoch(w) == leaseEpoch(q.lease) {
			q.fence("released")
		} else {
			q.fence(fmt.Sprintf("lease word changed to %#x", w))
		}
		return
	}
	stale, dead := q.holderBeat.Look(now, q.w(qHeartbeat))
	if dead {
		q.fence(fmt.Sprintf("heartbeat stale for %v", stale.Round(time.Millisecond)))
		return
	}
	if q.holderStart == 0 {
		if q.holderStart = q.w(qStart); q.holderStart != 0 {
			q.startChecked = time.Time{}
		}
	}
	if !q.a.cfg.CheckPIDs {
		return
	}
	pid := leasePID(q.lease)
	if !q.startChecked.IsZero() && now.Sub(q.startChecked) < startCheckEvery {
		// Between the full checks, only whether the pid still exists.
		if pidGone(pid) {
			q.fence(fmt.Sprintf("holder pid %d is gone", pid))
		}
		return
	}
	q.startChecked = now
	switch holderLiveness(pid, q.holderStart) {
	case holderGone:
		q.fence(fmt.Sprintf("holder pid %d is gone", pid))
	case holderSuspect:
		// The pid was probably reused: a holder that still beats keeps
		// its pair, one silent for suspectTimeout loses it.
		if stale > suspectTimeout {
			q.fence(fmt.Sprintf("holder pid %d has another start time and no heartbeat for %v", pid, stale.Round(time.Millisecond)))
		}
	}
}

// checkCQHead validates the host's completion head between Takes, which
// re-read it only when the completion ring looks full.
func (q *AgentQP) checkCQHead() {
	head := q.w(qCQHead)
	if head < q.seenCQHead || head > q.cqTail {
		q.fault(fmt.Sprintf("cq head %d (tail %d, last %d)", head, q.cqTail, q.seenCQHead))
		return
	}
	q.seenCQHead = head
}

func (q *AgentQP) checkReset() {
	req := q.w(qResetReq)
	if req == q.resetSeen || q.InFlight() != 0 {
		return // nothing asked, or wait for the drain
	}
	q.resetSeen = req
	if t, h := q.w(qSQTail), q.w(qCQHead); t != 0 || h != 0 {
		q.fault(fmt.Sprintf("reset with sq tail %d, cq head %d", t, h))
		q.resetAck = uint16(req)
		q.publishState()
		return
	}
	q.sqHead, q.cqTail = 0, 0
	q.seenSQTail, q.seenCQHead = 0, 0
	q.set(qSQHead, 0)
	q.set(qCQTail, 0)
	q.resetAck = uint16(req)
	q.state, q.reason = QPActive, ""
	q.publishState()
}

func (q *AgentQP) free() {
	for _, off := range []uint64{qSQHead, qCQTail, qSQTail, qCQHead, qResetReq, qHeartbeat, qStart} {
		q.set(off, 0)
	}
	q.sqHead, q.cqTail, q.pending = 0, 0, false
	q.epoch = leaseEpoch(q.lease) + 1
	q.lease = 0
	q.holderStart = 0
	q.state = QPFree
	q.publishState()
	q.set(qLease, leaseWord(q.epoch, 0)) // last: only now may a host take it
}

// Take copies up to len(dst) new descriptors out of the submission ring,
// decodes and validates each copy, and returns how many it took. It takes
// only as many as the completion ring has room for, so every descriptor
// taken can be completed. It faults the pair (and returns 0) when the host's
// indices are inconsistent.
func (q *AgentQP) Take(dst []Incoming) int {
	if q.state != QPActive {
		return 0
	}
	// Read the next slot along with the tail, though it is used only once
	// the tail says it holds a descriptor: the two misses of a new
	// submission (the tail, then the slot it covers) then overlap instead
	// of following each other, and a poller that finds it reads a slot it
	// has already fetched.
	if !raceBuild {
		q.fetched = loadWord(q.sq[(q.sqHead&q.mask)*descSize:])
	}
	tail := q.w(qSQTail)
	if tail < q.seenSQTail || tail-q.sqHead > q.mask+1 {
		q.fault(fmt.Sprintf("sq tail %d (head %d, last %d)", tail, q.sqHead, q.seenSQTail))
		return 0
	}
	q.seenSQTail = tail
	if tail == q.sqHead {
		return 0
	}
	// Completions the cq can still take. The host's head is re-read only
	// when the last value seen leaves no room: one cache line less per
	// round trip.
	room := q.mask + 1 - (q.sqHead - q.seenCQHead)
	if room == 0 {
		head := q.w(qCQHead)
		if head < q.seenCQHead || head > q.cqTail {
			q.fault(fmt.Sprintf("cq head %d (tail %d, last %d)", head, q.cqTail, q.seenCQHead))
			return 0
		}
		q.seenCQHead = head
		room = q.mask + 1 - (q.sqHead - head)
	}
	n := min(uint64(len(dst)), tail-q.sqHead, room)
	limit := q.win.Len()
	var raw [wire.DescSize]byte
	for i := uint64(0); i < n; i++ {
		slot := q.sq[((q.sqHead+i)&q.mask)*descSize:][:descSize]
		copyDesc(&raw, slot)
		in := &dst[i]
		in.Err = in.Desc.Unmarshal(raw[:])
		if in.Err == nil {
			in.Err = in.Desc.Validate(limit)
		}
	}
	q.sqHead += n
	q.set(qSQHead, q.sqHead)
	return int(n)
}

// Complete writes the completion of a descriptor taken earlier. The
// completion becomes visible to the host at the next Publish. On a pair that
// is fenced or faulted the completion is counted but not written.
func (q *AgentQP) Complete(d *wire.Desc) {
	if q.InFlight() == 0 {
		panic("ring: Complete without a descriptor in flight")
	}
	if q.state == QPActive {
		d.Marshal(q.cq[(q.cqTail&q.mask)*descSize:])
		q.pending = true
	}
	q.cqTail++
}

// Publish makes completions written since the last Publish visible, and
// rings the holder's completion bell if it sleeps on it.
func (q *AgentQP) Publish() {
	if q.pending && q.state == QPActive {
		publish(q.a.r.word(q.block+qCQTail), q.cqTail)
		if q.w(qSleeping) != 0 {
			bell := q.a.r.word(q.block + qBell)
			bell.Add(1)
			futexWake((*uint64)(unsafe.Pointer(bell)))
		}
	}
	q.pending = false
}

// copyDesc copies one descriptor out of shared memory with atomic 64-bit
// loads, so that a concurrent (hostile) writer is a value the agent then
// validates, never a data race on the agent's side.
func copyDesc(dst *[wire.DescSize]byte, src []byte) {
	for i := 0; i < wire.DescSize; i += 8 {
		binary.NativeEndian.PutUint64(dst[i:], loadWord(src[i:]))
	}
}
