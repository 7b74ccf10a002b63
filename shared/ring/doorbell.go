package ring

import (
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The doorbell lets an idle agent sleep in the kernel instead of polling,
// where the host processes share its kernel (local emulation): before it
// sleeps the agent sets the sleeping word, looks for work once more, and
// waits on the doorbell word with a timeout (FUTEX_WAIT); a host that
// publishes work while the sleeping word is set rings the doorbell
// (FUTEX_WAKE). The fast path costs the host one load of a word that
// rarely changes, and no system call. The words are sequentially consistent
// (Go's atomics), so a submission and the agent's last look cannot both miss
// each other; if they did (a hostile writer), the agent's timeout bounds the
// delay. Across a VM boundary (ivshmem) a wake does not reach the other
// kernel: the agent's short timeout is then what bounds latency.

const (
	futexWaitOp = 0 // FUTEX_WAIT: shared, not FUTEX_PRIVATE_FLAG: the word is in a shared mapping
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps on *addr while its low 32 bits are val, for at most d,
// and returns the system call's errno: 0 when woken, ETIMEDOUT, EAGAIN
// (the word had already changed) or EINTR. Each means the same to a
// caller — look again — except that only 0 says a FUTEX_WAKE reached it.
//
// held makes it a raw system call: the goroutine keeps its P (Go's
// monitor does not take it back and hand it on, nor wake every 20 µs
// while it is away), which no other goroutine can then use until it
// returns. For short sleeps only.
func futexWait(addr *uint64, val uint32, d time.Duration, held bool) unix.Errno {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	// The futex word is the low 32 bits of the doorbell (little-endian).
	// The pointers are converted in the calls' argument lists (unsafe's
	// rule for system calls).
	var e unix.Errno
	if held {
		_, _, e = unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
			uintptr(unsafe.Pointer(&ts)), 0, 0)
	} else {
		_, _, e = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
			uintptr(unsafe.Pointer(&ts)), 0, 0)
	}
	return e
}

func futexWake(addr *uint64) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, 1<<30, 0, 0, 0) //nolint:errcheck // nothing to do on failure
}

// SleepOnDoorbell sleeps for at most d unless work arrives: a host rings the
// doorbell, or Ring is called (by the agent's own workers). hasWork is
// called after the sleeping word is set, to close the race with a host that
// published just before; the agent returns at once when it reports true.
func (a *Agent) SleepOnDoorbell(d time.Duration, hasWork func() bool) {
	bell := a.r.word(hDoorbell)
	seq := uint32(bell.Load())
	// A swap, not a store: hasWork may read plain memory (a channel's
	// length), which on arm64 could otherwise be read before the word is
	// seen set, and a Ring in between would then look, see no sleeper and
	// not wake this one.
	a.r.word(hSleeping).Swap(1)
	if !hasWork() {
		futexWait((*uint64)(unsafe.Pointer(bell)), seq, d, false) //nolint:errcheck // every outcome means: look again
	}
	a.r.word(hSleeping).Store(0)
}

// Ring wakes the agent if it sleeps on the doorbell, and costs a load
// when it does not (a wake is a system call: a few microseconds on a
// virtualised core, on every job a worker hands back). Work handed over
// before Ring is either seen by SleepOnDoorbell's last look or Ring sees
// the sleeping word it set before that look.
func (a *Agent) Ring() {
	if a.r.word(hSleeping).Load() == 0 {
		return
	}
	a.r.word(hDoorbell).Add(1)
	futexWake((*uint64)(unsafe.Pointer(a.r.word(hDoorbell))))
}

// HasWork reports whether the agent can make progress on the pair: the
// host has published descriptors the agent has not taken, and the
// completion ring has room for their completions (a cheap look, for
// SleepOnDoorbell's last check). A pair whose host holds its completion
// ring full, or one that is faulted or unbound, has none: it costs the
// agent nothing until its host moves a word.
func (q *AgentQP) HasWork() bool {
	if q.state != QPActive || q.w(qSQTail) == q.sqHead {
		return false
	}
	// A head outside [last seen, tail] is progress too: Take faults the pair.
	head := q.w(qCQHead)
	return head < q.seenCQHead || head > q.cqTail || q.sqHead-head <= q.mask
}

// ring wakes a sleeping agent after a submission.
func (q *HostQP) ringDoorbell() {
	if q.h.r.word(hSleeping).Load() != 0 {
		q.h.r.word(hDoorbell).Add(1)
		futexWake((*uint64)(unsafe.Pointer(q.h.r.word(hDoorbell))))
	}
}

