package rail

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseChoice(t *testing.T) {
	tests := []struct {
		in      string
		allowed []string
		want    []string // nil: an error
	}{
		{"host", nil, []string{Host}},
		{" DPU ", nil, []string{DPU}},
		{"auto", nil, []string{Auto}},
		{"host,dpu,host,auto", nil, []string{Host, DPU, Auto}},
		{"gpu", nil, nil},
		{"", nil, nil},
		{"host,", nil, nil},
		{"host", []string{DPU, Auto}, nil},
		{"auto", []string{DPU, Auto}, []string{Auto}},
	}
	for _, tt := range tests {
		got, err := ParseChoices(tt.in, tt.allowed...)
		if tt.want == nil {
			if !errors.Is(err, ErrChoice) {
				t.Errorf("ParseChoices(%q, %v) = %v, %v; want ErrChoice", tt.in, tt.allowed, got, err)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Errorf("ParseChoices(%q, %v) = %v, %v; want %v", tt.in, tt.allowed, got, err, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("ParseChoices(%q) = %v, want %v", tt.in, got, tt.want)
			}
		}
	}
}

// TestExecuteRunsSharesAtOnce: every share runs once on its rail's runner
// with its own bytes, and at the same time as the others (the runners
// meet at a barrier that a sequential executor would never pass).
func TestExecuteRunsSharesAtOnce(t *testing.T) {
	p := Split([]Rail{{Name: Host, Kind: HostCPU, Rate: 1e9}, {Name: DPU, Kind: DPUCores, Rate: 3e9}}, 1<<20, 64)
	if len(p.Shares) != 2 {
		t.Fatalf("want a split:\n%s", p.Explain())
	}
	covered := make([]int, p.Size)
	var mu sync.Mutex
	var meet sync.WaitGroup
	meet.Add(2)
	run := func(ctx context.Context, off, n int64) error {
		mu.Lock()
		for i := off; i < off+n; i++ {
			covered[i]++
		}
		mu.Unlock()
		meet.Done()
		done := make(chan struct{})
		go func() { meet.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the other share did not run at the same time")
		}
	}
	took, err := Execute(context.Background(), p, Runners{Host: RunnerFunc(run), DPU: RunnerFunc(run)})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range covered {
		if c != 1 {
			t.Fatalf("byte %d run %d times", i, c)
		}
	}
	for i, d := range took {
		if d <= 0 {
			t.Errorf("share %d: no time", i)
		}
	}
}

func TestExecuteErrors(t *testing.T) {
	p := Plan{Size: 10, Shares: []Share{{Rail: Host, Kind: HostCPU, Bytes: 4}, {Rail: DPU, Offset: 4, Bytes: 6}}}
	ran := 0
	ok := RunnerFunc(func(context.Context, int64, int64) error { ran++; return nil })
	if _, err := Execute(context.Background(), p, Runners{Host: ok}); !errors.Is(err, ErrNoRunner) || ran != 0 {
		t.Fatalf("a rail without a runner: %v after %d runs; want ErrNoRunner before any", err, ran)
	}
	boom := errors.New("boom")
	bad := RunnerFunc(func(context.Context, int64, int64) error { return boom })
	took, err := Execute(context.Background(), p, Runners{Host: ok, DPU: bad})
	if !errors.Is(err, boom) || took[1] != 0 || took[0] == 0 {
		t.Fatalf("a failing share: %v, times %v; want its error, no time for it", err, took)
	}
}

// TestExecuteToOneShareAllocatesNothing: a service that keeps its
// runners pays no allocation for running a one-share plan through the
// executor (EC's host rail must allocate nothing per op).
func TestExecuteToOneShareAllocatesNothing(t *testing.T) {
	sum := 0
	runners := Runners{Host: RunnerFunc(func(_ context.Context, off, n int64) error { sum += int(n); return nil })}
	p := Plan{Size: 64, Shares: []Share{{Rail: Host, Kind: HostCPU, Bytes: 64}}}
	var took [2]time.Duration
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if err := ExecuteTo(ctx, p, runners, time.Now(), took[:]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || sum == 0 {
		t.Fatalf("%.1f allocations per one-share plan (ran %d bytes), want 0", allocs, sum)
	}
	if err := ExecuteTo(ctx, p, runners, time.Now(), took[:0]); err == nil {
		t.Fatal("ExecuteTo with no room for the times: no error")
	}
}

// TestTableNeverSplitsRailsThatSlowEachOther: rails like the issue's
// (host α 200 µs, DPU α 435 µs, rates alike) split large operations
// when running them at once costs what the model says, and never when
// it costs three times that (they share the cores); small operations run
// on the rail with the lower fixed cost either way.
func TestTableNeverSplitsRailsThatSlowEachOther(t *testing.T) {
	rails := []Rail{{Name: Host, Kind: HostCPU, Alpha: 200 * time.Microsecond, Rate: 0.4e9},
		{Name: DPU, Kind: DPUCores, Alpha: 435 * time.Microsecond, Rate: 0.45e9}}
	tests := []struct {
		cost float64
		size int64
		want []string
		why  string
	}{
		{1, 16, []string{Host}, "the lower fixed cost"},
		{1, 64 << 10, []string{Host}, "α still dominates"},
		{1, 16 << 20, []string{Host, DPU}, "independent rails split"},
		{3, 16, []string{Host}, "the lower fixed cost"},
		{3, 16 << 20, []string{DPU}, "the faster rail alone"},
		{3, 1 << 30, []string{DPU}, "the faster rail alone"},
	}
	for _, tt := range tests {
		tab := NewTable(rails, 64, 0.10, tt.cost, Time)
		p := tab.Lookup(tt.size)
		var got []string
		for _, s := range p.Shares {
			got = append(got, s.Rail)
		}
		if len(got) != len(tt.want) || got[0] != tt.want[0] {
			t.Errorf("cost %.0f, %d bytes: %v, want %v (%s)\n%s", tt.cost, tt.size, got, tt.want, tt.why, tab.Explain())
		}
	}
}

// TestTableLookup: for random rails, costs and sizes, the plan's shares
// cover the size exactly, in order, at aligned offsets; and the plan is
// not slower by the model than the best rail alone by more than what a
// band's width can move a decision made at its middle.
func TestTableLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		var rails []Rail
		for j := 0; j < 1+rng.IntN(3); j++ {
			rails = append(rails, Rail{Name: string(rune('a' + j)), Rate: 1e7 + rng.Float64()*1e10,
				Alpha: time.Duration(rng.IntN(1000)) * time.Microsecond})
		}
		tab := NewTable(rails, 64, 0.10, 1+rng.Float64()*2, Time)
		for range 50 {
			size := int64(1 + rng.IntN(1<<31))
			p := tab.Lookup(size)
			var off int64
			for k, s := range p.Shares {
				if s.Offset != off || s.Bytes <= 0 || (k < len(p.Shares)-1 && s.Offset%64 != 0) {
					t.Fatalf("share %d at %d of %d bytes, want at %d:\n%s", k, s.Offset, s.Bytes, off, tab.Explain())
				}
				off += s.Bytes
			}
			if off != size {
				t.Fatalf("shares cover %d of %d bytes", off, size)
			}
			var best time.Duration
			for _, r := range rails {
				if d := r.Time(size); best == 0 || d < best {
					best = d
				}
			}
			if float64(p.Predicted) > 1.25*float64(best) {
				t.Fatalf("%d bytes: plan %v, best rail alone %v\n%s", size, p.Predicted, best, tab.Explain())
			}
		}
	}
}

