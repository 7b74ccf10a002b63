package sysinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// FS reads a machine's /proc and /sys below Root ("/" or "": this machine).
type FS struct{ Root string }

func (f FS) path(p string) string {
	if f.Root == "" {
		return p
	}
	return filepath.Join(f.Root, p)
}

func (f FS) read(p string) (string, error) {
	b, err := os.ReadFile(f.path(p))
	return strings.TrimSpace(string(b)), err
}

// CPU is what a machine's processors are.
type CPU struct {
	Arch  string `json:"arch"`  // amd64 or arm64, from the features seen
	Count int    `json:"count"` // online CPUs
	Model string `json:"model"`
	// SIMD lists the vector and CRC features that matter to HEC's kernels:
	// sse4_2 pclmulqdq avx2 avx512f gfni on x86; asimd (NEON) sve crc32
	// pmull on Arm.
	SIMD []string `json:"simd"`
}

var simdOfInterest = []string{"sse4_2", "pclmulqdq", "avx2", "avx512f", "avx512bw", "gfni", "vpclmulqdq",
	"asimd", "sve", "sve2", "crc32", "pmull"}

// armParts names the Arm cores HEC meets (MIDR part numbers).
var armParts = map[string]string{
	"0xd08": "Cortex-A72", "0xd0c": "Neoverse-N1", "0xd41": "Cortex-A78", "0xd42": "Cortex-A78AE",
	"0xd40": "Neoverse-V1", "0xd4f": "Neoverse-V2", "0xd49": "Neoverse-N2", "0xd03": "Cortex-A53",
}

// CPU reads /proc/cpuinfo and /sys/devices/system/cpu/online.
func (f FS) CPU() (CPU, error) {
	s, err := f.read("/proc/cpuinfo")
	if err != nil {
		return CPU{}, fmt.Errorf("sysinfo: %w", err)
	}
	var c CPU
	feats := map[string]bool{}
	procs := 0
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			procs++
		case "model name":
			if c.Model == "" {
				c.Model = v
			}
		case "CPU part":
			if c.Model == "" {
				if n, ok := armParts[v]; ok {
					c.Model = n
				} else {
					c.Model = "Arm part " + v
				}
			}
		case "flags":
			c.Arch = "amd64"
			for _, x := range strings.Fields(v) {
				feats[x] = true
			}
		case "Features":
			c.Arch = "arm64"
			for _, x := range strings.Fields(v) {
				feats[x] = true
			}
		}
	}
	for _, x := range simdOfInterest {
		if feats[x] {
			c.SIMD = append(c.SIMD, x)
		}
	}
	c.Count = procs
	if online, err := f.read("/sys/devices/system/cpu/online"); err == nil {
		if n, err := countList(online); err == nil {
			c.Count = n
		}
	}
	return c, nil
}

