package ring

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// procStart returns the start time (clock ticks since boot, field 22 of
// /proc/PID/stat) of pid. A pid and its start time name a process uniquely
// even when pids are reused.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses itself: fields resume after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no ')'", pid)
	}
	fields := bytes.Fields(b[i+1:])
	// fields[0] is field 3 (state); start time is field 22.
	if len(fields) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	return strconv.ParseUint(string(fields[19]), 10, 64)
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

func holderLiveness(pid uint32, start uint64) liveness {
	s, err := procStart(int(pid))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return holderGone
	case err != nil || start == 0 || s == start:
		return holderLives // cannot tell, or matches: the heartbeat decides
	}
	return holderSuspect
}
