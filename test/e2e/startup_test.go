package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/test/testutil"
)

// hecdArgs are the flags of a hecd on a private region and state, every
// listener on an ephemeral loopback port.
func hecdArgs(t *testing.T) (region string, args []string) {
	t.Helper()
	region = filepath.Join("/dev/shm", fmt.Sprintf("hec-e2e-start-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { os.Remove(region) })
	return region, []string{"--shm", region, "--region-size", "8388608", "--queue-pairs", "2", "--state-dir", t.TempDir(),
		"--tcp", "127.0.0.1:0", "--mgmt", "127.0.0.1:0", "--resp", "127.0.0.1:0", "--udp", "127.0.0.1:0"}
}

// startFailure runs hecd, which must fail to start, and returns its output.
func startFailure(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testutil.Hecd(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	took := time.Since(t0)
	if err == nil {
		t.Fatalf("hecd %v started; output:\n%s", args, out.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() <= 0 {
		t.Fatalf("hecd did not exit with a status: %v\n%s", err, out.String())
	}
	if took > 2*time.Second {
		t.Errorf("hecd took %v to give up (want ≤ 2 s)", took)
	}
	text := strings.TrimSpace(out.String())
	for _, bad := range []string{"goroutine", "SIGSEGV", "panic", "fatal error"} {
		if strings.Contains(text, bad) {
			t.Fatalf("output has %q:\n%s", bad, text)
		}
	}
	if n := strings.Count(text, "\n") + 1; n != 1 {
		t.Errorf("want one line, got %d:\n%s", n, text)
	}
	return text
}

// TestBusyPortIsAnError: with another program on the port of any listener
// (or a region hecd may not create), hecd exits within 2 s with one line
// naming the flag, and no stack trace.
func TestBusyPortIsAnError(t *testing.T) {
	tcpTaken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcpTaken.Close()
	udpTaken, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udpTaken.Close()
	key := clusterKey(t)
	cases := []struct {
		flag  string
		extra []string
		want  string
	}{
		{"--resp", []string{"--resp", tcpTaken.Addr().String()}, "port is taken"},
		{"--udp", []string{"--udp", udpTaken.LocalAddr().String()}, "port is taken"},
		{"--tcp", []string{"--tcp", tcpTaken.Addr().String()}, "port is taken"},
		{"--mgmt", []string{"--mgmt", tcpTaken.Addr().String()}, "port is taken"},
		{"--peer", []string{"--peer", tcpTaken.Addr().String(), "--node-id", "1", "--cluster-key-file", key}, "port is taken"},
		// /proc is a directory no process may create files in, root
		// included.
		{"--shm", []string{"--shm", "/proc/hec-e2e-region"}, "/proc/hec-e2e-region"},
		{"--state-dir", []string{"--state-dir", "/proc/hec-e2e-state"}, "/proc/hec-e2e-state"},
		{"--durability", []string{"--durability", "sometimes"}, "sync or async"},
		{"--queue-pairs", []string{"--queue-pairs", "many"}, "many"},
	}
	for _, tc := range cases {
		t.Run(tc.flag, func(t *testing.T) {
			region, args := hecdArgs(t)
			line := startFailure(t, append(args, tc.extra...)...)
			if !strings.Contains(line, strings.TrimPrefix(tc.flag, "-")) || !strings.Contains(line, tc.want) {
				t.Errorf("%q does not name %s and say %q", line, tc.flag, tc.want)
			}
			if tc.flag != "--shm" {
				if _, err := os.Stat(region); err == nil {
					t.Errorf("a hecd that did not start left its region %s", region)
				}
			}
			t.Logf("%s", line)
		})
	}
}

// TestSecondAgentLeavesTheRegionAlone: a second hecd on the region of a
// running one (another state directory, other ports) names the first
// agent's pid and exits; the first agent's client never notices.
func TestSecondAgentLeavesTheRegionAlone(t *testing.T) {
	region, args := hecdArgs(t)
	first := exec.Command(testutil.Hecd(t), append(args, "--mgmt", "127.0.0.1:0")...)
	log := new(testutil.SyncBuffer)
	first.Stderr = log
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Process.Kill(); first.Wait() })
	var c *host.Client
	testutil.WaitFor(t, 10*time.Second, "first agent serving", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		c, err = host.Dial(ctx, "shm://"+region)
		return err == nil
	})
	defer c.Close()
	ctx := context.Background()
	buf, err := c.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, "before the second agent")
	before, err := c.Checksum(ctx, buf)
	if err != nil {
		t.Fatal(err)
	}
	_, second := hecdArgs(t) // its own state directory and ports
	second = append(second, "--shm", region)
	line := startFailure(t, second...)
	want := fmt.Sprintf("pid %d", first.Process.Pid)
	if !strings.Contains(line, "--shm") || !strings.Contains(line, want) {
		t.Fatalf("%q: want --shm and %q", line, want)
	}
	t.Logf("%s", line)
	for i := 0; i < 100; i++ {
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("the first agent's client noticed: %v\nfirst agent's log:\n%s", err, log.String())
		}
	}
	if after, err := c.Checksum(ctx, buf); err != nil || after != before {
		t.Fatalf("checksum after: %08x %v, before %08x", after, err, before)
	}
}

