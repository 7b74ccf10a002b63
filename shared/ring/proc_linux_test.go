package ring

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// statStart is the plain reading of field 22 of /proc/PID/stat.
func statStart(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestProcStart reads start times as the plain reading does, for a
// process whose name holds spaces and parentheses too, and allocates
// (almost) nothing: housekeeping calls it a hundred times a second.
func TestProcStart(t *testing.T) {
	if os.Getenv("HEC_TEST_EXEC") != "" {
		t.Skip("under qemu-user /proc/self/stat is synthesised by the emulator")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	odd := filepath.Join(t.TempDir(), "a) b (c")
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(odd, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for _, pid := range []int{os.Getpid(), cmd.Process.Pid} {
		got, err := procStart(pid)
		if want := statStart(t, pid); err != nil || got != want {
			t.Fatalf("pid %d: procStart = %d, %v; want %d", pid, got, err, want)
		}
	}
	if _, err := procStart(1<<22 + 12345); !os.IsNotExist(err) {
		t.Fatalf("no such pid: %v, want not-exist", err)
	}
	self := os.Getpid()
	if n := testing.AllocsPerRun(100, func() { procStart(self) }); n > 3 { // the path: its digits, the string, its C copy
		t.Fatalf("procStart allocates %.0f times per call", n)
	}
}

func TestPIDGone(t *testing.T) {
	tests := []struct {
		name string
		pid  uint32
		want bool
	}{
		{"self", uint32(os.Getpid()), false},
		{"process 1 (not ours to signal when not root)", 1, false},
		{"no such pid", 1<<22 + 12345, true},
		{"pid 0 (no holder: the full check judges it)", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pidGone(tt.pid); got != tt.want {
				t.Fatalf("pidGone(%d) = %v, want %v", tt.pid, got, tt.want)
			}
		})
	}
}

// TestHolderStartReadOncePerPeriod: housekeeping reads the holder's
// /proc/PID/stat once per startCheckEvery, not every pass (a hundred a
// second in the agent), and the pair of a live holder stays active.
func TestHolderStartReadOncePerPeriod(t *testing.T) {
	// Reads are counted, and answer "cannot tell": under qemu-user
	// /proc's start times are the emulator's, which would make a live
	// holder a suspect (TestHolderLiveness).
	var reads atomic.Int32
	readStart = func(int) (uint64, error) { reads.Add(1); return 0, errors.New("counted, not read") }
	t.Cleanup(func() { readStart = procStart }) // after the server's end (cleanups run last first)
	r, a := newFileRegion(t, smallGeo, AgentConfig{CheckPIDs: true, LeaseTimeout: time.Hour})
	s := &server{a: a}
	startServer(t, s)
	_, q := mustLease(t, r)
	s.mu.Lock()
	reads.Store(0)
	base := time.Now()
	passes := int(2500 * time.Millisecond / housekeepPass)
	for i := 1; i <= passes; i++ {
		a.Housekeep(base.Add(time.Duration(i) * housekeepPass))
	}
	s.mu.Unlock()
	// One read at each second passed since the last full check, which
	// was at most one real pass before base.
	if n := reads.Load(); n < 2 || n > 3 {
		t.Fatalf("%d reads of /proc/PID/stat in %d passes over 2.5 s, want 2 or 3", n, passes)
	}
	if err := q.Check(); err != nil {
		t.Fatalf("a live holder's pair: %v", err)
	}
}

// housekeepPass is the agent's housekeeping period (dpu's housekeepEvery).
const housekeepPass = 10 * time.Millisecond

// TestZombieHolderIsGone: a holder killed but not yet reaped by its
// parent (torchrun reaps its workers only at its monitor's next pass) is a
// zombie, which signal 0 still finds; its pair is fenced at the next full
// check, not after the heartbeat's timeout.
func TestZombieHolderIsGone(t *testing.T) {
	if os.Getenv("HEC_TEST_EXEC") != "" {
		t.Skip("under qemu-user /proc is the emulator's")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	start := statStart(t, pid)
	if got := holderLiveness(uint32(pid), start); got != holderLives {
		t.Fatalf("a live holder: holderLiveness = %d, want %d", got, holderLives)
	}
	cmd.Process.Kill()
	defer cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))[0] == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed child is no zombie after 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	if got := holderLiveness(uint32(pid), start); got != holderGone {
		t.Fatalf("a zombie holder: holderLiveness = %d, want %d (gone)", got, holderGone)
	}
}
