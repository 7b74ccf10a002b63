package vm

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/shared/api"
)

// TestVMXDP: the arm64 agent attaches its XDP program to the VM's
// virtio-net NIC (JIT-compiled for arm64) and counts the traffic that
// reaches it through QEMU; UDP GETs are answered, from XDP once hot.
func TestVMXDP(t *testing.T) {
	vm, _ := boot(t, "xdp")
	status := func() api.XDPStatus {
		t.Helper()
		s, err := mgmtOf(vm).XDP(context.Background(), 10)
		if err != nil {
			b, _ := os.ReadFile(vm.Console)
			t.Fatalf("/v1/xdp: %v\nconsole:\n%s", err, b)
		}
		return s
	}
	s := status()
	t.Logf("xdp on %s (%s mode), %s, %d bytes of JIT code", s.Interface, s.Mode, s.Arch, s.JITedBytes)
	if s.Arch != "arm64" || s.JITedBytes == 0 {
		t.Fatalf("want the program JIT-compiled on arm64: %s, %d bytes", s.Arch, s.JITedBytes)
	}
	rc := redis.NewClient(&redis.Options{Addr: vm.RESP, Password: vm.Token()})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.Set(ctx, "vmhot", "from the arm64 agent", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	to, _ := net.ResolveUDPAddr("udp4", vm.UDP)
	buf := make([]byte, 2048)
	const n = 400
	got := 0
	for i := 0; i < n; i++ {
		req := binary.BigEndian.AppendUint16(nil, uint16(i))
		req = append(req, 0, 0, 0, 1, 0, 0)
		req = append(req, "get vmhot\r\n"...)
		pc.WriteTo(req, to)
		pc.SetReadDeadline(time.Now().Add(2 * time.Second))
		m, _, err := pc.ReadFrom(buf)
		if err != nil {
			continue // UDP through QEMU's user network: count, don't insist
		}
		if strings.Contains(string(buf[8:m]), "from the arm64 agent") {
			got++
		}
	}
	after := status()
	udp, _ := after.Class("udp_get")
	resp, _ := after.Class("resp")
	mgmt, _ := after.Class("mgmt")
	t.Logf("%d of %d GETs answered; XDP counted udp_get %d packets (%d answered in XDP), resp %d, mgmt %d",
		got, n, udp.Packets, udp.Answered, resp.Packets, mgmt.Packets)
	if got < n*9/10 {
		t.Errorf("only %d of %d GETs answered", got, n)
	}
	if udp.Packets < uint64(n) || resp.Packets == 0 || mgmt.Packets == 0 {
		t.Errorf("traffic not counted by class: %+v", after.Classes)
	}
	if udp.Answered == 0 {
		t.Errorf("no GET answered in XDP (XDP_TX on virtio-net)")
	}
}
