package ring

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Waiter is an adaptive back-off for polling loops: spin, then yield the CPU,
// then sleep with a doubling interval. Call Wait each time a poll finds
// nothing and Reset when it finds work. The fast path makes no system call.
//
// A goroutine spins only inside Wait, and only while fewer goroutines of this
// process are spinning than there are CPUs to run them, so pollers that
// outnumber cores go straight to yielding and sleeping instead of stealing
// each other's time. The spin phase is bounded in time (SpinFor), so pollers
// in other processes cost each other at most that before they yield.
//
// The zero value is ready to use. A Waiter holds no resources between calls:
// dropping one is fine.
type Waiter struct {
	// Wake, when set, ends a sleep early: a producer that is not polled
	// (a worker pool, say) signals it so its results are not left waiting
	// for the sleep to run out.
	Wake <-chan struct{}
	// Sleep, when set, replaces the timed sleep (the agent sleeps on the
	// region's doorbell, which hosts ring).
	Sleep func(time.Duration)
	// MaxSleep caps the sleep after a long idle (default 10ms).
	MaxSleep time.Duration
	// Leave, when set, is told once (LeaveSpin), when the waiter first
	// stops spinning: before its first yield or sleep (a caller that
	// counts its spinning as its CPU time reads the real clock from then
	// on). An interface, not a func: a method value would be allocated
	// for every wait.
	Leave interface{ LeaveSpin() }

	n     int
	phase int // 0 spin, 1 yield, 2 sleep
	since time.Time
	sleep time.Duration
	timer *time.Timer

	skipYield bool
}

const (
	// SpinFor is how long a Waiter spins before it yields: long enough to
	// cover the other side finishing a batch, short enough not to matter
	// on an idle machine.
	SpinFor  = 50 * time.Microsecond
	spinLoop = 4 // iterations of one spinning Wait
	// YieldFor is how long a Waiter then yields the thread (sched_yield)
	// before it sleeps: it keeps completions of ops that take up to about
	// a millisecond prompt, and gives way to any runnable thread.
	YieldFor = 1 * time.Millisecond
	minSleep = 20 * time.Microsecond
	// A poller idle for less than longIdle sleeps at most shortSleep; after
	// that at most longSleep, which keeps an idle agent well under 1% of a
	// core.
	shortSleep = 1 * time.Millisecond
	longSleep  = 10 * time.Millisecond
	longIdle   = 200 * time.Millisecond
)

var (
	spinners  atomic.Int32
	spinSink  atomic.Uint32
	maxSpins  = int32(runtime.GOMAXPROCS(0))
	yieldCall = func() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) } //nolint:errcheck // cannot fail
)

// Wait backs off once.
func (w *Waiter) Wait() {
	w.n++
	switch w.phase {
	case 0:
		if w.n == 1 {
			w.since = time.Now()
		} else if w.n%16 == 0 && time.Since(w.since) > SpinFor {
			w.leave()
			w.phase, w.n = 1, 0
			if w.skipYield {
				w.phase, w.since, w.sleep = 2, time.Now(), minSleep
			}
			yieldCall()
			return
		}
		if spinners.Add(1) > maxSpins {
			spinners.Add(-1)
			w.leave()
			w.phase, w.n = 1, 0 // too many spinning here: yield instead
			w.since = time.Now().Add(-SpinFor)
			yieldCall()
			return
		}
		for i := uint32(0); i < spinLoop; i++ {
			spinSink.Load()
		}
		spinners.Add(-1)
	case 1:
		yieldCall()
		if w.n%16 == 0 && time.Since(w.since) > SpinFor+YieldFor {
			w.phase, w.n = 2, 0
			w.since = time.Now()
			w.sleep = minSleep
		}
	default:
		limit := shortSleep
		if time.Since(w.since) > longIdle {
			limit = longSleep
			if w.MaxSleep > 0 {
				limit = w.MaxSleep
			}
		}
		w.doSleep()
		w.sleep = min(w.sleep*2, limit)
	}
}

// leave calls Leave the first time the waiter stops spinning.
func (w *Waiter) leave() {
	if w.Leave != nil {
		w.Leave.LeaveSpin()
		w.Leave = nil
	}
}

func (w *Waiter) doSleep() {
	if w.Sleep != nil {
		w.Sleep(w.sleep)
		return
	}
	if w.Wake == nil {
		time.Sleep(w.sleep)
		return
	}
	if w.timer == nil {
		w.timer = time.NewTimer(w.sleep)
	} else {
		w.timer.Reset(w.sleep)
	}
	select {
	case <-w.Wake:
		w.timer.Stop()
		w.Reset()
	case <-w.timer.C:
	}
}

// SkipYield makes the waiter go from spinning straight to sleeping, for a
// poller whose work is in other threads' hands: short work still completes
// within the spin, long work does not have its cores taken by yielding.
// Reset clears it.
func (w *Waiter) SkipYield() { w.skipYield = true }

// SleepNow puts the waiter in its sleeping phase at once, for a wait
// known to last milliseconds (a collective across agents), where the spin
// and the yields would only burn a core: its first sleep is the shortest
// one. Reset clears it.
func (w *Waiter) SleepNow() {
	w.leave()
	w.phase, w.n, w.since, w.sleep = 2, 0, time.Now(), minSleep
}

// Reset returns the waiter to its spinning phase after work was found.
func (w *Waiter) Reset() {
	w.n, w.phase = 0, 0
	w.skipYield = false
}

// Idle reports whether the waiter has reached its sleeping phase.
func (w *Waiter) Idle() bool { return w.phase == 2 }

// Spinning reports whether the waiter is still spinning: each Wait is
// then tens of nanoseconds, and a poller that also reads the clock on
// each pass may read it less often.
func (w *Waiter) Spinning() bool { return w.phase == 0 }
