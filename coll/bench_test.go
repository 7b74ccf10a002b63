package coll

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkReduce measures the kernels: bytes of dst per second on one
// core (b.SetBytes), for buffers that stay in cache and for ones that do
// not.
func BenchmarkReduce(b *testing.B) {
	for _, size := range []int{64 << 10, 16 << 20} {
		for _, dt := range DTypes {
			for _, op := range []Op{Sum, Max} {
				b.Run(fmt.Sprintf("%v/%v/%dKiB", dt, op, size>>10), func(b *testing.B) {
					dst, src := make([]byte, size), make([]byte, size)
					b.SetBytes(int64(size))
					for b.Loop() {
						Reduce(dst, src, dt, op)
					}
				})
			}
		}
	}
}

// BenchmarkAllReduceLocal is the algorithms without a network: four ranks
// in one process.
func BenchmarkAllReduceLocal(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20, 16 << 20} {
		for _, alg := range []Algorithm{Ring, Tree, HalvingDoubling} {
			b.Run(fmt.Sprintf("%v/%dKiB", alg, size>>10), func(b *testing.B) {
				ts := Local(4)
				cs := make([]*Comm, 4)
				for r := range cs {
					cs[r], _ = New(ts[r], Config{Algorithm: alg})
					defer cs[r].Close()
				}
				bufs := make([][]byte, 4)
				for r := range bufs {
					bufs[r] = make([]byte, size)
				}
				b.SetBytes(int64(size))
				start := make([]chan struct{}, 3)
				done := make(chan error, 3)
				for r := 1; r < 4; r++ {
					start[r-1] = make(chan struct{})
					go func() {
						for range start[r-1] {
							done <- cs[r].AllReduce(context.Background(), bufs[r], bufs[r], Float32, Sum)
						}
					}()
				}
				for b.Loop() {
					for _, s := range start {
						s <- struct{}{}
					}
					if err := cs[0].AllReduce(context.Background(), bufs[0], bufs[0], Float32, Sum); err != nil {
						b.Fatal(err)
					}
					for range 3 {
						if err := <-done; err != nil {
							b.Fatal(err)
						}
					}
				}
				for _, s := range start {
					close(s)
				}
			})
		}
	}
}

// TestSteadyStateAllocations: once warm, an allreduce allocates next to
// nothing per call (a few small objects for the sends' contexts), not
// per chunk or per byte.
func TestSteadyStateAllocations(t *testing.T) {
	if raceDetector {
		t.Skip("allocation counts mean nothing under -race (sync.Pool drops items at random); go test ./coll counts them")
	}
	ts := Local(2)
	c0, _ := New(ts[0], Config{Chunk: 64 << 10})
	c1, _ := New(ts[1], Config{Chunk: 64 << 10})
	defer c0.Close()
	defer c1.Close()
	b0, b1 := make([]byte, 4<<20), make([]byte, 4<<20)
	start, done := make(chan struct{}), make(chan error)
	go func() {
		for range start {
			done <- c1.AllReduce(context.Background(), b1, b1, Float32, Sum)
		}
	}()
	defer close(start)
	run := func() {
		start <- struct{}{}
		if err := c0.AllReduce(context.Background(), b0, b0, Float32, Sum); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	run()
	allocs := testing.AllocsPerRun(20, run)
	// 4 MiB in 64 KiB chunks is 64 chunks per rank and direction: an
	// allocation per chunk would show as hundreds.
	if allocs > 10 {
		t.Fatalf("%v allocations per allreduce of 4 MiB in 64 chunks", allocs)
	}
	t.Logf("%v allocations per allreduce (both ranks) of 4 MiB", allocs)
}
