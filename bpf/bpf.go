//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Class is a traffic class of the agent's interface.
type Class uint32

// The classes, as xdp.c numbers them.
const (
	ClassRESP Class = iota
	ClassUDPGet
	ClassPeer
	ClassMgmt
	ClassOther
	NumClasses
)

var classNames = [NumClasses]string{"resp", "udp_get", "peer", "mgmt", "other"}

// ParseClass reads a class's name.
func ParseClass(s string) (Class, bool) {
	for c, n := range classNames {
		if n == s {
			return Class(c), true
		}
	}
	return 0, false
}

func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint32(c))
}

// Drop reasons, as xdp.c numbers them.
const (
	DropACL = iota
	DropMalformed
	NumDrops
)

// DropReasons names the drop reasons by index.
var DropReasons = [NumDrops]string{"acl", "malformed"}

// Ports are the service ports xdp.c classifies by; 0 leaves a class out.
type Ports struct {
	RESP, UDPGet, Peer, Mgmt uint16
}

// Config configures the program. The zero value classifies nothing as a
// service, allows every source and samples nothing.
type Config struct {
	Ports Ports
	// DefaultDeny drops packets to the service ports from sources the
	// allow-list does not name (default: allow them).
	DefaultDeny bool
	// SampleEvery samples one packet in this many into the ring buffer
	// (0: off); SnapLen bytes of each (default 128, at most SnapMax).
	SampleEvery uint32
	SnapLen     uint32
	// SampleClasses limits sampling to these classes (bit 1<<Class);
	// 0 samples every class.
	SampleClasses uint32
	// HotGET answers UDP GETs for keys in the hot map.
	HotGET bool
	// PinDir pins the maps that outlive the agent (counters, talkers,
	// allow-list) in this directory on a bpf filesystem; "" pins nothing.
	PinDir string
}

// Limits of the program (xdp.c).
const (
	SnapMax    = 256
	HotSlots   = 4096
	HotKeyMax  = 60
	HotBodyMax = 1024
)

// DefaultPinRoot is where the agent pins its maps, one directory per name.
const DefaultPinRoot = "/sys/fs/bpf/hec"

// Program is the loaded XDP program and its maps.
type Program struct {
	objs hecObjects
	hot  *HotCache

	mu     sync.Mutex
	cfg    Config
	link   link.Link
	ifname string
	mode   Mode
}

// ErrUnsupported reports a kernel without what the program needs.
var ErrUnsupported = errors.New("bpf: not supported by this kernel")

// Load loads the program and its maps (opening the pinned ones under
// cfg.PinDir when they exist, so counters carry on).
func Load(cfg Config) (*Program, error) {
	if cfg.SnapLen == 0 {
		cfg.SnapLen = 128
	}
	if cfg.SnapLen > SnapMax {
		return nil, fmt.Errorf("bpf: snap length %d over %d", cfg.SnapLen, SnapMax)
	}
	liftMemlock()
	spec, err := loadHec()
	if err != nil {
		return nil, fmt.Errorf("bpf: %w", err)
	}
	var opts ebpf.CollectionOptions
	if cfg.PinDir != "" {
		if err := ensureBPFFS(cfg.PinDir); err != nil {
			return nil, err
		}
		opts.Maps.PinPath = cfg.PinDir
	} else {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
	}
	p := &Program{cfg: cfg}
	err = spec.LoadAndAssign(&p.objs, &opts)
	if errors.Is(err, ebpf.ErrMapIncompatible) && cfg.PinDir != "" {
		// A pin from an older layout: start those counters over.
		for name, m := range spec.Maps {
			if m.Pinning == ebpf.PinByName {
				os.Remove(filepath.Join(cfg.PinDir, name))
			}
		}
		err = spec.LoadAndAssign(&p.objs, &opts)
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("bpf: load: %w (verifier: %+v)", err, ve)
		}
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("bpf: load: %w: %w", err, ErrUnsupported)
		}
		return nil, fmt.Errorf("bpf: load: %w", err)
	}
	if err := p.writeConfig(); err != nil {
		p.objs.Close()
		return nil, err
	}
	if p.hot, err = newHotCache(p.objs.HecHotSlots, p.objs.HecHotHits); err != nil {
		p.objs.Close()
		return nil, err
	}
	return p, nil
}

