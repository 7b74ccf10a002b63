package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/test/testutil"
)

// portPair finds a free TCP port P with P+10 free too: the TCP handoff and
// management ports of one agent, as hecctl derives one from the other.
func portPair(t *testing.T) (mgmt, tcp int) {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10))
		ln.Close()
		if err == nil {
			ln2.Close()
			return p, p + 10
		}
	}
	t.Fatal("no free pair of ports")
	return 0, 0
}

// startHecd runs bin/hecd as an operator would, on a region of its own
// and free loopback ports, until the test ends; it returns once the
// agent is ready.
func startHecd(t *testing.T) (region, mgmt, tcp string, agent *exec.Cmd) {
	t.Helper()
	return startHecdWith(t)
}

// startHecdWith is startHecd with hecd run by a command (taskset -c 1,
// say): wrap is that command's name and arguments, before hecd's.
func startHecdWith(t *testing.T, wrap ...string) (region, mgmt, tcp string, agent *exec.Cmd) {
	t.Helper()
	return startHecdFlags(t, wrap, nil)
}

// startHecdFlags is startHecdWith with flags added to hecd's (a later one
// overrides hecdArgs').
func startHecdFlags(t *testing.T, wrap, flags []string) (region, mgmt, tcp string, agent *exec.Cmd) {
	t.Helper()
	mgmtPort, tcpPort := portPair(t)
	mgmt, tcp = fmt.Sprintf("127.0.0.1:%d", mgmtPort), fmt.Sprintf("127.0.0.1:%d", tcpPort)
	region, args := hecdArgs(t)
	args = append(append(args, flags...), "--mgmt", mgmt, "--tcp", tcp, "--log-level", "warn")
	argv := append(append(wrap, testutil.Hecd(t)), args...)
	agent = exec.Command(argv[0], argv[1:]...)
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := host.NewMgmt(mgmt).WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return region, mgmt, tcp, agent
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// hecctl runs the hecctl binary as a user would, with env added.
func hecctl(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	return hecctlWithin(t, 30*time.Second, env, args...)
}

// hecctlWithin is hecctl for commands that may take up to d.
func hecctlWithin(t *testing.T, d time.Duration, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, testutil.Hecctl(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("hecctl %v: %v", args, err)
	}
	return r
}

// TestCLIFirstHour runs what an operator types in the first hour, as the
// issue tried it: global flags before or after the command, flags after
// arguments, the environment, -o json, help on stdout, unused flags
// refused, and one-line errors that say what to do.
func TestCLIFirstHour(t *testing.T) {
	region, mgmt, tcp, agent := startHecd(t)
	pid := strconv.Itoa(agent.Process.Pid)
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, bytes.Repeat([]byte("hec"), 100000), 0o644)
	shm := "shm://" + region

	ok := func(r cliResult, args ...string) cliResult {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("hecctl %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return r
	}
	run := func(env []string, args ...string) cliResult { t.Helper(); return ok(hecctl(t, env, args...), args...) }

	// One flag names one agent, before or after the command; the
	// management address follows from the TCP target.
	for _, a := range [][]string{
		{"--agent", "tcp://" + tcp, "status"},
		{"status", "--agent", "tcp://" + tcp},
		{"status", "--mgmt", mgmt},
	} {
		if r := run(nil, a...); !strings.Contains(r.stdout, "pid "+pid) {
			t.Errorf("hecctl %v shows another agent:\n%s", a, r.stdout)
		}
	}
	// ping takes --mgmt (its agent follows) and --agent, flags after it.
	run(nil, "ping", "--mgmt", mgmt, "--n", "50")
	run(nil, "--agent", shm, "ping", "--n", "50")
	// Flags after positional arguments.
	if r := run(nil, "checksum", file, "--verify", "--agent", shm); !strings.Contains(r.stdout, "match") {
		t.Errorf("checksum --verify: %s", r.stdout)
	}
	run(nil, "kv", "put", "a", "1", "--ttl", "10s", "--agent", shm)
	if r := run(nil, "kv", "get", "a", "--agent", shm); strings.TrimSpace(r.stdout) != "1" {
		t.Errorf("kv get: %q", r.stdout)
	}
	// The environment.
	env := []string{"HEC_AGENT=" + shm, "HEC_MGMT=" + mgmt}
	if r := run(env, "status"); !strings.Contains(r.stdout, "pid "+pid) {
		t.Errorf("HEC_AGENT/HEC_MGMT: %s", r.stdout)
	}
	// -o json is the management API's own types.
	var st api.Status
	if err := json.Unmarshal([]byte(run(env, "status", "-o", "json").stdout), &st); err != nil || strconv.Itoa(st.PID) != pid {
		t.Errorf("status -o json: %v %+v", err, st)
	}
	var pr map[string]any
	if err := json.Unmarshal([]byte(run(env, "ping", "--n", "20", "-o", "json").stdout), &pr); err != nil || pr["p50_ns"] == nil {
		t.Errorf("ping -o json: %v %v", err, pr)
	}
	var pairs []map[string]string
	if err := json.Unmarshal([]byte(run(env, "kv", "scan", "-o", "json").stdout), &pairs); err != nil || len(pairs) != 1 || pairs[0]["key"] != "a" {
		t.Errorf("kv scan -o json: %v %v", err, pairs)
	}
	var rails map[string]any
	if err := json.Unmarshal([]byte(run(env, "rails", "-o", "json").stdout), &rails); err != nil || rails["agent"] == nil {
		t.Errorf("rails -o json: %v", err)
	}
	// Help on stdout, exit 0, for every level.
	for _, a := range [][]string{{"help"}, {"--help"}, {"kv", "--help"}, {"qemu", "--help"}, {"cluster", "exec", "--help"}} {
		if r := run(nil, a...); !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
			t.Errorf("hecctl %v: stdout %q stderr %q", a, r.stdout, r.stderr)
		}
	}
	if r := run(nil, "version"); !strings.HasPrefix(r.stdout, "hecctl ") {
		t.Errorf("version: %q", r.stdout)
	}
	if r := run(nil, "completion", "bash"); !strings.Contains(r.stdout, "bash completion") {
		t.Errorf("completion bash: %.80q", r.stdout)
	}
	// Usage errors: exit 2, one line naming what is wrong.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--agent", "nonsense"}, "--agent"},
		{[]string{"qemu", "status", "--agent", "x"}, "--agent is not used"},
		{[]string{"checksum"}, "one FILE"},
		{[]string{"kv", "put", "a"}, "KEY VALUE"},
		{[]string{"kv", "nosuch"}, "unknown subcommand"},
		{[]string{"nosuch"}, "unknown command"},
		{[]string{"ping", "--nosuch"}, "unknown flag"},
		{[]string{"status", "-o", "yaml"}, "text or json"},
	} {
		r := hecctl(t, nil, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("hecctl %v: exit %d, stderr %q (want 2 and one line with %q)", tc.args, r.code, r.stderr, tc.want)
		}
	}
	// No agent: exit 3, one line with the hint; -v adds the chain.
	missing := "shm:///dev/shm/hec-e2e-nobody"
	r := hecctl(t, nil, "ping", "--agent", missing)
	if r.code != 3 || !strings.Contains(r.stderr, "no agent at /dev/shm/hec-e2e-nobody") || !strings.Contains(r.stderr, "--agent") ||
		strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("ping a missing agent: exit %d, %q", r.code, r.stderr)
	}
	if r := hecctl(t, nil, "status", "--mgmt", "127.0.0.1:1"); r.code != 3 || !strings.Contains(r.stderr, "start one with bin/hecd") {
		t.Errorf("status, nothing there: exit %d, %q", r.code, r.stderr)
	}
	if r := hecctl(t, nil, "ping", "--agent", missing, "-v"); strings.Count(strings.TrimSpace(r.stderr), "\n") < 1 {
		t.Errorf("-v: %q", r.stderr)
	}
	// Refused by the agent: exit 4 (no XDP on this agent).
	if r := hecctl(t, env, "acl", "list"); r.code != 4 || !strings.Contains(r.stderr, "xdp is not served") {
		t.Errorf("acl list without xdp: exit %d, %q", r.code, r.stderr)
	}
}

