package pid1

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/dpu/slots"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
)

// StateMount is where the state disk is mounted.
const StateMount = "/var/lib/hec"

// ChildEnv is set in the environment of the agent process 1 starts: the
// agent then asks process 1 to power off (SIGTERM to pid 1).
const ChildEnv = "HEC_INIT_CHILD"

// Supervision: restarts back off from minBackoff to maxBackoff (reset once
// the agent has lived stableAfter); more than maxCrashes exits within
// crashWindow reboot the machine; a /healthz failing for wedgedAfter gets
// the agent killed and restarted.
const (
	minBackoff  = 500 * time.Millisecond
	maxBackoff  = 30 * time.Second
	stableAfter = time.Minute
	maxCrashes  = 5
	crashWindow = time.Minute
	wedgedAfter = 10 * time.Second
	stopGrace   = 20 * time.Second
)

// IsInit reports whether this process is process 1.
func IsInit() bool { return os.Getpid() == 1 }

// Run is process 1: it prepares the machine, supervises the agent (this
// binary, run again with args built here) and powers off on SIGTERM. It
// does not return unless it cannot power off.
func Run(log *slog.Logger) error {
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
	log.Info("init", "kernel", uname(), "since boot", readUptime())
	loadModules(log, "/etc/hec/modules")
	children := reaper()
	nic, err := configureNetwork(log, params)
	if err != nil {
		log.Error("network", "err", err)
	}
	args := []string{"--mgmt", "0.0.0.0:" + strconv.Itoa(api.PortMgmt), "--tcp", "0.0.0.0:" + strconv.Itoa(api.PortTCP),
		"--resp", "0.0.0.0:" + strconv.Itoa(api.PortRESP), "--udp", "0.0.0.0:" + strconv.Itoa(api.PortUDP),
		// Hosts are across the VM (or PCIe) boundary: no pids to check, no
		// futex to ring.
		"--check-pids=false", "--doorbell=false"}
	// The XDP fast path on the agent's NIC, unless hec.xdp says otherwise.
	if nic != "" {
		args = append(args, "--xdp", nic)
	}
	if key := params[ClusterKeyParam]; key != "" {
		os.MkdirAll("/run/hec", 0o700)
		if err := os.WriteFile("/run/hec/cluster.key", []byte(key), 0o600); err != nil {
			log.Error("cluster key", "err", err)
		} else {
			args = append(args, "--cluster-key-file", "/run/hec/cluster.key")
		}
	}
	stateDir := StateMount
	if err := mountState(log, params[StateParam]); err != nil {
		log.Error("state disk: running without persistent state", "err", err)
		stateDir = "/run/hec"
	}
	// The operator's token: on the state disk, so it outlives reboots;
	// the agent makes it on first boot (the QEMU harness puts its own
	// there before), and refuses the network without it.
	tokenFile := filepath.Join(stateDir, "token")
	args = append(args, "--state-dir", stateDir, "--token-file", tokenFile)
	if path, err := findIvshmem(); err != nil {
		log.Error("no ivshmem region: the shared-memory handoff is off", "err", err)
		args = append(args, "--shm", "off")
	} else {
		args = append(args, "--shm", path, "--map-existing")
	}
	// hec.* parameters last: the agent applies them over these.
	args = append(args, "--kernel-cmdline")
	log.Info("init done", "took", time.Since(start).Round(time.Millisecond))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	s := &supervisor{log: log, args: args, children: children, tokenFile: tokenFile,
		mgmt: "127.0.0.1:" + strconv.Itoa(api.PortMgmt), reboot: true}
	// The A/B slots of agent bundles live on the state disk: without it
	// there is nothing to keep them across a reboot, and the image's own
	// agent runs.
	if stateDir == StateMount {
		if st, err := slots.Open(stateDir); err != nil {
			log.Error("slots: running the image's agent only", "err", err)
		} else if err := installKey(st, "/"+bundle.TrustedKeyPath); err != nil {
			log.Error("slots: no trusted key: running the image's agent only", "err", err)
		} else {
			s.slots, s.tries, s.gate = st, slots.DefaultTries, DefaultGate
			loaderParams(log, params, s)
			// The QEMU harness is the boot ROM: it says which slot's
			// kernel it booted, and which slot on trial it gave up.
			s.boots, s.booted, s.gaveUp = true, params[bundle.BootSlotParam], params[bundle.BootGaveUpParam]
			if s.booted == "base" {
				s.booted = slots.Base
			}
		}
	}
	s.run(ctx)
	stop()
	log.Info("powering off")
	unix.Sync()
	unix.Unmount(StateMount, 0)
	unix.Sync()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

// loaderParams applies hec.loader_tries=N and hec.loader_gate=DURATION
// (starts of a new slot before falling back, and how long it has to
// become ready) from the kernel command line.
func loaderParams(log *slog.Logger, params map[string]string, s *supervisor) {
	if v, ok := params[bundle.LoaderTriesParam]; ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			s.tries = n
		} else {
			log.Error(bundle.LoaderTriesParam+": want a count of 1 or more: ignored", "value", v)
		}
	}
	if v, ok := params[bundle.LoaderGateParam]; ok {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			s.gate = d
		} else {
			log.Error(bundle.LoaderGateParam+": want a duration such as 30s: ignored", "value", v)
		}
	}
}