// BenchmarkTableLookup is what an operation pays for the planner.
func BenchmarkTableLookup(b *testing.B) {
	tab := NewTable([]Rail{{Name: Host, Kind: HostCPU, Alpha: 200 * time.Microsecond, Rate: 0.4e9},
		{Name: DPU, Kind: DPUCores, Alpha: 435 * time.Microsecond, Rate: 0.45e9}}, 64, 0.10, 1, Time)
	for i := 0; b.Loop(); i++ {
		tab.Lookup(int64(16 << (i % 24)))
	}
}

// TestObjectiveHostCPU: with host-cpu, a band runs on the DPU rail where
// that is within 10 % of the fastest plan, and on the host where the DPU
// rail would be slower than that.
func TestObjectiveHostCPU(t *testing.T) {
	rails := []Rail{{Name: Host, Kind: HostCPU, Alpha: 200 * time.Microsecond, Rate: 1e9},
		{Name: DPU, Kind: DPUCores, Alpha: 400 * time.Microsecond, Rate: 1e9}}
	tab := NewTable(rails, 64, 0.10, 3, HostCPUTime)
	for _, tt := range []struct {
		size int64
		want string
	}{{16, Host}, {64 << 10, Host}, {16 << 20, DPU}, {1 << 30, DPU}} {
		p := tab.Lookup(tt.size)
		if len(p.Shares) != 1 || p.Shares[0].Rail != tt.want {
			t.Errorf("%d bytes: %s, want %s alone\n%s", tt.size, Words(p), tt.want, tab.Explain())
		}
	}
	if o, err := ParseObjective("host-cpu"); err != nil || o != HostCPUTime {
		t.Errorf("ParseObjective(host-cpu) = %v, %v", o, err)
	}
	if _, err := ParseObjective("speed"); err == nil {
		t.Error("ParseObjective(speed): no error")
	}
}

