package ring

import (
	"bufio"
	"context"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/wire"
)

var smallGeo = Geometry{QueuePairs: 4, Entries: 16, WindowSize: 64 << 10}

func TestLayout(t *testing.T) {
	tests := []struct {
		name string
		g    Geometry
		ok   bool
	}{
		{"small", smallGeo, true},
		{"default-ish", Geometry{16, 256, 4 << 20}, true},
		{"entries not power of two", Geometry{4, 12, 4096}, false},
		{"one entry", Geometry{4, 1, 4096}, false},
		{"no pairs", Geometry{0, 16, 4096}, false},
		{"too many pairs", Geometry{MaxQueuePairs + 1, 16, 4096}, false},
		{"window not page multiple", Geometry{4, 16, 4097}, false},
		{"window too large", Geometry{1, 16, 1 << 32}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := newLayout(tt.g)
			if (err == nil) != tt.ok {
				t.Fatalf("newLayout(%+v) err = %v", tt.g, err)
			}
			if err != nil {
				return
			}
			// Every piece page-aligned, in order, without overlap.
			if l.rings%pageSize != 0 || l.arena%pageSize != 0 || l.rings < l.block(l.QueuePairs-1)+qpBlockSize ||
				l.arena < l.cq(l.QueuePairs-1)+l.ringBytes || l.size != l.window(l.QueuePairs-1)+l.WindowSize {
				t.Fatalf("bad layout %+v", l)
			}
		})
	}
	g, err := GeometryForSize(64<<20, 16, 256)
	if err != nil {
		t.Fatal(err)
	}
	if sz, _ := g.Size(); sz > 64<<20 || g.WindowSize < 3<<20 {
		t.Fatalf("GeometryForSize(64 MiB) = %+v (size %d)", g, sz)
	}
	if _, err := GeometryForSize(8192, 16, 256); !errors.Is(err, ErrGeometry) {
		t.Fatalf("tiny region: %v", err)
	}
}

func TestAttachChecksHeader(t *testing.T) {
	tests := []struct {
		name   string
		off    uint64
		val    uint64
		is32   bool
		expect error
	}{
		{"magic", hMagic, 1, false, ErrNotFormatted},
		{"state", hState, agentFormatting, false, ErrNotFormatted},
		{"version", hVersion, Version + 1, true, ErrVersion},
		{"pairs", hQPs, 5, true, ErrGeometry},
		{"pairs zero", hQPs, 0, true, ErrGeometry},
		{"entries", hEntries, 1 << 20, true, ErrGeometry},
		{"window huge", hWindow, 1 << 40, false, ErrGeometry},
		{"arena", hArena, 12345, false, ErrGeometry},
		{"region size", hRegion, 1 << 50, false, ErrGeometry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newRegion(t, smallGeo, AgentConfig{})
			if _, err := Attach(r); err != nil {
				t.Fatalf("clean header: %v", err)
			}
			if tt.is32 {
				r.setU32(tt.off, uint32(tt.val))
			} else {
				r.word(tt.off).Store(tt.val)
			}
			if _, err := Attach(r); !errors.Is(err, tt.expect) {
				t.Fatalf("Attach = %v, want %v", err, tt.expect)
			}
		})
	}
}

func TestPingAndChecksumInProcess(t *testing.T) {
	r, a := newRegion(t, smallGeo, AgentConfig{})
	startServer(t, &server{a: a})
	_, q := mustLease(t, r)
	win := q.Window()
	for i := range win[:1000] {
		win[i] = byte(i * 7)
	}
	ds := []wire.Desc{
		{Op: wire.OpPing, Tag: 1, Arg0: 42},
		{Op: wire.OpChecksum, Tag: 2, NSpan: 1, Spans: [4]wire.Span{{Off: 0, Len: 1000}}},
		{Op: wire.OpChecksum, Tag: 3, NSpan: 1, Spans: [4]wire.Span{{Off: 1, Len: uint32(len(win))}}}, // past the window
		{Op: 0x7777, Tag: 4},
	}
	out := make([]wire.Desc, len(ds))
	if err := roundTrip(q, ds, out); err != nil {
		t.Fatal(err)
	}
	byTag := map[uint64]wire.Desc{}
	for _, c := range out {
		byTag[c.Tag] = c
	}
	if c := byTag[1]; c.Status != wire.StatusOK || c.Arg0 != 42 || c.Op != wire.OpPing {
		t.Fatalf("ping: %+v", c)
	}
	if c := byTag[2]; c.Status != wire.StatusOK || uint32(c.Arg0) != crc32.Checksum(win[:1000], castagnoli) {
		t.Fatalf("checksum: %+v", c)
	}
	if c := byTag[3]; c.Status != wire.StatusBadSpan {
		t.Fatalf("span past window: %+v", c)
	}
	if c := byTag[4]; c.Status != wire.StatusBadOp {
		t.Fatalf("unknown op: %+v", c)
	}
	if err := q.Check(); err != nil {
		t.Fatalf("bad descriptors must not fault the pair: %v", err)
	}
}