// rebootMachine reboots for the boot ROM to boot another slot (QEMU,
// run with -no-reboot, exits; its harness boots what the record names).
func (s *supervisor) rebootMachine() {
	unix.Sync()
	if err := unix.Unmount(StateMount, 0); err != nil {
		s.log.Warn("unmount the state disk before rebooting", "err", err)
	}
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		s.log.Error("reboot", "err", err)
	}
}

type supervisor struct {
	log       *slog.Logger
	args      []string
	children  *children
	tokenFile string // the agent's: its /healthz wants the token too
	mgmt      string // the agent's management API, for the probes: host:port
	reboot    bool   // process 1: reboot the machine when the agent keeps dying

	// The A/B slots (nil: always run this binary) and the loader's
	// settings: starts of a new slot before falling back, and how long a
	// new slot has to become ready.
	slots    *slots.Store
	tries    int
	gate     time.Duration
	lastExit string // how the agent last ended, for a rollback's reason
	// boots: the machine boots machine slots (process 1 of a VM, the QEMU
	// harness its boot ROM); booted is the slot whose kernel and
	// initramfs run, gaveUp the slot on trial the boot ROM gave up.
	boots          bool
	booted, gaveUp string
	// probeClient, when set, probes the agent over HTTPS (hecd supervise
	// of an agent with --mgmt-cert); nil probes plain HTTP.
	probeClient *http.Client
	manifest    bundle.Manifest // the running slot's, verified before it started
}

