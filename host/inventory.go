package host

import (
	"fmt"
	"runtime"

	"github.com/hecsys/hec/shared/sysinfo"
)

// Inventory is what discovery found on the host: the rails it may offer.
type Inventory struct {
	CPU         sysinfo.CPU   `json:"cpu"`
	MemoryBytes int64         `json:"memory_bytes"`
	NICs        []sysinfo.NIC `json:"nics"`
	BlueFields  []BlueField   `json:"bluefields"`
	GPUs        []GPU         `json:"gpus"`
	// GPUStatus says why GPUs is empty when it is: "no GPU (NVML library
	// not found)", "no GPU (built without cgo)", … Never an error.
	GPUStatus string `json:"gpu_status"`
}

// BlueField is a BlueField DPU function seen on the host's PCI bus.
type BlueField struct {
	PCI        string `json:"pci"`
	Generation string `json:"generation"` // BlueField, BlueField-2, BlueField-3
	Function   string `json:"function"`   // network, management
	NUMANode   int    `json:"numa_node"`
}

// GPU is a GPU NVML reports.
type GPU struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	MemoryBytes uint64 `json:"memory_bytes"`
	PCI         string `json:"pci"`
	NUMANode    int    `json:"numa_node"`
	NVLinks     int    `json:"nvlinks"` // active NVLink links, 0 where none
}

// Mellanox/NVIDIA's PCI vendor id and the BlueField functions' device ids.
const VendorMellanox = 0x15b3

var blueFieldIDs = map[uint16]struct{ gen, fn string }{
	0xa2d2: {"BlueField", "network"},   // MT416842 BlueField integrated ConnectX-5
	0xa2d6: {"BlueField-2", "network"}, // MT42822 BlueField-2 integrated ConnectX-6 Dx
	0xc2d3: {"BlueField-2", "management"},
	0xa2dc: {"BlueField-3", "network"}, // MT43244 BlueField-3 integrated ConnectX-7
}

// Discover inventories the host whose /proc and /sys are under root ("/":
// this machine). GPUs come from NVML on this machine only.
func Discover(root string) (Inventory, error) {
	fs := sysinfo.FS{Root: root}
	var inv Inventory
	var err error
	if inv.CPU, err = fs.CPU(); err != nil {
		return inv, fmt.Errorf("host: discover: %w", err)
	}
	if inv.MemoryBytes, err = fs.MemoryBytes(); err != nil {
		return inv, fmt.Errorf("host: discover: %w", err)
	}
	if inv.NICs, err = fs.NICs(); err != nil {
		return inv, fmt.Errorf("host: discover: %w", err)
	}
	devs, err := fs.PCIDevices()
	if err != nil {
		return inv, fmt.Errorf("host: discover: %w", err)
	}
	for _, d := range devs {
		if id, ok := blueFieldIDs[d.Device]; ok && d.Vendor == VendorMellanox {
			inv.BlueFields = append(inv.BlueFields, BlueField{PCI: d.Address, Generation: id.gen, Function: id.fn, NUMANode: d.NUMANode})
		}
	}
	if root == "" || root == "/" {
		inv.GPUs, inv.GPUStatus = discoverGPUs(fs)
	} else {
		inv.GPUStatus = "no GPU (not looked for in a recorded tree)"
	}
	if inv.CPU.Arch == "" {
		inv.CPU.Arch = runtime.GOARCH
	}
	return inv, nil
}
