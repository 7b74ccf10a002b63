package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/images"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
	"github.com/hecsys/hec/test/testutil"
)

// flashRig is an agent run by its loader (hecd supervise) as an operator
// would run it on a DPU's Linux, with the keys and binaries to flash it.
type flashRig struct {
	dir, region, mgmt, tokenFile, key string
	m                                 *host.Mgmt
}

// goBuild builds pkg into dir/name with ldflags.
func goBuild(t *testing.T, dir, name, pkg, ldflags string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = testutil.ModuleRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// agentBundle signs binary as an agent bundle of version with key.
func agentBundle(t *testing.T, binary, version, key string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bundle-"+version)
	if _, err := images.BuildAgent(images.AgentOptions{Agent: binary, Out: out, KeyPath: key, Version: version}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (r *flashRig) status(t *testing.T) api.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := r.m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// serving checks that version answers over shared memory.
func (r *flashRig) serving(t *testing.T, version string) {
	t.Helper()
	if st := r.status(t); st.Version != version {
		t.Fatalf("version %s serving, want %s", st.Version, version)
	}
	c := dial(t, "shm://"+r.region)
	if err := c.Ping(context.Background()); err != nil {
		t.Fatalf("ping %s: %v", version, err)
	}
	c.Close()
}

func (r *flashRig) flash(t *testing.T, args ...string) cliResult {
	t.Helper()
	return hecctl(t, nil, append([]string{"--mgmt", r.mgmt, "--token-file", r.tokenFile, "flash", "--timeout", "90s"}, args...)...)
}

// startLoader runs hecd supervise (binary base) with loader flags and the
// agent's flags, stops it at the end of the test, and shows its log (the
// agent's too) when the test failed.
func startLoader(t *testing.T, base string, loaderArgs, agentArgs []string) {
	t.Helper()
	args := append(append(append([]string{"supervise"}, loaderArgs...), "--"), agentArgs...)
	loader := exec.Command(base, args...)
	var logs testutil.SyncBuffer
	loader.Stderr = &logs
	if err := loader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		loader.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- loader.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			loader.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("loader and agent log:\n%s", logs.String())
		}
	})
}