// ensureBPFFS makes dir on a bpf filesystem, mounting one on /sys/fs/bpf
// when dir lies under it and none is mounted (as PID 1 or on a bare host).
func ensureBPFFS(dir string) error {
	if strings.HasPrefix(filepath.Clean(dir)+"/", "/sys/fs/bpf/") {
		var st unix.Statfs_t
		if err := unix.Statfs("/sys/fs/bpf", &st); err == nil && st.Type != unix.BPF_FS_MAGIC {
			if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
				return fmt.Errorf("bpf: mount bpffs on /sys/fs/bpf: %w", err)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bpf: pin dir: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("bpf: pin dir %s is not on a bpf filesystem", dir)
	}
	return nil
}

func (p *Program) writeConfig() error {
	c := hecConfig{
		Port:          [4]uint16{p.cfg.Ports.RESP, p.cfg.Ports.UDPGet, p.cfg.Ports.Peer, p.cfg.Ports.Mgmt},
		SampleEvery:   p.cfg.SampleEvery,
		Snaplen:       p.cfg.SnapLen,
		SampleClasses: p.cfg.SampleClasses,
	}
	if p.cfg.DefaultDeny {
		c.AclDefaultDeny = 1
	}
	if p.cfg.HotGET {
		c.HotOn = 1
	}
	if err := p.objs.HecConfig.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("bpf: config: %w", err)
	}
	return nil
}

// Config returns the program's configuration.
func (p *Program) Config() Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// SetSampling changes the sampling rate (0: off), the snap length (0:
// keep) and the classes sampled (a mask of 1<<Class; 0: every class).
func (p *Program) SetSampling(every, snapLen, classes uint32) error {
	if snapLen > SnapMax {
		return fmt.Errorf("bpf: snap length %d over %d", snapLen, SnapMax)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.SampleEvery = every
	p.cfg.SampleClasses = classes
	if snapLen > 0 {
		p.cfg.SnapLen = snapLen
	}
	return p.writeConfig()
}

// SetDefaultDeny changes the allow-list's default.
func (p *Program) SetDefaultDeny(deny bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.DefaultDeny = deny
	return p.writeConfig()
}

// Hot is the program's hot-GET map.
func (p *Program) Hot() *HotCache { return p.hot }

// Mode is how the program attaches.
type Mode int

// The attach modes: Auto tries native, then generic.
const (
	ModeAuto Mode = iota
	ModeNative
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return "auto"
}

// ParseMode reads "auto", "native" or "generic".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "auto":
		return ModeAuto, nil
	case "native", "driver":
		return ModeNative, nil
	case "generic", "skb":
		return ModeGeneric, nil
	}
	return 0, fmt.Errorf("bpf: xdp mode %q: want auto, native or generic", s)
}

// ErrForeignProgram is returned by Attach when the interface runs an XDP
// program the loader did not attach.
var ErrForeignProgram = errors.New("bpf: interface has an XDP program hec did not attach")

// Attach attaches the program to ifname (in the calling thread's network
// namespace). An XDP program already there that this Program did not
// attach is replaced only with replace; otherwise ErrForeignProgram.
// It returns the mode it attached in.
func (p *Program) Attach(ifname string, mode Mode, replace bool) (Mode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.link != nil {
		return p.mode, fmt.Errorf("bpf: already attached to %s", p.ifname)
	}
	nl, err := netlink.LinkByName(ifname)
	if err != nil {
		return mode, fmt.Errorf("bpf: interface %s: %w", ifname, err)
	}
	if x := nl.Attrs().Xdp; x != nil && x.Attached {
		if !replace {
			return mode, fmt.Errorf("%w: %s has program id %d (replace it with --xdp-replace)", ErrForeignProgram, ifname, x.ProgId)
		}
		for _, f := range []int{0, unix.XDP_FLAGS_SKB_MODE, unix.XDP_FLAGS_DRV_MODE} {
			netlink.LinkSetXdpFdWithFlags(nl, -1, f)
		}
		if nl, err = netlink.LinkByName(ifname); err == nil && nl.Attrs().Xdp != nil && nl.Attrs().Xdp.Attached {
			return mode, fmt.Errorf("%w: %s: could not remove program id %d (held by a bpf link?)", ErrForeignProgram, ifname, nl.Attrs().Xdp.ProgId)
		}
	}
	idx := nl.Attrs().Index
	try := func(m Mode) (link.Link, error) {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		return link.AttachXDP(link.XDPOptions{Program: p.objs.HecXdp, Interface: idx, Flags: flags})
	}
	var l link.Link
	switch mode {
	case ModeAuto:
		if l, err = try(ModeNative); err == nil {
			mode = ModeNative
		} else if l, err = try(ModeGeneric); err == nil {
			mode = ModeGeneric
		}
	default:
		l, err = try(mode)
	}
	if err != nil {
		return mode, fmt.Errorf("bpf: attach xdp to %s (%s): %w", ifname, mode, err)
	}
	p.link, p.ifname, p.mode = l, ifname, mode
	return mode, nil
}

