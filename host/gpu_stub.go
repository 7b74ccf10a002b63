//go:build !cgo || nonvml

package host

import "github.com/hecsys/hec/shared/sysinfo"

// discoverGPUs: NVML needs cgo, and libhec (-tags nonvml) leaves it out.
func discoverGPUs(sysinfo.FS) ([]GPU, string) {
	return nil, "no GPU (built without NVML: no cgo, or libhec)"
}