// TestFlashCommitRollbackRefuse flashes an agent run by hecd supervise:
// a good bundle is committed and serves; a bundle whose agent exits at
// start, and one that never becomes ready, are rolled back by the loader
// with the old version serving; and every bad bundle (a part or the
// manifest tampered with, another key, the other architecture, older
// than the floor, too large, cut short, no token) is refused while the
// running version serves throughout. Last, a committed bundle rotates the
// trusted key: the old one is refused from then on, the new one taken.
func TestFlashCommitRollbackRefuse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four agents and restarts them: not in -short")
	}
	work := t.TempDir()
	r := &flashRig{dir: work, key: filepath.Join(work, "signing.key")}
	if res := hecctl(t, nil, "keys", "gen", "--out", r.key); res.code != 0 {
		t.Fatalf("keys gen: %d %s", res.code, res.stderr)
	}
	const pkg, ver = "./dpu/cmd/hecd", "-X github.com/hecsys/hec/dpu.Version="
	base := goBuild(t, work, "hecd-1.0.0", pkg, ver+"v1.0.0")
	bundles := map[string]string{}
	for _, v := range []string{"v1.1.0", "v1.5.0"} {
		bundles[v] = agentBundle(t, goBuild(t, work, "hecd-"+v, pkg, ver+v), v, r.key)
	}
	bundles["exits"] = agentBundle(t, goBuild(t, work, "exits", "./test/e2e/testdata/badagent", "-X main.mode=exit"), "v1.3.0", r.key)
	bundles["hangs"] = agentBundle(t, goBuild(t, work, "hangs", "./test/e2e/testdata/badagent", "-X main.mode=hang"), "v1.4.0", r.key)

	mgmtPort, tcpPort := portPair(t)
	r.mgmt = fmt.Sprintf("127.0.0.1:%d", mgmtPort)
	r.tokenFile = filepath.Join(work, "token")
	region, args := hecdArgs(t)
	r.region = region
	args = append(args, "--mgmt", r.mgmt, "--tcp", fmt.Sprintf("127.0.0.1:%d", tcpPort), "--token-file", r.tokenFile,
		"--update-max-bundle", "100MiB", "--log-level", "warn")
	startLoader(t, base, []string{"--trusted-key", r.key + ".pub", "--tries", "2", "--gate", "8s"}, args)
	testutil.WaitFor(t, 20*time.Second, "the token file", func() bool { _, err := os.Stat(r.tokenFile); return err == nil })
	tok, _ := os.ReadFile(r.tokenFile)
	r.m = host.NewMgmt(r.mgmt)
	r.m.Token = strings.TrimSpace(string(tok))
	r.serving(t, "v1.0.0")
	if st := r.status(t); st.Update == nil || st.Update.Slot != "base" {
		t.Fatalf("status update %+v: want the base slot", st.Update)
	}

	// A dry run verifies and installs nothing.
	if res := r.flash(t, "--dry-run", bundles["v1.1.0"]); res.code != 0 || !strings.Contains(res.stdout, "verified") {
		t.Fatalf("dry run: %d %q %q", res.code, res.stdout, res.stderr)
	}
	r.serving(t, "v1.0.0")

	// A good update is committed and serves.
	res := r.flash(t, bundles["v1.1.0"])
	if res.code != 0 || !strings.Contains(res.stdout, "committed: hecd v1.0.0 → v1.1.0") {
		t.Fatalf("flash v1.1.0: %d %q %q", res.code, res.stdout, res.stderr)
	}
	r.serving(t, "v1.1.0")
	if u := r.status(t).Update; u.Committed != "a" || u.Floor != "v1.1.0" {
		t.Fatalf("after the commit: %+v", u)
	}

	// Every bad bundle is refused, the running version untouched.
	otherKey := filepath.Join(work, "other.key")
	hecctl(t, nil, "keys", "gen", "--out", otherKey)
	for _, b := range testutil.SpoiledBundles(t, bundles["v1.5.0"], r.key, otherKey, "v1.1.0", 100<<20, "100MiB") {
		res := r.flash(t, b.Dir)
		if res.code != 4 || !strings.Contains(res.stderr, b.Refusal) {
			t.Errorf("%s: exit %d, stderr %q; want 4 and %q", b.Name, res.code, res.stderr, b.Refusal)
		}
		r.serving(t, "v1.1.0")
	}
	if res := hecctl(t, nil, "--mgmt", r.mgmt, "flash", bundles["v1.5.0"]); res.code != 4 || !strings.Contains(res.stderr, "401") {
		t.Errorf("no token: exit %d, stderr %q; want 4 and 401", res.code, res.stderr)
	}
	// Cut short: half of the archive, then the end of the body.
	var tarball bytes.Buffer
	if err := bundle.Pack(&tarball, bundles["v1.5.0"]); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.mgmt+"/v1/update", bytes.NewReader(tarball.Bytes()[:tarball.Len()/2]))
	req.Header.Set("Authorization", "Bearer "+r.m.Token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("cut short: %v %v; want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	r.serving(t, "v1.1.0")

	// An agent that exits at start, then one that never becomes ready:
	// both rolled back, the committed version serving again.
	for _, c := range []struct{ bundle, reason string }{
		{"exits", "started 2 times without becoming ready"},
		{"hangs", "not ready within 8s"},
	} {
		res := r.flash(t, bundles[c.bundle])
		if res.code != 1 || !strings.Contains(res.stdout, "rolled back") || !strings.Contains(res.stdout, c.reason) {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want 1, rolled back: %s", c.bundle, res.code, res.stdout, res.stderr, c.reason)
		}
		r.serving(t, "v1.1.0")
		if u := r.status(t).Update; u.Committed != "a" || u.Slot != "a" || u.Last.Result != "rolled back" {
			t.Fatalf("%s: after the rollback %+v", c.bundle, u)
		}
	}

	// And a good one after them is committed into the other slot.
	res = r.flash(t, bundles["v1.5.0"])
	if res.code != 0 || !strings.Contains(res.stdout, "committed: hecd v1.1.0 → v1.5.0 (slot b)") {
		t.Fatalf("flash v1.5.0: %d %q %q", res.code, res.stdout, res.stderr)
	}
	r.serving(t, "v1.5.0")

	// Key rotation: a bundle signed with the trusted key names the next
	// one; once it is committed only the next key is trusted.
	nextPub, err := os.ReadFile(otherKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(bundles["v1.5.0"], bundle.AgentPart)
	rotate := filepath.Join(t.TempDir(), "rotate")
	if _, err := images.BuildAgent(images.AgentOptions{Agent: agent, Out: rotate, KeyPath: r.key, Version: "v1.6.0",
		NextKey: strings.TrimSpace(string(nextPub))}); err != nil {
		t.Fatal(err)
	}
	if res := r.flash(t, rotate); res.code != 0 || !strings.Contains(res.stdout, "committed") {
		t.Fatalf("flash the rotating bundle: %d %q %q", res.code, res.stdout, res.stderr)
	}
	if res := r.flash(t, agentBundle(t, agent, "v1.7.0", r.key)); res.code != 4 || !strings.Contains(res.stderr, "signature does not verify") {
		t.Fatalf("the old key after the rotation: %d %q %q", res.code, res.stdout, res.stderr)
	}
	if res := r.flash(t, agentBundle(t, agent, "v1.7.0", otherKey)); res.code != 0 || !strings.Contains(res.stdout, "committed") {
		t.Fatalf("the new key after the rotation: %d %q %q", res.code, res.stdout, res.stderr)
	}
	if u := r.status(t).Update; u.Floor != "v1.7.0" || u.Last.Result != "committed" {
		t.Fatalf("after the rotation: %+v", u)
	}
}

// TestFlashRollingCluster is a rolling update of four agents in network
// namespaces, each run by its loader (hecctl cluster up --trusted-key), as
// an operator runs it with hecctl flash --cluster. A bundle signed by
// another key is refused by every node before any is touched. A bundle
// whose agent breaks on node 3 only is committed on nodes 1 and 2, rolled
// back on node 3, which is then reported, and never tried on node 4: the
// table says so and the agents serve those versions. A good bundle after
// it, two nodes at a time, brings all four to it.
func TestFlashRollingCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three agents and restarts four: not in -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("agents in network namespaces: root only (CI runs as root)")
	}
	work := t.TempDir()
	key, otherKey := filepath.Join(work, "signing.key"), filepath.Join(work, "other.key")
	for _, k := range []string{key, otherKey} {
		if res := hecctl(t, nil, "keys", "gen", "--out", k); res.code != 0 {
			t.Fatalf("keys gen: %d %s", res.code, res.stderr)
		}
	}
	const pkg, ver = "./dpu/cmd/hecd", "-X github.com/hecsys/hec/dpu.Version="
	base := goBuild(t, work, "hecd-1.0.0", pkg, ver+"v1.0.0")
	good11 := goBuild(t, work, "hecd-1.1.0", pkg, ver+"v1.1.0")
	rigged := agentBundle(t, goBuild(t, work, "rigged", "./test/e2e/testdata/badagent",
		"-X main.mode=node -X main.failNode=3 -X main.agent="+good11), "v1.1.0", key)
	good := agentBundle(t, goBuild(t, work, "hecd-1.2.0", pkg, ver+"v1.2.0"), "v1.2.0", key)
	foreign := agentBundle(t, good11, "v1.1.0", otherKey)

	name := fmt.Sprintf("fl%d", os.Getpid()%100000)
	st := testCluster(t, cluster.Options{Name: name, Agents: 4, Hecd: base, TrustedKey: key + ".pub",
		LoaderArgs: []string{"--tries=2", "--gate=20s"}})
	versions := func() []string {
		var v []string
		for _, n := range st.Nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			m := n.Client()
			err := m.WaitReady(ctx)
			s, serr := m.Status(ctx)
			cancel()
			if err != nil || serr != nil {
				t.Fatalf("node %d: %v %v", n.Index, err, serr)
			}
			v = append(v, s.Version)
		}
		return v
	}
	flash := func(args ...string) cliResult {
		return hecctlWithin(t, 5*time.Minute, nil, append([]string{"flash", "--cluster=" + name, "--cluster-state", st.Dir, "--timeout", "2m"}, args...)...)
	}
	// The table's row for node n: NODE ARCH BEFORE AFTER RESULT …
	row := func(res cliResult, n int) []string {
		for _, l := range strings.Split(res.stdout, "\n") {
			if f := strings.Fields(l); len(f) >= 5 && f[0] == fmt.Sprint(n) {
				return f
			}
		}
		t.Fatalf("no row for node %d in\n%s", n, res.stdout)
		return nil
	}
	if v := versions(); strings.Join(v, " ") != "v1.0.0 v1.0.0 v1.0.0 v1.0.0" {
		t.Fatalf("versions at start: %v", v)
	}

	res := flash(foreign)
	if res.code == 0 || !strings.Contains(res.stderr, "nothing installed") {
		t.Fatalf("another key: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	for n := 1; n <= 4; n++ {
		if f := row(res, n); f[4] != "refused" || !strings.Contains(res.stdout, "signature does not verify") {
			t.Fatalf("another key, node %d: %v", n, f)
		}
	}
	if v := versions(); strings.Join(v, " ") != "v1.0.0 v1.0.0 v1.0.0 v1.0.0" {
		t.Fatalf("after the refused bundle: %v", v)
	}

	t0 := time.Now()
	res = flash(rigged)
	t.Logf("rigged rollout (%v):\n%s%s", time.Since(t0).Round(time.Millisecond), res.stdout, res.stderr)
	if res.code != 1 || !strings.Contains(res.stderr, "3 rolled back; left on their version: 4") {
		t.Fatalf("rigged: exit %d, want 1 and node 3 rolled back", res.code)
	}
	for _, w := range []struct {
		node                  int
		before, after, result string
	}{
		{1, "v1.0.0", "v1.1.0", "committed"},
		{2, "v1.0.0", "v1.1.0", "committed"},
		{3, "v1.0.0", "v1.0.0", "rolled"},
		{4, "v1.0.0", "v1.0.0", "not"},
	} {
		if f := row(res, w.node); f[2] != w.before || f[3] != w.after || f[4] != w.result {
			t.Errorf("node %d: %v, want %s → %s %s", w.node, f, w.before, w.after, w.result)
		}
	}
	if !strings.Contains(res.stdout, "started 2 times without becoming ready") {
		t.Errorf("node 3's reason not reported")
	}
	if v := versions(); strings.Join(v, " ") != "v1.1.0 v1.1.0 v1.0.0 v1.0.0" {
		t.Fatalf("after the rigged rollout the agents serve %v", v)
	}

	res = flash("--max-unavailable", "2", "-o", "json", good)
	var out struct {
		Nodes []host.RolloutNode `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || res.code != 0 || len(out.Nodes) != 4 {
		t.Fatalf("good, two at a time: exit %d, %v\n%s\n%s", res.code, err, res.stdout, res.stderr)
	}
	for i, r := range out.Nodes {
		if r.Result != "committed" || r.After != "v1.2.0" || r.Before != map[bool]string{true: "v1.0.0", false: "v1.1.0"}[i >= 2] {
			t.Errorf("good, node %s: %+v", r.Node, r)
		}
	}
	if v := versions(); strings.Join(v, " ") != "v1.2.0 v1.2.0 v1.2.0 v1.2.0" {
		t.Fatalf("after the good rollout the agents serve %v", v)
	}
	// A node stopped (its loader and the agent it runs: nothing is left
	// in its namespace) and started again runs its committed slot.
	if err := st.Stop(4); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("ip", "netns", "pids", st.Nodes[3].NS).Output(); len(strings.Fields(string(out))) > 0 {
		t.Fatalf("node 4 stopped, processes left in its namespace: %s", out)
	}
	if err := st.Start(context.Background(), 4, false); err != nil {
		t.Fatal(err)
	}
	if v := versions(); v[3] != "v1.2.0" {
		t.Fatalf("node 4 after a restart serves %s", v[3])
	}
	// The cluster works again as one: every agent sees the other three.
	testutil.WaitFor(t, 30*time.Second, "every agent seeing its three peers", func() bool {
		for _, n := range st.Nodes {
			s, err := n.Client().Status(context.Background())
			if err != nil {
				return false
			}
			alive := 0
			for _, p := range s.Peers {
				if p.Alive {
					alive++
				}
			}
			if alive != 3 {
				return false
			}
		}
		return true
	})
}

// TestFlashUnderMutualTLS flashes an agent whose management API is HTTPS
// and admits clients by certificate only (no token): hecd supervise
// refuses to start when its probes would have no way in, and with
// --probe-cert it probes the agent over TLS (pinned to the agent's
// certificate) and commits the update hecctl uploads with the operator's
// certificate.
func TestFlashUnderMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two agents: not in -short")
	}
	work := t.TempDir()
	key := filepath.Join(work, "signing.key")
	if res := hecctl(t, nil, "keys", "gen", "--out", key); res.code != 0 {
		t.Fatalf("keys gen: %d %s", res.code, res.stderr)
	}
	const pkg, ver = "./dpu/cmd/hecd", "-X github.com/hecsys/hec/dpu.Version="
	base := goBuild(t, work, "hecd-1.0.0", pkg, ver+"v1.0.0")
	next := agentBundle(t, goBuild(t, work, "hecd-1.1.0", pkg, ver+"v1.1.0"), "v1.1.0", key)
	ca := testutil.NewCA(t, work, "ca")
	agentCrt, agentKey := ca.Leaf(t, "agent")
	opCrt, opKey := ca.Leaf(t, "operator")
	loaderCrt, loaderKey := ca.Leaf(t, "loader")

	mgmtPort, tcpPort := portPair(t)
	mgmt := fmt.Sprintf("127.0.0.1:%d", mgmtPort)
	_, args := hecdArgs(t)
	args = append(args, "--mgmt", mgmt, "--tcp", fmt.Sprintf("127.0.0.1:%d", tcpPort),
		"--mgmt-cert", agentCrt, "--mgmt-key", agentKey, "--mgmt-client-ca", filepath.Join(work, "ca.crt"), "--log-level", "warn")
	loaderArgs := []string{"--trusted-key", key + ".pub", "--gate", "20s"}

	// No way in for the probes: refused at start, saying what to give.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, base, append(append(append([]string{"supervise"}, loaderArgs...), "--"), args...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--probe-cert") {
		t.Fatalf("supervise with no way in for its probes: %v\n%s", err, out)
	}

	startLoader(t, base, append(loaderArgs, "--probe-cert", loaderCrt, "--probe-key", loaderKey), args)
	tlsArgs := []string{"--mgmt", mgmt, "--mgmt-ca", filepath.Join(work, "ca.crt"), "--mgmt-cert", opCrt, "--mgmt-key", opKey}
	testutil.WaitFor(t, 20*time.Second, "the agent serving over HTTPS", func() bool {
		return hecctl(t, nil, append(tlsArgs, "status")...).code == 0
	})
	res := hecctlWithin(t, 2*time.Minute, nil, append(tlsArgs, "flash", "--timeout", "90s", next)...)
	if res.code != 0 || !strings.Contains(res.stdout, "committed: hecd v1.0.0 → v1.1.0") {
		t.Fatalf("flash over mutual TLS: %d %q %q", res.code, res.stdout, res.stderr)
	}
	// Without the operator's certificate: no way in.
	if res := hecctl(t, nil, "--mgmt", mgmt, "--mgmt-ca", filepath.Join(work, "ca.crt"), "flash", next); res.code != 4 || !strings.Contains(res.stderr, "401") {
		t.Fatalf("flash without a client certificate: %d %q", res.code, res.stderr)
	}
}
