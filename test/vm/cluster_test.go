package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/test/testutil"
)

// A test cluster with an arm64 VM among its agents: the VM joins the
// bridge through a tap, every agent reaches every other (the ping matrix),
// a rolling update with one bundle per architecture (hecctl flash
// --cluster) brings the x86 agents, run by hecd supervise, and the VM's,
// run by its process 1, to the new version, and down leaves nothing
// behind.
func TestClusterWithAVM(t *testing.T) {
	b := bundle(t)
	if os.Geteuid() != 0 {
		t.Skip("clusters are network namespaces: root only (CI runs as root)")
	}
	hecd := testutil.Hecd(t)
	const name = "tvm"
	dir := filepath.Join(t.TempDir(), "state")
	cluster.Down(name, dir, nil)
	st, err := cluster.Up(context.Background(), cluster.Options{Name: name, Agents: 3, VMs: 1, Bundle: b, Hecd: hecd, StateDir: dir,
		TrustedKey: filepath.Join(b, "manifest.pub")}) // the image's key: the VM trusts it too
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Down(name, dir, nil) })
	if !st.Nodes[2].VM {
		t.Fatalf("node 3 is not the VM: %+v", st.Nodes)
	}
	res, err := st.Ping(context.Background(), 5, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Error != "" || r.GBPerSec <= 0 {
			t.Fatalf("%d → %d: %+v", r.From, r.To, r)
		}
		t.Logf("%d → %d: rtt p50 %.0f µs, %.3f GB/s", r.From, r.To, r.RTTP50Us, r.GBPerSec)
	}

	const ver = "-X github.com/hecsys/hec/dpu.Version=v9.0.0"
	bundles := []string{arm64Bundle(t, "./dpu/cmd/hecd", ver, "v9.0.0")}
	if runtime.GOARCH != "arm64" {
		bundles = append(bundles, archBundle(t, runtime.GOARCH, "./dpu/cmd/hecd", ver, "v9.0.0"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	flash := exec.CommandContext(ctx, testutil.Hecctl(t), append([]string{"flash", "--cluster=" + name, "--cluster-state", dir, "-o", "json"}, bundles...)...)
	var stderr bytes.Buffer
	flash.Stderr = &stderr
	out, err := flash.Output()
	t.Logf("hecctl flash --cluster:\n%s%s", out, stderr.Bytes())
	var rollout struct {
		Nodes []host.RolloutNode `json:"nodes"`
	}
	if err != nil || json.Unmarshal(out, &rollout) != nil || len(rollout.Nodes) != 3 {
		t.Fatalf("rolling update: %v", err)
	}
	for i, r := range rollout.Nodes {
		if want := map[bool]string{true: "arm64", false: runtime.GOARCH}[i == 2]; r.Result != "committed" || r.After != "v9.0.0" || r.Arch != want {
			t.Errorf("node %s: %+v, want committed to v9.0.0 on %s", r.Node, r, want)
		}
	}

	pids := []int{st.Nodes[0].PID, st.Nodes[1].PID, st.Nodes[2].PID} // two loaders and QEMU
	if err := cluster.Down(name, dir, nil); err != nil {
		t.Fatal(err)
	}
	if left := cluster.Remains(name, dir, pids); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestCollWithAnArm64Rank runs hecctl coll bench among three ranks whose
// third agent is the arm64 VM: on the DPU rail that agent reduces its
// share in arm64 code, and every result must still be exact.
func TestCollWithAnArm64Rank(t *testing.T) {
	b := bundle(t)
	if os.Geteuid() != 0 {
		t.Skip("coll bench --net netns makes network namespaces: root only (CI runs as root)")
	}
	hecd := testutil.Hecd(t)
	hecctl := testutil.Hecctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "-o", "json", "--net", "netns", "--world", "3", "--vm", "1",
		"--bundle", b, "--hecd", hecd, "--rails", "dpu,host", "--sizes", "8,64K,1M,4M", "--iters", "2", "--deadline", "10s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("hecctl coll bench --world 3 --vm 1:\n%s%s", out, stderr.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct {
			Rail  string `json:"rail"`
			Size  int    `json:"size"`
			Wrong int64  `json:"wrong"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if row.Wrong != 0 {
			t.Errorf("%s rail, %d bytes: %d wrong", row.Rail, row.Size, row.Wrong)
		}
		rows++
	}
	if rows != 8 {
		t.Fatalf("%d rows, want 2 rails × 4 sizes", rows)
	}
}
