package ring

import (
	"math"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

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

// TestPublishIsAFullFence is the store-buffer litmus test (Dekker's): two
// threads on two CPUs each publish a word and then load the other's, round
// after round, starting each round together. Were the store let wait in
// the store buffer while the load after it went ahead (x86 reorders a
// store and a later load unless a fence or a locked instruction sits
// between them), both could load 0: the host reading "not asleep" while
// the agent, asleep, read the old tail — a completion nobody wakes for.
// publish must keep that outcome from ever happening. Under -race publish
// is sync/atomic's Store; make test runs this test without -race too,
// where the amd64 version (a plain store, then a fence) is the one tried.
// It runs for at most two seconds of rounds.
func TestPublishIsAFullFence(t *testing.T) {
	if os.Getenv("HEC_TEST_EXEC") != "" {
		// qemu-user translates an arm64 store-release and load-acquire
		// into x86 moves with one-sided barriers, none between the two:
		// the x86 host lets the load pass the store (4 rounds in 200,000,
		// seen 2026-12-06), which an Arm core never does.
		t.Skip("under an emulator (HEC_TEST_EXEC): its translation does not keep a store-release before a later load-acquire")
	}
	cpus, err := affinity.Allowed()
	if err != nil || len(cpus) < 2 || runtime.GOMAXPROCS(0) < 2 {
		t.Skipf("the litmus test needs two threads on two CPUs: CPUs %v (%v), GOMAXPROCS %d", cpus, err, runtime.GOMAXPROCS(0))
	}
	const rounds = 200_000
	xs, ys := make([]atomic.Uint64, rounds), make([]atomic.Uint64, rounds) // a fresh pair of words each round
	saw := make([][2]uint64, rounds)
	type padded struct {
		w atomic.Uint64
		_ [56]byte
	}
	var gate [2]padded // the round each side has reached
	var stop atomic.Bool
	deadline := time.Now().Add(2 * time.Second)
	// side runs the rounds on cpu and returns how many it finished.
	side := func(me, cpu int, mine, other []atomic.Uint64) (done int) {
		affinity.Do([]int{cpu}, func() error { //nolint:errcheck // the function cannot fail
			for r := range rounds {
				if me == 0 && r%1024 == 0 && time.Now().After(deadline) {
					stop.Store(true)
					gate[0].w.Store(math.MaxUint64) // let the other side out of its wait
				}
				if stop.Load() {
					return nil
				}
				gate[me].w.Store(uint64(r) + 1)
				for gate[1-me].w.Load() < uint64(r)+1 {
				}
				if stop.Load() {
					return nil
				}
				publish(&mine[r], 1)
				saw[r][me] = other[r].Load()
				done = r + 1
			}
			return nil
		})
		return done
	}
	var done1 int
	finished := make(chan struct{})
	go func() { done1 = side(1, cpus[1], ys, xs); close(finished) }()
	done0 := side(0, cpus[0], xs, ys)
	<-finished
	n := min(done0, done1)
	both := 0
	for r := range n {
		if saw[r][0] == 0 && saw[r][1] == 0 {
			both++
		}
	}
	t.Logf("%d rounds on CPUs %d and %d", n, cpus[0], cpus[1])
	if both > 0 {
		t.Fatalf("in %d of %d rounds both sides loaded 0 after publishing: a load passed publish's store", both, n)
	}
}