// TestStagedAccessorGivesSameAnswers runs the checksum service over staged
// copies (standing for DMA) and over the mapping: the answers must agree.
func TestStagedAccessorGivesSameAnswers(t *testing.T) {
	r, a := newRegion(t, smallGeo, AgentConfig{})
	var staged sync.Map
	srv := &server{a: a, accessor: func(q *AgentQP) Accessor {
		s, _ := staged.LoadOrStore(q.Index(), &StagedWindow{Under: q.Window(), Chunk: 100})
		return s.(*StagedWindow)
	}}
	startServer(t, srv)
	_, q := mustLease(t, r)
	win := q.Window()
	for i := range win {
		win[i] = byte(i ^ i>>8)
	}
	ds := []wire.Desc{{Op: wire.OpChecksum, Tag: 1, NSpan: 1, Spans: [4]wire.Span{{Off: 3, Len: 40000}}}}
	out := make([]wire.Desc, 1)
	if err := roundTrip(q, ds, out); err != nil {
		t.Fatal(err)
	}
	if uint32(out[0].Arg0) != crc32.Checksum(win[3:40003], castagnoli) {
		t.Fatal("staged checksum differs")
	}
	s, _ := staged.Load(q.Index())
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if sw := s.(*StagedWindow); sw.Transfers != 400 || sw.Bytes != 40000 {
		t.Fatalf("staged %d transfers of %d bytes, want 400 of 40000", sw.Transfers, sw.Bytes)
	}
}

func TestAccessorBounds(t *testing.T) {
	mem := make([]byte, 100)
	for _, acc := range []Accessor{NewMappedWindow(mem), &StagedWindow{Under: NewMappedWindow(mem)}} {
		if err := acc.ReadAt(make([]byte, 10), 95); !errors.Is(err, wire.ErrSpan) {
			t.Errorf("%T read past end: %v", acc, err)
		}
		if err := acc.WriteAt(make([]byte, 1), 1<<63); !errors.Is(err, wire.ErrSpan) {
			t.Errorf("%T write far past end: %v", acc, err)
		}
		if err := acc.WriteAt([]byte{1, 2}, 98); err != nil {
			t.Errorf("%T write at edge: %v", acc, err)
		}
	}
	if _, ok := NewMappedWindow(mem).View(wire.Span{Off: 99, Len: 2}); ok {
		t.Fatal("view past end")
	}
}

// TestRingProperty: every submitted descriptor completes exactly once, in
// any interleaving of batch sizes on both sides and in any completion order.
func TestRingProperty(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		r, a := newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{})
		hq := leaseHousekeeping(t, r, a)
		aq := a.QueuePairs()[0]
		rng := rand.New(rand.NewPCG(seed, 7))
		const total = 2000
		next := uint64(0)
		seen := make(map[uint64]int)
		var taken []Incoming
		in := make([]Incoming, 8)
		out := make([]wire.Desc, 8)
		for steps := 0; len(seen) < total; steps++ {
			if steps > 100000 {
				t.Fatalf("seed %d: stuck with %d of %d", seed, len(seen), total)
			}
			switch rng.IntN(3) {
			case 0: // host submits a random batch
				k := rng.IntN(9)
				batch := make([]wire.Desc, 0, k)
				for i := 0; i < k && next < total; i++ {
					batch = append(batch, wire.Desc{Op: wire.OpPing, Tag: next})
					next++
				}
				n := hq.Submit(batch)
				next -= uint64(len(batch) - n)
			case 1: // agent takes some and completes a random subset in random order
				n := aq.Take(in[:rng.IntN(9)])
				taken = append(taken, in[:n]...)
				rng.Shuffle(len(taken), func(i, j int) { taken[i], taken[j] = taken[j], taken[i] })
				c := rng.IntN(len(taken) + 1)
				for _, x := range taken[:c] {
					d := x.Desc
					aq.Complete(&d)
				}
				taken = taken[c:]
				aq.Publish()
			case 2: // host polls a random amount
				n, err := hq.Poll(out[:rng.IntN(9)])
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				for _, c := range out[:n] {
					seen[c.Tag]++
					if seen[c.Tag] > 1 || c.Tag >= next {
						t.Fatalf("seed %d: tag %d completed twice or never submitted", seed, c.Tag)
					}
				}
			}
			if hq.InFlight() > hq.Entries() || aq.InFlight() > uint64(hq.Entries()) {
				t.Fatalf("seed %d: over capacity", seed)
			}
		}
	}
}

