package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/rail"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/testutil"
)

func TestPingAndChecksumBothTransports(t *testing.T) {
	a := startAgent(t, agentConfig(t))
	for _, target := range []string{"shm://" + a.cfg.Agent.Shm, "tcp://" + a.Addr("tcp")} {
		t.Run(strings.SplitN(target, ":", 2)[0], func(t *testing.T) {
			c := dial(t, target)
			ctx := context.Background()
			if err := c.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 1))
			for _, size := range []int{0, 1, 4095, 1 << 20, 5<<20 + 17} {
				b := make([]byte, size) // not from Alloc: staged and chunked
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
				got, err := c.Checksum(ctx, b)
				if err != nil {
					t.Fatalf("size %d: %v", size, err)
				}
				if want := crc32.Checksum(b, castagnoli); got != want {
					t.Fatalf("size %d: %#x want %#x", size, got, want)
				}
			}
			buf, err := c.Alloc(1 << 20) // zero copy over shm
			if err != nil {
				t.Fatal(err)
			}
			for i := range buf {
				buf[i] = byte(i * 31)
			}
			if got, err := c.Checksum(ctx, buf); err != nil || got != crc32.Checksum(buf, castagnoli) {
				t.Fatalf("alloc'd buffer: %#x %v", got, err)
			}
			if err := c.Free(buf); err != nil {
				t.Fatal(err)
			}
			// An op the agent does not serve: a permanent error, and the
			// client goes on.
			if _, err := c.Do(ctx, host.Request{Op: 0x7fff}); !errors.Is(err, wire.StatusBadOp) || wire.IsRetryable(err) {
				t.Fatalf("unknown op: %v", err)
			}
			if err := c.Ping(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDialErrors(t *testing.T) {
	ctx := context.Background()
	for _, target := range []string{"udp://x", "shm://host/path", "tcp://", "::"} {
		if _, err := host.Dial(ctx, target); !errors.Is(err, host.ErrTarget) {
			t.Errorf("Dial(%q) = %v, want ErrTarget", target, err)
		}
	}
	if _, err := host.Dial(ctx, "shm:///dev/shm/hec-no-such-region"); err == nil {
		t.Error("dial of a missing region succeeded")
	}
}

// TestKill9MidBatch: four client processes hammer checksums while a fifth is
// killed with SIGKILL mid-batch a hundred times. The four never see a wrong
// answer; every dead client's queue pair is reclaimed.
func TestKill9MidBatch(t *testing.T) {
	kills := 100
	if testing.Short() {
		kills = 20
	}
	cfg := agentConfig(t)
	a := startAgent(t, cfg)
	target := "HEC_E2E_TARGET=shm://" + cfg.Agent.Shm
	type hammerProc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   strings.Builder
	}
	var hammers []*hammerProc
	for i := 0; i < 4; i++ {
		h := &hammerProc{cmd: helperCmd(t, "hammer", target)}
		h.stdin, _ = h.cmd.StdinPipe()
		h.cmd.Stdout = &h.out
		if err := h.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		hammers = append(hammers, h)
	}
	for k := 0; k < kills; k++ {
		v := helperCmd(t, "victim", target)
		out, _ := v.StdoutPipe()
		if err := v.Start(); err != nil {
			t.Fatal(err)
		}
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
			v.Process.Kill()
			v.Wait()
			t.Fatalf("victim %d said %q", k, line)
		}
		time.Sleep(time.Duration(1+k%7) * time.Millisecond) // mid-batch
		v.Process.Signal(syscall.SIGKILL)
		v.Wait()
	}
	total := 0
	for _, h := range hammers {
		h.stdin.Close()
		if err := h.cmd.Wait(); err != nil {
			t.Fatalf("hammer client saw a wrong answer or failed: %v", err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(h.out.String()))
		if n == 0 {
			t.Fatalf("a hammer client made no progress (%q)", h.out.String())
		}
		total += n
	}
	t.Logf("four clients: %d checked checksums while %d clients were killed", total, kills)
	// Every victim's pair comes back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		active, fences := 0, uint64(0)
		for _, q := range a.Dispatcher().QueuePairs() {
			if q.State != "free" {
				active++
			}
			fences += q.Fences
		}
		if active == 0 && fences >= uint64(kills) {
			t.Logf("%d kills, %d fences, all pairs free", kills, fences)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after kills: %d pairs not free, %d fences for %d kills", active, fences, kills)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAgentRestartUnderClients: clients keep going across an agent restart;
// ops in flight fail with retryable errors, later ones succeed.
func TestAgentRestartUnderClients(t *testing.T) {
	cfg := agentConfig(t)
	a := startAgent(t, cfg)
	ctx := context.Background()
	var okBefore, okAfter, retryable atomic.Int64
	var restarted atomic.Bool
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for i := 0; i < 3; i++ {
		c := dial(t, "shm://"+cfg.Agent.Shm)
		buf, err := c.Alloc(64 << 10)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			count := func() {
				if restarted.Load() {
					okAfter.Add(1)
				} else {
					okBefore.Add(1)
				}
			}
			if err := checksumLoop(ctx, c, buf, seed, stop, count, &retryable, 0); err != nil {
				errs <- err
			}
		}(uint64(i))
	}
	time.Sleep(300 * time.Millisecond)
	gen := a.Generation()
	a.stop()
	restarted.Store(true)
	b := startAgent(t, cfg)
	if b.Generation() <= gen {
		t.Fatalf("generation %d after %d", b.Generation(), gen)
	}
	deadline := time.Now().Add(10 * time.Second)
	for okAfter.Load() < 300 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("ok before %d, retryable errors %d, ok after restart %d", okBefore.Load(), retryable.Load(), okAfter.Load())
	if okBefore.Load() == 0 || okAfter.Load() < 300 {
		t.Fatalf("clients did not go on across the restart: before %d, after %d", okBefore.Load(), okAfter.Load())
	}
}

// TestMillionHostileDescriptors: a raw ring writer submits a million
// descriptors of random bytes and random spans (and now and then tears its
// own indices) against a running agent. The agent neither crashes nor
// hangs; every descriptor completes (with an error status) or is lost to a
// fault of that pair; a well-behaved client beside it stays correct.
func TestMillionHostileDescriptors(t *testing.T) {
	total := testutil.Sized(100_000, 1_000_000)
	if testing.Short() {
		total = 100_000
	}
	cfg := agentConfig(t)
	a := startAgent(t, cfg)
	r, err := ring.Map(cfg.Agent.Shm, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h, err := ring.Attach(r)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Lease(context.Background(), -1)
	if err != nil {
		t.Fatal(err)
	}
	good := dial(t, "shm://"+cfg.Agent.Shm)
	stop := make(chan struct{})
	goodErr := make(chan error, 1)
	var goodOps int
	go func() {
		var err error
		goodOps, err = hammer(context.Background(), good, stop, 5)
		goodErr <- err
	}()
	win := len(q.Window())
	rng := rand.New(rand.NewPCG(7, 7))
	batch := make([]wire.Desc, 64)
	out := make([]wire.Desc, 64)
	var sent, completed, faults int
	statuses := map[wire.Status]int{}
	var raw [wire.DescSize]byte
	lastProgress := time.Now()
	for sent < total {
		k := min(q.Room(), len(batch), total-sent)
		for i := 0; i < k; i++ {
			for j := range raw {
				raw[j] = byte(rng.Uint32())
			}
			d := &batch[i]
			d.Unmarshal(raw[:])   // whatever it decodes to
			if rng.IntN(2) == 0 { // plausible: known ops (kv ones too), spans near the window
				d.Op = []wire.Op{0, wire.OpPing, wire.OpChecksum, 3, wire.OpKVGet, wire.OpKVPut, wire.OpKVDelete, wire.OpKVScan, wire.OpKVBatch}[rng.IntN(9)]
				d.Flags = uint16(rng.IntN(2)) // sometimes an SGL
				d.NSpan = uint8(rng.IntN(6))
				d.Status = 0
				for i := range d.Spans {
					d.Spans[i] = wire.Span{Off: uint32(rng.IntN(win + 4096)), Len: uint32(rng.IntN(win / 8))}
				}
			}
		}
		sent += q.Submit(batch[:k])
		n, err := q.Poll(out)
		completed += n
		for _, c := range out[:n] {
			statuses[c.Status]++
		}
		if n > 0 {
			lastProgress = time.Now()
		}
		if err != nil {
			if !errors.Is(err, wire.StatusFaulted) {
				t.Fatalf("hostile pair: %v", err)
			}
			faults++
			lost := q.InFlight()
			if err := q.Reset(context.Background()); err != nil {
				t.Fatalf("reset: %v", err)
			}
			completed += lost // lost to the fault, by design
		}
		if time.Since(lastProgress) > 10*time.Second {
			t.Fatalf("agent stopped completing: %d sent, %d completed", sent, completed)
		}
		q.Beat()
	}
	for completed < sent && time.Since(lastProgress) < 10*time.Second {
		n, _ := q.Poll(out)
		completed += n
		if n > 0 {
			lastProgress = time.Now()
		}
	}
	close(stop)
	if err := <-goodErr; err != nil {
		t.Fatalf("well-behaved client beside the storm: %v", err)
	}
	if completed != sent {
		t.Fatalf("%d sent, %d completed", sent, completed)
	}
	if err := dial(t, "shm://"+cfg.Agent.Shm).Ping(context.Background()); err != nil {
		t.Fatalf("agent after the storm: %v", err)
	}
	t.Logf("%d hostile descriptors: statuses %v; %d faults; good client %d ops", sent, statuses, faults, goodOps)
	if goodOps == 0 {
		t.Fatal("the good client made no progress")
	}
	_ = a
}

// TestOneClientManyGoroutines: one Client shared by goroutines mixing sync
// and batched calls, over both transports.
func TestOneClientManyGoroutines(t *testing.T) {
	a := startAgent(t, agentConfig(t))
	for _, target := range []string{"shm://" + a.cfg.Agent.Shm, "tcp://" + a.Addr("tcp")} {
		c := dial(t, target)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				n, err := hammerFor(c, seed, time.Second)
				if err == nil && n == 0 {
					err = errors.New("no progress")
				}
				if err != nil {
					errs <- err
				}
			}(uint64(g))
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", target, err)
		}
	}
}

// hammerFor is hammer for a while.
func hammerFor(c *host.Client, seed uint64, d time.Duration) (int, error) {
	stop := make(chan struct{})
	time.AfterFunc(d, func() { close(stop) })
	return hammer(context.Background(), c, stop, seed)
}

// TestChecksumSplitEqualsSingleRail: the multi-rail checksum (host CPU and
// agent, split by the planner) equals the single-rail one, for calibrated
// rails and for rails forced to split evenly.
func TestChecksumSplitEqualsSingleRail(t *testing.T) {
	a := startAgent(t, agentConfig(t))
	c := dial(t, "shm://"+a.cfg.Agent.Shm)
	ctx := context.Background()
	cal, err := c.CalibrateChecksum(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	even := []rail.Rail{{Name: host.RailHost, Rate: 1e9}, {Name: host.RailDPU, Rate: 1e9}}
	rng := rand.New(rand.NewPCG(5, 5))
	for _, tc := range []struct {
		size     int
		inWindow bool
	}{{1, false}, {4095, false}, {1 << 20, false}, {3<<20 + 7, false}, {1 << 20, true}, {1<<20 + 7, true}} {
		size := tc.size
		b := make([]byte, size)
		if tc.inWindow { // the agent's share is read in place, the host's computed meanwhile
			var err error
			if b, err = c.Alloc(size); err != nil {
				t.Fatal(err)
			}
		}
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		for name, rails := range map[string][]rail.Rail{"calibrated": cal, "even": even} {
			got, plan, err := c.ChecksumSplit(ctx, b, rails)
			if err != nil {
				t.Fatal(err)
			}
			if want := crc32.Checksum(b, castagnoli); got != want {
				t.Fatalf("%s, %d bytes: %#x want %#x\n%s", name, size, got, want, plan.Explain())
			}
			if name == "even" && size >= 1<<20 && len(plan.Shares) != 2 {
				t.Fatalf("even rails did not split:\n%s", plan.Explain())
			}
		}
		if tc.inWindow {
			c.Free(b)
		}
	}
	t.Logf("calibrated rails: %+v", cal)

	// A model that starts out believing the agent 100× faster than it is
	// learns from the splits: the agent's share shrinks, the answer stays
	// exact.
	wrong := []rail.Rail{{Name: host.RailHost, Rate: 1e9}, {Name: host.RailDPU, Rate: 100e9}}
	m := c.NewChecksumModel(wrong)
	b, err := c.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	want := crc32.Checksum(b, castagnoli)
	var first, last float64
	for i := 0; i < 6; i++ {
		got, plan, err := m.Checksum(ctx, b)
		if err != nil || got != want {
			t.Fatalf("model split %d: %#x, %v; want %#x", i, got, err, want)
		}
		share := 0.0
		for _, s := range plan.Shares {
			if s.Rail == host.RailDPU {
				share = float64(s.Bytes) / float64(len(b))
			}
		}
		if i == 0 {
			first = share
		}
		last = share
	}
	if agent := m.Rails()[1].Rate; agent >= 50e9 || last >= first {
		t.Fatalf("the model did not learn: agent rate %.3g B/s, agent share %.2f then %.2f", agent, first, last)
	}
	t.Logf("learned rails: %+v; agent share %.2f → %.2f", m.Rails(), first, last)
}

// TestChecksumAutoInTheWindow: a one-shot multi-rail checksum of a buffer
// in the window (the host from the front, the agent from the back) gives
// the single-rail answer whatever the model claims.
func TestChecksumAutoInTheWindow(t *testing.T) {
	cfg := agentConfig(t)
	cfg.Agent.RegionSize, cfg.Agent.QueuePairs = 128<<20, 2
	a := startAgent(t, cfg)
	c := dial(t, "shm://"+a.cfg.Agent.Shm)
	ctx := context.Background()
	b, err := c.Alloc(40<<20 + 12345)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, randomBytes(len(b), 9))
	want := crc32.Checksum(b, castagnoli)
	for _, tc := range []struct {
		name  string
		rails []rail.Rail
	}{
		// Pessimistic about both: the measured rates plan the rest.
		{"a model that underrates both", []rail.Rail{{Name: host.RailHost, Rate: 1e7}, {Name: host.RailDPU, Rate: 1e7}}},
		// Eight times the host's rate (more, and the host's share would
		// not be worth a split): the trial's measure plans the rest.
		{"a model that flatters the agent", []rail.Rail{{Name: host.RailHost, Rate: 1e10}, {Name: host.RailDPU, Rate: 8e10}}},
		{"calibrated", nil},
	} {
		rails := tc.rails
		if rails == nil {
			if rails, err = c.CalibrateChecksum(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		got, d, err := c.ChecksumAuto(ctx, b, rails)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != want || d.Reason == "" || (tc.rails != nil && d.Trial == 0) {
			t.Fatalf("%s: %#x want %#x, after a trial of %d bytes (%s: %s)", tc.name, got, want, d.Trial, d.Choice, d.Reason)
		}
		t.Logf("%s: %s: %s", tc.name, d.Choice, d.Reason)
	}
}

// TestChecksumAutoNeverWaitsForTheAgent: with the agent stopped (SIGSTOP:
// a DPU whose CPU quota ran out, or busy elsewhere), a one-shot split of
// a buffer in the window still returns the right answer: the host takes
// over the agent's piece instead of waiting for it. The agent's late
// answer, once it runs again, disturbs nothing.
func TestChecksumAutoNeverWaitsForTheAgent(t *testing.T) {
	mgmtPort, tcpPort := portPair(t)
	region, args := hecdArgs(t)
	agent := exec.Command(testutil.Hecd(t), append(args, "--region-size", strconv.Itoa(128<<20), "--log-level", "warn",
		"--mgmt", fmt.Sprintf("127.0.0.1:%d", mgmtPort), "--tcp", fmt.Sprintf("127.0.0.1:%d", tcpPort))...)
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Signal(syscall.SIGCONT); agent.Process.Kill(); agent.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := host.NewMgmt(fmt.Sprintf("127.0.0.1:%d", mgmtPort)).WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	c := dial(t, "shm://"+region)
	b, err := c.Alloc(40 << 20)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, randomBytes(len(b), 31))
	want := crc32.Checksum(b, castagnoli)
	even := []rail.Rail{{Name: host.RailHost, Rate: 1e10}, {Name: host.RailDPU, Rate: 1e10}}
	if err := agent.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, agent.Process.Pid)
	got, d, err := c.ChecksumAuto(ctx, b, even)
	if err != nil || got != want {
		t.Fatalf("with the agent stopped: %#x, %v; want %#x", got, err, want)
	}
	if d.Stolen == 0 || d.Choice != host.RailHost {
		t.Fatalf("with the agent stopped: chose %s, the host took over %d bytes: %s", d.Choice, d.Stolen, d.Reason)
	}
	t.Logf("agent stopped: %s: %s", d.Choice, d.Reason)
	if err := agent.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping after the agent ran again: %v", err)
	}
	if got, d, err = c.ChecksumAuto(ctx, b, even); err != nil || got != want {
		t.Fatalf("after the agent ran again: %#x, %v; want %#x (%s)", got, err, want, d.Reason)
	}
	t.Logf("agent running: %s: %s", d.Choice, d.Reason)
}

// waitStopped waits until every thread of pid is stopped: kill returns
// once SIGSTOP is sent, while a thread running on another core may go on
// for a while (in CI one finished half a millisecond of checksum work).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if st := string(b); strings.Contains(st[strings.LastIndexByte(st, ')')+1:], " T ") {
				stopped++
			}
		}
		if stopped == len(tasks) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d threads of %d stopped after 5s", stopped, len(tasks), pid)
		}
	}
}

