package ring

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/wire"
)

// completeOne has the agent take the host's one submitted ping and
// complete it; silent publishes it without ringing the bell, as an agent
// in a VM does in effect (its wake reaches its own kernel only).
func completeOne(t *testing.T, aq *AgentQP, silent bool) {
	t.Helper()
	in := make([]Incoming, 1)
	if aq.Take(in) != 1 {
		t.Fatal("the agent found no descriptor")
	}
	d := in[0].Desc
	aq.Complete(&d)
	if silent {
		aq.set(qCQTail, aq.cqTail)
		aq.pending = false
		return
	}
	aq.Publish()
}

func stillWaiting() bool { return true }

// sleepAsync runs SleepForCompletion(d, hold) on a goroutine of its own.
func sleepAsync(q *HostQP, d, hold time.Duration) <-chan Wake {
	out := make(chan Wake, 1)
	go func() { out <- q.SleepForCompletion(d, hold, stillWaiting) }()
	return out
}

// waitSleeping waits until n goroutines sleep on q's bell.
func waitSleeping(t *testing.T, q *HostQP, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); q.word(qSleeping).Load() != n; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sleepers after 5s, want %d", q.word(qSleeping).Load(), n)
		}
	}
	time.Sleep(2 * time.Millisecond) // from the count to the futex wait
}

// woken returns how the sleep on woke ended, failing with why when it
// has not within 10 s.
func woken(t *testing.T, woke <-chan Wake, why string) Wake {
	t.Helper()
	select {
	case got := <-woke:
		return got
	case <-time.After(10 * time.Second):
		t.Fatal(why)
		return WakeNone
	}
}

// raced runs one sleep-and-wake round until its sleeper was asleep when
// the wake came: a sleeper counted but not yet in the futex wait when the
// bell moves finds WakeNone, which a loaded machine makes likely once in a
// while. It returns the first other outcome.
func raced(t *testing.T, round func() Wake) Wake {
	t.Helper()
	for range 20 {
		if got := round(); got != WakeNone {
			return got
		}
	}
	t.Fatal("20 rounds in a row woke their sleeper before it slept")
	return WakeNone
}

// TestSleepForCompletionSaysHowItEnded: a sleeper learns whether the
// agent's ring reached it (the host library then sleeps long, one wake-up
// per op), whether a completion came without one (a VM: short sleeps
// again), or neither. The sleeps that should end early are given a minute:
// a ring that did not arrive shows as a test that hangs for it.
func TestSleepForCompletionSaysHowItEnded(t *testing.T) {
	// hold: the sleep's first part keeps the P (a raw system call), the
	// whole of a short sleep and the start of a long one; the outcomes
	// are the same.
	for _, hold := range []time.Duration{0, 500 * time.Microsecond, 2 * time.Millisecond} {
		t.Run(fmt.Sprintf("hold %v", hold), func(t *testing.T) {
			r, a := newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{})
			q := leaseHousekeeping(t, r, a)
			aq := a.QueuePairs()[q.Index()]
			ping := []wire.Desc{{Op: wire.OpPing}}
			out := make([]wire.Desc, 1)
			reap := func() {
				t.Helper()
				if n, err := q.Poll(out); n != 1 || err != nil {
					t.Fatalf("poll: %d completions, %v", n, err)
				}
			}

			if got := q.SleepForCompletion(time.Millisecond, hold, stillWaiting); got != WakeTimeout {
				t.Fatalf("nothing published: %v, want WakeTimeout", got)
			}

			// publishAsleep submits a ping, lets a sleep of d begin and
			// has the agent complete the ping (silent: without a ring).
			publishAsleep := func(d time.Duration, silent bool) Wake {
				return raced(t, func() Wake {
					q.Submit(ping)
					woke := sleepAsync(q, d, hold)
					waitSleeping(t, q, 1)
					completeOne(t, aq, silent)
					defer reap()
					return <-woke
				})
			}

			if got := publishAsleep(time.Minute, false); got != WakeRung {
				t.Fatalf("published while it slept: %v, want WakeRung", got)
			}

			q.Submit(ping)
			completeOne(t, aq, false)
			if got := q.SleepForCompletion(time.Minute, hold, stillWaiting); got != WakeNone {
				t.Fatalf("a completion already waiting: %v, want WakeNone (no sleep)", got)
			}
			reap()

			// A second, not 50 ms: the check that the sleep began must see
			// it before it ends, and a loaded CI machine kept this goroutine
			// off its core for longer ("0 sleepers after 5s, want 1").
			if got := publishAsleep(time.Second, true); got != WakeMissed {
				t.Fatalf("published without a ring: %v, want WakeMissed", got)
			}

			if got := raced(t, func() Wake {
				woke := sleepAsync(q, time.Minute, hold)
				waitSleeping(t, q, 1)
				q.WakeSleepers()
				return <-woke
			}); got != WakeRung {
				t.Fatalf("woken by the holder: %v, want WakeRung", got)
			}

			if got := q.SleepForCompletion(time.Minute, hold, func() bool { return false }); got != WakeNone {
				t.Fatalf("the caller no longer waits: %v, want WakeNone (no sleep)", got)
			}
		})
	}
}

