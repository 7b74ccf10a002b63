package ring

import (
	"testing"

	"github.com/hecsys/hec/shared/wire"
)

// benchPair formats a region in /dev/shm with an echo agent goroutine and
// leases one pair.
func benchPair(b *testing.B) *HostQP {
	r, a := newFileRegion(b, Geometry{QueuePairs: 2, Entries: 256, WindowSize: 1 << 20}, AgentConfig{})
	startServer(b, &server{a: a})
	_, q := mustLease(b, r)
	return q
}

// BenchmarkRoundTrip is one 64-byte descriptor there and back, both ends in
// this process (two goroutines).
func BenchmarkRoundTrip(b *testing.B) {
	q := benchPair(b)
	req := []wire.Desc{{Op: wire.OpPing}}
	out := make([]wire.Desc, 1)
	var w Waiter
	b.ReportAllocs()
	b.SetBytes(wire.DescSize)
	for i := 0; b.Loop(); i++ {
		q.Submit(req)
		w.Reset()
		for {
			n, err := q.Poll(out)
			if err != nil {
				b.Fatal(err)
			}
			if n == 1 {
				break
			}
			w.Wait()
		}
		if i%4096 == 0 {
			q.Beat()
		}
	}
}

// BenchmarkBatched keeps the ring full: descriptors per second on one pair.
func BenchmarkBatched(b *testing.B) {
	q := benchPair(b)
	batch := make([]wire.Desc, q.Entries())
	out := make([]wire.Desc, q.Entries())
	var w Waiter
	b.ReportAllocs()
	b.SetBytes(wire.DescSize)
	sent, got := 0, 0
	for got < b.N {
		if room := min(q.Room(), b.N-sent); room > 0 {
			sent += q.Submit(batch[:room])
		}
		n, err := q.Poll(out)
		if err != nil {
			b.Fatal(err)
		}
		got += n
		if n > 0 {
			w.Reset()
			q.Beat()
		} else {
			w.Wait()
		}
	}
}
