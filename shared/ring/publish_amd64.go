//go:build amd64 && !race

package ring

import (
	"sync/atomic"
	"unsafe"
)

// publish stores v in w, the index that hands the descriptors written
// before it to the other side, as a plain store then a full fence: x86
// keeps stores in order, so the descriptors are seen no later than the
// index, and the fence keeps a load that follows (whether the other side
// sleeps on a bell) from passing the store.
//
// sync/atomic's Store is an XCHG, a locked instruction, which first waits
// for the stores before it to be written (the descriptor's line, which
// the other side holds from reading it) and only then asks for its own
// line (which the other side holds from polling it): two transfers
// between the cores, one after the other. A plain store waits in the
// store buffer beside the descriptor's, and both lines are fetched at
// once. On the 2-vCPU KVM guest of `make bench`, BenchmarkPublish's round
// trip (a descriptor's line and an index line each way, between two
// pinned threads) took 0.92-1.0 µs with XCHG and 0.62 µs this way, and a
// PING through the agent went from 1.26-1.36 µs to 1.02-1.10 µs.
//
// This is the one exception to DESIGN.md's rule that an index is written
// only through sync/atomic, a rule made for the DPU's weakly ordered Arm
// cores: arm64 keeps to it (publish_other.go, a store-release). Both
// sides of a pair are other processes in use, where the Go memory model
// has nothing to say and the hardware's does; a race build, whose tests
// run both sides in one process, uses sync/atomic too.
func publish(w *atomic.Uint64, v uint64) {
	*(*uint64)(unsafe.Pointer(w)) = v
	var fence atomic.Uint32 // on this goroutine's stack: a locked op no other core contends for
	fence.Add(1)
}
