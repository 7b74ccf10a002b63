package dpu

import (
	"context"
	"time"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/rail"
)

// Calibration runs in the background: first once the agent is ready (it
// never delays readiness), then every calibrationEvery, so a rate drifts
// with the machine's load.
const (
	calibrationDelay = 300 * time.Millisecond
	calibrationEvery = 10 * time.Minute
	calibrationBytes = 16 << 20               // two buffers: well past a BlueField's caches
	calibrationTime  = 200 * time.Millisecond // per rate: many quota periods
)

// calibrate keeps the agent's rail rates fresh until ctx ends.
func (a *Agent) calibrate(ctx context.Context) {
	t := time.NewTimer(calibrationDelay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ways := a.disp.workers
		cp, crc := rail.MeasureCPU(calibrationBytes, ways, calibrationTime)
		a.mu.Lock()
		a.rails = []api.Rail{{Rail: rail.DPU, Kind: rail.DPUCores.String(), Cores: ways, CopyRate: cp, CRC32CRate: crc, MeasuredAt: time.Now()}}
		a.mu.Unlock()
		a.log.Debug("calibrated", "copy_GBps", cp/1e9, "crc32c_GBps", crc/1e9, "cores", ways)
		t.Reset(calibrationEvery)
	}
}

// Rails returns the agent's calibrated rail rates with their age.
func (a *Agent) Rails() []api.Rail {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]api.Rail, len(a.rails))
	for i, r := range a.rails {
		r.AgeSeconds = time.Since(r.MeasuredAt).Seconds()
		out[i] = r
	}
	return out
}
