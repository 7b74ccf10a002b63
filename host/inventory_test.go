package host

import (
	"slices"
	"strings"
	"testing"
)

func TestDiscoverRecordedHost(t *testing.T) {
	inv, err := Discover("testdata/x86-bf3")
	if err != nil {
		t.Fatal(err)
	}
	if inv.CPU.Arch != "amd64" || inv.CPU.Count != 64 || !strings.Contains(inv.CPU.Model, "6430") {
		t.Fatalf("cpu: %+v", inv.CPU)
	}
	for _, f := range []string{"avx2", "avx512f", "gfni"} {
		if !slices.Contains(inv.CPU.SIMD, f) {
			t.Errorf("SIMD %v lacks %s", inv.CPU.SIMD, f)
		}
	}
	if len(inv.BlueFields) != 2 || inv.BlueFields[0].Generation != "BlueField-3" || inv.BlueFields[0].NUMANode != 1 {
		t.Fatalf("bluefields: %+v", inv.BlueFields)
	}
	want := map[string]int{"ens1f0np0": 200000, "ens1f1np1": 0, "eno1": 25000, "docker0": 0}
	if len(inv.NICs) != len(want) {
		t.Fatalf("nics: %+v", inv.NICs)
	}
	for _, n := range inv.NICs {
		if sp, ok := want[n.Name]; !ok || sp != n.SpeedMbps {
			t.Errorf("nic %+v: want speed %d", n, sp)
		}
		if n.Name == "docker0" && !n.Virtual {
			t.Error("docker0 not virtual")
		}
	}
	if len(inv.GPUs) != 0 || !strings.HasPrefix(inv.GPUStatus, "no GPU") {
		t.Fatalf("gpus in a recorded tree: %+v %q", inv.GPUs, inv.GPUStatus)
	}
}

// On this machine: no GPU is a state, reported, not an error.
func TestDiscoverThisHost(t *testing.T) {
	inv, err := Discover("/")
	if err != nil {
		t.Fatal(err)
	}
	if inv.CPU.Count < 1 || inv.MemoryBytes <= 0 {
		t.Fatalf("%+v", inv)
	}
	if len(inv.GPUs) == 0 && !strings.HasPrefix(inv.GPUStatus, "no GPU (") {
		t.Fatalf("no GPUs and no reason: %q", inv.GPUStatus)
	}
	t.Logf("gpu: %s", inv.GPUStatus)
}
