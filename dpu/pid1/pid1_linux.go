package dpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Kernel command line parameters read by RunInit (all optional):
//
//	hec.ip=10.0.2.15/24   address of the first non-loopback interface
//	hec.gw=10.0.2.2       default gateway
//	hec.state=/dev/vda    the state disk (ext4), mounted at /var/lib/hec
//	hec.loglevel=info
//	hec.lease_timeout=3s
//	hec.durability=sync   kv writes acknowledged on disk (sync) or in memory (async)
//	hec.xdp=eth0          the interface of the XDP fast path (default the one of hec.ip; off: none)
//	hec.xdp_mode=auto     auto, native or generic
//
// and for the peer layer (a node of a test cluster):
//
//	hec.node_id=5                this agent's node id
//	hec.peer=10.77.0.5:7700      the address it takes peers on
//	hec.peers=1@10.77.0.1:7700,… static members
//	hec.cluster_key=HEX          the cluster key (a test cluster's, made per cluster)
//	hec.cluster=NAME             the cluster's name
//	hec.membership=etcd://H:P    members from etcd instead
const stateMount = "/var/lib/hec"

// IsInit reports whether this process is process 1 (the init of a VM or a
// DPU image).
func IsInit() bool { return os.Getpid() == 1 }

// RunInit is hecd as process 1: it mounts the pseudo file systems, loads the
// kernel modules shipped in the image, configures the network from the
// kernel command line, mounts the state disk, finds the region on the
// ivshmem device, reaps orphans, and runs the agent under a watchdog that
// restarts it when it fails and reboots when it wedges. On SIGTERM or a
// poweroff request it stops the agent, syncs and powers off. It does not
// return unless it cannot power off.
func RunInit(log *slog.Logger) error {
	start := time.Now()
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
		{"bpf", "/sys/fs/bpf", "bpf"}, {"tmpfs", "/run", "tmpfs"}, {"tmpfs", "/tmp", "tmpfs"},
	} {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			log.Warn("mount", "fs", m.fs, "at", m.dst, "err", err)
		}
	}
	params := cmdline()
	if lvl, ok := params["hec.loglevel"]; ok {
		var l slog.Level
		if l.UnmarshalText([]byte(lvl)) == nil {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
		}
	}
	log.Info("init", "kernel", uname(), "since boot", readUptime())
	loadModules(log, "/etc/hec/modules")
	go reap()
	nic, err := configureNetwork(log, params)
	if err != nil {
		log.Error("network", "err", err)
	}
	cfg := Config{Mgmt: "0.0.0.0:7600", TCP: "0.0.0.0:7610", RESP: "0.0.0.0:6380", UDP: "0.0.0.0:11311",
		StateDir: stateMount, MapExisting: true}
	f := false
	cfg.CheckPIDs, cfg.Doorbell = &f, &f // hosts are across the VM (or PCIe) boundary
	cfg.KVDurability = params["hec.durability"]
	// The XDP fast path on the agent's NIC, unless hec.xdp=off (or
	// another interface); hec.xdp_mode=auto|native|generic.
	cfg.XDP, cfg.XDPMode = Off, params["hec.xdp_mode"]
	if nic != "" {
		cfg.XDP = nic
	}
	if v := params["hec.xdp"]; v != "" {
		cfg.XDP = v
	}
	if d, err := time.ParseDuration(params["hec.lease_timeout"]); err == nil {
		cfg.LeaseTimeout.Duration = d
	}
	if err := configurePeers(&cfg, params); err != nil {
		log.Error("peer layer: off", "err", err)
		cfg.Peer = Off
	}
	if err := mountState(log, params["hec.state"]); err != nil {
		log.Error("state disk: running without persistent state", "err", err)
		cfg.StateDir = "/run/hec"
	}
	if path, err := findIvshmem(); err != nil {
		log.Error("no ivshmem region: the shared-memory handoff is off", "err", err)
		cfg.Shm = Off
	} else {
		cfg.Shm = path
	}
	log.Info("init done", "took", time.Since(start).Round(time.Millisecond), "region", cfg.Shm)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR2)
	poweroff := make(chan struct{}, 1)
	superviseAgent(ctx, log, cfg, poweroff, stop)
	stop()
	log.Info("powering off")
	unix.Sync()
	unix.Unmount(stateMount, 0)
	unix.Sync()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