// TestChecksumAutoDecides: the one-shot multi-rail checksum splits only
// when the model stands behind it, tries the split on a prefix first, and
// whatever it chooses gives the single-rail answer.
func TestChecksumAutoDecides(t *testing.T) {
	a := startAgent(t, agentConfig(t))
	c := dial(t, "shm://"+a.cfg.Agent.Shm)
	ctx := context.Background()
	b := randomBytes(40<<20+12345, 7) // Go memory: the agent's share is staged
	want := crc32.Checksum(b, castagnoli)
	for _, tc := range []struct {
		name   string
		rails  []rail.Rail
		choice string
		trial  bool
	}{
		// The agent barely helps: no split, no trial.
		{"small gain", []rail.Rail{{Name: host.RailHost, Rate: 1e9}, {Name: host.RailDPU, Rate: 5e7}}, host.RailHost, false},
		// The model claims an agent no agent can be: the trial shows it,
		// and one rail, the faster at the slower of its two rates ("one":
		// which one depends on the machine's load), does the rest.
		{"claims the trial refutes", []rail.Rail{{Name: host.RailHost, Rate: 1e10}, {Name: host.RailDPU, Rate: 2e10}}, "one", true},
		// The model is pessimistic about both: the trial beats its
		// prediction, and the rest is split by the measured rates.
		{"trial beats the model", []rail.Rail{{Name: host.RailHost, Rate: 1e7}, {Name: host.RailDPU, Rate: 1e7}}, "split", true},
	} {
		got, d, err := c.ChecksumAuto(ctx, b, tc.rails)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != want {
			t.Fatalf("%s: %#x want %#x (%s: %s)", tc.name, got, want, d.Choice, d.Reason)
		}
		choice := d.Choice
		if tc.choice == "one" && (choice == host.RailHost || choice == host.RailDPU) {
			choice = "one"
		}
		if choice != tc.choice || (d.Trial > 0) != tc.trial || d.Reason == "" {
			t.Fatalf("%s: chose %q (trial %d bytes): %s; want %q, trial %v", tc.name, d.Choice, d.Trial, d.Reason, tc.choice, tc.trial)
		}
		t.Logf("%s: %s: %s", tc.name, d.Choice, d.Reason)
	}
}
