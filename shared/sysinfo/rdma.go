package sysinfo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
)

// RDMADevice is a device of /sys/class/infiniband: an RDMA NIC (a
// ConnectX, a BlueField's) or a software one (soft-RoCE, rxe).
type RDMADevice struct {
	Name     string     `json:"name"`
	NodeType string     `json:"node_type,omitempty"` // "CA", "RNIC", …
	NodeGUID string     `json:"node_guid,omitempty"`
	Ports    []RDMAPort `json:"ports"`
	// Soft says the device is software (rxe, siw): its "NIC" is the
	// kernel's network stack on the CPU.
	Soft bool `json:"soft,omitempty"`
}

// RDMAPort is one port of an RDMA device.
type RDMAPort struct {
	Port      int    `json:"port"`
	State     string `json:"state"`                // ACTIVE, DOWN, INIT, …
	LinkLayer string `json:"link_layer,omitempty"` // Ethernet (RoCE), InfiniBand
	Rate      string `json:"rate,omitempty"`       // as the kernel says it: "100 Gb/sec (4X EDR)"
	NetDev    string `json:"netdev,omitempty"`     // the network interface of its first GID (RoCE)
	GID       string `json:"gid,omitempty"`        // its first GID
	GIDType   string `json:"gid_type,omitempty"`   // "RoCE v2", "IB/RoCE v1"
}

// ErrNoRDMA says that the kernel shows no RDMA subsystem: no
// /sys/class/infiniband (a kernel without RDMA, or its modules not
// loaded).
var ErrNoRDMA = errors.New("no /sys/class/infiniband: the kernel has no RDMA, or no RDMA driver is loaded")

// RDMADevices lists /sys/class/infiniband, by name. A kernel without the
// RDMA subsystem is ErrNoRDMA; one with it and no device, an empty list.
func (f FS) RDMADevices() ([]RDMADevice, error) {
	ents, err := os.ReadDir(f.path("/sys/class/infiniband"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoRDMA
	}
	if err != nil {
		return nil, fmt.Errorf("sysinfo: %w", err)
	}
	var out []RDMADevice
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		base := "/sys/class/infiniband/" + name
		d := RDMADevice{Name: name}
		if v, err := f.read(base + "/node_type"); err == nil {
			d.NodeType = afterColon(v)
		}
		d.NodeGUID, _ = f.read(base + "/node_guid")
		if _, err := f.read(base + "/parent"); err == nil { // rxe and siw name the netdev they run on
			d.Soft = true
		}
		ports, _ := os.ReadDir(f.path(base + "/ports"))
		for _, p := range ports {
			n, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			pb := base + "/ports/" + p.Name()
			port := RDMAPort{Port: n, State: "unknown"}
			if v, err := f.read(pb + "/state"); err == nil {
				port.State = afterColon(v)
			}
			port.LinkLayer, _ = f.read(pb + "/link_layer")
			port.Rate, _ = f.read(pb + "/rate")
			port.NetDev, _ = f.read(pb + "/gid_attrs/ndevs/0")
			port.GID, _ = f.read(pb + "/gids/0")
			port.GIDType, _ = f.read(pb + "/gid_attrs/types/0")
			d.Ports = append(d.Ports, port)
		}
		sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Port < d.Ports[j].Port })
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// afterColon is "ACTIVE" of "4: ACTIVE", as sysfs writes states and node
// types.
func afterColon(s string) string {
	if _, v, ok := strings.Cut(s, ":"); ok {
		return strings.TrimSpace(v)
	}
	return s
}

// RDMASummary says in a line what devs are (none: why), for a status
// or inventory line.
func RDMASummary(devs []RDMADevice, err error) string {
	if err != nil {
		return "no RDMA device (" + err.Error() + ")"
	}
	if len(devs) == 0 {
		return "no RDMA device (the kernel has RDMA; no device: for soft-RoCE, hecd --rdma-rxe NETDEV)"
	}
	var parts []string
	for _, d := range devs {
		for _, p := range d.Ports {
			s := fmt.Sprintf("%s port %d %s", d.Name, p.Port, p.State)
			switch {
			case p.LinkLayer == "Ethernet" && p.NetDev != "":
				s += " RoCE over " + p.NetDev
			case p.LinkLayer != "":
				s += " " + p.LinkLayer
			}
			if d.Soft {
				s += " (software)"
			}
			parts = append(parts, s)
		}
		if len(d.Ports) == 0 {
			parts = append(parts, d.Name+" (no port)")
		}
	}
	return strings.Join(parts, "; ")
}
