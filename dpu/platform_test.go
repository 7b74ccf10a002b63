package dpu

import (
	"slices"
	"testing"
)

func TestDetectPlatform(t *testing.T) {
	p, err := DetectPlatform("testdata/bf2-arm")
	if err != nil {
		t.Fatal(err)
	}
	if p.Generation != "BlueField-2" || p.CPU.Arch != "arm64" || p.CPU.Count != 8 || p.CPU.Model != "Cortex-A72" {
		t.Fatalf("bf2 tree: %+v", p)
	}
	if !slices.Contains(p.CPU.SIMD, "asimd") || slices.Contains(p.CPU.SIMD, "sve") {
		t.Fatalf("bf2 SIMD: %v", p.CPU.SIMD)
	}
	if p.MemoryBytes != 16063084<<10 || len(p.NICs) != 3 {
		t.Fatalf("bf2 memory %d, NICs %+v", p.MemoryBytes, p.NICs)
	}
	for _, n := range p.NICs {
		if n.Name == "p0" && (n.SpeedMbps != 25000 || n.PCI != "0000:03:00.0" || n.Driver != "mlx5_core") {
			t.Fatalf("p0: %+v", n)
		}
	}
	// This machine is not a DPU.
	here, err := DetectPlatform("/")
	if err != nil {
		t.Fatal(err)
	}
	if here.Generation != Emulated || here.CPU.Count < 1 {
		t.Fatalf("this machine: %+v", here)
	}
}
