//go:build cgo && !nonvml

package host

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hecsys/hec/shared/sysinfo"
)

// discoverGPUs asks NVML, loaded at run time: no library, no driver or no
// GPU is a normal state, reported in the status.
func discoverGPUs(fs sysinfo.FS) ([]GPU, string) {
	switch ret := nvml.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, "no GPU (NVML library not found)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, "no GPU (NVIDIA driver not loaded)"
	default:
		return nil, "no GPU (NVML: " + nvml.ErrorString(ret) + ")"
	}
	defer nvml.Shutdown()
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, "no GPU (NVML: " + nvml.ErrorString(ret) + ")"
	}
	if n == 0 {
		return nil, "no GPU (NVML sees none)"
	}
	var gpus []GPU
	for i := 0; i < n; i++ {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		g := GPU{Index: i, NUMANode: -1}
		g.Name, _ = d.GetName()
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryBytes = m.Total
		}
		if p, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			g.PCI = busID(p.BusId[:])
			if s, err := fsRead(fs, g.PCI); err == nil {
				g.NUMANode = s
			}
		}
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			st, ret := d.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				break
			}
			if st == nvml.FEATURE_ENABLED {
				g.NVLinks++
			}
		}
		gpus = append(gpus, g)
	}
	return gpus, fmt.Sprintf("%d GPU(s) through NVML", len(gpus))
}

// busID turns NVML's "00000000:3B:00.0" into sysfs's "0000:3b:00.0".
func busID(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	id := strings.ToLower(s.String())
	if len(id) == len("00000000:3b:00.0") {
		id = id[4:]
	}
	return id
}

func fsRead(fs sysinfo.FS, pci string) (int, error) {
	devs, err := fs.PCIDevices()
	if err != nil {
		return -1, err
	}
	for _, d := range devs {
		if d.Address == pci {
			return d.NUMANode, nil
		}
	}
	return -1, strconv.ErrSyntax
}
