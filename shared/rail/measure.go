package rail

import (
	"sync"
	"time"

	"github.com/hecsys/hec/shared/crc32c"
)

// MeasureCPU measures this process's copy and crc32c rates, in bytes per
// second, on ways goroutines: passes over quarters of a buffer of size
// bytes in turn (a large buffer: the streaming rate a large operation sees,
// not a cache's) for at least minTime each, timed together. The time
// matters as much as the size: under a CPU quota a run shorter than a few
// quota periods runs at full speed.
func MeasureCPU(size, ways int, minTime time.Duration) (copyRate, crcRate float64) {
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i * 13)
	}
	copy(dst, src) // fault every page in before anything is timed
	q := size / 4
	at := func(b []byte, pass int) []byte { return b[(pass%4)*q : (pass%4+1)*q] }
	copyRate, _ = TimeRate(q, minTime, func(p int) error { parallelCopy(at(dst, p), at(src, p), ways); return nil })
	crcRate, _ = TimeRate(q, minTime, func(p int) error { crc32c.UpdateParallel(0, at(src, p), ways); return nil })
	return copyRate, crcRate
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

func parallelCopy(dst, src []byte, ways int) {
	if ways <= 1 {
		copy(dst, src)
		return
	}
	part := (len(src) + ways - 1) / ways
	var wg sync.WaitGroup
	for i := 0; i < ways; i++ {
		lo, hi := min(i*part, len(src)), min((i+1)*part, len(src))
		wg.Add(1)
		go func() { defer wg.Done(); copy(dst[lo:hi], src[lo:hi]) }()
	}
	wg.Wait()
}
