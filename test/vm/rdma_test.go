package vm

import (
	"context"
	"testing"
	"time"
)

// TestRDMARxeInVM: an arm64 VM agent started with soft-RoCE on its NIC
// (hec.rdma_rxe=eth0: hecd --rdma-rxe eth0) makes the RDMA link and says
// so: its status lists the device, its port ACTIVE and RoCE over eth0,
// with no error, and the RDMA rail absent for want of a transport, not
// of a device. The image carries rdma_rxe and the RDMA core and loads
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
