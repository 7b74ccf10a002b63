package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hecsys/hec/test/testutil"
)

// lines collects a process's output lines with the time each arrived, and
// lets a test wait for one that matches.
type lines struct {
	mu   sync.Mutex
	all  []line
	more chan struct{} // closed and replaced at each new line
	done bool
}

type line struct {
	at   time.Time
	text string
}

func collect(r io.Reader) *lines {
	l := &lines{more: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.all = append(l.all, line{time.Now(), sc.Text()})
			close(l.more)
			l.more = make(chan struct{})
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.done = true
		close(l.more)
		l.mu.Unlock()
	}()
	return l
}

// wait returns the first line matching re, waiting up to d for it.
func (l *lines) wait(t *testing.T, d time.Duration, re *regexp.Regexp) line {
	t.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		for _, ln := range l.all {
			if re.MatchString(ln.text) {
				l.mu.Unlock()
				return ln
			}
		}
		more, done := l.more, l.done
		l.mu.Unlock()
		if done {
			t.Fatalf("the output ended without a line matching %q:\n%s", re, l)
		}
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("no line matching %q within %v:\n%s", re, d, l)
		}
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, ln := range l.all {
		fmt.Fprintf(&b, "%s %s\n", ln.at.Format("15:04:05.000"), ln.text)
	}
	return b.String()
}

// worker finds the pid of torchrun's worker of the given local rank and
// restart count, among the children of the torchrun process parent.
func worker(t *testing.T, parent int, localRank, restart int) int {
	t.Helper()
	var found []int
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("torchrun's worker %d (restart %d)", localRank, restart), func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			if len(f) < 2 || f[1] != strconv.Itoa(parent) {
				continue
			}
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				continue
			}
			vars := strings.Split(string(env), "\x00")
			if slices.Contains(vars, "LOCAL_RANK="+strconv.Itoa(localRank)) &&
				slices.Contains(vars, "TORCHELASTIC_RESTART_COUNT="+strconv.Itoa(restart)) {
				found = append(found, pid)
			}
		}
		return len(found) == 1
	})
	return found[0]
}

// TestTorchFailover trains the example under torchrun --max-restarts 1 on
// three ranks, kills one rank (or its agent) mid-training, and checks
// what PyTorch users get from NCCL's watchdog: each other rank's next
// collective raises within the agents' peer deadline, naming the rank
// that is gone; then torchrun restarts the job, which resumes from its
// checkpoint on a new communicator epoch and trains to the end.
func TestTorchFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds libhec, starts agents and trains with torchrun")
	}
	testutil.NeedLong(t, "three torchrun jobs of three ranks with a restart each, some 100 s; it guards hec.torch's failure path and torchrun's restart")
	py := torchPython(t)
	dir := t.TempDir()
	so := buildLib(t, dir, "c-shared")
	python := filepath.Join(testutil.ModuleRoot(), "host", "libhec", "python")
	const world, victim = 3, 1
	for _, what := range []string{"rank", "agent"} {
		t.Run("kill its "+what, func(t *testing.T) {
			as := agents(t, world)
			var targets []string
			for _, s := range shms(as) {
				targets = append(targets, "shm://"+s)
			}
			ckpt := filepath.Join(t.TempDir(), "ckpt.pt")
			logs := t.TempDir()
			t.Cleanup(func() {
				if t.Failed() {
					dumpLogs(t, logs)
				}
			})
			// A monitor interval of 20 s: torchrun stops the survivors
			// only after they had the time to fail on their own.
			cmd := exec.Command(py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", fmt.Sprint(world),
				"--max_restarts", "1", "--monitor_interval", "20", "--redirects", "2", "--tee", "2",
				"--log_dir", logs, filepath.Join(python, "examples", "train_ddp.py"), "--steps", "60", "--batch", "2", "--checkpoint", ckpt)
			cmd.Env = append(os.Environ(), "HEC_LIB="+so, "HEC_AGENT="+strings.Join(targets, ","),
				"PYTHONPATH="+python, "OMP_NUM_THREADS=1", "PYTHONFAULTHANDLER=1")
			pr, pw := io.Pipe()
			cmd.Stdout, cmd.Stderr = pw, pw
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the cleanup kills torchrun and its workers at once
			out := collect(pr)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait(); pw.Close() }()
			t.Cleanup(func() {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				cmd.Process.Kill()
			})
			out.wait(t, 3*time.Minute, regexp.MustCompile(`step +20 +loss`))
			var killed time.Time
			if what == "rank" {
				pid := worker(t, cmd.Process.Pid, victim, 0)
				killed = time.Now()
				syscall.Kill(pid, syscall.SIGKILL)
			} else {
				killed = time.Now()
				as[victim].kill()
			}
			// Every other rank's collective fails, naming the rank.
			for r := range world {
				if r == victim {
					continue
				}
				re := regexp.MustCompile(fmt.Sprintf(`^\[default%d\]:.*(rank %d|ranks? .*\b%d\b)`, r, victim, victim))
				ln := out.wait(t, time.Minute, re)
				t.Logf("rank %d failed %v after the kill: %s", r, ln.at.Sub(killed).Round(time.Millisecond), ln.text)
				if ln.at.Sub(killed) > 5*time.Second {
					t.Errorf("rank %d learned of rank %d's death only after %v", r, victim, ln.at.Sub(killed))
				}
			}
			if what == "agent" {
				as[victim].start() // as hecd supervise would
			}
			out.wait(t, 3*time.Minute, regexp.MustCompile(`resumed from step [1-9]`))
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("torchrun: %v\n%s", err, out)
				}
			case <-time.After(4 * time.Minute):
				t.Fatalf("torchrun did not finish:\n%s", out)
			}
			out.wait(t, time.Second, regexp.MustCompile(`step +60 +loss`))
			t.Logf("output:\n%s", out)
		})
	}
}

// dumpLogs logs the files torchrun wrote under its log directory.
func dumpLogs(t *testing.T, dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
				t.Logf("%s:\n%s", p, b)
			}
		}
		return nil
	})
}
