package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/images"
	"github.com/hecsys/hec/qemu"
	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/sysinfo"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/testutil"
)

func TestMain(m *testing.M) {
	if os.Getenv("HEC_VM_HELPER") != "" {
		os.Exit(helper())
	}
	// go-redis logs every failed dial: the power-cut test's writers dial
	// a VM that is down, by design, and would fill the log.
	redis.SetLogger(quietRedis{})
	removeDeadRegions()
	os.Exit(testutil.Main(m)) // it removes the bundle, in testutil.ProcessDir
}

// vmRegionPrefix starts the region files of test VMs, which vmOptions
// names /dev/shm/hec-vmtest-PID-NAME.
const vmRegionPrefix = "/dev/shm/hec-vmtest-"

// removeDeadRegions removes the region files of test VMs whose test
// process ended without removing them (killed, or a -timeout's panic);
// testutil.ProcessDir kills the VMs themselves.
func removeDeadRegions() {
	files, _ := filepath.Glob(vmRegionPrefix + "*")
	for _, f := range files {
		pid, _, _ := strings.Cut(strings.TrimPrefix(f, vmRegionPrefix), "-")
		if n, err := strconv.Atoi(pid); err == nil && n > 0 && sysinfo.Ended(n) {
			os.Remove(f)
		}
	}
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

var (
	bundleOnce sync.Once
	bundleDir  string
	bundleErr  error
)

// bundle builds hecd for arm64 and an image around it, once per run.
func bundle(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-aarch64"); err != nil {
		t.Skip("qemu-system-aarch64 is not installed (make test installs qemu-system-arm as root)")
	}
	bundleOnce.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			bundleErr = err
			return
		}
		if bundleDir, bundleErr = testutil.ProcessDir(); bundleErr != nil {
			return
		}
		bundleDir = filepath.Join(bundleDir, "vm-bundle")
		_, bundleErr = images.BuildFromSource(context.Background(), root, bundleDir, "test")
	})
	if bundleErr != nil {
		if os.Geteuid() != 0 {
			t.Skipf("cannot build the VM image without root: %v", bundleErr)
		}
		t.Fatal(bundleErr)
	}
	return bundleDir
}

// vmOptions are the options of a test VM: a state directory of the
// test's, a region file and ports of its own. Whatever VM runs from that
// state directory when the test ends is killed, and its region file
// removed.
func vmOptions(t *testing.T, name string, kernelArgs ...string) qemu.Options {
	t.Helper()
	o := qemu.Options{Name: name, Bundle: bundle(t), StateDir: filepath.Join(t.TempDir(), name), KernelArgs: strings.Join(kernelArgs, " "),
		Shm: fmt.Sprintf("%s%d-%s", vmRegionPrefix, os.Getpid(), name), LeaseTimeout: time.Second,
		MgmtPort: freePort(t), TCPPort: freePort(t), RESPPort: freePort(t), UDPPort: freePort(t)}
	t.Cleanup(func() {
		if last, err := qemu.Load(o.StateDir); err == nil {
			last.PowerCut()
		}
		os.Remove(o.Shm)
	})
	return o
}

// boot boots a test VM (vmOptions).
func boot(t *testing.T, name string, kernelArgs ...string) (*qemu.VM, qemu.Options) {
	t.Helper()
	o := vmOptions(t, name, kernelArgs...)
	vm, err := qemu.Up(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.PowerCut() }) // a test may have rebooted it: vmOptions kills the last
	t.Logf("VM %s: boot to ready %v", name, vm.BootTime.Round(time.Millisecond))
	return vm, o
}

// mgmtOf is a client of the VM's management API, with its token.
func mgmtOf(vm *qemu.VM) *host.Mgmt { return &host.Mgmt{Addr: vm.Mgmt, Token: vm.Token()} }

// freePort hands out host ports derived from the pid, so parallel runs keep
// apart; Up checks that they are free.
func freePort(t *testing.T) int {
	portSeq++
	return 20000 + (os.Getpid()%500)*20 + portSeq
}

var portSeq int