// countList counts the CPUs in a kernel list such as "0-3,8,10-11".
func countList(s string) (int, error) {
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("sysinfo: cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("sysinfo: cpu list %q", s)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

// MemoryBytes reads MemTotal from /proc/meminfo.
func (f FS) MemoryBytes() (int64, error) {
	s, err := f.read("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("sysinfo: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("sysinfo: MemTotal %q", v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("sysinfo: no MemTotal in /proc/meminfo")
}

// NIC is a network interface.
type NIC struct {
	Name  string `json:"name"`
	MAC   string `json:"mac,omitempty"`
	MTU   int    `json:"mtu"`
	State string `json:"state"` // operstate: up, down, unknown
	// SpeedMbps is the link speed; 0 when the driver does not say (virtual
	// links, links that are down).
	SpeedMbps int    `json:"speed_mbps"`
	Driver    string `json:"driver,omitempty"`
	PCI       string `json:"pci,omitempty"` // the device's PCI address, when it has one
	Virtual   bool   `json:"virtual"`       // no device behind it (veth, bridge, tap, lo)
}

// NICs lists /sys/class/net, without lo.
func (f FS) NICs() ([]NIC, error) {
	dir := f.path("/sys/class/net")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sysinfo: %w", err)
	}
	var out []NIC
	for _, e := range ents {
		name := e.Name()
		if name == "lo" || strings.HasPrefix(name, ".") {
			continue
		}
		base := "/sys/class/net/" + name
		n := NIC{Name: name, State: "unknown"}
		n.MAC, _ = f.read(base + "/address")
		if v, err := f.read(base + "/mtu"); err == nil {
			n.MTU, _ = strconv.Atoi(v)
		}
		if v, err := f.read(base + "/operstate"); err == nil && v != "" {
			n.State = v
		}
		if v, err := f.read(base + "/speed"); err == nil { // EINVAL when down or virtual
			if sp, err := strconv.Atoi(v); err == nil && sp > 0 {
				n.SpeedMbps = sp
			}
		}
		if dev, err := filepath.EvalSymlinks(f.path(base + "/device")); err == nil {
			// The PCI function is the device or, for virtio, its parent.
			for p := dev; p != "/" && p != "."; p = filepath.Dir(p) {
				if pciAddr.MatchString(filepath.Base(p)) {
					n.PCI = filepath.Base(p)
					break
				}
			}
			if drv, err := filepath.EvalSymlinks(filepath.Join(dev, "driver")); err == nil {
				n.Driver = filepath.Base(drv)
			}
		} else {
			n.Virtual = true
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

var pciAddr = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// PCIDevice is one function on the PCI bus.
type PCIDevice struct {
	Address  string `json:"address"`
	Vendor   uint16 `json:"vendor"`
	Device   uint16 `json:"device"`
	Class    uint32 `json:"class"`
	NUMANode int    `json:"numa_node"` // -1: unknown
}

// VendorMellanox is Mellanox/NVIDIA's PCI vendor id.
const VendorMellanox = 0x15b3

var blueFieldIDs = map[uint16]struct{ gen, fn string }{
	0xa2d2: {"BlueField", "network"},   // MT416842 BlueField integrated ConnectX-5
	0xa2d6: {"BlueField-2", "network"}, // MT42822 BlueField-2 integrated ConnectX-6 Dx
	0xc2d3: {"BlueField-2", "management"},
	0xa2dc: {"BlueField-3", "network"}, // MT43244 BlueField-3 integrated ConnectX-7
}

// BlueField reports whether d is a BlueField's integrated function, and
// its generation ("BlueField-2") and role ("network", "management").
func (d PCIDevice) BlueField() (generation, function string, ok bool) {
	id, ok := blueFieldIDs[d.Device]
	if !ok || d.Vendor != VendorMellanox {
		return "", "", false
	}
	return id.gen, id.fn, true
}

// PCIDevices lists /sys/bus/pci/devices. A machine without PCI (some
// Arm boards, containers) has none: not an error.
func (f FS) PCIDevices() ([]PCIDevice, error) {
	dir := f.path("/sys/bus/pci/devices")
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sysinfo: %w", err)
	}
	var out []PCIDevice
	for _, e := range ents {
		base := "/sys/bus/pci/devices/" + e.Name()
		d := PCIDevice{Address: e.Name(), NUMANode: -1}
		v, err1 := f.hex(base + "/vendor")
		dv, err2 := f.hex(base + "/device")
		if err1 != nil || err2 != nil {
			continue
		}
		d.Vendor, d.Device = uint16(v), uint16(dv)
		if c, err := f.hex(base + "/class"); err == nil {
			d.Class = uint32(c)
		}
		if s, err := f.read(base + "/numa_node"); err == nil {
			if n, err := strconv.Atoi(s); err == nil {
				d.NUMANode = n
			}
		}
		out = append(out, d)
	}
	return out, nil
}

func (f FS) hex(p string) (uint64, error) {
	s, err := f.read(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 32)
}

// DeviceTreeModel returns /proc/device-tree/model (Arm boards), without
// its trailing NUL; "" when there is none.
func (f FS) DeviceTreeModel() string {
	b, err := os.ReadFile(f.path("/proc/device-tree/model"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(bytes.TrimRight(b, "\x00")))
}

// DMI returns the DMI strings HEC looks at (product_name, board_name,
// sys_vendor), "" where absent.
func (f FS) DMI() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"product_name", "board_name", "sys_vendor"} {
		m[k], _ = f.read("/sys/class/dmi/id/" + k)
	}
	return m
}
