package ring

import (
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

func futexWait(addr *uint64, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	// The futex word is the low 32 bits of the doorbell (little-endian).
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0) //nolint:errcheck // EAGAIN, ETIMEDOUT and EINTR all mean: look again
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
	a.r.word(hSleeping).Store(1)
	if !hasWork() {
		futexWait((*uint64)(unsafe.Pointer(bell)), seq, d)
	}
	a.r.word(hSleeping).Store(0)
}

// Ring wakes the agent if it sleeps on the doorbell.
func (a *Agent) Ring() {
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

// SleepForCompletion sleeps for at most d unless the agent publishes a
// completion on this pair first (it rings the pair's bell when it sees the
// holder sleeping). Like the agent's doorbell it needs a shared kernel; in a
// VM the timeout bounds the wait.
func (q *HostQP) SleepForCompletion(d time.Duration) {
	bell := q.word(qBell)
	seq := uint32(bell.Load())
	q.word(qSleeping).Store(1)
	if q.word(qCQTail).Load() == q.word(qCQHead).Load() { // nothing to poll: sleep
		futexWait((*uint64)(unsafe.Pointer(q.h.r.word(q.block+qBell))), seq, d)
	}
	q.word(qSleeping).Store(0)
}