// TestClusterCLI: hecctl cluster exec N -- hecctl status reaches node N's
// agent with no flags; cluster status says how to reach each node; after
// cluster down returns, nothing it started is alive.
func TestClusterCLI(t *testing.T) {
	testutil.NeedRoot(t, "clusters are network namespaces")
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip (iproute2): make test installs it as root")
	}
	const name = "cli"
	hecctl(t, nil, "cluster", "down", "--name", name)
	if r := hecctl(t, nil, "cluster", "up", "--name", name, "--agents", "2", "--hecd", testutil.Hecd(t)); r.code != 0 {
		t.Fatalf("cluster up: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Cleanup(func() { hecctl(t, nil, "cluster", "down", "--name", name) })
	r := hecctl(t, nil, "cluster", "status", "--name", name, "-o", "json")
	var doc struct {
		Nodes []struct {
			Index int    `json:"index"`
			PID   int    `json:"pid"`
			Agent string `json:"agent"`
			Mgmt  string `json:"mgmt"`
			Peers []api.PeerStatus
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Nodes) != 2 {
		t.Fatalf("cluster status -o json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if n := doc.Nodes[1]; n.Agent == "" || n.Mgmt == "" || len(n.Peers) != 1 {
		t.Errorf("node 2 in cluster status: %+v", n)
	}
	r = hecctl(t, nil, "cluster", "exec", "--name", name, "2", "--", testutil.Hecctl(t), "status", "-o", "json")
	var st api.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.PID != doc.Nodes[1].PID || st.NodeID != 2 {
		t.Fatalf("hecctl status inside node 2: exit %d, %v, pid %d node %d (want %d, 2)\n%s", r.code, err, st.PID, st.NodeID,
			doc.Nodes[1].PID, r.stderr)
	}
	if r := hecctl(t, nil, "cluster", "down", "--name", name); r.code != 0 {
		t.Fatalf("cluster down: %d %s", r.code, r.stderr)
	}
	for _, n := range doc.Nodes {
		if err := syscall.Kill(n.PID, 0); err == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.PID)); !strings.Contains(string(b), ") Z ") {
				t.Errorf("node %d's agent (pid %d) alive after cluster down returned", n.Index, n.PID)
			}
		}
	}
}

