package rail

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestMeasureCPULetsOthersRun: on one P (an agent on one core), another
// goroutine runs between MeasureCPU's slices, not only when Go's monitor
// preempts it every 10 ms: it runs hundreds of times in a calibration
// where it would run some 40 (two rates of 200 ms). On the code before,
// which timed whole passes of 4 MiB without yielding, it ran 23 times.
func TestMeasureCPULetsOthersRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ran.Add(1)
			runtime.Gosched()
		}
	}()
	copyRate, crcRate := MeasureCPU(16<<20, 1, 200*time.Millisecond)
	close(stop)
	<-done
	n := ran.Load()
	t.Logf("copy %.2f GB/s, crc32c %.2f GB/s; the other goroutine ran %d times", copyRate/1e9, crcRate/1e9, n)
	if copyRate <= 0 || crcRate <= 0 {
		t.Fatalf("rates %v, %v", copyRate, crcRate)
	}
	// At least a slice of MeasureSlice bytes per 400 µs of work (0.65
	// GB/s: slower than any core this runs on) lets it run 1000 times.
	if n < 500 {
		t.Fatalf("another goroutine ran %d times while MeasureCPU measured for 400 ms, want hundreds", n)
	}
}
