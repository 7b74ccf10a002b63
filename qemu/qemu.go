package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/wire"
)

// Options configure a VM. Zero fields take the defaults noted.
type Options struct {
	Name     string // default "hec-vm"
	Bundle   string // directory with Image and initramfs.cpio; default .cache/images/qemu
	StateDir string // default StateRoot()/NAME
	Shm      string // region backing file; default /dev/shm/NAME
	ShmSize  int64  // default 64 MiB
	DiskSize int64  // state disk; default 256 MiB, sparse (the kv store, its reserve, two agent slots)
	MemoryMB int    // default 1024
	CPUs     int    // default 2
	// Host loopback ports forwarded to the agent's management, TCP
	// handoff, RESP and UDP GET ports. PortBase, when set, gives them as
	// PortBase, +1, +2 and +3; ports left 0 are chosen free, so VMs of
	// other names run side by side. VM records the ones taken.
	MgmtPort, TCPPort, RESPPort, UDPPort int
	PortBase                             int
	ReadyTimeout                         time.Duration // default DefaultReadyTimeout
	// LeaseTimeout for the agent (hec.lease_timeout); default the agent's.
	LeaseTimeout time.Duration
	// KernelArgs are appended to the kernel command line (hec.* settings,
	// such as hec.durability=async).
	KernelArgs string
	// A VM on a bridge instead of QEMU's user network (a test cluster's
	// node): QEMU runs inside network namespace NetNS on tap device Tap
	// (made there beforehand), the guest takes GuestIP (CIDR), and its
	// agent is reached at GuestIP through HTTP (which must dial inside
	// NetNS). The forwarded ports are then unused.
	NetNS, Tap, GuestIP string
	HTTP                *http.Client `json:"-"`
	// Progress, when set, is told each stage of the boot, a line each.
	Progress io.Writer `json:"-"`
	// Token is the operator's token the agent is to hold (a test
	// cluster's, shared by its nodes). Default: the VM's own, made on
	// its first boot and kept in StateDir/token.
	Token string `json:"-"` // kept in StateDir/token (0600), not in vm.json
}

func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = "hec-vm"
	}
	if o.Bundle == "" {
		o.Bundle = filepath.Join(".cache", "images", "qemu")
	}
	if o.StateDir == "" {
		o.StateDir = StateDirFor(o.Name)
	}
	if o.Shm == "" {
		o.Shm = "/dev/shm/" + o.Name
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MemoryMB, 1024)
	def(&o.CPUs, 2)
	if o.PortBase > 0 {
		def(&o.MgmtPort, o.PortBase)
		def(&o.TCPPort, o.PortBase+1)
		def(&o.RESPPort, o.PortBase+2)
		def(&o.UDPPort, o.PortBase+3)
	}
	if o.ShmSize == 0 {
		o.ShmSize = 64 << 20
	}
	if o.DiskSize == 0 {
		o.DiskSize = 256 << 20
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	return o
}

// DefaultReadyTimeout is how long Up waits for the agent to become ready:
// a VM boots in 5–10 s on an idle machine of two cores, several times that
// on a busy one (the CPU is emulated).
const DefaultReadyTimeout = 60 * time.Second

// VM is a running (or recorded) virtual machine.
type VM struct {
	Name      string        `json:"name"`
	PID       int           `json:"pid"`
	Agent     string        `json:"agent"` // --agent value for hecctl
	Mgmt      string        `json:"mgmt"`  // --mgmt value for hecctl
	TCP       string        `json:"tcp"`
	RESP      string        `json:"resp"`
	UDP       string        `json:"udp"`
	Shm       string        `json:"shm"`
	StateDir  string        `json:"state_dir"`
	Console   string        `json:"console"`
	TokenFile string        `json:"token_file"`   // the operator's token the agent holds
	BootTime  time.Duration `json:"boot_time_ns"` // QEMU start to /readyz
	StartedAt time.Time     `json:"started_at"`
	// Boot is the slot whose kernel and initramfs the boot ROM booted
	// ("base": the bundle's own); Options, how the VM was booted, for
	// Reboot.
	Boot    string  `json:"boot"`
	Options Options `json:"options"`
}

// ErrNotRunning is returned for a VM whose QEMU is gone.
var ErrNotRunning = errors.New("qemu: VM not running")

