package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/sysinfo"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestBuildHelper runs only as the child of TestBuiltRemoved: it builds a
// small command and prints where.
func TestBuildHelper(t *testing.T) {
	if os.Getenv("HEC_TESTUTIL_BUILD") == "" {
		t.Skip("the child of TestBuiltRemoved")
	}
	p, err := Build("./test/e2e/testdata/badagent")
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("built " + p + "\n")
}

// TestBuiltRemoved checks that what a test process builds goes when its
// tests end, and that what an earlier process left (it was killed) goes
// when the next one builds, its orphans killed.
func TestBuiltRemoved(t *testing.T) {
	tmp := t.TempDir()
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(tmp, "hec-testbin", strconv.Itoa(ended.Process.Pid))
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "hecd"), []byte("left by a killed run"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A process that ended and that its parent has not reaped yet (a
	// zombie: kill(pid, 0) still succeeds) has ended too.
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	leftByZombie := filepath.Join(tmp, "hec-testbin", strconv.Itoa(zombie.Process.Pid))
	if err := os.MkdirAll(leftByZombie, 0o755); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := (sysinfo.FS{}).ProcessState(zombie.Process.Pid); st == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("true did not end within 5 s")
		}
	}
	// An orphan of that run: a process whose command line names its
	// directory (as an agent run from a binary built there does).
	orphan := exec.Command("sleep", "30")
	orphan.Args[0] = filepath.Join(left, "hecd")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	orphanDone := make(chan error, 1)
	go func() { orphanDone <- orphan.Wait() }()
	defer orphan.Process.Kill()
	child := exec.Command(os.Args[0], "-test.run", "^TestBuildHelper$", "-test.v")
	child.Env = append(os.Environ(), "HEC_TESTUTIL_BUILD=1", "TMPDIR="+tmp)
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := child.Run(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.Bytes())
	}
	_, after, ok := strings.Cut(out.String(), "built ")
	path, _, _ := strings.Cut(after, "\n")
	if !ok || !strings.HasPrefix(path, filepath.Join(tmp, "hec-testbin")) {
		t.Fatalf("child built nothing under %s:\n%s", tmp, out.Bytes())
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s is still there after its tests ended (%v)", path, err)
	}
	for _, dir := range []string{left, leftByZombie} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s, left by a process that ended, is still there (%v)", dir, err)
		}
	}
	select {
	case err := <-orphanDone:
		if err == nil {
			t.Errorf("the orphan exited by itself")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the orphan of the process that ended is still running")
	}
	if rest, _ := os.ReadDir(filepath.Join(tmp, "hec-testbin")); len(rest) > 0 {
		t.Errorf("hec-testbin still holds %d entries, first %s", len(rest), rest[0].Name())
	}
}