// Detach takes the program off its interface.
func (p *Program) Detach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link, p.ifname = nil, ""
	if err != nil {
		return fmt.Errorf("bpf: detach: %w", err)
	}
	return nil
}

// Close detaches the program and releases it; pinned maps stay.
func (p *Program) Close() error {
	err := p.Detach()
	if p.hot != nil {
		p.hot.close()
	}
	if cerr := p.objs.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("bpf: close: %w", cerr)
	}
	return err
}

// Run runs the program once on a packet (BPF_PROG_TEST_RUN) and returns
// its action and the packet as the program left it.
func (p *Program) Run(pkt []byte) (action uint32, out []byte, err error) {
	out = make([]byte, len(pkt)+HotBodyMax+256)
	opts := ebpf.RunOptions{Data: pkt, DataOut: out}
	action, err = p.objs.HecXdp.Run(&opts)
	if err != nil {
		return 0, nil, fmt.Errorf("bpf: test run: %w", err)
	}
	return action, opts.DataOut, nil
}

// Benchmark runs the program repeat times on pkt and returns the mean time
// per run as the kernel measured it. A program that rewrites the packet
// sees its own output from the second run on: see BenchmarkLive.
func (p *Program) Benchmark(pkt []byte, repeat int) (action uint32, nsPerRun float64, err error) {
	action, d, err := p.objs.HecXdp.Benchmark(pkt, repeat, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("bpf: benchmark: %w", err)
	}
	return action, float64(d.Nanoseconds()), nil
}

// JITedBytes returns the size of the program's machine code: 0 when the
// kernel interprets it.
func (p *Program) JITedBytes() (uint32, error) {
	info, err := p.objs.HecXdp.Info()
	if err != nil {
		return 0, fmt.Errorf("bpf: program info: %w", err)
	}
	n, err := info.JitedSize()
	if err != nil {
		return 0, fmt.Errorf("bpf: program info: %w", err)
	}
	return n, nil
}

// Program returns the XDP program (for tests and benchmarks).
func (p *Program) Program() *ebpf.Program { return p.objs.HecXdp }

// XDP action values.
const (
	XDPAborted = 0
	XDPDrop    = 1
	XDPPass    = 2
	XDPTx      = 3
)

// AttachPass attaches a program that passes every packet, natively, to
// ifname in the calling thread's network namespace, through netlink so
// that it stays once this process ends (remove it with ip link set dev
// IFACE xdp off, or by deleting the interface). A veth delivers XDP_TX
// frames from its far end only while this end runs an XDP program.
func AttachPass(ifname string) error {
	pass, err := LoadPass()
	if err != nil {
		return err
	}
	defer pass.Close()
	nl, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("bpf: interface %s: %w", ifname, err)
	}
	if err := netlink.LinkSetXdpFdWithFlags(nl, pass.FD(), unix.XDP_FLAGS_DRV_MODE); err != nil {
		return fmt.Errorf("bpf: attach pass program to %s: %w", ifname, err)
	}
	return nil
}

// LoadPass loads the program that passes every packet (AttachPass; the
// benchmarks time BPF_PROG_TEST_RUN's own cost with it).
func LoadPass() (*ebpf.Program, error) {
	liftMemlock()
	spec, err := loadHec()
	if err != nil {
		return nil, fmt.Errorf("bpf: %w", err)
	}
	var objs struct {
		Pass *ebpf.Program `ebpf:"hec_pass"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("bpf: load pass program: %w", err)
	}
	return objs.Pass, nil
}

// liftMemlock lifts RLIMIT_MEMLOCK, which kernels before 5.11 charge BPF
// maps to (later ones charge the memory cgroup). Not cilium/ebpf's rlimit
// package: its init creates a map to probe the kernel before main runs,
// which, in hecd as process 1, is before /proc is mounted — and the
// library caches the failed mount table read for good.
func liftMemlock() {
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	unix.Setrlimit(unix.RLIMIT_MEMLOCK, &inf)
}
