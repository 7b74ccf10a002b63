package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hecsys/hec/test/guestvm"
	"github.com/hecsys/hec/test/testutil"
)

// The rdma scenario (issue: RDMA): one link measured both ways HEC can
// use it, in the same run — RDMA over soft-RoCE (package verbs: a ping by
// SEND, bulk by RDMA WRITE) and TCP — between two x86_64 guests
// (test/guestvm) joined by one virtual link, rxe on each guest's NIC;
// then the same over HEC's own paths: the agent's handoff (host.Dial
// rdma:// against tcp://, checksums of window buffers) and the agents'
// peer links (--peer-transport rdma against tcp: two-rank allreduces the
// agents reduce, the client process being host and agent both).
// This machine's kernel has no RDMA. rxe is software: the NIC's work is
// the guest kernel's, on the guest's CPU; the guests run under TCG here
// (KVM guests do not boot on this machine), so every figure is an
// emulated machine's and only the ratios mean anything. The client's CPU
// per GB counts its own process: the RDMA side polls its completion
// queue while an op is due (as the transport's poller will), the TCP
// side blocks in write.
// rdmaResult is one transport's figures, as rdmaperf's client prints
// them.
type rdmaResult struct {
	Transport string             `json:"transport"`
	PingP50US float64            `json:"ping_p50_us"`
	GBps      map[string]float64 `json:"gb_per_s"`
	CPUmsGB   map[string]float64 `json:"cpu_ms_per_gb"`
}

func benchRDMA(ctx context.Context, rep *Report, quick bool) error {
	const s = "rdma"
	dir, err := testutil.ProcessDir()
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "rdmaperf")
	build := exec.Command("go", "build", "-o", bin, "./test/bench/rdmaperf")
	build.Dir = testutil.ModuleRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build rdmaperf: %v\n%s", err, out)
	}
	accel, why := guestvm.Accel(ctx)
	progress(s, "two x86_64 guests (%s: %s), soft-RoCE on each", accel, why)
	// The link: UDP datagrams between two loopback ports (QEMU's dgram
	// netdev), each guest's NIC on one end; neither waits for the other.
	addrs, err := testutil.FreeLoopbackAddrs(2)
	if err != nil {
		return err
	}
	end := func(local, remote string) string {
		lh, lp, _ := net.SplitHostPort(local)
		rh, rp, _ := net.SplitHostPort(remote)
		return fmt.Sprintf("dgram,local.type=inet,local.host=%s,local.port=%s,remote.type=inet,remote.host=%s,remote.port=%s", lh, lp, rh, rp)
	}
	setup := `set -e
ip link set lo up
ip link set eth0 up
ip addr add %s/24 dev eth0
rdma link add rxe0 type rxe netdev eth0
cp /mnt/rdmaperf /tmp/rdmaperf
`
	guests := []struct {
		role, ip, netdev, mac string
	}{
		{"server", "10.9.0.1", end(addrs[0], addrs[1]), "52:54:00:00:09:01"},
		{"client", "10.9.0.2", end(addrs[1], addrs[0]), "52:54:00:00:09:02"},
	}
	outs := make([][]byte, len(guests))
	errs := make([]error, len(guests))
	var wg sync.WaitGroup
	for i, g := range guests {
		work, err := os.MkdirTemp(dir, "rdma-"+g.role)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(work, "rdmaperf"), b, 0o755); err != nil {
			return err
		}
		script := fmt.Sprintf(setup, g.ip) + fmt.Sprintf("timeout 240 /tmp/rdmaperf -role %s > /mnt/result.json\n", g.role)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				progress(s, "guests booting; the client measures RDMA, then TCP")
			}
			outs[i], errs[i] = guestvm.Run(ctx, guestvm.Options{Work: work, Script: script, NetDev: g.netdev, MAC: g.mac, Timeout: 5 * time.Minute})
			if errs[i] == nil {
				outs[i], errs[i] = os.ReadFile(filepath.Join(work, "result.json"))
			}
		}()
	}
	wg.Wait()
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("%s guest: %w\n%s", guests[i].role, err, outs[i]))
		}
	}
	if len(failed) > 0 {
		return errors.Join(failed...)
	}
	var res []rdmaResult
	if err := json.Unmarshal(outs[1], &res); err != nil || len(res) != 6 {
		return errors.Join(fmt.Errorf("the client's figures: %q", strings.TrimSpace(string(outs[1]))), err)
	}
	// The link itself (raw verbs against a socket), then the agent's
	// handoff over each (host.Dial rdma:// against tcp://: checksums of
	// window buffers, which RDMA hands over without a copy here).
	for _, pair := range []struct {
		what, ping string
		sizes      []string
		first      int
	}{{"", "64 B", []string{"1MiB", "64MiB"}, 0}, {"handoff ", "the agent's ping op", []string{"1MiB", "16MiB"}, 2},
		{"peer links' ", "a 64 B allreduce", []string{"1MiB", "16MiB"}, 4}} {
		rd, tcp := res[pair.first], res[pair.first+1]
		for _, r := range []rdmaResult{rd, tcp} {
			rep.add(s, fmt.Sprintf("%s ping p50 (%s, guests under %s)", r.Transport, pair.ping, accel), r.PingP50US, "µs")
			for _, size := range pair.sizes {
				rep.add(s, fmt.Sprintf("%s %s transfers", r.Transport, size), r.GBps[size], "GB/s")
				rep.add(s, fmt.Sprintf("%s %s transfers: the client's CPU per GB", r.Transport, size), r.CPUmsGB[size], "ms")
			}
		}
		rep.add(s, pair.what+"ping p50: RDMA (rxe) / TCP", rd.PingP50US/tcp.PingP50US, "×")
		for _, size := range pair.sizes {
			rep.add(s, pair.what+size+" transfers: RDMA (rxe) / TCP, GB/s", rd.GBps[size]/tcp.GBps[size], "×")
			rep.add(s, pair.what+size+" transfers: RDMA (rxe) / TCP, the client's CPU per GB", rd.CPUmsGB[size]/tcp.CPUmsGB[size], "×")
		}
	}
	return nil
}
