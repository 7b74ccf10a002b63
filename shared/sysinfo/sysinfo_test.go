package sysinfo

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCountList(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{{"0", 1, true}, {"0-3", 4, true}, {"0-3,8,10-11", 7, true}, {"", 0, false}, {"3-1", 0, false}, {"a", 0, false}} {
		n, err := countList(tt.in)
		if (err == nil) != tt.ok || n != tt.want {
			t.Errorf("countList(%q) = %d, %v", tt.in, n, err)
		}
	}
}

func TestMissingTreeIsAnError(t *testing.T) {
	fs := FS{Root: t.TempDir()}
	if _, err := fs.CPU(); err == nil {
		t.Fatal("CPU of an empty tree")
	}
	if devs, err := fs.PCIDevices(); err != nil || devs != nil {
		t.Fatalf("no PCI bus: %v %v", devs, err)
	}
}

func TestProcessState(t *testing.T) {
	for _, tt := range []struct {
		name, stat string
		want       byte
		ppid       int
		ok         bool
	}{
		{"running", "4242 (hecd) R 1 4242 4242 0 -1", 'R', 1, true},
		{"a zombie", "4242 (vm.test) Z 17 4242", 'Z', 17, true},
		{"a name with spaces and parentheses", "4242 (a) S (b) c) S 1 2", 'S', 1, true},
		{"a name that looks like a state", "4242 (x) Z (y) R 3 2", 'R', 3, true},
		{"cut short", "4242 (hecd)", 0, 0, false},
		{"no parenthesis", "4242 hecd R", 0, 0, false},
		{"no parent", "4242 (hecd) R", 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "proc", "4242"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "proc", "4242", "stat"), []byte(tt.stat+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			st, err := FS{Root: root}.ProcessState(4242)
			if (err == nil) != tt.ok || st != tt.want {
				t.Fatalf("ProcessState = %q, %v; want %q (ok %v)", st, err, tt.want, tt.ok)
			}
			if ppid, err := (FS{Root: root}).ParentPID(4242); (err == nil) != tt.ok || ppid != tt.ppid {
				t.Fatalf("ParentPID = %d, %v; want %d (ok %v)", ppid, err, tt.ppid, tt.ok)
			}
		})
	}
	if _, err := (FS{Root: t.TempDir()}).ProcessState(4242); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a pid that is not there: %v", err)
	}
}

// TestEnded: a process that runs has not ended; one that exited and waits
// for its parent (a zombie) has, and so has one reaped.
func TestEnded(t *testing.T) {
	if Ended(os.Getpid()) {
		t.Fatal("this process has ended")
	}
	for _, pid := range []int{0, -1} {
		if !Ended(pid) {
			t.Fatalf("Ended(%d) = false", pid)
		}
	}
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	defer sleeper.Wait()         //nolint:errcheck // killed
	defer sleeper.Process.Kill() //nolint:errcheck // may be gone
	if Ended(sleeper.Process.Pid) {
		t.Fatal("a sleeping child has ended")
	}
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	pid := zombie.Process.Pid
	waitZombie(t, pid, "true")
	if !Ended(pid) {
		t.Fatal("a zombie has not ended")
	}
	zombie.Wait() //nolint:errcheck // true
	if !Ended(pid) {
		t.Fatal("a reaped process has not ended")
	}
}

// waitZombie waits until pid's first thread (what) is a zombie.
func waitZombie(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := (FS{}).ProcessState(pid); st == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not end within 5 s", what)
		}
	}
}

// init, in the process TestEndedWhileThreadsRun starts, binds a port, says
// which, and ends the first thread, the one whose id is the process's pid,
// while the runtime's others run on. (A process killed while its threads
// are busy passes through this state: the first thread a zombie, the
// others still letting go of its memory, files and ports.) Package
// initialisation runs on the first thread.
func init() {
	if os.Getenv("HEC_SYSINFO_HELPER") != "leader-gone" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Printf("LISTEN %s\n", ln.Addr()) // the kernel takes connections: no accept needed
	// exit, not exit_group: the process lives on in its other threads.
	// No collection may start after this: it would wait for this thread
	// forever.
	debug.SetGCPercent(-1)
	syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
}

// TestEndedWhileThreadsRun: a process whose first thread has ended while
// its others run has not ended: it still holds what it opened (a port
// here), and a restart that takes it for gone finds its port or lock
// taken. Only when its last thread is gone has it ended.
func TestEndedWhileThreadsRun(t *testing.T) {
	// Under qemu-user (arm64 tests on x86) HEC_TEST_EXEC names the
	// emulator: the binary cannot be executed directly.
	argv := append(strings.Fields(os.Getenv("HEC_TEST_EXEC")), os.Args[0], "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HEC_SYSINFO_HELPER=leader-gone", "GOGC=off")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()         //nolint:errcheck // killed
	defer cmd.Process.Kill() //nolint:errcheck // may be gone
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "LISTEN ")
	if err != nil || !ok {
		t.Fatalf("helper said %q (%v)", line, err)
	}
	pid := cmd.Process.Pid
	waitZombie(t, pid, "the helper's first thread")
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("the helper's port: %v", err)
	}
	c.Close()
	if Ended(pid) {
		t.Fatal("Ended while the process's other threads run and hold its port")
	}
	cmd.Process.Kill() //nolint:errcheck // checked below
	for deadline := time.Now().Add(5 * time.Second); !Ended(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not ended 5 s after SIGKILL")
		}
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("ended, and its port still answers")
	}
}

// TestStartTimeNamesOneProcess: a child's start time reads the same while
// it lives, is not this process's, and is gone once it has been reaped.
func TestStartTimeNamesOneProcess(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep(1):", err)
	}
	pid := cmd.Process.Pid
	a, err := FS{}.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := FS{}.StartTime(pid)
	self, _ := FS{}.StartTime(os.Getpid())
	if a != b || a == 0 || a < self {
		t.Fatalf("start times: child %d then %d, this process %d", a, b, self)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := (FS{}).StartTime(pid); err == nil {
		t.Fatalf("a reaped child %d still has a start time", pid)
	}
}