// startedShare is a Starter's share in TestExecuteStartsBeforeTheHostShare.
type startedShare struct {
	done  *atomic.Bool
	waits *int
}

func (s startedShare) Done() bool  { return s.done.Load() }
func (s startedShare) Wait() error { *s.waits++; return nil }

type startRunner struct {
	started *bool
	s       startedShare
}

func (r startRunner) Run(context.Context, int64, int64) error { return errors.New("Run, not Start") }
func (r startRunner) Start(context.Context, int64, int64) (Started, error) {
	*r.started = true
	return r.s, nil
}

type pieceRunner struct {
	started *bool
	done    *atomic.Bool
	pieces  *int
}

func (r pieceRunner) Run(context.Context, int64, int64) error {
	return errors.New("Run, not RunPieces")
}
func (r pieceRunner) RunPieces(_ context.Context, _, _ int64, between func()) error {
	if !*r.started {
		return errors.New("the host share ran before the other was started")
	}
	for i := range 4 {
		*r.pieces++
		if i == 1 {
			time.Sleep(time.Millisecond)
			r.done.Store(true) // the started share ends during the second piece
		}
		between()
		time.Sleep(time.Millisecond)
	}
	return nil
}

// TestExecuteStartsBeforeTheHostShare: a Starter's share is started
// before the host's share runs (on the calling goroutine, in pieces),
// its end is seen between pieces — so its time is that of the piece it
// ended in, not the host share's end — and it is waited for once.
func TestExecuteStartsBeforeTheHostShare(t *testing.T) {
	p := Plan{Size: 10, Shares: []Share{{Rail: Host, Kind: HostCPU, Bytes: 4}, {Rail: DPU, Kind: DPUCores, Offset: 4, Bytes: 6}}}
	var started bool
	var done atomic.Bool
	var waits, pieces int
	took, err := Execute(context.Background(), p, Runners{
		Host: pieceRunner{started: &started, done: &done, pieces: &pieces},
		DPU:  startRunner{started: &started, s: startedShare{done: &done, waits: &waits}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if pieces != 4 || waits != 1 {
		t.Fatalf("%d pieces, %d waits; want 4 and 1", pieces, waits)
	}
	if took[1] <= 0 || took[1] >= took[0] {
		t.Fatalf("the started share took %v, the host share %v: want it seen ending before the host share", took[1], took[0])
	}
}
