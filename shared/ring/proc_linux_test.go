package ring

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