// TestConcurrentRace runs host and agent in separate goroutines under -race.
func TestConcurrentRace(t *testing.T) {
	r, a := newRegion(t, smallGeo, AgentConfig{})
	startServer(t, &server{a: a, reverse: true})
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for c := 0; c < 3; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := Attach(r)
			if err != nil {
				errs <- err
				return
			}
			q, err := h.Lease(context.Background(), -1)
			if err != nil {
				errs <- err
				return
			}
			defer q.Release()
			ds := make([]wire.Desc, 40)
			out := make([]wire.Desc, 40)
			for round := 0; round < 100; round++ {
				for i := range ds {
					ds[i] = wire.Desc{Op: wire.OpPing, Tag: uint64(round*100 + i), Arg0: uint64(i)}
				}
				if err := roundTrip(q, ds, out); err != nil {
					errs <- err
					return
				}
				for _, o := range out {
					if o.Status != wire.StatusOK || o.Arg0 != o.Tag%100 {
						errs <- errors.New("wrong completion")
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestFaultAndReset(t *testing.T) {
	tests := []struct {
		name  string
		off   uint64
		value uint64 // after a round trip of two: sq tail 2, cq head 2
	}{
		{"sq tail backwards", qSQTail, 1},
		{"sq tail a ring ahead", qSQTail, 2 + 16 + 1},
		{"sq tail torn", qSQTail, 2 | 1<<40},
		{"cq head past tail", qCQHead, 7},
		{"cq head backwards", qCQHead, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, a := newRegion(t, smallGeo, AgentConfig{})
			s := &server{a: a}
			startServer(t, s)
			_, q := mustLease(t, r)
			_, neighbour := mustLease(t, r)
			out := make([]wire.Desc, 4)
			for i := 0; i < 2; i++ {
				if err := roundTrip(q, []wire.Desc{{Op: wire.OpPing}}, out); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(20 * time.Millisecond) // housekeeping has seen cq head 2
			q.word(tt.off).Store(tt.value)
			if tt.off == qCQHead {
				q.Submit([]wire.Desc{{Op: wire.OpPing}}) // the agent reads cq head when it takes work
			}
			deadline := time.Now().Add(5 * time.Second)
			for q.Check() == nil {
				if time.Now().After(deadline) {
					t.Fatal("pair not faulted")
				}
				time.Sleep(time.Millisecond)
			}
			if err := q.Check(); !errors.Is(err, wire.StatusFaulted) {
				t.Fatalf("Check = %v, want faulted", err)
			}
			if err := roundTrip(neighbour, []wire.Desc{{Op: wire.OpPing, Tag: 9}}, out); err != nil || out[0].Tag != 9 {
				t.Fatalf("neighbour disturbed: %v", err)
			}
			if err := q.Reset(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := roundTrip(q, []wire.Desc{{Op: wire.OpPing, Tag: 7}}, out); err != nil || out[0].Tag != 7 {
				t.Fatalf("after reset: %v %+v", err, out[0])
			}
		})
	}
}

func TestLeaseLifecycle(t *testing.T) {
	r, a := newRegion(t, Geometry{QueuePairs: 2, Entries: 4, WindowSize: 4096}, AgentConfig{LeaseTimeout: 150 * time.Millisecond})
	s := &server{a: a}
	startServer(t, s)
	h, q1 := mustLease(t, r)
	q2, err := h.Lease(context.Background(), -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Lease(context.Background(), -1); !errors.Is(err, ErrNoQueuePair) {
		t.Fatalf("third lease: %v", err)
	}
	epoch := leaseEpoch(q1.lease)
	q1.Release()
	var q3 *HostQP
	deadline := time.Now().Add(5 * time.Second)
	for q3 == nil {
		q3, err = h.Lease(context.Background(), q1.Index())
		if time.Now().After(deadline) {
			t.Fatalf("released pair never came back: %v", err)
		}
		q2.Beat()
		time.Sleep(5 * time.Millisecond)
	}
	if q3.Index() != q1.Index() || leaseEpoch(q3.lease) != epoch+1 {
		t.Fatalf("re-lease: pair %d epoch %d, want pair %d epoch %d", q3.Index(), leaseEpoch(q3.lease), q1.Index(), epoch+1)
	}
	if err := q1.Check(); !errors.Is(err, wire.StatusFenced) {
		t.Fatalf("old holder sees %v, want fenced", err)
	}
	// q2 stops beating: fenced by heartbeat after LeaseTimeout.
	deadline = time.Now().Add(5 * time.Second)
	for q2.Check() == nil {
		q3.Beat()
		if time.Now().After(deadline) {
			t.Fatal("stale holder never fenced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := q2.Check(); !errors.Is(err, wire.StatusFenced) {
		t.Fatalf("stale holder sees %v", err)
	}
	if err := q3.Check(); err != nil {
		t.Fatalf("beating holder disturbed: %v", err)
	}
}

func TestRestartIsVisible(t *testing.T) {
	r, a := newRegion(t, smallGeo, AgentConfig{})
	s := &server{a: a}
	startServer(t, s)
	h, q := mustLease(t, r)
	s.mu.Lock()
	a2, err := Format(r, AgentConfig{Geometry: smallGeo})
	s.a = a2
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if a2.Generation() != a.Generation()+1 {
		t.Fatalf("generation %d after %d", a2.Generation(), a.Generation())
	}
	if err := q.Check(); !errors.Is(err, wire.StatusRestarted) || !wire.IsRetryable(err) {
		t.Fatalf("Check after restart = %v", err)
	}
	if !h.AgentStopped() {
		t.Fatal("host did not notice the new generation")
	}
	_, q2 := mustLease(t, r)
	out := make([]wire.Desc, 1)
	if err := roundTrip(q2, []wire.Desc{{Op: wire.OpPing, Tag: 5}}, out); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	a2.Stop()
	s.mu.Unlock()
	if err := q2.Check(); !errors.Is(err, wire.StatusUnavailable) {
		t.Fatalf("after stop: %v", err)
	}
}

func TestTwoProcesses(t *testing.T) {
	r, a := newFileRegion(t, smallGeo, AgentConfig{CheckPIDs: true})
	startServer(t, &server{a: a})
	var cmds []*strings.Builder
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		var out strings.Builder
		cmds = append(cmds, &out)
		cmd := helperCmd(t, "client", r.Path())
		cmd.Env = append(cmd.Env, "HEC_RING_OPS=2000")
		cmd.Stdout = &out
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Run(); err != nil {
				t.Errorf("client process: %v", err)
			}
		}()
	}
	wg.Wait()
	for _, o := range cmds {
		if strings.TrimSpace(o.String()) != "ok" {
			t.Fatalf("client said %q", o.String())
		}
	}
}

func TestLeaseReclaimAfterKill9(t *testing.T) {
	tests := []struct {
		name string
		cfg  AgentConfig
	}{
		{"pid check", AgentConfig{CheckPIDs: true, LeaseTimeout: time.Hour}},
		{"heartbeat only", AgentConfig{LeaseTimeout: 300 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, a := newFileRegion(t, Geometry{QueuePairs: 1, Entries: 4, WindowSize: 4096}, tt.cfg)
			s := &server{a: a}
			startServer(t, s)
			cmd := helperCmd(t, "hold", r.Path())
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line := readLine(bufio.NewScanner(stdout)); line != "leased 0" {
				cmd.Process.Kill()
				t.Fatalf("helper said %q", line)
			}
			h, err := Attach(r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.Lease(context.Background(), -1); !errors.Is(err, ErrNoQueuePair) {
				t.Fatalf("lease while held: %v", err)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			start := time.Now()
			var q *HostQP
			for q == nil {
				if time.Since(start) > 10*time.Second {
					t.Fatal("dead holder's pair never reclaimed")
				}
				time.Sleep(5 * time.Millisecond)
				q, _ = h.Lease(context.Background(), -1)
			}
			t.Logf("reclaimed after %v", time.Since(start).Round(time.Millisecond))
			out := make([]wire.Desc, 1)
			if err := roundTrip(q, []wire.Desc{{Op: wire.OpPing, Tag: 3}}, out); err != nil || out[0].Tag != 3 {
				t.Fatalf("reclaimed pair: %v %+v", err, out[0])
			}
			s.mu.Lock()
			_, fences := a.QueuePairs()[0].Counters()
			s.mu.Unlock()
			if fences != 1 {
				t.Fatalf("%d fences, want 1", fences)
			}
		})
	}
}

// TestHostileWriter: another process scribbles over the header, every other
// pair's control block and rings, and submits garbage on its own pair, while
// a well-behaved pair runs checksums whose answers must all be right.
func TestHostileWriter(t *testing.T) {
	dur := 3 * time.Second
	if testing.Short() {
		dur = time.Second
	}
	r, a := newFileRegion(t, Geometry{QueuePairs: 4, Entries: 32, WindowSize: 64 << 10}, AgentConfig{CheckPIDs: true})
	srv := &server{a: a}
	startServer(t, srv)
	_, q := mustLease(t, r)
	cmd := helperCmd(t, "hostile", r.Path())
	cmd.Env = append(cmd.Env, "HEC_RING_VICTIM="+itoa(q.Index()), "HEC_RING_FOR="+dur.String())
	var hostileOut strings.Builder
	cmd.Stdout = &hostileOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	win := q.Window()
	rng := rand.New(rand.NewPCG(1, 2))
	ds := make([]wire.Desc, 8)
	out := make([]wire.Desc, 8)
	ops := 0
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var hostileErr error
loop:
	for {
		select {
		case hostileErr = <-done:
			break loop
		default:
		}
		want := map[uint64]uint32{}
		for i := range ds {
			off, l := uint32(i*8192), uint32(rng.IntN(8192))
			for j := off; j < off+l; j += 4 {
				win[j] = byte(rng.Uint32())
			}
			tag := uint64(ops + i)
			ds[i] = wire.Desc{Op: wire.OpChecksum, Tag: tag, NSpan: 1, Spans: [4]wire.Span{{Off: off, Len: l}}}
			want[tag] = crc32.Checksum(win[off:off+l], castagnoli)
		}
		if err := roundTrip(q, ds, out); err != nil {
			t.Fatalf("well-behaved pair after %d ops: %v", ops, err)
		}
		for _, c := range out {
			if c.Status != wire.StatusOK || uint32(c.Arg0) != want[c.Tag] {
				t.Fatalf("tag %d: status %s, crc %#x want %#x", c.Tag, c.Status, c.Arg0, want[c.Tag])
			}
		}
		ops += len(ds)
		q.Beat()
	}
	if hostileErr != nil {
		t.Fatalf("hostile process: %v", hostileErr)
	}
	var faults, fences uint64
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, p := range a.QueuePairs() {
		f, fe := p.Counters()
		faults += f
		fences += fe
	}
	t.Logf("well-behaved ops %d; hostile: %s; faults %d, fences %d", ops, strings.TrimSpace(hostileOut.String()), faults, fences)
	if ops == 0 || faults+fences == 0 {
		t.Fatalf("test did nothing: %d ops, %d faults, %d fences", ops, faults, fences)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

func TestAllocator(t *testing.T) {
	a := NewAllocator(1024)
	x, err := a.Alloc(100) // rounds to 128
	if err != nil || x != 0 {
		t.Fatal(x, err)
	}
	y, _ := a.Alloc(64)
	z, _ := a.Alloc(800)
	if y != 128 || z != 192 {
		t.Fatalf("offsets %d %d", y, z)
	}
	if _, err := a.Alloc(64); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("full: %v", err)
	}
	if err := a.Free(5); err == nil {
		t.Fatal("free of unallocated offset accepted")
	}
	for _, off := range []uint64{y, x, z} {
		if err := a.Free(off); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Free(x); err == nil {
		t.Fatal("double free accepted")
	}
	if len(a.free) != 1 || a.Available() != 1024 {
		t.Fatalf("not coalesced: %+v", a.free)
	}
	if _, err := a.Alloc(2048); !errors.Is(err, ErrNoSpace) {
		t.Fatal("oversize alloc")
	}
}

func TestWaiterNeverOversubscribesSpinners(t *testing.T) {
	var wg sync.WaitGroup
	var maxSeen int32
	var mu sync.Mutex
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w Waiter
			for k := 0; k < 300; k++ {
				w.Wait()
				if n := spinners.Load(); n > 0 {
					mu.Lock()
					maxSeen = max(maxSeen, n)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if limit := int32(runtimeProcs()); maxSeen > limit {
		t.Fatalf("%d spinners with %d procs", maxSeen, limit)
	}
	if spinners.Load() != 0 {
		t.Fatalf("spinner count leaked: %d", spinners.Load())
	}
}

// TestWaiterSleepNow: a waiter told to sleep at once neither spins nor
// yields: its first wait is a sleep of the shortest time, doubling after;
// Reset brings back the spin.
func TestWaiterSleepNow(t *testing.T) {
	var slept []time.Duration
	w := Waiter{Sleep: func(d time.Duration) { slept = append(slept, d) }}
	w.SleepNow()
	if !w.Idle() {
		t.Fatal("not in the sleeping phase after SleepNow")
	}
	w.Wait()
	w.Wait()
	if len(slept) != 2 || slept[0] != minSleep || slept[1] != 2*minSleep {
		t.Fatalf("slept %v, want [%v %v]", slept, minSleep, 2*minSleep)
	}
	w.Reset()
	w.Wait()
	if w.Idle() || len(slept) != 2 {
		t.Fatalf("after Reset: idle %v, slept %v: want a spin", w.Idle(), slept)
	}
}

type leaveCount int

func (n *leaveCount) LeaveSpin() { *n++ }

// TestWaiterLeave: Leave runs once, when the waiter first stops spinning
// (before it yields or sleeps), whichever way it stops: its spin ran out,
// SleepNow, or more spinners than procs. A waiter that finds work while
// it spins never calls it.
func TestWaiterLeave(t *testing.T) {
	tests := []struct {
		name  string
		setup func(w *Waiter)
		waits int
		busy  bool // hold every spinning slot
		want  int
	}{
		{"spins, then yields", func(*Waiter) {}, 0, false, 1},
		{"SleepNow", func(w *Waiter) { w.SleepNow() }, 3, false, 1},
		{"too many spinners", func(*Waiter) {}, 1, true, 1},
		{"work found within the spin", func(*Waiter) {}, 3, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls leaveCount
			w := Waiter{Leave: &calls, Sleep: func(time.Duration) {}}
			tt.setup(&w)
			if tt.busy {
				spinners.Add(maxSpins)
				defer spinners.Add(-maxSpins)
			}
			if tt.waits > 0 {
				for range tt.waits {
					w.Wait()
				}
			} else {
				for t0 := time.Now(); w.phase == 0; {
					w.Wait()
					if time.Since(t0) > 10*time.Second {
						t.Fatal("still spinning after 10 s")
					}
				}
				for range 100 { // on through the yields
					w.Wait()
				}
			}
			if int(calls) != tt.want {
				t.Fatalf("Leave called %d times, want %d", calls, tt.want)
			}
		})
	}
}

func TestHolderLiveness(t *testing.T) {
	if os.Getenv("HEC_TEST_EXEC") != "" {
		t.Skip("under qemu-user /proc/self/stat is synthesised by the emulator; start times are not comparable")
	}
	self := uint32(os.Getpid())
	tests := []struct {
		name  string
		pid   uint32
		start uint64
		want  liveness
	}{
		{"self, start unknown", self, 0, holderLives},
		{"self, right start", self, selfStart(), holderLives},
		{"self, other start (pid reused)", self, selfStart() + 1, holderSuspect},
		{"no such pid", 1<<22 + 12345, 0, holderGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := holderLiveness(tt.pid, tt.start); got != tt.want {
				t.Fatalf("holderLiveness = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestLeaseWaitsForAReleasedPair: every pair taken, one released; the
// next Lease, called at once, gets it (the agent fences and frees it at
// its next housekeeping) instead of failing with ErrNoQueuePair — a CLI
// run right after another one exited found no pair that way. With every
// pair held and none released, Lease still fails.
func TestLeaseWaitsForAReleasedPair(t *testing.T) {
	r, a := newRegion(t, Geometry{QueuePairs: 2, Entries: 4, WindowSize: 4096}, AgentConfig{LeaseTimeout: time.Second})
	startServer(t, &server{a: a})
	h, q1 := mustLease(t, r)
	if _, err := h.Lease(context.Background(), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Lease(context.Background(), -1); !errors.Is(err, ErrNoQueuePair) {
		t.Fatalf("third lease with both held: %v", err)
	}
	for range 20 {
		q1.Release()
		q, err := h.Lease(context.Background(), -1)
		if err != nil {
			t.Fatalf("lease right after a release: %v", err)
		}
		q1 = q
	}
}