// Up boots the bundle and waits until the agent answers /readyz. QEMU runs
// in its own session, so it outlives the caller (hecctl qemu up); Down or
// PowerCut end it.
func Up(ctx context.Context, o Options) (*VM, error) {
	o = o.withDefaults()
	bin, err := exec.LookPath("qemu-system-aarch64")
	if err != nil {
		return nil, fmt.Errorf("qemu-system-aarch64 not found (apt-get install qemu-system-arm): %w", err)
	}
	for _, f := range []string{"Image", "initramfs.cpio"} {
		if _, err := os.Stat(filepath.Join(o.Bundle, f)); err != nil {
			return nil, fmt.Errorf("bundle %s: %w (run make image)", o.Bundle, err)
		}
	}
	if vm, err := Load(o.StateDir); err == nil && vm.alive() {
		return nil, fmt.Errorf("VM %s already running (pid %d)", o.Name, vm.PID)
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, err
	}
	if o.Tap == "" {
		if err := o.pickPorts(); err != nil {
			return nil, err
		}
	}
	for _, p := range []int{o.MgmtPort, o.TCPPort, o.RESPPort} {
		if o.Tap != "" {
			break
		}
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err != nil {
			return nil, fmt.Errorf("host port %d is taken (--ports BASE picks others): %w", p, err)
		} else {
			ln.Close()
		}
	}
	disk := filepath.Join(o.StateDir, "disk.img")
	if err := ensureDisk(ctx, disk, o.DiskSize); err != nil {
		return nil, err
	}
	boot, err := o.bootROM(ctx, disk)
	if err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(o.StateDir, "token")
	if err := ensureToken(ctx, disk, tokenFile, o.Token); err != nil {
		return nil, err
	}
	if err := ensureShm(o.Shm, o.ShmSize); err != nil {
		return nil, err
	}
	console := filepath.Join(o.StateDir, "console.log")
	logf, err := os.Create(console)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// panic=-1: a panicked guest kernel reboots at once, which -no-reboot
	// turns into QEMU's exit (Panic reads why from the console), instead
	// of QEMU spinning on a dead guest.
	appendArgs := "console=ttyAMA0 quiet panic=-1 hec.ip=10.0.2.15/24 hec.gw=10.0.2.2 hec.state=/dev/vda"
	netdev := fmt.Sprintf("user,id=n0,hostfwd=tcp:127.0.0.1:%d-:%d,hostfwd=tcp:127.0.0.1:%d-:%d,hostfwd=tcp:127.0.0.1:%d-:%d,hostfwd=udp:127.0.0.1:%d-:%d",
		o.MgmtPort, api.PortMgmt, o.TCPPort, api.PortTCP, o.RESPPort, api.PortRESP, o.UDPPort, api.PortUDP)
	if o.Tap != "" {
		appendArgs = "console=ttyAMA0 quiet panic=-1 hec.ip=" + o.GuestIP + " hec.state=/dev/vda"
		netdev = "tap,id=n0,ifname=" + o.Tap + ",script=no,downscript=no"
	}
	if o.LeaseTimeout > 0 {
		appendArgs += " hec.lease_timeout=" + o.LeaseTimeout.String()
	}
	appendArgs += " " + boot.params
	if o.KernelArgs != "" {
		appendArgs += " " + o.KernelArgs
	}
	args := []string{
		"-M", "virt", "-cpu", "cortex-a72", "-smp", strconv.Itoa(o.CPUs), "-m", strconv.Itoa(o.MemoryMB),
		"-nographic", "-no-reboot", "-nic", "none",
		"-kernel", boot.kernel, "-initrd", boot.initrd,
		"-append", appendArgs,
		"-netdev", netdev, "-device", "virtio-net-pci,netdev=n0,romfile=" + nicMAC(o),
		"-object", fmt.Sprintf("memory-backend-file,id=shm,mem-path=%s,size=%d,share=on", o.Shm, o.ShmSize),
		"-device", "ivshmem-plain,memdev=shm",
		"-drive", "file=" + disk + ",if=none,format=raw,id=d0", "-device", "virtio-blk-pci,drive=d0",
	}
	cmd := exec.Command(bin, args...)
	if o.NetNS != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", o.NetNS, bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	vm := &VM{Name: o.Name, PID: cmd.Process.Pid, Agent: "shm://" + o.Shm, Mgmt: fmt.Sprintf("127.0.0.1:%d", o.MgmtPort),
		TCP: fmt.Sprintf("127.0.0.1:%d", o.TCPPort), RESP: fmt.Sprintf("127.0.0.1:%d", o.RESPPort),
		UDP: fmt.Sprintf("127.0.0.1:%d", o.UDPPort), Shm: o.Shm, StateDir: o.StateDir, Console: console, TokenFile: tokenFile, StartedAt: start,
		Boot: boot.slot, Options: o}
	client := &http.Client{Timeout: time.Second}
	if o.Tap != "" {
		ip, _, _ := strings.Cut(o.GuestIP, "/")
		at := func(port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
		vm.Mgmt, vm.TCP, vm.RESP, vm.UDP = at(api.PortMgmt), at(api.PortTCP), at(api.PortRESP), at(api.PortUDP)
		if o.HTTP != nil {
			client = o.HTTP
		}
	}
	// exited is closed when QEMU ends (waitErr says how): any number of
	// waiters see it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	if err := vm.save(); err != nil {
		cmd.Process.Kill()
		return nil, err
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "qemu: started (pid %d), console %s\n", vm.PID, console)
	}
	stages := &bootStages{console: console, w: o.Progress}
	if err := waitReady(ctx, client, vm.Mgmt, vm.Token(), o.ReadyTimeout, exited, stages.poll); err != nil {
		cmd.Process.Kill()
		<-exited
		if errors.Is(err, errExited) {
			err = fmt.Errorf("%w: %v", err, waitErr)
		}
		if why, ok := vm.Panic(); ok {
			err = fmt.Errorf("%w; the guest kernel panicked: %s", err, why)
		}
		stages.poll()
		text, _ := os.ReadFile(console)
		return nil, notReady(o.Name, console, stages.reached(), text, err)
	}
	vm.BootTime = time.Since(start)
	// QEMU stays, reaped by the goroutine above while this process lives
	// (it was started in its own session and is reparented when this
	// process exits).
	return vm, vm.save()
}

