package ring

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/wire"
)

// The tests in this file reproduce what an adversarial client found
// (issue 17): words scribbled on free pairs and on the header, a frozen
// header heartbeat, a completion ring held full, a truncated region file.

// TestScribbledFreePairBindsClean: whatever a scribbler leaves in a free
// pair's words, the next lease binds it promptly and its first ops work.
func TestScribbledFreePairBindsClean(t *testing.T) {
	tests := []struct {
		name string
		off  uint64
		val  uint64
	}{
		{"reset request", qResetReq, 3},
		{"completion tail", qCQTail, 5},
		{"submission head", qSQHead, 9},
		{"submission tail", qSQTail, 2},
		{"completion head", qCQHead, 4},
		{"sleeping flag", qSleeping, 1},
		{"state word", qState, 0xdead_0000_0001},
		{"state word, another generation's free", qState, stateWord(77, 0, QPFree)},
		{"lease epoch", qLease, leaseWord(99, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, a := newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{})
			s := &server{a: a}
			startServer(t, s)
			h, err := Attach(r)
			if err != nil {
				t.Fatal(err)
			}
			h.qp(0).word(tt.off).Store(tt.val)
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var q *HostQP
			for q == nil {
				if q, err = h.Lease(ctx, -1); err != nil && ctx.Err() != nil {
					t.Fatalf("lease after %v: %v", time.Since(t0), err)
				}
			}
			out := make([]wire.Desc, 1)
			for i := range 3 {
				if err := roundTrip(q, []wire.Desc{{Op: wire.OpPing, Arg0: uint64(i), Tag: uint64(i)}}, out); err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
				if out[0].Status != wire.StatusOK || out[0].Arg0 != uint64(i) {
					t.Fatalf("op %d: %+v", i, out[0])
				}
			}
			t.Logf("bound and served after %v", time.Since(t0).Round(time.Millisecond))
		})
	}
}

