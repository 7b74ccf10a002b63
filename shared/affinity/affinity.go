package affinity

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Allowed returns the CPUs this thread may run on, in ascending order.
func Allowed() ([]int, error) { return OfThread(0) }

// OfThread returns the CPUs thread tid (of any process) may run on, in
// ascending order.
func OfThread(tid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		return nil, fmt.Errorf("affinity of thread %d: %w", tid, err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// OfProcess returns the CPUs every thread of process pid may run on, and
// an error where its threads' differ.
func OfProcess(pid int) ([]int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("affinity: %w", err)
	}
	var cpus []int
	for i, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		these, err := OfThread(tid)
		if errors.Is(err, unix.ESRCH) {
			continue // it ended
		} else if err != nil {
			return nil, err
		}
		if i > 0 && cpus != nil && !slices.Equal(these, cpus) {
			return nil, fmt.Errorf("affinity: process %d: thread %d on CPUs %v, another on %v", pid, tid, these, cpus)
		}
		cpus = these
	}
	return cpus, nil
}

// PinProcess moves every thread of this process to cpus; the threads it
// makes from then on inherit the mask of the thread that makes them.
func PinProcess(cpus []int) error {
	set, err := setOf(cpus)
	if err != nil {
		return err
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("affinity: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: it ended
			return fmt.Errorf("affinity: move thread %d to CPUs %v: %w", tid, cpus, err)
		}
	}
	return nil
}

// setOf is cpus as a mask.
func setOf(cpus []int) (unix.CPUSet, error) {
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return set, fmt.Errorf("affinity: no CPU %d", c)
		}
		set.Set(c)
	}
	return set, nil
}

// Shares splits cpus among n ranks as mpirun binds them to cores: where
// they fit, share i is the i-th run of len(cpus)/n of them (the rest go
// unused); where the ranks outnumber the CPUs, rank i shares CPU
// cpus[i%len(cpus)] with the ranks len(cpus) apart (mpirun's --bind-to
// core:overload-allowed), so that two ranks that take turns on a CPU stay
// on it rather than being moved about. Nil when n is not positive or
// there are no CPUs.
func Shares(cpus []int, n int) [][]int {
	if n < 1 || len(cpus) == 0 {
		return nil
	}
	shares := make([][]int, n)
	if len(cpus) < n {
		for i := range shares {
			c := i % len(cpus)
			shares[i] = cpus[c : c+1 : c+1]
		}
		return shares
	}
	per := len(cpus) / n
	for i := range shares {
		shares[i] = cpus[i*per : (i+1)*per : (i+1)*per]
	}
	return shares
}

// Do runs f on this goroutine's thread moved to cpus (all of the
// thread's CPUs when cpus is empty), then gives the thread back the mask
// it had.
func Do(cpus []int, f func() error) error {
	if len(cpus) == 0 {
		return f()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	set, err := setOf(cpus)
	if err != nil {
		return err
	}
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("affinity: %w", err)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("affinity: move to CPUs %v: %w", cpus, err)
	}
	defer unix.SchedSetaffinity(0, &old) //nolint:errcheck // the mask it had a moment ago
	return f()
}

// Start starts cmd with its process on cpus (anywhere when cpus is
// empty): forked from a thread moved there, the child and every thread it
// makes inherit the mask. The program may widen it again.
func Start(cmd *exec.Cmd, cpus []int) error {
	return Do(cpus, cmd.Start)
}
