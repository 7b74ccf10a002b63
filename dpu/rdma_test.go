package dpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/sysinfo"
)

// TestRDMAStatus: an agent asked for soft-RoCE on an interface that does
// not exist starts and serves, and its status says which link it could
// not make and why; the RDMA rail is absent, saying why: no device here
// (this machine's kernel, or the recorded tree), or no transport where
// there are devices. A name that cannot be an interface's is refused.
func TestRDMAStatus(t *testing.T) {
	dir := t.TempDir()
	shm := filepath.Join("/dev/shm", fmt.Sprintf("hec-dpu-rdma-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { os.Remove(shm) })
	a := runAgent(t, Config{
		Agent: AgentConfig{Shm: shm, RegionSize: 4 << 20, QueuePairs: 1, TCP: Off, Mgmt: Off, StateDir: dir},
		RESP:  RESPConfig{Addr: Off}, UDP: UDPConfig{Addr: Off},
		RDMA: RDMAConfig{Rxe: []string{"nosuch9"}},
	})
	st := a.Status()
	if !st.Ready || st.RDMA == nil {
		t.Fatalf("ready %v, rdma %+v", st.Ready, st.RDMA)
	}
	if len(st.RDMA.Errors) != 1 || !strings.HasPrefix(st.RDMA.Errors[0], "rxe on nosuch9: ") {
		t.Errorf("errors %q: want the link on nosuch9 named", st.RDMA.Errors)
	}
	if !strings.HasPrefix(st.RDMA.Rail, "absent: ") {
		t.Errorf("rail %q: want it absent, saying why", st.RDMA.Rail)
	}
	row, _ := st.Service("rdma")
	if row.Served || !strings.Contains(row.Note, "nosuch9") {
		t.Errorf("status row %+v", row)
	}
	t.Logf("rdma: %s; rail %s; %v", st.RDMA.Summary, st.RDMA.Rail, st.RDMA.Errors)

	// Devices (a recorded tree): the rail is absent for want of a
	// transport; none: for want of a device.
	s := &rdmaService{root: t.TempDir()}
	if r := s.status(); r.Rail != "absent: "+sysinfo.RDMASummary(nil, sysinfo.ErrNoRDMA) {
		t.Errorf("no /sys/class/infiniband: rail %q", r.Rail)
	}
	port := filepath.Join(s.root, "sys/class/infiniband/rxe_eth0/ports/1")
	os.MkdirAll(port, 0o755)
	os.WriteFile(filepath.Join(port, "state"), []byte("4: ACTIVE\n"), 0o644)
	if r := s.status(); !strings.HasPrefix(r.Rail, "absent: this hecd serves no RDMA handoff") || len(r.Devices) != 1 || r.Devices[0].Ports[0].State != "ACTIVE" {
		t.Errorf("a device: %+v", r)
	}

	for _, bad := range []string{"", "eth0/../x", strings.Repeat("e", 16), "eth 0"} {
		c := DefaultConfig()
		c.RDMA.Rxe = []string{bad}
		if _, err := c.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("--rdma-rxe %q: %v, want ErrConfig", bad, err)
		}
	}
}