// superviseAgent runs the agent until ctx ends or a poweroff is requested,
// restarting it when Run fails (at most 5 times a minute) and rebooting the
// machine when its dispatcher stays unhealthy (wedged) for 10s.
func superviseAgent(ctx context.Context, log *slog.Logger, cfg Config, poweroff chan struct{}, stop func()) {
	var restarts []time.Time
	for ctx.Err() == nil {
		a, err := New(cfg, log)
		if err != nil {
			log.Error("agent config", "err", err)
			return
		}
		a.powerOff = func() { stop() }
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(actx) }()
		wedged := time.Time{}
		tick := time.NewTicker(time.Second)
	watch:
		for {
			select {
			case err := <-done:
				cancel()
				tick.Stop()
				if ctx.Err() != nil {
					return
				}
				log.Error("agent exited; restarting", "err", err)
				break watch
			case <-tick.C:
				if !a.ready.Load() {
					continue
				}
				if err := a.healthy(); err != nil {
					if wedged.IsZero() {
						wedged = time.Now()
					}
					if time.Since(wedged) > 10*time.Second {
						log.Error("agent wedged: rebooting", "err", err)
						unix.Sync()
						unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
					}
				} else {
					wedged = time.Time{}
				}
			}
		}
		now := time.Now()
		restarts = append(restarts, now)
		for len(restarts) > 0 && now.Sub(restarts[0]) > time.Minute {
			restarts = restarts[1:]
		}
		if len(restarts) > 5 {
			log.Error("agent failing repeatedly: rebooting")
			unix.Sync()
			unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		}
		time.Sleep(time.Second)
	}
}

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

// reap collects orphaned children, as process 1 must.
func reap() {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGCHLD)
	for range ch {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// configureNetwork sets up the first network interface and returns its
// name ("" when hec.ip is not given).
func configureNetwork(log *slog.Logger, params map[string]string) (string, error) {
	if lo, err := netlink.LinkByName("lo"); err == nil {
		netlink.LinkSetUp(lo)
	}
	ip := params["hec.ip"]
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
	if gw := params["hec.gw"]; gw != "" {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil && !errors.Is(err, unix.EEXIST) {
			return name, fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	log.Info("network", "link", name, "addr", ip, "gw", params["hec.gw"])
	return name, nil
}

// configurePeers fills cfg's peer layer from hec.* parameters.
func configurePeers(cfg *Config, params map[string]string) error {
	if params["hec.peer"] == "" {
		return nil
	}
	id, err := strconv.ParseUint(params["hec.node_id"], 10, 32)
	if err != nil || id == 0 {
		return fmt.Errorf("hec.node_id=%q: want a node id ≥ 1", params["hec.node_id"])
	}
	key := params["hec.cluster_key"]
	if len(key) < 16 {
		return fmt.Errorf("hec.cluster_key: want at least 16 characters")
	}
	os.MkdirAll("/run/hec", 0o700)
	cfg.ClusterKeyFile = "/run/hec/cluster.key"
	if err := os.WriteFile(cfg.ClusterKeyFile, []byte(key), 0o600); err != nil {
		return err
	}
	cfg.NodeID, cfg.Peer = uint32(id), params["hec.peer"]
	if p := params["hec.peers"]; p != "" {
		cfg.Peers = []string{p}
	}
	cfg.Cluster, cfg.Membership = params["hec.cluster"], params["hec.membership"]
	return nil
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
	os.MkdirAll(stateMount, 0o755)
	if err := unix.Mount(dev, stateMount, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s (ext4) at %s: %w (the harness formats the disk image when it creates it)", dev, stateMount, err)
	}
	log.Info("state disk", "dev", dev, "at", stateMount)
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
