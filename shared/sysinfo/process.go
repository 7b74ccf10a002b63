package sysinfo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// ProcessState returns process pid's state from /proc/PID/stat: R, S, D,
// T, Z (ended, not yet reaped by its parent), ….
func (f FS) ProcessState(pid int) (byte, error) {
	s, err := f.read("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// "pid (comm) state ...": comm may hold anything, spaces and
	// parentheses too; the state follows the last parenthesis.
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) || s[i+1] != ' ' {
		return 0, fmt.Errorf("sysinfo: /proc/%d/stat: no state in %q", pid, s)
	}
	return s[i+2], nil
}

// Ended says whether process pid of this machine has ended: it is gone,
// or it is a zombie its parent has not reaped yet (kill(pid, 0), which
// tests whether a pid is taken, still succeeds on one). A pid that is not
// positive names no one process (kill would signal a group): ended.
func Ended(pid int) bool {
	if pid <= 0 {
		return true
	}
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	st, err := FS{}.ProcessState(pid)
	return errors.Is(err, syscall.ENOENT) || st == 'Z'
}
