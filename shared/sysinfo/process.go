package sysinfo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ProcessState returns process pid's state from /proc/PID/stat: R, S, D,
// T, Z (ended, not yet reaped by its parent), ….
func (f FS) ProcessState(pid int) (byte, error) {
	st, err := f.stat(pid)
	if err != nil {
		return 0, err
	}
	return st[0][0], nil
}

// ParentPID returns process pid's parent from /proc/PID/stat.
func (f FS) ParentPID(pid int) (int, error) {
	st, err := f.stat(pid)
	if err != nil {
		return 0, err
	}
	ppid, err := strconv.Atoi(st[1])
	if err != nil {
		return 0, fmt.Errorf("sysinfo: /proc/%d/stat: parent %q", pid, st[1])
	}
	return ppid, nil
}

// StartTime returns when process pid started, in clock ticks since boot
// (/proc/PID/stat's starttime): with the pid, it names one process, which
// a later one given the same pid does not share.
func (f FS) StartTime(pid int) (uint64, error) {
	st, err := f.stat(pid)
	if err != nil {
		return 0, err
	}
	if len(st) < 20 {
		return 0, fmt.Errorf("sysinfo: /proc/%d/stat: no start time", pid)
	}
	t, err := strconv.ParseUint(st[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sysinfo: /proc/%d/stat: start time %q", pid, st[19])
	}
	return t, nil
}

// stat returns the fields of /proc/PID/stat after the command's name,
// from the state on: at least the state and the parent.
func (f FS) stat(pid int) ([]string, error) {
	s, err := f.read("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	// "pid (comm) state ppid ...": comm may hold anything, spaces and
	// parentheses too; the state follows the last parenthesis.
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) || s[i+1] != ' ' {
		return nil, fmt.Errorf("sysinfo: /proc/%d/stat: no state in %q", pid, s)
	}
	fields := strings.Fields(s[i+2:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return nil, fmt.Errorf("sysinfo: /proc/%d/stat: no state and parent in %q", pid, s)
	}
	return fields, nil
}

// Ended says whether process pid of this machine has ended: it is gone,
// or it is a zombie its parent has not reaped yet (kill(pid, 0), which
// tests whether a pid is taken, still succeeds on one). A pid that is not
// positive names no one process (kill would signal a group): ended.
//
// A zombie first thread is not enough: a process killed while its threads
// are busy shows one while the others still let go of its memory, files
// and ports, and a process may end its first thread alone. It has ended
// when no other thread is left.
func Ended(pid int) bool {
	if pid <= 0 {
		return true
	}
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	st, err := FS{}.ProcessState(pid)
	if errors.Is(err, syscall.ENOENT) {
		return true
	}
	if st != 'Z' {
		return false
	}
	threads, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	return err != nil || len(threads) <= 1
}

// StateDir is where HEC keeps what it learns on this machine for the
// user: $XDG_STATE_HOME/hec, or ~/.local/state/hec. The agent's default
// --state-dir; the host processes' measured models.
func StateDir() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "hec"), nil
}
