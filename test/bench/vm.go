package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/images"
	"github.com/hecsys/hec/qemu"
	"github.com/hecsys/hec/shared/crc32c"
)

// The VM scenario (issue: arm64 image and QEMU harness): the foundation's
// round trip and checksum against the arm64 agent in QEMU over ivshmem.
// TCG emulates every arm64 instruction on x86: reported, not targeted.

func benchVM(ctx context.Context, rep *Report, quick bool) error {
	if _, err := exec.LookPath("qemu-system-aarch64"); err != nil {
		return fmt.Errorf("qemu-system-aarch64 not installed (make test installs it): %w", err)
	}
	root, _ := filepath.Abs(".")
	dir, err := os.MkdirTemp("", "hec-bench-vm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := images.BuildFromSource(ctx, root, dir, "bench"); err != nil {
		return err
	}
	o := qemu.Options{Name: "bench", Bundle: dir, StateDir: filepath.Join(dir, "vm"), Shm: shmPath("vm"),
		MgmtPort: 27600, TCPPort: 27610, RESPPort: 26380, UDPPort: 31311}
	vm, err := qemu.Up(ctx, o)
	if err != nil {
		return err
	}
	defer os.Remove(o.Shm)
	defer vm.PowerCut()
	c, err := host.Dial(ctx, vm.Agent)
	if err != nil {
		return err
	}
	defer c.Close()

	n := 20_000
	if quick {
		n = 2_000
	}
	d := make([]time.Duration, 0, n)
	for i := 0; i < n+n/10; i++ {
		t0 := time.Now()
		if err := c.Ping(ctx); err != nil {
			return err
		}
		if i >= n/10 {
			d = append(d, time.Since(t0))
		}
	}
	ping := latencies(d)

	// Checksum: 64 MiB, copied into the window in chunks (the VM's windows
	// are 4 MiB), and 2 MiB in the window itself (zero copy).
	big := make([]byte, 64<<20)
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	win, err := c.Alloc(2 << 20)
	if err != nil {
		return err
	}
	copy(win, big)
	rate := func(b []byte) (float64, error) {
		var ts []float64
		for r := 0; r < 3; r++ {
			t0 := time.Now()
			got, err := c.Checksum(ctx, b)
			if err != nil {
				return 0, err
			}
			if got != crc32c.Checksum(b) {
				return 0, fmt.Errorf("the arm64 agent's checksum differs")
			}
			ts = append(ts, time.Since(t0).Seconds())
		}
		slices.Sort(ts)
		return float64(len(b)) / ts[1] / 1e9, nil
	}
	bigRate, err := rate(big)
	if err != nil {
		return err
	}
	winRate, err := rate(win)
	if err != nil {
		return err
	}
	t0 := time.Now()
	crc32c.Checksum(big)
	local := float64(len(big)) / time.Since(t0).Seconds() / 1e9

	const s = "vm"
	rep.add(s, "boot to ready (QEMU start to /readyz)", vm.BootTime.Seconds(), "s")
	rep.add(s, "PING to the arm64 agent over ivshmem p50", ping.P50, "ns")
	rep.add(s, "PING to the arm64 agent over ivshmem p99", ping.P99, "ns")
	rep.add(s, "CHECKSUM 64 MiB, staged into 4 MiB windows, arm64 agent", bigRate, "GB/s")
	rep.add(s, "CHECKSUM 2 MiB in the window (zero copy), arm64 agent", winRate, "GB/s")
	rep.add(s, "crc32c 64 MiB in-process on the x86 host", local, "GB/s")
	// Boot to ready is reported, not checked: an absolute time on an
	// emulated CPU says more about the machine than about the image.
	return nil
}
