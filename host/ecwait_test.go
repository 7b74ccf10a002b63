package host

import (
	"testing"
	"time"
)

// TestExpectEnd: a call's expected end follows the agent's rate and the
// calls before it; a short wait is spent awake, a long one sleeps until
// a quarter of it (within [minAhead, maxAhead]) before the end and looks
// until as long after.
func TestExpectEnd(t *testing.T) {
	now := time.Unix(1000, 0)
	const gbps = 1e9 // bytes per second
	for _, tc := range []struct {
		name  string
		prev  time.Time
		bytes int
		rate  float64
		took  time.Duration // from now to the end
		long  bool
		ahead time.Duration
	}{
		{"a short op", time.Time{}, 100_000, gbps, 100 * time.Microsecond, false, 0},
		{"just short of sleeping", time.Time{}, 399_000, gbps, 399 * time.Microsecond, false, 0},
		{"long enough to sleep: the least margin", time.Time{}, 400_000, gbps, 400 * time.Microsecond, true, minAhead},
		{"a quarter of its time", time.Time{}, 1_000_000, gbps, time.Millisecond, true, 250 * time.Microsecond},
		{"a long op: the most margin", time.Time{}, 64_000_000, gbps, 64 * time.Millisecond, true, maxAhead},
		{"behind a call ending later", now.Add(time.Millisecond), 1_000_000, gbps, 2 * time.Millisecond, true, maxAhead},
		{"behind a call that ended", now.Add(-time.Millisecond), 1_000_000, gbps, time.Millisecond, true, 250 * time.Microsecond},
		{"a short op behind a long one", now.Add(time.Millisecond), 100_000, gbps, 1100 * time.Microsecond, true, 275 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end, wakeAt, spinTo, long := expectEnd(now, tc.prev, tc.bytes, tc.rate)
			if got := end.Sub(now); got != tc.took {
				t.Errorf("ends %v after now, want %v", got, tc.took)
			}
			if long != tc.long {
				t.Fatalf("long %v, want %v", long, tc.long)
			}
			if !long {
				if !wakeAt.IsZero() || !spinTo.IsZero() {
					t.Fatalf("a short call has wakeAt %v, spinTo %v", wakeAt, spinTo)
				}
				return
			}
			if got := end.Sub(wakeAt); got != tc.ahead {
				t.Errorf("wakes %v before its end, want %v", got, tc.ahead)
			}
			if got := spinTo.Sub(end); got != tc.ahead {
				t.Errorf("looks until %v after its end, want %v", got, tc.ahead)
			}
		})
	}
}
