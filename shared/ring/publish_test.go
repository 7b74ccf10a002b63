package ring

import (
	"sync/atomic"
	"testing"

	"github.com/hecsys/hec/shared/affinity"
)

// BenchmarkPublish is a ping-pong between two threads, each writing a
// descriptor's line and then the index that hands it over, as Submit and
// Publish do, and spinning on the other's index: publish against
// sync/atomic's Store (XCHG on amd64) beside it. Each op is a round
// trip. On a machine with two CPUs or more the threads are pinned to the
// first two.
func BenchmarkPublish(b *testing.B) {
	for _, c := range []struct {
		name  string
		store func(*atomic.Uint64, uint64)
	}{
		{"publish", publish},
		{"atomic-store", (*atomic.Uint64).Store},
	} {
		b.Run(c.name, func(b *testing.B) {
			type line struct {
				w [8]atomic.Uint64
				_ [64]byte
			}
			type descLine struct {
				w [8]uint64 // written by one side only: plain stores, as Marshal's
				_ [64]byte
			}
			var desc [2]descLine // one each way
			var index [2]line
			cpus, err := affinity.Allowed()
			if err != nil || len(cpus) < 2 {
				cpus = []int{-1, -1}
			}
			pinned := func(cpu int, f func()) {
				if cpu < 0 {
					f()
					return
				}
				affinity.Do([]int{cpu}, func() error { f(); return nil }) //nolint:errcheck // f cannot fail
			}
			send := func(dir int, v uint64) {
				for i := range desc[dir].w {
					desc[dir].w[i] = v
				}
				c.store(&index[dir].w[0], v)
			}
			stop := uint64(1 << 62)
			done := make(chan struct{})
			go pinned(cpus[1], func() {
				defer close(done)
				for last := uint64(0); ; {
					v := index[0].w[0].Load()
					if v == last {
						continue
					}
					last = v
					send(1, v)
					if v == stop {
						return
					}
				}
			})
			pinned(cpus[0], func() {
				v := uint64(0)
				for b.Loop() {
					v++
					send(0, v)
					for index[1].w[0].Load() != v {
					}
				}
				send(0, stop)
			})
			<-done
		})
	}
}
