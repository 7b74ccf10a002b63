package lockfile

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// HeldError is returned by Lock when another process holds the lock.
type HeldError struct {
	Path string
	PID  int // 0: unknown
}

func (e *HeldError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("%s is in use by hecd pid %d", e.Path, e.PID)
	}
	return fmt.Sprintf("%s is in use by another process", e.Path)
}

// Lock opens path (creating it with mode when create is set) and takes
// an exclusive flock on it, without waiting. The lock lasts until the
// returned file is closed, or the process ends. A file system that has no
// locks (ENOLCK, EINVAL: some device files) is not an error: the file
// comes back unlocked.
func Lock(path string, create bool, mode os.FileMode) (*os.File, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, mode)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid := lockHolder(f)
			f.Close()
			return nil, &HeldError{Path: path, PID: pid}
		}
		if !errors.Is(err, unix.ENOLCK) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	return f, nil
}

// lockHolder finds the pid holding a flock on f's file in /proc/locks
// (lines like "1: FLOCK ADVISORY WRITE 1234 00:1a:5678 0 EOF", the device
// in hex, the inode in decimal); 0 when it cannot tell.
func lockHolder(f *os.File) int {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer locks.Close()
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