// TestCLIAgentKilled: an agent killed with SIGKILL leaves its region file
// behind, still reading "ready". hecctl against it must say, within the
// agent timeout and some slack, that the agent there stopped beating — not
// wait out its whole dial deadline and report "context deadline exceeded".
func TestCLIAgentKilled(t *testing.T) {
	testutil.Hecctl(t) // built before the clock starts
	region, _, _, agent := startHecd(t)
	agent.Process.Kill()
	agent.Wait()
	if _, err := os.Stat(region); err != nil {
		t.Fatalf("a killed agent's region: %v", err)
	}
	start := time.Now()
	r := hecctl(t, nil, "--agent", "shm://"+region, "ping", "--n", "1")
	took := time.Since(start)
	t.Logf("hecctl ping, its agent killed: exit %d after %v: %s", r.code, took.Round(time.Millisecond), r.stderr)
	if r.code != 3 || !strings.Contains(r.stderr, "heartbeat") || !strings.Contains(r.stderr, "start one") {
		t.Errorf("ping a killed agent's region: exit %d, %q (want 3, the heartbeat named, and what to do)", r.code, r.stderr)
	}
	if took > 5*time.Second {
		t.Errorf("ping a killed agent's region took %v (agent timeout 2 s)", took)
	}
}

// TestCLIRailsSayWhyNoRDMA: an agent asked for an RDMA handoff it cannot
// serve (no device has 10.9.0.1 here: on this machine no RDMA at all)
// starts and serves the rest, and `hecctl rails` says why the RDMA rail
// is absent and what failed.
func TestCLIRailsSayWhyNoRDMA(t *testing.T) {
	_, mgmt, tcp, _ := startHecdFlags(t, nil, []string{"--rdma-listen", "10.9.0.1:7470", "--insecure"})
	r := hecctl(t, nil, "rails", "--agent", "tcp://"+tcp, "--mgmt", mgmt)
	if r.code != 0 {
		t.Fatalf("hecctl rails: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "(error: rdma: listen at 10.9.0.1:7470") || !strings.Contains(r.stdout, "rdma ") {
		t.Fatalf("hecctl rails does not say why there is no RDMA handoff:\n%s", r.stdout)
	}
	if r := hecctl(t, nil, "ping", "--agent", "tcp://"+tcp, "--mgmt", mgmt, "--n", "20"); r.code != 0 {
		t.Fatalf("the agent does not serve the rest: %s%s", r.stdout, r.stderr)
	}
	// A listener that could not listen is not listed as served insecurely.
	r = hecctl(t, nil, "status", "--agent", "tcp://"+tcp, "--mgmt", mgmt, "-o", "json")
	if r.code != 0 || strings.Contains(r.stdout, `"rdma-listen"`) {
		t.Fatalf("hecctl status lists the RDMA handoff that could not listen among those served insecurely: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