// Wake is how a SleepForCompletion ended.
type Wake uint8

const (
	// WakeNone: it did not sleep (a completion was waiting, or the caller
	// no longer waits), or it woke for another reason (the bell moved
	// before it slept, a signal): nothing learned about the bell.
	WakeNone Wake = iota
	// WakeRung: the bell moved while it slept and a wake reached it: the
	// agent's ring — so the agent's wakes reach this kernel and a sleeper
	// may sleep long — or, once the holder relies on that, its own
	// WakeSleepers.
	WakeRung
	// WakeMissed: the time ran out although the agent had published a
	// completion meanwhile: its ring did not reach this kernel (an agent
	// in a VM), so only the timeout bounds a sleep.
	WakeMissed
	// WakeTimeout: the time ran out and nothing was published.
	WakeTimeout
)

// SleepForCompletion sleeps for at most d unless the agent publishes a
// completion on this pair first (it rings the pair's bell when it sees the
// holder sleeping) and says how the sleep ended. Like the agent's doorbell
// it needs a shared kernel; in a VM the timeout bounds the wait. Several
// goroutines of the holder may sleep at once: the sleeping word counts
// them, so the agent rings while any sleeps. waiting is asked once the
// sleeper is counted, the last look before it sleeps: another goroutine
// that reaps this one's completion meanwhile and then calls WakeSleepers
// is either seen by it or wakes it.
//
// The first hold of the sleep (at most d; keep it short, a millisecond)
// the goroutine sleeps holding its P: where the completion comes within
// it, the sleep costs one wake-up of this thread. A sleep in an ordinary
// system call hands the P on after Go's monitor notices it (20 µs), keeps
// the monitor waking every 20 µs, and takes a P back at the end: on a
// virtual machine that cost a host process more CPU than the rest of its
// wait for a 1 MiB collective. Meanwhile the process's other goroutines
// cannot use that P (with GOMAXPROCS 1, cannot run), for at most hold.
func (q *HostQP) SleepForCompletion(d, hold time.Duration, waiting func() bool) Wake {
	bell := q.h.r.word(q.block + qBell)
	seq := uint32(bell.Load())
	sleeping := q.word(qSleeping)
	sleeping.Add(1)
	defer func() {
		// Not below zero: the agent clears the word when it resets the
		// pair, maybe while this one slept.
		for {
			v := sleeping.Load()
			if v == 0 || sleeping.CompareAndSwap(v, v-1) {
				return
			}
		}
	}()
	if q.completionsWaiting() || !waiting() {
		return WakeNone
	}
	addr := (*uint64)(unsafe.Pointer(bell))
	var e unix.Errno
	if hold = min(hold, d); hold > 0 {
		start := time.Now()
		e = futexWait(addr, seq, hold, true)
		// Run out, or a signal: the runtime wants the P (a collection
		// stopping the world sends one until it gets it). The rest of
		// the sleep is an ordinary one.
		if e == unix.ETIMEDOUT || e == unix.EINTR {
			e = unix.ETIMEDOUT
			if rest := d - time.Since(start); rest > 0 {
				runtime.Gosched() // what waited for the P runs first
				e = futexWait(addr, seq, rest, false)
			}
		}
	} else {
		e = futexWait(addr, seq, d, false)
	}
	switch e {
	case 0:
		if uint32(bell.Load()) != seq {
			return WakeRung
		}
	case unix.ETIMEDOUT:
		if q.completionsWaiting() {
			return WakeMissed
		}
		return WakeTimeout
	}
	return WakeNone
}

// WakeSleepers rings the pair's bell from the holder's side, when any of
// its goroutines sleeps in SleepForCompletion: for a call another
// goroutine completed, cancelled or failed meanwhile. It moves the bell as
// the agent's ring does (a wake that cannot be lost), so the sleepers take
// it for one (WakeRung): only a holder that relies on the agent's rings
// (it has seen one) should call it.
func (q *HostQP) WakeSleepers() {
	if q.word(qSleeping).Load() == 0 {
		return
	}
	bell := q.h.r.word(q.block + qBell)
	bell.Add(1)
	futexWake((*uint64)(unsafe.Pointer(bell)))
}

// completionsWaiting reports whether the agent has published completions
// the holder has not reaped.
func (q *HostQP) completionsWaiting() bool {
	return q.word(qCQTail).Load() != q.word(qCQHead).Load()
}