// TestEveryFreeStateWordOverwritten: with every free pair's state word
// scribbled, leases still succeed (the agent republishes them), and the
// repairs are counted.
func TestEveryFreeStateWordOverwritten(t *testing.T) {
	r, a := newRegion(t, Geometry{QueuePairs: 16, Entries: 4, WindowSize: 4096}, AgentConfig{})
	s := &server{a: a}
	startServer(t, s)
	h, err := Attach(r)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		h.qp(i).word(qState).Store(stateWord(h.gen, 0, QPActive))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for {
		q, err := h.Lease(ctx, -1)
		if err == nil {
			defer q.Release()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no lease: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var repairs uint64
	for _, q := range a.QueuePairs() {
		n, showed := q.Repairs()
		repairs += n
		if n > 0 && showed == "" {
			t.Errorf("pair %d repaired %d times without saying what it saw", q.Index(), n)
		}
	}
	if repairs < 16 {
		t.Fatalf("%d state words repaired, want 16", repairs)
	}
}

// TestScribbledHeaderRepaired: with any header field overwritten, a new
// client attaches once the agent's housekeeping has run again.
func TestScribbledHeaderRepaired(t *testing.T) {
	tests := []struct {
		name string
		off  uint64
		val  uint64
		is32 bool
	}{
		{"magic", hMagic, 1, false},
		{"version", hVersion, 9, true},
		{"queue pairs", hQPs, 3, true},
		{"entries", hEntries, 2, true},
		{"window", hWindow, 8192, false},
		{"arena", hArena, 0, false},
		{"generation", hGeneration, 12345, false},
		{"state", hState, agentStopped, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, a := newRegion(t, smallGeo, AgentConfig{})
			s := &server{a: a}
			startServer(t, s)
			if tt.is32 {
				r.setU32(tt.off, uint32(tt.val))
			} else {
				r.word(tt.off).Store(tt.val)
			}
			deadline := time.Now().Add(2 * time.Second)
			for {
				h, err := Attach(r)
				if err == nil {
					if h.Generation() != a.Generation() {
						t.Fatalf("attached to generation %d, agent's is %d", h.Generation(), a.Generation())
					}
					q, err := h.Lease(context.Background(), -1)
					if err != nil {
						t.Fatal(err)
					}
					q.Release()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("header never repaired: %v", err)
				}
				time.Sleep(time.Millisecond)
			}
			s.mu.Lock()
			n := a.HeaderRepairs()
			s.mu.Unlock()
			if n == 0 {
				t.Fatal("repair not counted")
			}
		})
	}
}

// TestPairCarriesAgentHeartbeat: an attached holder sees the agent's
// heartbeat in its own pair's block advance while the header's is held
// still by a scribbler.
func TestPairCarriesAgentHeartbeat(t *testing.T) {
	r, a := newRegion(t, smallGeo, AgentConfig{})
	s := &server{a: a}
	startServer(t, s)
	_, q := mustLease(t, r)
	stop := make(chan struct{})
	frozen := make(chan struct{})
	go func() {
		defer close(frozen)
		for {
			select {
			case <-stop:
				return
			default:
				r.word(hHeartbeat).Store(42)
			}
		}
	}()
	b0 := q.AgentHeartbeat()
	time.Sleep(100 * time.Millisecond)
	b1 := q.AgentHeartbeat()
	close(stop)
	<-frozen
	if b1 == b0 {
		t.Fatalf("pair's agent heartbeat stood at %d for 100 ms", b0)
	}
}

// TestFullCompletionRingIsNotWork: a holder that never consumes its
// completions and submits one more leaves the agent nothing it can do:
// HasWork says so, and nothing is taken until the holder moves its head.
func TestFullCompletionRingIsNotWork(t *testing.T) {
	r, a := newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{})
	q := leaseHousekeeping(t, r, a)
	aq := a.QueuePairs()[0]
	in := make([]Incoming, 16)
	ds := make([]wire.Desc, 8)
	for i := range ds {
		ds[i] = wire.Desc{Op: wire.OpPing, Tag: uint64(i)}
	}
	if n := q.Submit(ds); n != 8 {
		t.Fatalf("submitted %d", n)
	}
	if n := aq.Take(in); n != 8 {
		t.Fatalf("took %d", n)
	}
	for i := range 8 {
		aq.Complete(&in[i].Desc)
	}
	aq.Publish()
	// The holder submits one more without polling: the word is written
	// directly, as a hostile holder would (Submit checks room).
	ds[0].Marshal(q.sq[0:])
	q.word(qSQTail).Store(9)
	if aq.HasWork() {
		t.Fatal("HasWork with the completion ring full")
	}
	if n := aq.Take(in); n != 0 {
		t.Fatalf("took %d with no room for completions", n)
	}
	if st, why := aq.State(); st != QPActive {
		t.Fatalf("pair %s (%s): a full ring is not a fault", st, why)
	}
	out := make([]wire.Desc, 1)
	if n, err := q.Poll(out); n != 1 || err != nil {
		t.Fatalf("poll: %d %v", n, err)
	}
	if !aq.HasWork() {
		t.Fatal("no work once the holder freed a completion slot")
	}
	if n := aq.Take(in); n != 1 {
		t.Fatalf("took %d after the head moved", n)
	}
}

