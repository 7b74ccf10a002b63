package rail

import (
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/shared/crc32c"
)

// MeasureCPU measures this process's copy and crc32c rates, in bytes per
// second, on ways goroutines: each passes over its share of a buffer of
// size bytes (a large buffer: the streaming rate a large operation sees,
// not a cache's) for at least minTime, and the rates add up. The time
// matters as much as the size: under a CPU quota a run shorter than a few
// quota periods runs at full speed.
//
// Each goroutine works in slices of at most MeasureSlice bytes and lets
// the others run between them (runtime.Gosched), timing only its slices:
// an agent calibrating while it serves (on one core, one P) keeps its
// requests waiting for at most a slice, not for the 10 ms Go's monitor
// lets a goroutine run, and the rate is the core's, not what the serving
// left of it.
//
// The buffers are mapped for the call and unmapped after it, not taken
// from Go's heap: giving 2×size bytes of heap back at once
// (debug.FreeOSMemory) held the agent's one P for 75 ms, and leaving it
// to Go's scavenger keeps them for minutes. Faulting them in and
// unmapping them go page by page and piece by piece, letting the others
// run between: a page fault costs 15 µs on a virtualised core, 32 MiB of
// them 120 ms.
func MeasureCPU(size, ways int, minTime time.Duration) (copyRate, crcRate float64) {
	ways = max(ways, 1)
	buf, unmap := mapBuffer(2 * size)
	defer unmap()
	src, dst := buf[:size:size], buf[size:]
	page := os.Getpagesize()
	for lo := 0; lo < size; lo += page {
		hi := min(lo+page, size)
		for i := lo; i < hi; i++ {
			src[i] = byte(i * 13)
		}
		copy(dst[lo:hi], src[lo:hi])
		runtime.Gosched()
	}
	copyRate = inSlices(size, ways, minTime, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
	crcRate = inSlices(size, ways, minTime, func(lo, hi int) { crc32c.Update(0, src[lo:hi]) })
	return copyRate, crcRate
}

// mapBuffer maps size bytes of anonymous memory and returns them with the
// function that unmaps them, 64 KiB at a time with runtime.Gosched between
// (3 ms for 32 MiB at once on a virtualised core). Where mapping fails it
// returns heap memory and a function that does nothing.
func mapBuffer(size int) ([]byte, func()) {
	base, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, size), func() {}
	}
	return unsafe.Slice((*byte)(base), size), func() {
		const piece = 64 << 10
		for off := 0; off < size; off += piece {
			unix.MunmapPtr(unsafe.Add(base, off), uintptr(min(piece, size-off))) //nolint:errcheck // ours, mapped above
			runtime.Gosched()
		}
	}
}

// MeasureSlice is the most MeasureCPU works on before it lets another
// goroutine run: a request's slice on the agent (dpu.YieldEvery).
const MeasureSlice = 256 << 10

// inSlices runs work over [0, size) split among ways goroutines, slice by
// slice, each for at least minTime of its own work, and returns the sum of
// their rates.
func inSlices(size, ways int, minTime time.Duration, work func(lo, hi int)) float64 {
	part := (size + ways - 1) / ways
	rates := make([]float64, ways)
	var wg sync.WaitGroup
	for w := range ways {
		lo, hi := min(w*part, size), min((w+1)*part, size)
		if lo == hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var busy time.Duration
			done := 0
			for at := lo; busy < minTime; at = lo + (at-lo+MeasureSlice)%(hi-lo) {
				end := min(at+MeasureSlice, hi)
				t0 := time.Now()
				work(at, end)
				busy += time.Since(t0)
				done += end - at
				runtime.Gosched()
			}
			rates[w] = float64(done) / busy.Seconds()
		}()
	}
	wg.Wait()
	var sum float64
	for _, r := range rates {
		sum += r
	}
	return sum
}

// TimeRate runs f, which processes size bytes (pass is 0, 1, 2, …: f may
// move through a larger buffer), once to warm up (page faults), then again
// until at least minTime and three runs have passed, and returns the rate
// in bytes per second.
func TimeRate(size int, minTime time.Duration, f func(pass int) error) (float64, error) {
	if err := f(0); err != nil {
		return 0, err
	}
	t0 := time.Now()
	n := 0
	for n < 3 || time.Since(t0) < minTime {
		if err := f(n + 1); err != nil {
			return 0, err
		}
		n++
	}
	return float64(size*n) / time.Since(t0).Seconds(), nil
}
