//go:build !cgo

package host

import "github.com/hecsys/hec/shared/sysinfo"

// discoverGPUs: NVML needs cgo; this build has none.
func discoverGPUs(sysinfo.FS) ([]GPU, string) {
	return nil, "no GPU (built without cgo: NVML not available)"
}
