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
	// Over a sleep, what two Now reads measure lies between what the
	// time.Now reads around them measure: the inner pair and the outer.
	a1 := time.Now()
	m1 := Now()
	a2 := time.Now()
	time.Sleep(20 * time.Millisecond)
	b1 := time.Now()
	m2 := Now()
	b2 := time.Now()
	if d := m2.Sub(m1); d < b1.Sub(a2) || d > b2.Sub(a1) {
		t.Fatalf("over one sleep Now measured %v, outside [%v, %v]", d, b1.Sub(a2), b2.Sub(a1))
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
