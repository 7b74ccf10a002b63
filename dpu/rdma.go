package dpu

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/hecsys/hec/dpu/handoff"
	"github.com/hecsys/hec/dpu/handoff/rdma"
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
	// Listen is where the RDMA handoff takes hosts (IPv4:PORT of an RDMA
	// device's interface, or 0.0.0.0:PORT; "" or "off": none). Hosts dial
	// rdma://HOST:PORT.
	Listen string `toml:"listen"`
	// Window is the largest host window the agent mirrors per connection
	// (bytes of the agent's memory each host may take; default 64 MiB).
	Window uint64 `toml:"window"`
}

func (c *RDMAConfig) withDefaults() error {
	if c.Window == 0 {
		c.Window = 64 << 20
	}
	if c.Listen == Off {
		c.Listen = ""
	}
	return nil
}

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
	fs.StringVar(&c.Listen, "rdma-listen", c.Listen, "serve the handoff over RDMA at IPv4:PORT (hosts dial rdma://HOST:PORT; needs an RDMA device there and rdma-core's libraries)")
	fs.Var(listFlag{&c.Rxe}, "rdma-rxe", "run soft-RoCE (rdma_rxe) on these network interfaces, NETDEV,...: an RDMA link rxe_NETDEV on each (tests and VMs without an RDMA NIC)")
}

// rdmaService makes the soft-RoCE links asked for and reports the
// machine's RDMA devices, and the RDMA rail: absent while hecd carries no
// op over RDMA, with why.
type rdmaService struct {
	cfg     RDMAConfig
	root    string   // where /sys is read ("": this machine's)
	errors  []string // the links asked for that could not be made
	handoff *rdma.Transport
	// peerOver is what carries the peer links: "tcp" or "rdma".
	peerOver string
}

func newRDMAService(c RDMAConfig, peerTransport string) *rdmaService {
	return &rdmaService{cfg: c, peerOver: peerTransport}
}

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

// Start: the handoff over RDMA is one of the agent's transports
// (openHandoff).
func (s *rdmaService) Start(context.Context, *Env) error { return nil }

// openHandoff listens for the handoff over RDMA where asked: nil where
// not. An address that is none, or one beyond loopback without
// credentials, is an error (ErrConfig); one that cannot listen (no device
// has that address, no rdma-core) leaves the agent serving the rest and
// says why in the status.
func (s *rdmaService) openHandoff(env *Env) (handoff.Transport, error) {
	if s.cfg.Listen == "" {
		return nil, nil
	}
	ap, err := netip.ParseAddrPort(s.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("--rdma-listen %q: want IPv4:PORT: %w", s.cfg.Listen, ErrConfig)
	}
	// An RDMA device's address reaches beyond this machine: as the TCP
	// handoff, it wants the operator's token, or --insecure.
	if err := env.Shared.checkExposed(env.Log, "--rdma-listen", s.cfg.Listen, env.Shared.Token != ""); err != nil {
		return nil, err
	}
	t, err := rdma.Listen(ap, s.cfg.Window)
	if err != nil {
		env.Shared.notServed("rdma-listen") // not an insecure listener: none
		s.errors = append(s.errors, err.Error())
		env.Log.Warn("rdma: no RDMA handoff", "err", err)
		return nil, nil
	}
	s.handoff = t
	return t, nil
}

func (s *rdmaService) Stop() {}

func (s *rdmaService) status() *api.RDMAStatus {
	devs, err := sysinfo.FS{Root: s.root}.RDMADevices()
	st := &api.RDMAStatus{Devices: devs, Summary: sysinfo.RDMASummary(devs, err), Errors: s.errors}
	peers := "peer links over TCP"
	if s.peerOver == "rdma" {
		peers = "peer links over RDMA"
	}
	switch {
	case len(devs) == 0:
		st.Rail = "absent: " + st.Summary
	case s.handoff != nil:
		st.Rail = fmt.Sprintf("handoff at rdma://%s (windows up to %d MiB); %s", s.handoff.Addr(), s.cfg.Window>>20, peers)
	case s.peerOver == "rdma":
		st.Rail = "no RDMA handoff (--rdma-listen); " + peers
	default:
		st.Rail = "absent: this hecd serves no RDMA handoff (--rdma-listen), and its peer links run over TCP"
	}
	return st
}

func (s *rdmaService) Status() api.Service {
	st := s.status()
	note := st.Summary
	if len(st.Errors) > 0 {
		note += "; " + strings.Join(st.Errors, "; ")
	}
	if s.handoff != nil {
		return api.Service{Name: "rdma", Addr: s.handoff.Addr(), Served: true, Note: note}
	}
	return api.Service{Name: "rdma", Served: false, Note: note}
}

// FillStatus reports the devices and the rail.
func (s *rdmaService) FillStatus(st *api.Status) { st.RDMA = s.status() }
