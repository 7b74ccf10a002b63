package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/host/collbench"
	"github.com/hecsys/hec/shared/affinity"
	"github.com/hecsys/hec/shared/sysinfo"
	"github.com/hecsys/hec/test/testutil"
)

// TestCollBenchAsANewUser runs what the README tells a new user: hecctl
// coll bench --world 4 (here with fewer sizes and iterations), every rail.
// Every row must say wrong = 0, and --plot must draw the picture.
func TestCollBenchAsANewUser(t *testing.T) {
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t) // beside hecctl, where coll bench looks for it
	png := filepath.Join(t.TempDir(), "busbw.png")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "--world", "4", "--sizes", "8,64K,1M", "--iters", "2", "--plot", png)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("hecctl coll bench --world 4:\n%s%s", out, stderr.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || (f[0] != "host" && f[0] != "dpu" && f[0] != "auto") {
			continue
		}
		rows++
		if f[8] != "0" {
			t.Errorf("wrong = %s in %q", f[8], line)
		}
	}
	if rows != 9 {
		t.Fatalf("%d rows, want 3 rails × 3 sizes", rows)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Fatalf("--plot: %v", err)
	}
}

// TestCollBenchAgentKilled kills one rank's agent (SIGKILL) while the DPU
// rail runs: the command must exit with an error naming that rank, within
// the deadline (the agents notice the lost connection at once, the rank's
// own host its agent's stopped heartbeat), and leave nothing behind.
func TestCollBenchAgentKilled(t *testing.T) {
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t)
	const victim = 2
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "--world", "4", "--rails", "dpu", "--sizes", "4M", "--iters", "100000",
			"--deadline", "3s", "--net", "loopback") // the agents are its own processes: found by their region files
		var out testutil.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		shm := "/dev/shm/hec-coll-" + strconv.Itoa(cmd.Process.Pid) + "-" + strconv.Itoa(victim)
		var agent int
		testutil.WaitFor(t, 30*time.Second, "the rows to start", func() bool {
			// The agent's own argument, not the rank's --agent-at
			// naming the same file: /proc lists pids as strings, so
			// either could come first.
			agent = findProcess("--shm\x00" + shm + "\x00")
			return agent != 0 && strings.Contains(out.String(), "rail")
		})
		// Round 0 kills at once, while the ranks may still be attaching
		// (a lease must notice the agent's heartbeat standing still);
		// the others mid-run.
		time.Sleep(time.Duration(550*round) * time.Millisecond)
		syscall.Kill(agent, syscall.SIGKILL)
		killed := time.Now()
		err := cmd.Wait()
		took := time.Since(killed)
		cancel()
		t.Logf("round %d: exited %v after the kill: %v\n%s", round, took.Round(time.Millisecond), err, out.String())
		if err == nil {
			t.Fatal("coll bench succeeded after an agent was killed")
		}
		if !strings.Contains(out.String(), "the agent of rank 2 failed") || !strings.Contains(out.String(), "rank 2 (node 3) failed") {
			t.Fatalf("the error does not name rank 2")
		}
		if strings.Contains(out.String(), "a hang") {
			t.Fatal("a rank hung")
		}
		if took > 3*time.Second+2*time.Second {
			t.Fatalf("exited %v after the kill: more than the deadline (3s) and some slack", took)
		}
		if _, err := os.Stat(shm); err == nil {
			t.Fatalf("%s left behind", shm)
		}
	}
}

