package sysinfo

import "testing"

func TestCountList(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{{"0", 1, true}, {"0-3", 4, true}, {"0-3,8,10-11", 7, true}, {"", 0, false}, {"3-1", 0, false}, {"a", 0, false}} {
		n, err := countList(tt.in)
		if (err == nil) != tt.ok || n != tt.want {
			t.Errorf("countList(%q) = %d, %v", tt.in, n, err)
		}
	}
}

func TestMissingTreeIsAnError(t *testing.T) {
	fs := FS{Root: t.TempDir()}
	if _, err := fs.CPU(); err == nil {
		t.Fatal("CPU of an empty tree")
	}
	if devs, err := fs.PCIDevices(); err != nil || devs != nil {
		t.Fatalf("no PCI bus: %v %v", devs, err)
	}
}
