package host

import (
	"testing"
	"time"
)

// TestCPUMeter: an op that never gives up its thread costs its wall time,
// read without a system call; one that parks costs, from then on, the
// process's CPU time, read at the park and at the end (twice, however
// often it parks), so that its sleep is not counted.
func TestCPUMeter(t *testing.T) {
	reads := 0
	old := cpuTime
	cpuTime = func() time.Duration { reads++; return old() }
	defer func() { cpuTime = old }()

	spin := func(d time.Duration) {
		for t0 := time.Now(); time.Since(t0) < d; {
		}
	}
	t.Run("works and spins", func(t *testing.T) {
		reads = 0
		m := cpuMeter{start: time.Now()}
		spin(3 * time.Millisecond)
		if got := m.totalAt(time.Since(m.start)); got < 3*time.Millisecond {
			t.Errorf("total %v after spinning 3ms", got)
		}
		if reads != 0 {
			t.Errorf("%d reads of the CPU clock, want none", reads)
		}
	})
	t.Run("parks and sleeps", func(t *testing.T) {
		reads = 0
		m := cpuMeter{start: time.Now()}
		spin(2 * time.Millisecond)
		m.park()
		time.Sleep(100 * time.Millisecond)
		m.park() // a second park reads nothing
		got := m.totalAt(time.Since(m.start))
		if got < 2*time.Millisecond {
			t.Errorf("total %v: the spin before the park is lost", got)
		}
		// The 100 ms asleep are not CPU time; what the process's other
		// threads (the runtime's, the test's) ran meanwhile is, so the
		// bound leaves them half of it.
		if got > 52*time.Millisecond {
			t.Errorf("total %v: the sleep was counted", got)
		}
		if reads != 2 {
			t.Errorf("%d reads of the CPU clock, want 2 (at the park, at the end)", reads)
		}
	})
	t.Run("a nil meter", func(t *testing.T) {
		var m *cpuMeter
		m.park() // no panic: calls that are not an EC op's have none
	})
}