// TestCollSplitFollowsTheRates runs coll bench in namespaces with the host
// rail's links limited to half the agents' (tc: 100 and 200 Mbit/s): the
// planner must give the host rail about a third of the buffer, and every
// row must be exact. (That the split's speed reaches 0.85× the sum of the
// two rails' is a bench figure: make bench.)
func TestCollSplitFollowsTheRates(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("coll bench --net netns makes network namespaces: root only (CI runs as root)")
	}
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // auto measures: no table kept by an earlier run
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "-o", "json", "--net", "netns", "--world", "2",
		"--rails", "host,dpu,auto", "--host-rate", "100mbit", "--dpu-rate", "200mbit", "--sizes", "4M", "--iters", "3")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("hecctl coll bench, host rail 100mbit, agents 200mbit:\n%s%s", out, stderr.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	busbw := map[string]float64{}
	share := -1.0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct {
			Rail     string  `json:"rail"`
			BusBW    float64 `json:"busbw_gbs"`
			Wrong    int64   `json:"wrong"`
			HostFrac float64 `json:"host_fraction"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if row.Wrong != 0 {
			t.Errorf("%s rail: %d wrong", row.Rail, row.Wrong)
		}
		busbw[row.Rail] = row.BusBW
		if row.Rail == "auto" {
			share = row.HostFrac
		}
	}
	if len(busbw) != 3 {
		t.Fatalf("rows for %v, want host, dpu and auto", busbw)
	}
	// The links make the rails 1:2 (each rank's link carries its ring's
	// traffic): a third for the host rail, give or take what the
	// calibration's noise moves.
	if share < 0.2 || share > 0.47 {
		t.Fatalf("host rail's share %.2f, want about 1/3 (0.20 to 0.47)", share)
	}
	t.Logf("host share %.2f; busbw host %.4f, dpu %.4f, split %.4f GB/s (%.2f× the sum)", share, busbw["host"], busbw["dpu"],
		busbw["auto"], busbw["auto"]/(busbw["host"]+busbw["dpu"]))
	// coll bench names its cluster after its pid.
	if left := cluster.Remains(fmt.Sprintf("cb%d", cmd.Process.Pid%1_000_000), "", nil); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestCollAutoRunsSmallOnOneRail: on loopback, where the ranks and the
// agents share this machine's cores, auto runs an 8-byte allreduce on
// one rail (the fixed costs decide) — splitting it made it 7.6× slower
// than the host rail alone — and every row is exact, for either
// objective (which rail the host-cpu one picks depends on the machine).
func TestCollAutoRunsSmallOnOneRail(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t)
	for _, objective := range []string{"time", "host-cpu"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "-o", "json", "--net", "loopback", "--world", "2",
			"--rails", "auto", "--objective", objective, "--sizes", "8,64K,4M", "--iters", "3")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		t.Logf("hecctl coll bench --rails auto --objective %s:\n%s%s", objective, out, stderr.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var row struct {
				Size  int    `json:"size"`
				Wrong int64  `json:"wrong"`
				Plan  string `json:"plan"`
			}
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if row.Wrong != 0 {
				t.Errorf("%d bytes: %d wrong", row.Size, row.Wrong)
			}
			if row.Size == 8 && !strings.HasSuffix(row.Plan, " alone") {
				t.Errorf("8 bytes ran as %q, want one rail alone", row.Plan)
			}
		}
	}
}

// TestRailsPlanSaysWhy: hecctl rails plan runs the size among the ranks
// and prints auto's table, the band it tuned with each candidate's
// measured and predicted time.
func TestRailsPlanSaysWhy(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, hecctl, "rails", "plan", "--net", "loopback", "--world", "2", "--size", "1M").CombinedOutput()
	t.Logf("hecctl rails plan --size 1M --world 2:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"auto's plan by size", "rails run at once cost", "(512 KiB, 1 MiB]", "measured at 1 MiB: ", "(model at "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in the output", want)
		}
	}
}

// TestRailsTuneKeepsTheTable: hecctl rails tune measures and tunes auto's
// table for a collective other than allreduce and keeps it under the
// state directory; rails plan of the same topology takes it (and says
// so), with --retune measures again, and every row is exact.
func TestRailsTuneKeepsTheTable(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t)
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, hecctl, append(args, "--net", "loopback", "--world", "2", "--op", "broadcast")...).CombinedOutput()
		t.Logf("hecctl %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 8 && f[0] == "auto" && f[8] != "0" {
				t.Errorf("wrong elements: %s", line)
			}
		}
		return string(out)
	}
	out := run("rails", "tune", "--sizes", "8,1M")
	for _, want := range []string{"broadcast of float32", "table measured now", "measured at 8 B: ", "measured at 1 MiB: "} {
		if !strings.Contains(out, want) {
			t.Errorf("rails tune: no %q", want)
		}
	}
	b, err := os.ReadFile(filepath.Join(state, "hec", "rails-tables.json"))
	if err != nil || !strings.Contains(string(b), "|ranks=2|broadcast|objective=time") {
		t.Fatalf("the kept tables: %s, %v", b, err)
	}
	out = run("rails", "plan", "--size", "1M")
	if !strings.Contains(out, "table kept in "+filepath.Join(state, "hec", "rails-tables.json")) || !strings.Contains(out, "measured at 1 MiB: ") {
		t.Errorf("rails plan did not take the kept table")
	}
	if out = run("rails", "plan", "--size", "1M", "--retune"); !strings.Contains(out, "table measured now") {
		t.Errorf("rails plan --retune took the kept table")
	}
}

// findProcess returns the pid of a process whose command line contains
// s, or 0.
func findProcess(s string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), s) {
			return pid
		}
	}
	return 0
}

// TestCollBenchStopped: coll bench in namespaces stopped by SIGTERM (as
// timeout, kill and service managers stop a command) or SIGINT (Ctrl-C)
// mid-run exits and leaves no namespace, agent or region file behind:
// its agents run in sessions of their own and would outlive it.
func TestCollBenchStopped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("coll bench --net netns makes network namespaces: root only (CI runs as root)")
	}
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "--net", "netns", "--world", "2", "--rails", "dpu",
			"--sizes", "4M", "--iters", "100000")
		var out testutil.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("cb%d", cmd.Process.Pid%1_000_000) // coll bench names its cluster after its pid
		var agent int
		testutil.WaitFor(t, 60*time.Second, "the rows to start", func() bool {
			agent = findProcess("--cluster\x00" + name + "\x00")
			return agent != 0 && strings.Contains(out.String(), "rail")
		})
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		hung := ctx.Err() != nil
		cancel()
		t.Logf("%v: exited with %v\n%s", sig, err, out.String())
		if hung {
			t.Fatalf("%v: coll bench did not exit", sig)
		}
		if left := cluster.Remains(name, "", []int{agent}); len(left) > 0 {
			cluster.Down(name, "", nil)
			syscall.Kill(agent, syscall.SIGKILL)
			t.Fatalf("%v: left behind: %v", sig, left)
		}
	}
}

// TestCollBenchBindsRanks: with --bind (the default), rank i's host
// process and agent run, every thread of them, on the i-th share of the
// cores (one core each, round robin, where the ranks outnumber the cores),
// as mpirun binds ranks; with --bind=false, anywhere. In namespaces (root)
// the agents are the cluster's, started by another path.
func TestCollBenchBindsRanks(t *testing.T) {
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t)
	all, err := affinity.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 {
		t.Skipf("one CPU (%v): every rank would be on it", all)
	}
	type run struct {
		net   string
		world int
		bind  bool
	}
	runs := []run{{"loopback", 2, true}, {"loopback", 2, false}}
	if len(all) < 4 {
		runs = append(runs, run{"loopback", len(all) + 1, true}) // more ranks than cores
	}
	if os.Geteuid() == 0 {
		runs = append(runs, run{"netns", 2, true})
	}
	for _, r := range runs {
		shares := affinity.Shares(all, r.world)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "--world", strconv.Itoa(r.world), "--rails", "dpu", "--sizes", "8",
			"--iters", "1000000", "--net", r.net, "--bind="+strconv.FormatBool(r.bind))
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // it takes its cluster down
		var out testutil.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var procs map[int]string
		testutil.WaitFor(t, time.Minute, "the ranks and their agents running", func() bool {
			procs = childrenOf(cmd.Process.Pid)
			return len(procs) == 2*r.world && strings.Contains(out.String(), "rail")
		})
		for pid, args := range procs {
			rank := -1
			if _, opts, ok := strings.Cut(args, "coll\x00rank\x00"); ok { // a rank: its options, one argument
				if o, err := collbench.ParseRankOptions(strings.TrimSuffix(opts, "\x00")); err == nil {
					rank = o.Rank
				}
			}
			for i := range r.world {
				if strings.Contains(args, fmt.Sprintf("--node-id\x00%d\x00", i+1)) {
					rank = i
				}
			}
			got, err := affinity.OfProcess(pid)
			if err != nil {
				t.Errorf("%s: %v", r.net, err)
				continue
			}
			if rank < 0 {
				t.Errorf("%s: process %d is neither a rank nor an agent: %q", r.net, pid, args)
				continue
			}
			want := all
			if r.bind {
				want = shares[rank]
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s, %d ranks, --bind=%v: %s of rank %d runs on CPUs %v, want %v", r.net, r.world, r.bind, what(args), rank, got, want)
			}
		}
		cancel()
		cmd.Wait()
	}
}

func what(args string) string {
	if strings.Contains(args, "coll\x00rank\x00") {
		return "the host process"
	}
	return "the agent"
}

// childrenOf returns the processes whose parent is pid, with their
// command lines (NUL-separated).
func childrenOf(pid int) map[int]string {
	kids := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := (sysinfo.FS{}).ParentPID(p); err != nil || ppid != pid {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil {
			kids[p] = string(b)
		}
	}
	return kids
}

// TestCollStatusNamesTheStoppedRank stops one rank's agent (SIGSTOP:
// alive, silent, as a hung process) among four while the DPU rail runs
// allreduces: `hecctl coll status`, given the four agents, shows that
// rank without an answer, the collective the others last heard it at,
// and names it behind; at the deadline, the command's error names it.
func TestCollStatusNamesTheStoppedRank(t *testing.T) {
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t)
	const victim = 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "--world", "4", "--rails", "dpu", "--sizes", "1M", "--iters", "100000",
		"--deadline", "4s", "--net", "loopback")
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	agents := make([]int, 4)
	mgmts := make([]string, 4)
	testutil.WaitFor(t, 30*time.Second, "the rows to start", func() bool {
		for i := range agents {
			shm := "/dev/shm/hec-coll-" + strconv.Itoa(cmd.Process.Pid) + "-" + strconv.Itoa(i)
			if agents[i] = findProcess("--shm\x00" + shm + "\x00"); agents[i] == 0 {
				return false
			}
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", agents[i]))
			args := strings.Split(string(b), "\x00")
			if j := slices.Index(args, "--mgmt"); j >= 0 && j+1 < len(args) {
				mgmts[i] = args[j+1]
			}
		}
		return strings.Contains(out.String(), "rail")
	})
	testutil.WaitFor(t, 30*time.Second, "allreduces to complete on every agent", func() bool {
		for _, m := range mgmts {
			comms, err := host.NewMgmt(m).Coll(ctx)
			if err != nil || len(comms) == 0 || comms[0].Completed < 5 {
				return false
			}
		}
		return true
	})
	if err := syscall.Kill(agents[victim], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(agents[victim], syscall.SIGKILL)
	time.Sleep(500 * time.Millisecond) // the others reach the collective it does not
	st, err := exec.Command(hecctl, append([]string{"coll", "status", "--timeout", "1s"}, mgmts...)...).CombinedOutput()
	t.Logf("coll status:\n%s", st)
	if err != nil {
		t.Fatalf("coll status: %v", err)
	}
	if !regexp.MustCompile(`(?m)^2\s.*no answer: last heard at #\d+`).Match(st) {
		t.Errorf("coll status does not show rank 2 silent with the collective it was last heard at")
	}
	// Stopped before the others reached the next collective, rank 2 is
	// behind; stopped inside the one they all run, it is silent there.
	if !regexp.MustCompile(`(behind|silent in) #\d+: ranks \[2\]`).Match(st) {
		t.Errorf("coll status does not name rank 2 behind or silent")
	}
	err = cmd.Wait()
	t.Logf("coll bench: %v\n%s", err, out.String())
	if err == nil || !strings.Contains(out.String(), "rank 2") {
		t.Fatalf("coll bench after rank 2's agent stopped: %v, want an error naming rank 2", err)
	}
}
