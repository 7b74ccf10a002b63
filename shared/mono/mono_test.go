package mono

import (
	"strings"
	"testing"
	"time"
)

// TestNowMeasuresAsTimeNow: intervals between Now and time.Now, either
// way round, are the monotonic clock's, and Now is never behind a
// time.Now read before it nor ahead of one read after.
func TestNowMeasuresAsTimeNow(t *testing.T) {
	for range 1000 {
		before := time.Now()
		now := Now()
		after := time.Now()
		if now.Before(before) || now.After(after) {
			t.Fatalf("Now %v outside the time.Now reads around it (%v, %v)", now, before, after)
		}
		if d := after.Sub(now); d < 0 || d > after.Sub(before) {
			t.Fatalf("time.Now − Now = %v, outside [0, %v]", d, after.Sub(before))
		}
	}
	// Sleeping moves both clocks alike (a millisecond's tolerance for
	// the reads in between on a loaded machine).
	a, b := Now(), time.Now()
	time.Sleep(20 * time.Millisecond)
	da, db := time.Since(a), Now().Sub(b)
	if diff := da - db; diff > time.Millisecond || diff < -time.Millisecond {
		t.Fatalf("over one sleep Now measured %v and time.Now %v", da, db)
	}
	// A time from Now keeps its monotonic reading: its String says m=.
	if s := Now().String(); !strings.Contains(s, "m=+") {
		t.Fatalf("Now() = %s: no monotonic reading", s)
	}
}

// BenchmarkNow and BenchmarkTimeNow side by side: one read of the clock
// against two.
func BenchmarkNow(b *testing.B) {
	var t time.Time
	for b.Loop() {
		t = Now()
	}
	_ = t
}

func BenchmarkTimeNow(b *testing.B) {
	var t time.Time
	for b.Loop() {
		t = time.Now()
	}
	_ = t
}