// TestLeaseMovesOnPastAPairThatDoesNotBind: a pair the agent does not bind
// in time is given back and the next one leased.
func TestLeaseMovesOnPastAPairThatDoesNotBind(t *testing.T) {
	setBindWait(t, 200*time.Millisecond)
	r, a := newRegion(t, Geometry{QueuePairs: 2, Entries: 4, WindowSize: 4096}, AgentConfig{})
	// An agent that serves only pair 1: pair 0 stays free in the region
	// but is never bound.
	everyMillisecond(t, func() { a.qps[1].housekeep(time.Now()) })
	h, err := Attach(r)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Lease(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if q.Index() != 1 {
		t.Fatalf("leased pair %d, want 1", q.Index())
	}
}

// TestTruncatedRegionFaultsAreCaught: a region file cut short under the
// mapping makes the agent's accesses fault; CatchFault turns that into
// ErrRegionLost, Lost reports it, and Rebuild restores the file and
// formats it with the next generation, to which a new host attaches.
func TestTruncatedRegionFaultsAreCaught(t *testing.T) {
	r, a := newFileRegion(t, Geometry{QueuePairs: 2, Entries: 8, WindowSize: 64 << 10}, AgentConfig{})
	if a.Lost() {
		t.Fatal("lost before anything happened")
	}
	if err := os.Truncate(r.Path(), 4096); err != nil {
		t.Fatal(err)
	}
	if !a.Lost() {
		t.Fatal("Lost is false after the file was cut to 4096 bytes")
	}
	err := r.CatchFault(func() { a.Housekeep(time.Now()) })
	if !errors.Is(err, ErrRegionLost) {
		t.Fatalf("housekeeping on a truncated region: %v, want ErrRegionLost", err)
	}
	b, err := a.Rebuild()
	if err != nil {
		t.Fatal(err)
	}
	if b.Generation() != a.Generation()+1 {
		t.Fatalf("rebuilt generation %d after %d", b.Generation(), a.Generation())
	}
	s := &server{a: b}
	startServer(t, s)
	_, q := mustLease(t, r)
	out := make([]wire.Desc, 1)
	if err := roundTrip(q, []wire.Desc{{Op: wire.OpPing, Arg0: 5}}, out); err != nil || out[0].Arg0 != 5 {
		t.Fatalf("after rebuild: %v %+v", err, out[0])
	}
	// A fault anywhere else is not swallowed.
	defer func() {
		if recover() == nil {
			t.Fatal("a nil dereference was swallowed")
		}
	}()
	var p *int
	r.CatchFault(func() { _ = *p })
}

// TestLeaseGivesUpOnADeadAgent: a region whose agent was killed (SIGKILL:
// it still reads "ready") binds no pair. Lease must say so once the
// agent's heartbeat has stood still for the host's agent timeout, not
// wait out the bind wait of every pair in turn (16 × 3 s by default) or
// the caller's whole deadline.
func TestLeaseGivesUpOnADeadAgent(t *testing.T) {
	// The bind wait outlasts the test: only the heartbeat can end it.
	setBindWait(t, time.Hour)
	r, _ := newRegion(t, Geometry{QueuePairs: 4, Entries: 4, WindowSize: 4096}, AgentConfig{})
	h, err := Attach(r)
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 300 * time.Millisecond
	h.SetAgentTimeout(timeout)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := h.Lease(ctx, -1)
	if err == nil {
		t.Fatalf("leased pair %d of a dead agent", q.Index())
	}
	if !errors.Is(err, ErrAgentSilent) || !errors.Is(err, wire.StatusUnavailable) {
		t.Fatalf("lease from a dead agent: %v, want ErrAgentSilent and StatusUnavailable", err)
	}
	// Nothing stranded: every pair is free again for the next agent.
	for i := range 4 {
		if w := h.qp(i).word(qLease).Load(); leasePID(w) != releasedPID && leasePID(w) != 0 {
			t.Errorf("pair %d left leased to pid %d", i, leasePID(w))
		}
	}
}

// TestLeaseMovesOnPastAFrozenPairHeartbeat: a host that holds a free
// pair's copy of the agent's heartbeat still (and keeps it from binding)
// must not make Lease take the agent for dead while the header's
// heartbeat moves: Lease gives that pair up after the agent timeout and
// leases the next.
func TestLeaseMovesOnPastAFrozenPairHeartbeat(t *testing.T) {
	// The bind wait outlasts the test: only the heartbeat can give pair 0 up.
	setBindWait(t, time.Hour)
	r, a := newRegion(t, Geometry{QueuePairs: 2, Entries: 4, WindowSize: 4096}, AgentConfig{})
	// An agent that serves only pair 1 and beats in the header and in
	// pair 1's block; pair 0's copy of its heartbeat stands still.
	beat := uint64(100)
	everyMillisecond(t, func() {
		beat++
		r.word(hHeartbeat).Store(beat)
		a.qps[1].set(qAgentBeat, beat)
		a.qps[1].housekeep(time.Now())
	})
	h, err := Attach(r)
	if err != nil {
		t.Fatal(err)
	}
	h.SetAgentTimeout(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a failure, not a hang
	defer cancel()
	q, err := h.Lease(ctx, 0)
	if err != nil {
		t.Fatalf("lease beside a pair whose heartbeat copy stood still: %v", err)
	}
	if q.Index() != 1 {
		t.Fatalf("leased pair %d, want 1", q.Index())
	}
}
