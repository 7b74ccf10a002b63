package ring

import (
	"errors"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/wire"
)

// TestBeatWatch: a beat that moves is alive; one that stands still is dead
// once Timeout of looked-at time has passed; a gap between looks counts
// for at most MaxGap (the watcher did not run), and time going backwards
// counts for nothing.
func TestBeatWatch(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type look struct {
		at    time.Duration
		beat  uint64
		still time.Duration
		dead  bool
	}
	for _, tc := range []struct {
		name   string
		maxGap time.Duration
		looks  []look
	}{
		{"a beating peer", ms(1000), []look{{0, 1, 0, false}, {ms(250), 2, 0, false}, {ms(500), 3, 0, false}, {ms(5000), 4, 0, false}}},
		{"a silent peer, regular looks", ms(1000), []look{{0, 1, 0, false}, {ms(1000), 1, ms(1000), false}, {ms(2000), 1, ms(2000), false}, {ms(2250), 1, ms(2250), true}}},
		{"the watcher stalled: a gap counts for MaxGap", ms(1000), []look{{0, 1, 0, false}, {ms(250), 1, ms(250), false}, {ms(3500), 1, ms(1250), false}, {ms(4250), 1, ms(2000), false}, {ms(4500), 1, ms(2250), true}}},
		{"the peer beat after the stall", ms(1000), []look{{0, 1, 0, false}, {ms(3500), 1, ms(1000), false}, {ms(3750), 2, 0, false}, {ms(5000), 2, ms(1000), false}}},
		{"no cap: a gap counts whole", 0, []look{{0, 1, 0, false}, {ms(3500), 1, ms(3500), true}}},
		{"the clock went back", ms(1000), []look{{0, 1, 0, false}, {-ms(500), 1, 0, false}, {ms(500), 1, ms(1000), false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := BeatWatch{Timeout: 2 * time.Second, MaxGap: tc.maxGap}
			t0 := time.Unix(1000, 0)
			for i, l := range tc.looks {
				still, dead := w.Look(t0.Add(l.at), l.beat)
				if still != l.still || dead != l.dead {
					t.Fatalf("look %d at %v (beat %d): still %v dead %v, want %v %v", i, l.at, l.beat, still, dead, l.still, l.dead)
				}
			}
		})
	}
}

// TestAStalledAgentDoesNotFenceALiveHolder: the agent judges a holder's
// heartbeat on its own housekeeping passes; a pass seconds late (the agent
// did not run, nor did the holder) counts for half the lease timeout, so
// the holder is not fenced on it, and a holder silent for the timeout of
// passes after that still is.
func TestAStalledAgentDoesNotFenceALiveHolder(t *testing.T) {
	r, a := newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{LeaseTimeout: 3 * time.Second})
	q := leaseHousekeeping(t, r, a)
	t0 := time.Now() // just after leaseHousekeeping's last pass
	for _, d := range []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 4 * time.Second} {
		a.Housekeep(t0.Add(d))
		if err := q.Check(); err != nil {
			t.Fatalf("a pass %v after the first, 3.5 s of it a stall of the agent: %v", d, err)
		}
	}
	// Silent since: fenced after 3 s of passes (0.5 s + 1.5 s counted by
	// the 4 s pass), not before.
	for d := 4250 * time.Millisecond; d <= 6*time.Second; d += 250 * time.Millisecond {
		a.Housekeep(t0.Add(d))
		err := q.Check()
		if d <= 4750*time.Millisecond && err != nil || d >= 5250*time.Millisecond && !errors.Is(err, wire.StatusFenced) {
			t.Fatalf("at %v: %v", d, err)
		}
	}
}
