package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// The idle scenario: the CPU hecd (a process of its own, every default
// service: the region, the TCP handoff, management, RESP, UDP GET and the
// kv store) uses while idle with one client attached, after a burst of
// handoff work, over 5 s (2 s in a quick run). It is measured again after
// kv traffic, when Badger runs (reported, not checked: its compactors wake
// every 50 ms). 5 s rather than 10, for make bench's 15 minutes.

func benchIdle(ctx context.Context, rep *Report, quick bool) error {
	dir, hecd, err := scratchHecd("idle")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	n, reps, idleFor := 200_000, 2, 5*time.Second
	if quick {
		n, reps, idleFor = 20_000, 1, 2*time.Second
	}
	// A fresh agent each time: the first figure is of an agent whose kv
	// store has not been written yet.
	var afterBurst, afterKV []float64
	for r := range reps {
		progress("idle", "repetition %d of %d: a burst, %v idle; 5000 RESP SETs, %v idle", r+1, reps, idleFor, idleFor)
		b, k, err := idleRun(ctx, hecd, filepath.Join(dir, fmt.Sprint(r)), n, idleFor)
		if err != nil {
			return err
		}
		afterBurst, afterKV = append(afterBurst, b), append(afterKV, k)
	}
	const s = "idle"
	rep.addN(s, fmt.Sprintf("hecd CPU idle, default services, one client attached, after a handoff burst (%v)", idleFor), afterBurst, "% of a core")
	rep.addN(s, "the same after 5000 RESP SETs (Badger open: compactors tick every 50 ms)", afterKV, "% of a core")
	// CPU-seconds per wall second: a fraction, the same on any machine.
	rep.atMostN(s, "idle hecd CPU after a burst (share of a core)", afterBurst, 0.5, "%")
	return nil
}

// idleRun starts an agent with every default service and returns its idle
// CPU (% of a core) after a handoff burst, then after RESP SETs.
func idleRun(ctx context.Context, hecd, dir string, n int, idleFor time.Duration) (afterBurst, afterKV float64, err error) {
	shm := shmPath("idle")
	defer os.Remove(shm)
	addrs, err := loopbackAddrs(4)
	if err != nil {
		return 0, 0, err
	}
	mgmt, resp := addrs[1], addrs[2]
	cmd := exec.Command(hecd, "--shm", shm, "--region-size", "167772160", "--queue-pairs", "2",
		"--state-dir", filepath.Join(dir, "state"), "--tcp", addrs[0], "--mgmt", mgmt, "--resp", resp, "--udp", addrs[3],
		"--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	if err := waitCalibrated(ctx, mgmt); err != nil {
		return 0, 0, err
	}
	pid := cmd.Process.Pid
	if afterBurst, err = idleAfterBurst(shm, pid, n, idleFor); err != nil {
		return 0, 0, err
	}
	if err := respBurst(resp, 5000); err != nil {
		return 0, 0, err
	}
	afterKV, err = idleAfterBurst(shm, pid, n/10, idleFor)
	return afterBurst, afterKV, err
}

// idleAfterBurst runs the agent-client child (pings and checksums, then
// idle with its lease held) against region shm and returns hecd's CPU
// while the client idles, in % of a core.
func idleAfterBurst(shm string, pid, n int, idleFor time.Duration) (float64, error) {
	self, _ := os.Executable()
	c := exec.Command(self, "child", "agent-client", shm, fmt.Sprint(n), idleFor.String())
	c.Stderr = os.Stderr
	out, err := c.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := c.Start(); err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(out)
	var cpu0, cpu float64
	var t0 time.Time
	var took time.Duration
	var res agentResult
	for sc.Scan() {
		switch line := sc.Text(); line {
		case "idle-start":
			cpu0, t0 = procCPU(pid), time.Now()
		case "idle-end":
			cpu, took = procCPU(pid)-cpu0, time.Since(t0)
		default:
			if err := json.Unmarshal([]byte(line), &res); err != nil {
				return 0, fmt.Errorf("agent-client said %q: %w", line, err)
			}
		}
	}
	if err := c.Wait(); err != nil {
		return 0, fmt.Errorf("agent-client: %w", err)
	}
	if t0.IsZero() || took == 0 {
		return 0, fmt.Errorf("agent-client never went idle")
	}
	return 100 * cpu / took.Seconds(), nil
}

// respBurst writes n SETs, pipelined, and reads their replies.
func respBurst(addr string, n int) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	w := bufio.NewWriter(c)
	for i := range n {
		fmt.Fprintf(w, "SET idle:%d value-%d\r\n", i, i)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	for i := range n {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("SET %d: %w", i, err)
		}
		if line != "+OK\r\n" {
			return fmt.Errorf("SET %d: %q", i, line)
		}
	}
	return nil
}

// loopbackAddrs returns n loopback addresses whose ports were free a
// moment ago.
func loopbackAddrs(n int) ([]string, error) {
	var out []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}
