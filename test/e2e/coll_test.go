package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hecsys/hec/test/testutil"
)

// TestCollBenchAsANewUser runs what the README tells a new user: hecctl
// coll bench --world 4 (here with fewer sizes and iterations), every rail.
// Every row must say wrong = 0, and --plot must draw the picture.
func TestCollBenchAsANewUser(t *testing.T) {
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t) // beside hecctl, where coll bench looks for it
	png := filepath.Join(t.TempDir(), "busbw.png")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "--world", "4", "--sizes", "8,64K,1M", "--iters", "2", "--plot", png)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("hecctl coll bench --world 4:\n%s%s", out, stderr.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || (f[0] != "host" && f[0] != "dpu" && f[0] != "auto") {
			continue
		}
		rows++
		if f[8] != "0" {
			t.Errorf("wrong = %s in %q", f[8], line)
		}
	}
	if rows != 9 {
		t.Fatalf("%d rows, want 3 rails × 3 sizes", rows)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Fatalf("--plot: %v", err)
	}
}

// TestCollBenchAgentKilled kills one rank's agent (SIGKILL) while the DPU
// rail runs: the command must exit with an error naming that rank, within
// the deadline (the agents notice the lost connection at once, the rank's
// own host its agent's stopped heartbeat), and leave nothing behind.
func TestCollBenchAgentKilled(t *testing.T) {
	hecctl := testutil.Hecctl(t)
	testutil.Hecd(t)
	const victim = 2
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "--world", "4", "--rail", "dpu", "--sizes", "4M", "--iters", "100000",
			"--deadline", "3s")
		var out lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		shm := "/dev/shm/hec-coll-" + strconv.Itoa(cmd.Process.Pid) + "-" + strconv.Itoa(victim)
		var agent int
		testutil.WaitFor(t, 30*time.Second, "the rows to start", func() bool {
			agent = findProcess(shm + "\x00")
			return agent != 0 && strings.Contains(out.String(), "rail")
		})
		time.Sleep(time.Duration(500+300*round) * time.Millisecond) // mid-run
		syscall.Kill(agent, syscall.SIGKILL)
		killed := time.Now()
		err := cmd.Wait()
		took := time.Since(killed)
		cancel()
		t.Logf("round %d: exited %v after the kill: %v\n%s", round, took.Round(time.Millisecond), err, out.String())
		if err == nil {
			t.Fatal("coll bench succeeded after an agent was killed")
		}
		if !strings.Contains(out.String(), "the agent of rank 2 failed") || !strings.Contains(out.String(), "rank 2 (node 3) failed") {
			t.Fatalf("the error does not name rank 2")
		}
		if strings.Contains(out.String(), "a hang") {
			t.Fatal("a rank hung")
		}
		if took > 3*time.Second+2*time.Second {
			t.Fatalf("exited %v after the kill: more than the deadline (3s) and some slack", took)
		}
		if _, err := os.Stat(shm); err == nil {
			t.Fatalf("%s left behind", shm)
		}
	}
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// findProcess returns the pid of a process whose command line contains
// s, or 0.
func findProcess(s string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), s) {
			return pid
		}
	}
	return 0
}
