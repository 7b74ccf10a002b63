package sysinfo

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// tree writes files (path → content) under a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") { // a directory
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestRDMADevices(t *testing.T) {
	const ib = "sys/class/infiniband/"
	rxe := map[string]string{
		ib + "rxe_eth0/node_type":                 "1: CA",
		ib + "rxe_eth0/node_guid":                 "5054:00ff:fe12:3456",
		ib + "rxe_eth0/parent":                    "eth0",
		ib + "rxe_eth0/ports/1/state":             "4: ACTIVE",
		ib + "rxe_eth0/ports/1/link_layer":        "Ethernet",
		ib + "rxe_eth0/ports/1/rate":              "10 Gb/sec (1X QDR)",
		ib + "rxe_eth0/ports/1/gids/0":            "fe80:0000:0000:0000:5054:00ff:fe12:3456",
		ib + "rxe_eth0/ports/1/gid_attrs/ndevs/0": "eth0",
		ib + "rxe_eth0/ports/1/gid_attrs/types/0": "IB/RoCE v1",
		ib + "mlx5_0/node_type":                   "1: CA",
		ib + "mlx5_0/ports/1/state":               "1: DOWN",
		ib + "mlx5_0/ports/1/link_layer":          "InfiniBand",
		ib + "mlx5_0/ports/2/state":               "4: ACTIVE",
		ib + "mlx5_0/ports/2/link_layer":          "InfiniBand",
		ib + "mlx5_0/ports/not-a-port/state":      "4: ACTIVE",
	}
	for _, c := range []struct {
		name    string
		files   map[string]string
		want    []RDMADevice
		err     error
		summary string
	}{
		{"no RDMA in the kernel", map[string]string{"sys/class/net/": ""}, nil, ErrNoRDMA, "no RDMA device (no /sys/class/infiniband"},
		{"RDMA, no device", map[string]string{ib: ""}, nil, nil, "no RDMA device (the kernel has RDMA; no device"},
		{"soft-RoCE and an InfiniBand NIC", rxe, []RDMADevice{
			{Name: "mlx5_0", NodeType: "CA", Ports: []RDMAPort{
				{Port: 1, State: "DOWN", LinkLayer: "InfiniBand"}, {Port: 2, State: "ACTIVE", LinkLayer: "InfiniBand"}}},
			{Name: "rxe_eth0", NodeType: "CA", NodeGUID: "5054:00ff:fe12:3456", Soft: true, Ports: []RDMAPort{
				{Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", Rate: "10 Gb/sec (1X QDR)", NetDev: "eth0",
					GID: "fe80:0000:0000:0000:5054:00ff:fe12:3456", GIDType: "IB/RoCE v1"}}},
		}, nil, "mlx5_0 port 1 DOWN InfiniBand; mlx5_0 port 2 ACTIVE InfiniBand; rxe_eth0 port 1 ACTIVE RoCE over eth0 (software)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := FS{Root: tree(t, c.files)}.RDMADevices()
			if !errors.Is(err, c.err) || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, %v; want %+v, %v", got, err, c.want, c.err)
			}
			if s := RDMASummary(got, err); !strings.HasPrefix(s, c.summary) {
				t.Errorf("summary %q, want it to start %q", s, c.summary)
			}
		})
	}
}
