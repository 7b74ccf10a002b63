package dpu

import (
	"fmt"
	"strings"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/sysinfo"
)

// Emulated is the Generation of an agent that is not on a DPU.
const Emulated = "emulated"

// DetectPlatform reads the machine under root ("/": this one): the
// BlueField generation from its DMI strings or device tree, or from the
// integrated ConnectX functions on an Arm machine's own PCI bus.
func DetectPlatform(root string) (api.Platform, error) {
	fs := sysinfo.FS{Root: root}
	p := api.Platform{Generation: Emulated}
	var err error
	if p.CPU, err = fs.CPU(); err != nil {
		return p, fmt.Errorf("dpu: platform: %w", err)
	}
	if p.MemoryBytes, err = fs.MemoryBytes(); err != nil {
		return p, fmt.Errorf("dpu: platform: %w", err)
	}
	if p.NICs, err = fs.NICs(); err != nil {
		return p, fmt.Errorf("dpu: platform: %w", err)
	}
	dmi := fs.DMI()
	for _, s := range []string{dmi["product_name"], fs.DeviceTreeModel(), dmi["board_name"]} {
		if g := generationIn(s); g != "" {
			p.Generation, p.Model = g, s
			return p, nil
		}
	}
	if p.CPU.Arch == "arm64" {
		devs, _ := fs.PCIDevices()
		for _, d := range devs {
			if gen, _, ok := d.BlueField(); ok {
				p.Generation = gen
			}
		}
	}
	return p, nil
}

func generationIn(s string) string {
	switch {
	case strings.Contains(s, "BlueField-3"), strings.Contains(s, "BlueField 3"):
		return "BlueField-3"
	case strings.Contains(s, "BlueField-2"), strings.Contains(s, "BlueField 2"):
		return "BlueField-2"
	case strings.Contains(s, "BlueField"):
		return "BlueField"
	}
	return ""
}
