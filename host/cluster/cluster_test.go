package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/affinity"
	"github.com/hecsys/hec/test/testutil"

	"golang.org/x/sys/unix"
)

// TestMain removes the agent the tests built when they end.
func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }

// hecd builds the agent for the cluster tests.
func hecd(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("clusters are network namespaces: root only (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip (iproute2): make test installs it as root")
	}
	return testutil.Hecd(t)
}

// nothingLeft checks that cluster name left nothing behind.
func nothingLeft(t *testing.T, name, stateDir string, pids []int) {
	t.Helper()
	if left := Remains(name, stateDir, pids); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// Eight nodes up, every agent talking to its neighbours, a rate limit
// that shows, then down with nothing left behind.
func TestEightNodesUpAndDown(t *testing.T) {
	bin := hecd(t)
	const name = "t8"
	dir := filepath.Join(t.TempDir(), "state")
	Down(name, dir, nil)
	var log bytes.Buffer
	ctx := context.Background()
	st, err := Up(ctx, Options{Name: name, Agents: 8, Hecd: bin, StateDir: dir, Rates: map[int]string{8: "200mbit"}, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var pids []int
	for _, n := range st.Nodes {
		pids = append(pids, n.PID)
	}
	t.Cleanup(func() { Down(name, dir, nil) })
	// Each node pings the next (a ring), and 1 sends to 2 and to 8.
	m := st.Nodes[0].Client()
	for _, to := range []int{2, 8} {
		lt, err := m.TestPeer(context.Background(), uint32(to), 10, 16<<20)
		if err != nil {
			t.Fatal(err)
		}
		r := PairResult{From: 1, To: to, LinkTest: lt}
		if r.Error != "" || r.GBPerSec <= 0 {
			t.Fatalf("1 → %d: %+v", to, r)
		}
		t.Logf("1 → %d: rtt p50 %.0f µs, %.3f GB/s", to, r.RTTP50Us, r.GBPerSec)
		// 200 Mbit/s is 0.025 GB/s: the limited link must show it.
		if to == 8 && r.GBPerSec > 0.05 {
			t.Errorf("1 → 8 through a 200mbit link at %.3f GB/s", r.GBPerSec)
		}
	}
	// A command inside a node sees its own address only.
	cmd, err := st.Exec(5, "ip", "-br", "-4", "addr", "show", "dev", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "10.77.0.5/24") {
		t.Fatalf("exec in node 5: %q %v", out, err)
	}
	if err := Down(name, dir, nil); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, name, dir, pids)
}

// The tool that made a cluster crashed and its state is gone: Down still
// removes everything, from the names alone. (The agents also get the
// environment they were given.)
func TestDownAfterACrash(t *testing.T) {
	bin := hecd(t)
	const name = "tcrash"
	dir := filepath.Join(t.TempDir(), "state")
	Down(name, dir, nil)
	all, err := affinity.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	last := all[len(all)-1:]
	st, err := Up(context.Background(), Options{Name: name, Agents: 2, Hecd: bin, StateDir: dir, AgentEnv: []string{"GOMAXPROCS=1"},
		AgentCPUs: [][]int{last}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Down(name, dir, nil) })
	pids := []int{st.Nodes[0].PID, st.Nodes[1].PID}
	for i, pid := range pids {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(string(env), "\x00"), "GOMAXPROCS=1") {
			t.Errorf("agent %d runs without its AgentEnv", pid)
		}
		// Node 1's agent on the CPUs it was given, node 2's anywhere.
		want := all
		if i == 0 {
			want = last
		}
		if got, err := affinity.OfProcess(pid); err != nil || !slices.Equal(got, want) {
			t.Errorf("agent of node %d runs on CPUs %v (%v), want %v", i+1, got, err, want)
		}
	}
	os.RemoveAll(dir) // the state is lost with the tool
	if _, err := Up(context.Background(), Options{Name: name, Agents: 2, Hecd: bin, StateDir: dir}); err == nil ||
		!strings.Contains(err.Error(), "namespaces left") {
		t.Fatalf("up over leftovers: %v", err)
	}
	if err := Down(name, dir, nil); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, name, dir, pids)
}

// An agent that cannot start: Up says which node's and why, from the
// agent's own last words, and Down leaves nothing.
func TestAgentThatCannotStart(t *testing.T) {
	bin := hecd(t)
	const name = "tnostart"
	dir := filepath.Join(t.TempDir(), "state")
	Down(name, dir, nil)
	t.Cleanup(func() { Down(name, dir, nil) })
	_, err := Up(context.Background(), Options{Name: name, Agents: 2, Hecd: bin, StateDir: dir, AgentArgs: []string{"--no-such-flag"}})
	if err == nil || !strings.Contains(err.Error(), "agent exited") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("up with agents that cannot start: %v", err)
	}
	t.Log(err)
	if err := Down(name, dir, nil); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, name, dir, nil)
}

// Members from etcd (in the switch namespace): an agent killed leaves the
// member set of the others when its lease ends.
func TestClusterEtcdMembership(t *testing.T) {
	bin := hecd(t)
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("no etcd: make test installs etcd-server as root")
	}
	const name = "tetcd"
	dir := filepath.Join(t.TempDir(), "state")
	Down(name, dir, nil)
	st, err := Up(context.Background(), Options{Name: name, Agents: 3, Hecd: bin, StateDir: dir, Membership: "etcd"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Down(name, dir, nil) })
	members := func() map[int]bool {
		ps, err := st.Nodes[0].Client().Peers(context.Background())
		if err != nil {
			return nil
		}
		m := map[int]bool{}
		for _, p := range ps {
			m[int(p.ID)] = true
		}
		return m
	}
	testutil.WaitFor(t, 15*time.Second, "member set", func() bool { m := members(); return m[2] && m[3] })
	unix.Kill(st.Nodes[2].PID, unix.SIGKILL)
	t0 := time.Now()
	testutil.WaitFor(t, 15*time.Second, "member set", func() bool { return !members()[3] })
	t.Logf("node 3 killed: gone from node 1's member set after %v", time.Since(t0).Round(100*time.Millisecond))
}

// TestDownReturnsOnceProcessesAreGone: when Down returns, no process of
// the cluster is left in the process table — not even as a zombie its
// parent (PID 1, the agents' parent once hecctl cluster up returned) has
// yet to reap, which ps and pgrep list as hecd for a second or two after
// (this machine's PID 1 reaps every 1.2-1.5 s).
func TestDownReturnsOnceProcessesAreGone(t *testing.T) {
	bin := hecd(t)
	const name = "tgone"
	dir := filepath.Join(t.TempDir(), "state")
	Down(name, dir, nil)
	// As a user makes one: hecctl cluster up returns, and the agents are
	// left to PID 1 (or the nearest subreaper).
	up := exec.Command(testutil.Hecctl(t), "cluster", "up", "--name", name, "--agents", "2", "--hecd", bin, "--state", dir)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("hecctl cluster up: %v\n%s", err, out)
	}
	t.Cleanup(func() { Down(name, dir, nil) })
	st, err := Load(name, dir)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, n := range st.Nodes {
		pids = append(pids, n.PID)
	}
	var log bytes.Buffer
	if err := Down(name, dir, &log); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); err != unix.ESRCH {
			state, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Errorf("agent %d still in the process table after Down (kill 0: %v): %s", pid, err, state)
		}
	}
	t.Logf("%s", log.String())
}