// TestWakeSleepersIsNotLost: a goroutine that completes another's call
// wakes it with WakeSleepers at whatever point of going to sleep the other
// is — here the worst: after its last look said it still waits, before
// the futex wait. A wake that left the bell as it was would be lost there,
// and the sleeper would sleep its whole minute.
func TestWakeSleepersIsNotLost(t *testing.T) {
	for _, hold := range []time.Duration{0, time.Millisecond} { // a held sleep's wait too
		t.Run(fmt.Sprintf("hold %v", hold), func(t *testing.T) {
			r, a := newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{})
			q := leaseHousekeeping(t, r, a)
			woke := make(chan Wake, 1)
			go func() {
				woke <- q.SleepForCompletion(time.Minute, hold, func() bool {
					q.WakeSleepers() // the other goroutine, just after the look
					return true
				})
			}()
			if got := woken(t, woke, "the sleeper was not woken"); got != WakeNone {
				t.Fatalf("%v, want WakeNone: the bell had moved before the sleep", got)
			}
		})
	}
}

// TestSleepersAreCounted: while one goroutine sleeps long on the bell,
// another's short sleep ends; the agent must still ring for the first.
// With a flag instead of a count, the second cleared it on its way out and
// the first slept its whole time.
func TestSleepersAreCounted(t *testing.T) {
	r, a := newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{})
	q := leaseHousekeeping(t, r, a)
	aq := a.QueuePairs()[q.Index()]
	long := sleepAsync(q, time.Minute, 0)
	waitSleeping(t, q, 1)
	if got := q.SleepForCompletion(time.Millisecond, 0, stillWaiting); got != WakeTimeout {
		t.Fatalf("short sleep: %v", got)
	}
	if n := q.word(qSleeping).Load(); n != 1 {
		t.Fatalf("%d sleepers counted, want 1", n)
	}
	q.Submit([]wire.Desc{{Op: wire.OpPing}})
	completeOne(t, aq, false)
	// WakeNone: rung before its futex wait began (the bell had moved).
	if got := woken(t, long, "the agent did not ring for the sleeper left"); got != WakeRung && got != WakeNone {
		t.Fatalf("long sleeper: %v, want WakeRung", got)
	}
	if n := q.word(qSleeping).Load(); n != 0 {
		t.Fatalf("%d sleepers counted after both woke", n)
	}
}

// TestRingWakesOnlyASleepingAgent: a worker hands work over (here a
// channel send, what the dispatcher's workers do) and rings. The agent,
// asleep on its doorbell or at any point of going to sleep, must see the
// work or be woken, never sleep its whole time; and a ring while no agent
// sleeps leaves the doorbell as it was (no system call).
func TestRingWakesOnlyASleepingAgent(t *testing.T) {
	_, a := newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{})
	before := a.r.word(hDoorbell).Load()
	a.Ring()
	if got := a.r.word(hDoorbell).Load(); got != before {
		t.Fatalf("a ring with no agent asleep moved the doorbell from %d to %d", before, got)
	}
	work := make(chan struct{}, 1)
	for i := range 2000 {
		slept := make(chan struct{})
		go func() {
			defer close(slept)
			a.SleepOnDoorbell(time.Minute, func() bool { return len(work) > 0 })
		}()
		if i%2 == 1 {
			runtime.Gosched() // some rounds hand over later in the sleeper's way down
		}
		work <- struct{}{}
		a.Ring()
		select {
		case <-slept:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the agent slept on with work handed over and rung", i)
		}
		<-work
	}
}

// TestHeldSleepGivesThePBack: a sleep's held part keeps the goroutine's P
// for a while only (hold; Go's monitor, which interrupts a goroutine that
// has run 10 ms, would end a longer one); then the rest is an ordinary
// sleep, and with one P the process's other goroutines run again while
// it sleeps on.
func TestHeldSleepGivesThePBack(t *testing.T) {
	r, a := newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{})
	q := leaseHousekeeping(t, r, a)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	t0 := time.Now()
	woke := sleepAsync(q, 20*time.Second, 5*time.Millisecond)
	waitSleeping(t, q, 1) // yields the P to the sleeper, which holds it, then gives it back
	if took := time.Since(t0); took > 10*time.Second {
		t.Fatalf("this goroutine ran again %v after the sleep began: the P was held for the whole sleep", took)
	}
	q.WakeSleepers()
	if got := woken(t, woke, "the sleeper was not woken"); got != WakeRung {
		t.Fatalf("%v, want WakeRung", got)
	}
}

// TestAgentHere: a process that formats a region as its agent says so
// (its holders then never hold a P while they wait).
func TestAgentHere(t *testing.T) {
	newRegion(t, Geometry{QueuePairs: 1, Entries: 8, WindowSize: 4096}, AgentConfig{})
	if !AgentHere() {
		t.Fatal("AgentHere false after Format")
	}
}
