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
	// RDMA are the RDMA devices (/sys/class/infiniband); RDMAStatus says
	// in a line what they are, or why there is none.
	RDMA       []sysinfo.RDMADevice `json:"rdma"`
	RDMAStatus string               `json:"rdma_status"`
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
		if gen, fn, ok := d.BlueField(); ok {
			inv.BlueFields = append(inv.BlueFields, BlueField{PCI: d.Address, Generation: gen, Function: fn, NUMANode: d.NUMANode})
		}
	}
	var rerr error
	inv.RDMA, rerr = fs.RDMADevices()
	inv.RDMAStatus = sysinfo.RDMASummary(inv.RDMA, rerr)
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