// TestListenersSurviveDescriptorExhaustion: with hecd's descriptors
// nearly all in use, connections to RESP and the TCP handoff pile up until
// accept fails (EMFILE); once they close, both listeners serve again, and
// the retries were counted.
func TestListenersSurviveDescriptorExhaustion(t *testing.T) {
	_, args := hecdArgs(t)
	addrs := testutil.FreeAddrs(t, 3)
	resp, tcp, mgmt := addrs[0], addrs[1], addrs[2]
	cmd := exec.Command(testutil.Hecd(t), append(args, "--resp", resp, "--tcp", tcp, "--mgmt", mgmt, "--log-level", "warn")...)
	log := new(testutil.SyncBuffer)
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	m := host.NewMgmt(mgmt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	limit := uint64(len(fds) + 6)
	if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	var conns []net.Conn
	for _, addr := range []string{resp, tcp} {
		for range 30 {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				t.Fatalf("dial %s: %v", addr, err)
			}
			conns = append(conns, c)
		}
	}
	time.Sleep(500 * time.Millisecond) // the agent meets EMFILE, backs off, retries
	for _, c := range conns {
		c.Close()
	}
	// Both serve again.
	testutil.WaitFor(t, 10*time.Second, "RESP answers PING", func() bool { return respPing(resp) == nil })
	testutil.WaitFor(t, 10*time.Second, "the TCP handoff answers a ping", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := host.Dial(ctx, "tcp://"+tcp)
		if err != nil {
			return false
		}
		defer c.Close()
		return c.Ping(ctx) == nil
	})
	for _, l := range []string{"resp", "tcp"} {
		var n float64
		testutil.WaitFor(t, 10*time.Second, "metrics", func() bool {
			var ok bool
			n, ok, err = m.Metric(context.Background(), `hec_accept_retries_total{listener="`+l+`"}`)
			return err == nil && ok
		})
		if n == 0 {
			t.Errorf("%s: no accept retries counted\n%s", l, log.String())
		}
		t.Logf("%s: %v accept errors retried", l, n)
	}
	if err := m.Ready(context.Background()); err != nil {
		t.Errorf("not ready after the storm: %v", err)
	}
}

// respPing sends PING to a RESP server and checks the answer.
func respPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	b := make([]byte, 16)
	n, err := c.Read(b)
	if err != nil {
		return err
	}
	if string(b[:n]) != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", b[:n])
	}
	return nil
}

// TestCleanStopLeavesNothing: an agent stopped cleanly removes the region
// file it created; a region left by an agent that died is formatted anew,
// and the log says so.
func TestCleanStopLeavesNothing(t *testing.T) {
	region, args := hecdArgs(t)
	start := func() (*exec.Cmd, *testutil.SyncBuffer, string) {
		t.Helper()
		addrs := testutil.FreeAddrs(t, 1)
		cmd := exec.Command(testutil.Hecd(t), append(args, "--mgmt", addrs[0])...)
		log := new(testutil.SyncBuffer)
		cmd.Stderr = log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := host.NewMgmt(addrs[0]).WaitReady(ctx); err != nil {
			cmd.Process.Kill()
			t.Fatalf("%v\n%s", err, log.String())
		}
		return cmd, log, addrs[0]
	}
	cmd, _, _ := start()
	if _, err := os.Stat(region); err != nil {
		t.Fatalf("no region while serving: %v", err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	if _, err := os.Stat(region); !os.IsNotExist(err) {
		t.Fatalf("region %s left after a clean stop: %v", region, err)
	}
	// Killed: the region stays; the next agent says it formats it anew.
	cmd, _, _ = start()
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := os.Stat(region); err != nil {
		t.Fatalf("a killed agent's region: %v", err)
	}
	cmd, log, _ := start()
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	if !strings.Contains(log.String(), "left by an agent that is gone") {
		t.Errorf("a stale region reused without a word:\n%s", log.String())
	}
}
