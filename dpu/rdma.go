package dpu

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/sysinfo"
)

// RDMAConfig is what the agent does with RDMA at start: the soft-RoCE
// links it makes (where RDMA is tested without an RDMA NIC: VMs, CI).
type RDMAConfig struct {
	// Rxe names network interfaces to run soft-RoCE on (the kernel's
	// rdma_rxe): at start the agent adds an RDMA link rxe_NETDEV on each
	// that has none (netlink, as `rdma link add rxe_eth0 type rxe netdev
	// eth0` does). One it cannot add is reported in the status, not
	// fatal: the agent serves what does not need RDMA.
	Rxe []string `toml:"rxe"`
}

func (c *RDMAConfig) withDefaults() error { return nil }

var netdevName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,15}$`)

func (c *RDMAConfig) validate() error {
	for _, n := range c.Rxe {
		if !netdevName.MatchString(n) {
			return fmt.Errorf("--rdma-rxe %q: want a network interface's name: %w", n, ErrConfig)
		}
	}
	return nil
}

func (c *RDMAConfig) flags(fs *flag.FlagSet) {
	fs.Var(listFlag{&c.Rxe}, "rdma-rxe", "run soft-RoCE (rdma_rxe) on these network interfaces, NETDEV,...: an RDMA link rxe_NETDEV on each (tests and VMs without an RDMA NIC)")
}

// rdmaService makes the soft-RoCE links asked for and reports the
// machine's RDMA devices, and the RDMA rail: absent while hecd carries no
// op over RDMA, with why.
type rdmaService struct {
	cfg    RDMAConfig
	root   string   // where /sys is read ("": this machine's)
	errors []string // the links asked for that could not be made
}

func newRDMAService(c RDMAConfig) *rdmaService { return &rdmaService{cfg: c} }

func (s *rdmaService) Name() string { return "rdma" }

// Open adds the soft-RoCE links asked for.
func (s *rdmaService) Open(_ context.Context, env *Env) error {
	for _, dev := range s.cfg.Rxe {
		if err := addRxe(dev); err != nil {
			s.errors = append(s.errors, err.Error())
			env.Log.Warn("rdma: no soft-RoCE link", "netdev", dev, "err", err)
		}
	}
	return nil
}

// addRxe adds the soft-RoCE link rxe_DEV on network interface dev, unless
// an RDMA link runs on it already.
func addRxe(dev string) error {
	if _, err := netlink.LinkByName(dev); err != nil {
		return fmt.Errorf("rxe on %s: %w", dev, err)
	}
	links, err := netlink.RdmaLinkList()
	if err != nil {
		return fmt.Errorf("rxe on %s: the kernel's RDMA netlink: %w (a kernel without RDMA)", dev, err)
	}
	devs, _ := sysinfo.FS{}.RDMADevices()
	for _, l := range links {
		for _, d := range devs {
			if d.Name == l.Attrs.Name && slices.ContainsFunc(d.Ports, func(p sysinfo.RDMAPort) bool { return p.NetDev == dev }) {
				return nil // there already
			}
		}
	}
	name := "rxe_" + dev
	if err := netlink.RdmaLinkAdd(name, "rxe", dev); err != nil {
		return fmt.Errorf("rxe on %s: rdma link add %s type rxe: %w (the kernel's rdma_rxe not there, or not loaded?)", dev, name, err)
	}
	return nil
}

func (s *rdmaService) Start(context.Context, *Env) error { return nil }
func (s *rdmaService) Stop()                             {}

// rdmaRailAbsent is why the RDMA rail is absent where devices are.
const rdmaRailAbsent = "absent: this hecd carries its handoff and peer links over shared memory and TCP only (no RDMA transport yet)"

func (s *rdmaService) status() *api.RDMAStatus {
	devs, err := sysinfo.FS{Root: s.root}.RDMADevices()
	st := &api.RDMAStatus{Devices: devs, Summary: sysinfo.RDMASummary(devs, err), Errors: s.errors}
	st.Rail = rdmaRailAbsent
	if len(devs) == 0 {
		st.Rail = "absent: " + st.Summary
	}
	return st
}

func (s *rdmaService) Status() api.Service {
	st := s.status()
	note := st.Summary
	if len(st.Errors) > 0 {
		note += "; " + strings.Join(st.Errors, "; ")
	}
	return api.Service{Name: "rdma", Served: false, Note: note}
}

// FillStatus reports the devices and the rail.
func (s *rdmaService) FillStatus(st *api.Status) { st.RDMA = s.status() }
