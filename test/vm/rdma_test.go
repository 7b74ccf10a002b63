package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/images"
	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/test/guestvm"
	"github.com/hecsys/hec/test/testutil"
)

// TestRDMARxeInVM: an arm64 VM agent started with soft-RoCE on its NIC
// (hec.rdma_rxe=eth0: hecd --rdma-rxe eth0) makes the RDMA link and says
// so: its status lists the device, its port ACTIVE and RoCE over eth0,
// with no error, and the RDMA rail absent for want of a handoff asked
// for (--rdma-listen), not of a device. The image carries rdma_rxe and the RDMA core and loads
// them at boot. (This machine's own kernel has no RDMA: the VM is where
// RDMA is tested.)
func TestRDMARxeInVM(t *testing.T) {
	vm, _ := boot(t, "rdma", "hec.rdma_rxe=eth0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := mgmtOf(vm).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := st.RDMA
	if r == nil {
		t.Fatal("the status has no rdma")
	}
	t.Logf("rdma: %s; rail: %s; errors: %q", r.Summary, r.Rail, r.Errors)
	if len(r.Errors) != 0 {
		t.Fatalf("soft-RoCE on eth0 failed: %q", r.Errors)
	}
	found := false
	for _, d := range r.Devices {
		for _, p := range d.Ports {
			if p.NetDev == "eth0" && p.State == "ACTIVE" && p.LinkLayer == "Ethernet" && d.Soft {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("no soft-RoCE device ACTIVE over eth0 among %+v", r.Devices)
	}
	if r.Rail == "" || r.Rail == "absent: "+r.Summary {
		t.Errorf("rail %q: want it absent for want of a transport, the device being there", r.Rail)
	}
}

// TestRDMAPeerLinksBetweenVMs: a cluster of two arm64 VM agents whose
// peer links run over RDMA (cluster.Up with Transport rdma, as hecctl
// cluster up --vm 2 --agents 2 --transport rdma): each agent, the image's
// hecd built with cgo and carrying its libraries, makes a soft-RoCE link
// on its NIC and listens and dials its peer over it; round trips and a
// 4 MiB transfer go both ways, and each agent says its peer links run
// over RDMA on its rxe device.
func TestRDMAPeerLinksBetweenVMs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := rdmaVMCluster(ctx, t, "trdma", 2)
	res, err := st.Ping(ctx, 5, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("ping matrix %+v: want both ways", res)
	}
	for _, r := range res {
		if r.Error != "" || r.GBPerSec <= 0 {
			t.Fatalf("%d → %d over RDMA: %+v", r.From, r.To, r)
		}
		t.Logf("%d → %d over RDMA: rtt p50 %.0f µs, 4 MiB at %.3f GB/s", r.From, r.To, r.RTTP50Us, r.GBPerSec)
	}
	for _, n := range st.Nodes {
		m := &host.Mgmt{Addr: n.Mgmt(), HTTP: cluster.Client(st.Switch), Token: n.Token()}
		s, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.RDMA == nil || len(s.RDMA.Errors) != 0 || !strings.Contains(s.RDMA.Rail, "peer links over RDMA") || len(s.RDMA.Devices) == 0 {
			t.Errorf("node %d's RDMA: %+v, want its peer links over RDMA on a device, no error", n.Index, s.RDMA)
		}
	}
}

// rdmaVMCluster brings up test cluster name of vms arm64 VM agents whose
// peer links and handoff run over RDMA (cluster.Up with Transport rdma),
// down again at the test's end. It skips where clusters cannot be made
// (not root) or the image's agent has no RDMA (no cross compiler or arm64
// rdma-core: make test-deps installs them).
func rdmaVMCluster(ctx context.Context, t *testing.T, name string, vms int) *cluster.State {
	t.Helper()
	b := bundle(t)
	if os.Geteuid() != 0 {
		t.Skip("clusters are network namespaces: root only (CI runs as root)")
	}
	if ok, why := images.ArmRDMA(); !ok {
		t.Skipf("the image's agent has no RDMA: %s (make test-deps installs them)", why)
	}
	dir := filepath.Join(t.TempDir(), "state")
	cluster.Down(name, dir, nil)
	st, err := cluster.Up(ctx, cluster.Options{Name: name, Agents: vms, VMs: vms, Bundle: b, Hecd: testutil.Hecd(t), StateDir: dir, Transport: "rdma"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Down(name, dir, nil) })
	return st
}

// TestRDMAHostInGuestToArmAgent: a host talks to its DPU over RDMA — an
// x86_64 guest with soft-RoCE on the bridge of a cluster whose one agent
// is an arm64 VM serving the handoff over RDMA (cluster.Up with
// Transport rdma). hecctl in the guest, this tree's, pings the agent at
// rdma://, checksums a 3 MiB file through it (the agent's CRC equal to
// this process's), and without the cluster's token is refused.
func TestRDMAHostInGuestToArmAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	st := rdmaVMCluster(ctx, t, "trh", 1)
	agent := st.Nodes[0].RDMA
	if agent == "" {
		t.Fatalf("the VM serves no RDMA handoff: %+v", st.Nodes[0])
	}
	// The guest's NIC: a tap on the cluster's bridge (gone with the
	// switch's namespace).
	for _, c := range [][]string{
		{"-n", st.Switch, "tuntap", "add", "dev", "gx", "mode", "tap"},
		{"-n", st.Switch, "link", "set", "gx", "master", "br0"},
		{"-n", st.Switch, "link", "set", "gx", "up"},
	} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", c, err, out)
		}
	}
	work := t.TempDir()
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	token, err := os.ReadFile(st.Token)
	if err != nil {
		t.Fatal(err)
	}
	hecctl, err := os.ReadFile(testutil.Hecctl(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"data": data, "token": token, "hecctl": hecctl} {
		if err := os.WriteFile(filepath.Join(work, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := `set -e
ip link set lo up
ip link set eth0 up
ip addr add 10.77.0.200/24 dev eth0
rdma link add rxe0 type rxe netdev eth0
/mnt/hecctl ping --agent rdma://` + agent + ` --token-file /mnt/token --n 50
/mnt/hecctl checksum /mnt/data --agent rdma://` + agent + ` --token-file /mnt/token --verify
if /mnt/hecctl ping --agent rdma://` + agent + ` --n 5 2>&1; then echo "ANSWERED WITHOUT THE TOKEN"; else echo "refused without the token"; fi
`
	out, err := guestvm.Run(ctx, guestvm.Options{Work: work, Script: script, NetDev: "tap,ifname=gx,script=no,downscript=no",
		MAC: "52:54:00:4d:00:c8", NetNS: st.Switch, Timeout: 4 * time.Minute})
	if errors.Is(err, guestvm.ErrNoQEMU) {
		t.Skip(err)
	}
	t.Logf("in the guest:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%08x", crc32c.Checksum(data))
	if !strings.Contains(string(out), "50 round trips") || !strings.Contains(string(out), want) ||
		!strings.Contains(string(out), "refused without the token") {
		t.Errorf("the guest's hecctl over rdma://%s: want 50 round trips, the checksum %s, and a refusal without the token", agent, want)
	}
}

// TestRDMAVerbsInGuest runs the RDMA tests of packages built here with
// cgo in an x86_64 guest whose kernel has soft-RoCE, on an rxe device
// over the guest's NIC, where they must not skip (HEC_REQUIRE_RDMA=1):
//   - shared/verbs: the queue pairs move bytes by send, RDMA write, read
//     and write with immediate, and the NIC refuses a write beyond the
//     peer's region; the RDMA connection manager connects a client to a
//     listener that checks the key the request carries (a wrong one is
//     rejected);
//   - host/handoff/rdma: the host's RDMA transport held to the contract
//     every host transport is (handofftest), as shm and tcp are here;
//   - dpu: the handoff over RDMA (TestRDMAHandoff): the host library's
//     round trips against an agent, the same as over TCP, a hostile
//     host's descriptors, the token.
//
// This machine's own kernel has no RDMA.
func TestRDMAVerbsInGuest(t *testing.T) {
	ctx := context.Background()
	work := t.TempDir()
	suites := []struct {
		pkg, bin, run string
		want          []string
	}{
		{"../../shared/verbs", "verbs.test", "TestRDMA|TestEndpoint", []string{"TestRDMALoopback", "TestRDMAConnectionManager"}},
		{"../../shared/rdmalink", "rdmalink.test", "TestRDMA", []string{"TestRDMAStreamIsAConn", "TestRDMAStreamCarriesBytes"}},
		{"../../host/handoff/rdma", "handoffrdma.test", "TestRDMA", []string{"TestRDMAContract"}},
		{"../../dpu", "dpu.test", "TestRDMAHandoff|TestRDMAPeerLinks", []string{"TestRDMAHandoff/tcp", "TestRDMAHandoff/rdma", "TestRDMAHandoff/hostile", "TestRDMAHandoff/token", "TestRDMAPeerLinks"}},
	}
	script := `set -e
ip link set lo up
ip link set eth0 up
ip addr add 10.9.0.1/24 dev eth0
rdma link add rxe0 type rxe netdev eth0
`
	for _, s := range suites {
		if out, err := exec.Command("go", "test", "-c", "-o", filepath.Join(work, s.bin), s.pkg).CombinedOutput(); err != nil {
			t.Fatalf("go test -c %s: %v\n%s", s.pkg, err, out)
		}
		script += "HEC_REQUIRE_RDMA=1 /mnt/" + s.bin + " -test.v -test.count=1 -test.timeout=3m -test.run '" + s.run + "'\n"
	}
	accel, why := guestvm.Accel(ctx)
	t.Logf("guest: %s (%s)", accel, why)
	// About 75 s in a guest under TCG on an idle machine; CI runs other
	// packages beside it.
	out, err := guestvm.Run(ctx, guestvm.Options{Work: work, Script: script, Timeout: 8 * time.Minute})
	if errors.Is(err, guestvm.ErrNoQEMU) {
		t.Skip(err)
	}
	t.Logf("in the guest:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range suites {
		for _, name := range s.want {
			if !strings.Contains(string(out), "--- PASS: "+name) {
				t.Errorf("%s did not pass in the guest", name)
			}
		}
	}
}