func dial(t *testing.T, vm *qemu.VM) *host.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := host.Dial(ctx, vm.Agent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func generation(t *testing.T, vm *qemu.VM) uint32 {
	t.Helper()
	g, ok, err := mgmtOf(vm).Metric(context.Background(), "hec_agent_generation")
	if err != nil || !ok {
		t.Fatalf("no hec_agent_generation in /metrics: %v", err)
	}
	return uint32(g)
}

// TestVM is the arm64 agent in QEMU against the x86 host library over
// ivshmem: ping, a large checksum, several client processes with one killed
// mid-batch, a reboot under a running client, and state kept on the disk.
func TestVM(t *testing.T) {
	vm, o := boot(t, "e2e")
	c := dial(t, vm)
	ctx := context.Background()

	t.Run("ping", func(t *testing.T) {
		for i := 0; i < 100; i++ {
			if err := c.Ping(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("checksum of a large buffer", func(t *testing.T) {
		b := make([]byte, 24<<20+5)
		rng := rand.New(rand.NewPCG(1, 1))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		got, err := c.Checksum(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if want := crc32c.Checksum(b); got != want {
			t.Fatalf("arm64 agent says %#x, want %#x", got, want)
		}
		win, err := c.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		copy(win, b)
		if got, err := c.Checksum(ctx, win); err != nil || got != crc32c.Checksum(win) {
			t.Fatalf("zero-copy buffer: %#x %v", got, err)
		}
		c.Free(win)
	})
	t.Run("client processes, one killed mid-batch", func(t *testing.T) {
		var procs []*exec.Cmd
		var outs []*strings.Builder
		for i := 0; i < 3; i++ {
			cmd := helperCmd(t, vm.Agent, "2s")
			var out strings.Builder
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			procs, outs = append(procs, cmd), append(outs, &out)
		}
		victim := helperCmd(t, vm.Agent, "1h")
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond)
		victim.Process.Signal(syscall.SIGKILL)
		victim.Wait()
		for i, p := range procs {
			if err := p.Wait(); err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
			if strings.TrimSpace(outs[i].String()) == "0" {
				t.Fatalf("client %d made no progress", i)
			}
		}
		// The victim's pair is fenced by its stale heartbeat (pids are not
		// visible across the VM) and comes back: leases succeed again.
		deadline := time.Now().Add(15 * time.Second)
		for {
			var cs []*host.Client
			ok := true
			for i := 0; i < 15; i++ { // 16 pairs, one held by c
				cl, err := host.Dial(ctx, vm.Agent)
				if err != nil {
					ok = false
					break
				}
				cs = append(cs, cl)
			}
			for _, cl := range cs {
				cl.Close()
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the killed client's queue pair was not reclaimed")
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	t.Run("erasure coding through the arm64 agent, decoded here", func(t *testing.T) {
		st, err := mgmtOf(vm).Status(ctx)
		if err != nil || st.EC == nil {
			t.Fatalf("status: %v, ec %+v", err, st.EC)
		}
		if p := st.EC.SIMD; p != "neon" && p != "sve" {
			t.Errorf("the arm64 agent's coder takes the %q path, want neon or sve", p)
		}
		t.Logf("arm64 agent's coder: %s", st.EC.SIMD)
		dir := t.TempDir()
		data := make([]byte, 6<<20+777)
		rng := rand.New(rand.NewPCG(9, 9))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		in := filepath.Join(dir, "in")
		if err := os.WriteFile(in, data, 0o644); err != nil {
			t.Fatal(err)
		}
		e, err := c.EC(10, 4, host.WithRails(host.RailsDPU))
		if err != nil {
			t.Fatal(err)
		}
		enc := filepath.Join(dir, "enc")
		if _, err := ec.EncodeFile(ctx, e, 10, 4, in, enc, ec.WithBuffers(e.Buffers), ec.WithChunk(e.Chunk())); err != nil {
			t.Fatal(err)
		}
		if st := e.Stats(); st.RailBytes[host.RailDPU] < int64(len(data)) {
			t.Fatalf("the agent coded %d bytes of %d", st.RailBytes[host.RailDPU], len(data))
		}
		// Checked and decoded on this side, in this process.
		if rep, err := ec.VerifyDir(ctx, nil, enc); err != nil || !rep.ParityOK {
			t.Fatalf("the arm64 agent's parity does not verify here: %v %+v", err, rep)
		}
		for _, i := range []int{0, 4, 11, 13} {
			os.Remove(filepath.Join(enc, ec.ShardName(i)))
		}
		local, _ := host.NewEC(nil, 10, 4)
		if _, err := ec.DecodeDir(ctx, local, enc, filepath.Join(dir, "out")); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "out")); !bytes.Equal(got, data) {
			t.Fatal("decoded here, the file differs")
		}
		// And the arm64 agent rebuilds lost shards.
		shards := make([][]byte, 6)
		for i := range shards {
			shards[i] = make([]byte, 64<<10)
			if i < 4 {
				copy(shards[i], data[i<<16:])
			}
		}
		ref, _ := ec.New(4, 2)
		if err := ref.Encode(shards); err != nil {
			t.Fatal(err)
		}
		want := bytes.Clone(shards[1])
		shards[1], shards[4] = nil, nil
		r, _ := c.EC(4, 2, host.WithRails(host.RailsDPU))
		if _, err := r.Reconstruct(ctx, shards, true); err != nil || !bytes.Equal(shards[1], want) {
			t.Fatalf("rebuilt by the arm64 agent: %v, equal %v", err, bytes.Equal(shards[1], want))
		}
	})
	t.Run("reboot under a running client and state on the disk", func(t *testing.T) {
		gen := generation(t, vm)
		var ok, retryable atomic.Int64
		var wrong atomic.Value
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			b := make([]byte, 4096)
			for {
				select {
				case <-stop:
					return
				default:
				}
				b[0]++
				got, err := c.Checksum(ctx, b)
				switch {
				case err != nil && wire.IsRetryable(err):
					retryable.Add(1)
				case err != nil:
					wrong.Store(err)
					return
				case got != crc32c.Checksum(b):
					wrong.Store(errors.New("wrong checksum"))
					return
				default:
					ok.Add(1)
				}
			}
		}()
		time.Sleep(300 * time.Millisecond)
		if err := vm.Down(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		before := ok.Load()
		var err error
		vm, err = qemu.Up(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rebooted: boot to ready %v", vm.BootTime.Round(time.Millisecond))
		deadline := time.Now().Add(20 * time.Second)
		for ok.Load() < before+100 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		close(stop)
		<-done
		if e := wrong.Load(); e != nil {
			t.Fatal(e)
		}
		if ok.Load() < before+100 {
			t.Fatalf("the client did not go on after the reboot: %d ok before, %d after, %d retryable", before, ok.Load()-before, retryable.Load())
		}
		t.Logf("client: %d ok before the reboot, %d retryable errors, %d ok after", before, retryable.Load(), ok.Load()-before)
		// The generation lives on the state disk: it grows across a reboot.
		if g := generation(t, vm); g != gen+1 {
			t.Fatalf("generation %d after a reboot from %d: state did not survive", g, gen)
		}
	})
}

func helperCmd(t *testing.T, agent, dur string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "HEC_VM_HELPER=1", "HEC_VM_AGENT="+agent, "HEC_VM_FOR="+dur)
	cmd.Stderr = os.Stderr
	return cmd
}

// helper is a client process: checked checksums for HEC_VM_FOR.
func helper() int {
	ctx := context.Background()
	c, err := host.Dial(ctx, os.Getenv("HEC_VM_AGENT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer c.Close()
	d, _ := time.ParseDuration(os.Getenv("HEC_VM_FOR"))
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	buf, err := c.Alloc(8192)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		b := buf[:rng.IntN(len(buf))]
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		got, err := c.Checksum(ctx, b)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		if got != crc32c.Checksum(b) {
			fmt.Fprintln(os.Stderr, "helper: wrong checksum")
			return 1
		}
	}
	fmt.Println(n)
	return 0
}

// TestDeadRegionsRemoved: removeDeadRegions removes the region file of a
// test VM whose process ended, and leaves those of live processes and
// other tests' files (shared/ring's hec-test-PID-NANOS) alone.
func TestDeadRegionsRemoved(t *testing.T) {
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("%s%d-crash", vmRegionPrefix, ended.Process.Pid)
	live := fmt.Sprintf("%s%d-other", vmRegionPrefix, os.Getpid())
	other := fmt.Sprintf("/dev/shm/hec-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	for _, f := range []string{dead, live, other} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Skipf("no /dev/shm here: %v", err)
		}
		t.Cleanup(func() { os.Remove(f) })
	}
	removeDeadRegions()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("%s, of a process that ended, is still there (%v)", dead, err)
	}
	for _, f := range []string{live, other} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
}