// run keeps the agent running until ctx ends, then stops it.
func (s *supervisor) run(ctx context.Context) {
	var crashes []time.Time
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		started := time.Now()
		exe, slot := s.choose()
		if exe == "" {
			s.rebootMachine()
			return
		}
		pid, exited, err := s.start(exe, slot)
		if err != nil {
			s.log.Error("start agent", "exe", exe, "err", err)
			s.lastExit = err.Error()
		} else {
			s.log.Info("agent started", "pid", pid, "slot", slots.Name(slot))
			status, stopped := s.watch(ctx, pid, exited, slot)
			if stopped {
				return
			}
			s.lastExit = describe(status)
			if s.switched(slot) {
				// The agent installed an update (or the gate gave one up):
				// not a crash; start the slot the record names now.
				s.log.Info("agent exited to switch slots", "pid", pid, "status", s.lastExit, "was", slots.Name(slot))
				backoff = 0
				continue
			}
			s.log.Error("agent exited; restarting", "pid", pid, "status", s.lastExit, "ran", time.Since(started).Round(time.Millisecond))
		}
		now := time.Now()
		if now.Sub(started) > stableAfter {
			backoff = 0
		}
		crashes = append(crashes, now)
		for len(crashes) > 0 && now.Sub(crashes[0]) > crashWindow {
			crashes = crashes[1:]
		}
		if len(crashes) > maxCrashes && s.reboot {
			s.log.Error("agent keeps dying: rebooting", "exits", len(crashes), "within", crashWindow)
			unix.Sync()
			unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		}
		backoff = min(max(2*backoff, minBackoff), maxBackoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// start runs exe (this binary, or a slot's) as the agent.
func (s *supervisor) start(exe, slot string) (int, <-chan unix.WaitStatus, error) {
	env := append(os.Environ(), ChildEnv+"=1")
	if s.slots != nil {
		env = append(env, slots.LoaderEnv+"="+slots.Name(slot))
		if s.boots {
			env = append(env, slots.BootsEnv+"=1")
		}
	}
	s.children.mu.Lock() // a fast exit must find its waiter registered
	defer s.children.mu.Unlock()
	pid, err := syscall.ForkExec(exe, append([]string{exe}, s.args...), &syscall.ProcAttr{
		Env: env, Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	s.children.waiting[pid] = ch
	return pid, ch, nil
}

// watch waits for the agent to exit (returning its status) or for ctx to
// end (stopping it and returning stopped). An agent whose /healthz keeps
// failing is killed. A slot on trial is committed once /readyz answers,
// and killed and given up when it has not within the gate's deadline.
func (s *supervisor) watch(ctx context.Context, pid int, exited <-chan unix.WaitStatus, slot string) (unix.WaitStatus, bool) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	started := time.Now()
	healthy, failing := false, time.Time{}
	trial := s.onTrial(slot)
	client := s.probeClient
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	for {
		select {
		case st := <-exited:
			return st, false
		case <-ctx.Done():
			s.log.Info("stopping agent", "pid", pid)
			unix.Kill(pid, unix.SIGTERM)
			select {
			case <-exited:
			case <-time.After(stopGrace):
				s.log.Error("agent did not stop: killing it", "pid", pid)
				unix.Kill(pid, unix.SIGKILL)
				<-exited
			}
			return 0, true
		case <-tick.C:
			if trial {
				switch err := probe(client, s.mgmtURL(), "/readyz", s.tokenFile); {
				case err == nil:
					s.commit(slot)
					trial = false
				case time.Since(started) > s.gate:
					s.log.Error("new slot not ready in time: rolling back", "slot", slots.Name(slot), "gate", s.gate, "err", err)
					s.giveUp(slot, fmt.Sprintf("not ready within %s: %v", s.gate, err))
					unix.Kill(pid, unix.SIGKILL)
					trial = false
				}
				continue
			}
			err := probe(client, s.mgmtURL(), "/healthz", s.tokenFile)
			switch {
			case err == nil:
				healthy, failing = true, time.Time{}
			case !healthy: // still starting
			case failing.IsZero():
				failing = time.Now()
			case time.Since(failing) > wedgedAfter:
				s.log.Error("agent wedged: killing it", "pid", pid, "err", err)
				unix.Kill(pid, unix.SIGKILL)
				failing = time.Time{}
			}
		}
	}
}

// mgmtURL is where the probes go: the agent's management API, over
// HTTPS when it serves TLS (probeClient set).
func (s *supervisor) mgmtURL() string {
	if s.probeClient != nil {
		return "https://" + s.mgmt
	}
	return "http://" + s.mgmt
}

func probe(c *http.Client, base, path, tokenFile string) error {
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(tokenFile); err == nil { // made by the agent on first boot
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return nil
}

func describe(st unix.WaitStatus) string {
	switch {
	case st.Exited():
		return "exit " + strconv.Itoa(st.ExitStatus())
	case st.Signaled():
		return "killed by " + st.Signal().String()
	}
	return fmt.Sprintf("status %#x", uint32(st))
}

// children reaps every child, as process 1 must, and hands the status of
// the ones it was asked about to their waiters.
type children struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
}

func reaper() *children {
	c := &children{waiting: map[int]chan unix.WaitStatus{}}
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		for range ch {
			for {
				var ws unix.WaitStatus
				pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
				c.mu.Lock()
				if w, ok := c.waiting[pid]; ok {
					w <- ws
					delete(c.waiting, pid)
				}
				c.mu.Unlock()
			}
		}
	}()
	return c
}
