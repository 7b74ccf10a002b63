package host

import (
	"testing"

	"github.com/hecsys/hec/shared/rail"
)

// After a one-shot split's trial, the rest is planned with each rail at the
// slower of the two rates seen for it: neither a flattering model nor a
// flattering trial decides alone which rail is the faster.
func TestSlowerOfBoth(t *testing.T) {
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
		rails := func(r [2]float64) []rail.Rail {
			return []rail.Rail{{Name: RailHost, Kind: rail.HostCPU, Rate: r[0]}, {Name: RailDPU, Kind: rail.DPUCores, Rate: r[1]}}
		}
		cautious := slowerOfBoth(rails(tc.trial), rails(tc.model))
		best := rail.Split(cautious, n, 4096).BestOne
		var rate float64
		for _, r := range cautious {
			if r.Name == best {
				rate = r.Rate
			}
		}
		if best != tc.want || rate != tc.wantRate {
			t.Errorf("%s: %s at %.3g B/s, want %s at %.3g", tc.name, best, rate, tc.want, tc.wantRate)
		}
	}
}
