package host

import (
	"math"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/rail"
)

// After a one-shot split's trial, the rest is planned with each rail at the
// slower of the two rates seen for it: neither a flattering model nor a
// flattering trial decides alone which rail is the faster.
func TestCautiousRates(t *testing.T) {
	const n = 224 << 20
	for _, tc := range []struct {
		name         string
		trial, model [2]float64 // host, dpu rates (bytes/s)
		want         string
		wantRate     float64
	}{
		// A DPU profile's CPU quota lets a short trial run at full speed.
		{"the trial flatters the dpu", [2]float64{4e9, 1e10}, [2]float64{5.8e9, 1.6e9}, RailHost, 4e9},
		// A model claims an agent no agent can be.
		{"the model flatters the dpu", [2]float64{4e9, 2e9}, [2]float64{1e10, 2e10}, RailHost, 4e9},
		{"both find the dpu faster", [2]float64{1e9, 3e9}, [2]float64{1.2e9, 4e9}, RailDPU, 3e9},
	} {
		model := []rail.Rail{{Name: RailHost, Kind: rail.HostCPU, Rate: tc.model[0]}, {Name: RailDPU, Kind: rail.DPUCores, Rate: tc.model[1]}}
		// A trial of 8 MiB on each rail, timed at the trial's rates.
		const share = 8 << 20
		tp := rail.Plan{Shares: []rail.Share{{Rail: RailHost, Bytes: share}, {Rail: RailDPU, Bytes: share}}}
		took := []time.Duration{
			time.Duration(share / tc.trial[0] * float64(time.Second)),
			time.Duration(share / tc.trial[1] * float64(time.Second)),
		}
		cautious := cautiousRates(model, tp, took)
		best := rail.Split(cautious, n, 4096).BestOne
		var rate float64
		for _, r := range cautious {
			if r.Name == best {
				rate = r.Rate
			}
		}
		if best != tc.want || math.Abs(rate/tc.wantRate-1) > 1e-6 { // durations round to the nanosecond
			t.Errorf("%s: %s at %.3g B/s, want %s at %.3g", tc.name, best, rate, tc.want, tc.wantRate)
		}
	}
}
