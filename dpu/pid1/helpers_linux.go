package pid1

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func cmdline() map[string]string {
	b, _ := os.ReadFile("/proc/cmdline")
	m := map[string]string{}
	for _, f := range strings.Fields(string(b)) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "hec.") {
			m[k] = v
		}
	}
	return m
}

func uname() string {
	var u unix.Utsname
	unix.Uname(&u)
	return unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
}

func readUptime() string {
	b, _ := os.ReadFile("/proc/uptime")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0] + "s"
}

// loadModules loads the modules listed (in dependency order) in list.
func loadModules(log *slog.Logger, list string) {
	b, err := os.ReadFile(list)
	if err != nil {
		log.Warn("no module list", "err", err)
		return
	}
	for _, p := range strings.Fields(string(b)) {
		f, err := os.Open(p)
		if err != nil {
			log.Warn("module", "path", p, "err", err)
			continue
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			log.Warn("load module", "module", filepath.Base(p), "err", err)
		}
	}
}

// configureNetwork sets up the first network interface and returns its
// name ("" when hec.ip is not given).
func configureNetwork(log *slog.Logger, params map[string]string) (string, error) {
	if lo, err := netlink.LinkByName("lo"); err == nil {
		netlink.LinkSetUp(lo)
	}
	ip := params[IPParam]
	if ip == "" {
		return "", nil
	}
	addr, err := netlink.ParseAddr(ip)
	if err != nil {
		return "", fmt.Errorf("hec.ip=%s: %w", ip, err)
	}
	// The NIC appears once its driver has probed: wait a little.
	var link netlink.Link
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		links, _ := netlink.LinkList()
		for _, l := range links {
			if l.Attrs().Name != "lo" && l.Type() == "device" {
				link = l
				break
			}
		}
		if link != nil || time.Now().After(deadline) {
			break
		}
	}
	if link == nil {
		return "", errors.New("no network interface appeared")
	}
	name := link.Attrs().Name
	if err := netlink.AddrAdd(link, addr); err != nil && !errors.Is(err, unix.EEXIST) {
		return name, fmt.Errorf("address %s on %s: %w", ip, name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return name, err
	}
	if gw := params[GatewayParam]; gw != "" {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil && !errors.Is(err, unix.EEXIST) {
			return name, fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	log.Info("network", "link", name, "addr", ip, "gw", params[GatewayParam])
	return name, nil
}

// mountState mounts the state disk (ext4) at /var/lib/hec.
func mountState(log *slog.Logger, dev string) error {
	if dev == "" {
		dev = "/dev/vda"
	}
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(dev); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear", dev)
		}
	}
	os.MkdirAll(StateMount, 0o755)
	if err := unix.Mount(dev, StateMount, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s (ext4) at %s: %w (the harness formats the disk image when it creates it)", dev, StateMount, err)
	}
	log.Info("state disk", "dev", dev, "at", StateMount)
	return nil
}

// findIvshmem returns the write-combining BAR2 resource of the ivshmem
// device (vendor 0x1af4, device 0x1110), enabling the device.
func findIvshmem() (string, error) {
	devs, _ := filepath.Glob("/sys/bus/pci/devices/*")
	for _, d := range devs {
		v, _ := os.ReadFile(filepath.Join(d, "vendor"))
		id, _ := os.ReadFile(filepath.Join(d, "device"))
		if strings.TrimSpace(string(v)) != "0x1af4" || strings.TrimSpace(string(id)) != "0x1110" {
			continue
		}
		os.WriteFile(filepath.Join(d, "enable"), []byte("1"), 0)
		for _, r := range []string{"resource2_wc", "resource2"} {
			if _, err := os.Stat(filepath.Join(d, r)); err == nil {
				return filepath.Join(d, r), nil
			}
		}
		return "", fmt.Errorf("ivshmem at %s has no BAR2 resource", d)
	}
	return "", errors.New("no ivshmem device (vendor 0x1af4, device 0x1110)")
}