// bootMarks are the console lines that show the boot's stages, in order,
// and what each says to the operator.
var bootMarks = []struct{ mark, say string }{
	{"msg=init ", "the guest kernel is up: process 1 (hecd) is setting the machine up"},
	{`msg="init done"`, "network, state disk and region ready: starting the agent"},
	{`msg="agent started"`, "the agent is starting its services"},
}

// bootStages follows the boot's stages on the console: poll tells w (when
// set) each stage reached, once.
type bootStages struct {
	console string
	w       io.Writer
	next    int // bootMarks seen so far
}

func (s *bootStages) poll() {
	if s.next == len(bootMarks) {
		return
	}
	b, _ := os.ReadFile(s.console)
	for s.next < len(bootMarks) && strings.Contains(string(b), bootMarks[s.next].mark) {
		if s.w != nil {
			fmt.Fprintf(s.w, "qemu: %s\n", bootMarks[s.next].say)
		}
		s.next++
	}
}

// reached is the last stage the console showed ("" none).
func (s *bootStages) reached() string {
	if s.next == 0 {
		return ""
	}
	return bootMarks[s.next-1].say
}

// consoleTail is how much of the console a boot that failed carries.
const consoleTail = 2000

// notReady is Up's error for a VM that did not become ready: its first
// line says how far the boot got and the console's last line (a tool that
// prints one line, as hecctl does, shows where the boot stuck); the
// console's tail follows.
func notReady(name, console, reached string, text []byte, err error) error {
	where := "the console shows no boot stage yet"
	if reached != "" {
		where = "it got as far as: " + reached
	}
	text = bytes.TrimRight(text, "\r\n") // a serial console ends lines in CR LF
	last := bytes.TrimRight(text[bytes.LastIndexByte(text, '\n')+1:], "\r")
	if len(last) > 300 {
		last = last[:300]
	}
	if len(text) > consoleTail {
		text = text[len(text)-consoleTail:]
	}
	return fmt.Errorf("VM %s not ready: %w; %s; the console's last line: %q (all of it: %s)\nconsole's tail:\n%s",
		name, err, where, last, console, text)
}

// errExited is waitReady's error when QEMU ended first.
var errExited = errors.New("qemu exited")

