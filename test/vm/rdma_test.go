package vm

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/test/guestvm"
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

// TestRDMAVerbsInGuest runs the RDMA tests of packages built here with
// cgo in an x86_64 guest whose kernel has soft-RoCE, on an rxe device
// over the guest's NIC, where they must not skip (HEC_REQUIRE_RDMA=1):
//   - shared/verbs: the queue pairs move bytes by send, RDMA write, read
//     and write with immediate, and the NIC refuses a write beyond the
//     peer's region; the RDMA connection manager connects a client to a
//     listener that checks the key the request carries (a wrong one is
//     rejected);
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
		script += "HEC_REQUIRE_RDMA=1 /mnt/" + s.bin + " -test.v -test.count=1 -test.run '" + s.run + "'\n"
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
