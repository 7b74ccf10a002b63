// Package affinity runs threads and processes on chosen CPUs (Linux
// sched_setaffinity): a function on this goroutine's thread moved to a set
// of CPUs, a command whose every thread starts on a set (a child inherits
// the mask of the thread that forks it, and its threads the mask of the
// thread that makes them), and the split of this process's CPUs into
// shares, one per rank, as mpirun binds ranks to cores.
package affinity
