package ring

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// errZombie is procStart's error for a process that has exited but is
// not yet reaped (state Z or X): gone, though signal 0 still finds it.
var errZombie = fmt.Errorf("ring: the process has exited (a zombie): %w", os.ErrNotExist)

// procStart returns the start time (clock ticks since boot, field 22 of
// /proc/PID/stat) of pid. A pid and its start time name a process uniquely
// even when pids are reused. A process that has exited and waits for its
// parent to reap it is errZombie.
func procStart(pid int) (uint64, error) {
	// Read into a buffer of the stack, not os.ReadFile's: housekeeping
	// asks for every leased pair's holder a hundred times a second, and
	// what it allocates the garbage collector must then take back on the
	// agent's cores.
	var buf [1024]byte
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: "/proc/" + strconv.Itoa(pid) + "/stat", Err: err}
	}
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil {
		return 0, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	b := buf[:max(n, 0)]
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses itself: fields resume after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no ')'", pid)
	}
	// Field 3 (state) follows; the start time is field 22.
	field, rest := 2, b[i+1:]
	for {
		rest = bytes.TrimLeft(rest, " ")
		if len(rest) == 0 {
			return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, field)
		}
		field++
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		if field == 3 && (rest[0] == 'Z' || rest[0] == 'X') {
			return 0, errZombie
		}
		if field == 22 {
			var v uint64
			for _, c := range bytes.TrimRight(rest[:end], "\n") {
				if c < '0' || c > '9' {
					return 0, fmt.Errorf("parse /proc/%d/stat: start time %q", pid, rest[:end])
				}
				v = v*10 + uint64(c-'0')
			}
			return v, nil
		}
		rest = rest[end:]
	}
}

var selfStart = sync.OnceValue(func() uint64 {
	s, err := procStart(os.Getpid())
	if err != nil {
		return 0 // unknown: the agent then checks the pid alone
	}
	return s
})

// Holder liveness as seen through /proc.
type liveness int

const (
	holderLives   liveness = iota // the pid exists with the recorded start time
	holderGone                    // no such pid
	holderSuspect                 // the pid exists with another start time: reused, or a start time we cannot compare (qemu-user fakes /proc/self/stat)
)

// startCheckEvery is how often housekeeping compares a holder's start
// time with its pid's (holderLiveness), which reads /proc/PID/stat:
// 10-15 µs on a lightly loaded virtual machine of two vCPUs, and some
// 150 µs on the same machine loaded with a collective's four agents,
// where a check every pass (100 a second) took 3 % of each agent's CPU,
// on the one P the collective ran on. In between, pidGone asks only
// whether the pid still exists, which is what fences a dead holder's
// pair; a pid reused within the second is found by the next full check.
const startCheckEvery = time.Second

// pidGone reports whether no process has pid: kill with signal 0, a
// system call of 2-3 µs. A pid that exists but is not ours to signal
// (EPERM) is not gone; pid 0 names no holder, which the full check
// (holderLiveness) judges.
func pidGone(pid uint32) bool {
	return pid != 0 && errors.Is(unix.Kill(int(pid), 0), unix.ESRCH)
}

// readStart is procStart (a variable: tests count the reads).
var readStart = procStart

func holderLiveness(pid uint32, start uint64) liveness {
	s, err := readStart(int(pid))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return holderGone
	case err != nil || start == 0 || s == start:
		return holderLives // cannot tell, or matches: the heartbeat decides
	}
	return holderSuspect
}