func waitReady(ctx context.Context, client *http.Client, mgmt, token string, timeout time.Duration, exited <-chan struct{}, progress func()) error {
	deadline := time.Now().Add(timeout)
	req, err := http.NewRequest(http.MethodGet, "http://"+mgmt+"/readyz", nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for {
		progress()
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no /readyz within %v", timeout)
		}
	}
}

// ensureDisk creates and formats the state disk once (ext4): the guest has
// no mkfs, so "first boot" formatting happens here, when the image is made.
func ensureDisk(ctx context.Context, path string, size int64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return fmt.Errorf("mkfs.ext4 not found (apt-get install e2fsprogs): %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	f.Close()
	if out, err := exec.CommandContext(ctx, mkfs, "-q", "-F", "-L", "hec-state", tmp).CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("format state disk: %v: %s", err, out)
	}
	return os.Rename(tmp, path)
}

// ensureToken makes the state disk at disk hold the operator's token the
// harness keeps in file: the one given, else the harness's copy, else the
// one the agent made on an earlier boot (read off the disk), else a new
// one. The agent (as process 1, --token-file on its state disk) reads it
// from there; a DPU without this harness makes its own on first boot.
func ensureToken(ctx context.Context, disk, file, token string) error {
	debugfs, err := exec.LookPath("debugfs")
	if err != nil {
		return fmt.Errorf("debugfs not found (apt-get install e2fsprogs): %w", err)
	}
	if token == "" {
		if b, err := os.ReadFile(file); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	if token == "" {
		if t := strings.TrimSpace(string(debugfsCat(ctx, disk, "/token"))); len(t) >= 16 && !strings.ContainsAny(t, " \n") {
			token = t
		}
	}
	if token == "" {
		if token, err = wire.NewToken(); err != nil {
			return err
		}
	}
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	os.Chmod(file, 0o600)
	exec.CommandContext(ctx, debugfs, "-w", "-R", "rm /token", disk).Run() // absent on a new disk
	if out, err := exec.CommandContext(ctx, debugfs, "-w", "-R", "write "+file+" /token", disk).CombinedOutput(); err != nil {
		return fmt.Errorf("put the token on the state disk: %v: %s", err, out)
	}
	return nil
}

// Token is the operator's token the VM's agent holds ("" if unknown).
func (vm *VM) Token() string {
	if vm.TokenFile == "" {
		return ""
	}
	b, err := os.ReadFile(vm.TokenFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func ensureShm(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("region file: %w", err)
	}
	defer f.Close()
	return f.Truncate(size)
}

func (vm *VM) save() error {
	b, _ := json.MarshalIndent(vm, "", "  ")
	// 0600: the kernel arguments may hold a cluster key.
	if err := os.WriteFile(filepath.Join(vm.StateDir, "vm.json"), b, 0o600); err != nil {
		return err
	}
	return os.Chmod(filepath.Join(vm.StateDir, "vm.json"), 0o600)
}

// Reboot boots the VM recorded in stateDir again, as it was booted (its
// ports, disk, region, kernel arguments), once its QEMU has ended: the
// guest rebooted (QEMU runs with -no-reboot), panicked or was cut. The
// boot ROM chooses the kernel and initramfs from the slots' record.
func Reboot(ctx context.Context, stateDir string, progress io.Writer) (*VM, error) {
	vm, err := Load(stateDir)
	if err != nil {
		return nil, err
	}
	if vm.alive() {
		return vm, nil
	}
	o := vm.Options
	if o.StateDir == "" {
		return nil, fmt.Errorf("VM %s was booted by an older harness: hecctl qemu up", vm.Name)
	}
	o.Progress = progress
	return Up(ctx, o)
}

// KeepBooted reboots the VM recorded in stateDir whenever its QEMU ends,
// until ctx ends: what a machine's own reset does for a guest that
// reboots into a new kernel. Errors go to progress, and the next look
// tries again.
func KeepBooted(ctx context.Context, stateDir string, progress io.Writer) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		vm, err := Load(stateDir)
		if err != nil || vm.alive() {
			continue
		}
		if _, err := Reboot(ctx, stateDir, progress); err != nil && ctx.Err() == nil && progress != nil {
			fmt.Fprintf(progress, "reboot %s: %v\n", vm.Name, err)
		}
	}
}

