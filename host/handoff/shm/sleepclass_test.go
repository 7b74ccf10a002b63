package shm

import (
	"testing"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/shared/wire"
)

// Calls alike share a sleep class; a barrier and a 1 MiB allreduce, or
// EC ops of sizes apart, do not (the hash of these is fixed: a collision
// would show here, not come and go).
func TestSleepClass(t *testing.T) {
	buf := make([]byte, 3<<19)
	mib := buf[:1<<20]
	allreduce := wire.CollArgs(uint8(coll.KindAllReduce), uint8(coll.Float32), uint8(coll.Sum), 0, 1)
	allreduce2 := wire.CollArgs(uint8(coll.KindAllReduce), uint8(coll.Float32), uint8(coll.Sum), 0, 2)
	barrier := wire.CollArgs(uint8(coll.KindBarrier), uint8(coll.Float32), uint8(coll.Sum), 0, 3)
	for _, tc := range []struct {
		name string
		a, b handoff.Request
		same bool
	}{
		{"1 MiB and 1.5 MiB allreduces", handoff.Request{Op: wire.OpCollRun, Arg1: allreduce, In: [][]byte{mib}, Out: [][]byte{mib}},
			handoff.Request{Op: wire.OpCollRun, Arg1: allreduce2, In: [][]byte{buf}, Out: [][]byte{buf}}, true},
		{"a barrier and a 1 MiB allreduce", handoff.Request{Op: wire.OpCollRun, Arg1: barrier},
			handoff.Request{Op: wire.OpCollRun, Arg1: allreduce, In: [][]byte{mib}, Out: [][]byte{mib}}, false},
		{"1 MiB and 16 KiB allreduces", handoff.Request{Op: wire.OpCollRun, Arg1: allreduce, In: [][]byte{mib}, Out: [][]byte{mib}},
			handoff.Request{Op: wire.OpCollRun, Arg1: allreduce, In: [][]byte{mib[:16<<10]}, Out: [][]byte{mib[:16<<10]}}, false},
		{"a PING and a CHECKSUM", handoff.Request{Op: wire.OpPing}, handoff.Request{Op: wire.OpChecksum}, false},
	} {
		ca, cb := sleepClass(&handoff.Call{Req: tc.a}), sleepClass(&handoff.Call{Req: tc.b})
		if (ca == cb) != tc.same || ca < 0 || ca >= sleepClasses || cb < 0 || cb >= sleepClasses {
			t.Errorf("%s: classes %d and %d, want them the same: %v", tc.name, ca, cb, tc.same)
		}
	}
}