// Load reads a VM's record from its state directory.
func Load(stateDir string) (*VM, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, "vm.json"))
	if err != nil {
		return nil, err
	}
	var vm VM
	if err := json.Unmarshal(b, &vm); err != nil {
		return nil, fmt.Errorf("%s/vm.json: %w", stateDir, err)
	}
	return &vm, nil
}

// StateRoot is where VMs keep their state by default:
// $XDG_STATE_HOME/hec/qemu, or ~/.local/state/hec/qemu.
func StateRoot() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "hec", "qemu")
}

// StateDirFor returns the default state directory of a VM named name.
func StateDirFor(name string) string { return filepath.Join(StateRoot(), name) }

// List returns the VMs recorded under StateRoot, running or not.
func List() []*VM {
	dirs, _ := os.ReadDir(StateRoot())
	var out []*VM
	for _, d := range dirs {
		if vm, err := Load(filepath.Join(StateRoot(), d.Name())); err == nil {
			out = append(out, vm)
		}
	}
	return out
}

// pickPorts chooses free loopback ports for the forwarded ports not set.
func (o *Options) pickPorts() error {
	for _, p := range []*int{&o.MgmtPort, &o.TCPPort, &o.RESPPort} {
		if *p != 0 {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("pick a free port: %w", err)
		}
		*p = ln.Addr().(*net.TCPAddr).Port
		defer ln.Close() // held until all are picked: no two the same
	}
	if o.UDPPort == 0 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("pick a free port: %w", err)
		}
		o.UDPPort = pc.LocalAddr().(*net.UDPAddr).Port
		pc.Close()
	}
	return nil
}

func (vm *VM) alive() bool {
	if vm.PID <= 0 {
		return false
	}
	if err := syscall.Kill(vm.PID, 0); err != nil {
		return false
	}
	// A reused pid is not our QEMU.
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", vm.PID))
	return len(cmd) > 0 && string(cmd[:min(len(cmd), 11)]) == "qemu-system"
}

// Panic reports whether the guest kernel panicked (its console says
// "Kernel panic"), and the line that says why.
func (vm *VM) Panic() (string, bool) {
	b, err := os.ReadFile(vm.Console)
	if err != nil {
		return "", false
	}
	i := strings.Index(string(b), "Kernel panic")
	if i < 0 {
		return "", false
	}
	line, _, _ := strings.Cut(string(b[i:]), "\n")
	return strings.TrimSpace(line), true
}

// Running reports whether the VM's QEMU still runs.
func (vm *VM) Running() bool { return vm.alive() }

// Down asks the agent to power off (POST /v1/poweroff) and waits for QEMU
// to exit; after timeout it kills QEMU. The region file is removed.
func (vm *VM) Down(ctx context.Context, timeout time.Duration) error {
	defer os.Remove(vm.Shm)
	if !vm.alive() {
		return nil
	}
	// With the VM's token; on failure, the kill below.
	if req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+vm.Mgmt+"/v1/poweroff", nil); err == nil {
		req.Header.Set("Authorization", "Bearer "+vm.Token())
		if resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req); err == nil {
			resp.Body.Close()
		}
	}
	deadline := time.Now().Add(timeout)
	for vm.alive() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return vm.PowerCut()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// PowerCut kills QEMU at once, like pulling the plug.
func (vm *VM) PowerCut() error {
	if !vm.alive() {
		return ErrNotRunning
	}
	if err := syscall.Kill(vm.PID, syscall.SIGKILL); err != nil {
		return err
	}
	for i := 0; i < 100 && vm.alive(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// nicMAC is the NIC's MAC address option: on a tap, one of its own, made
// from the guest's address (52:54:00, QEMU's prefix, then the address's
// last three bytes), since every VM on a bridge would otherwise have
// QEMU's one default address and frames for one reach another; "" (the
// default) on user networking, where the VM is alone.
func nicMAC(o Options) string {
	if o.Tap == "" {
		return ""
	}
	ip, err := netip.ParsePrefix(o.GuestIP)
	if err != nil || !ip.Addr().Is4() {
		return ""
	}
	a := ip.Addr().As4()
	return fmt.Sprintf(",mac=52:54:00:%02x:%02x:%02x", a[1], a[2], a[3])
}
