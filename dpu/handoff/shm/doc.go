// Package shm carries the handoff over memory the agent shares with its
// hosts: the region (a file under /dev/shm in local emulation, an ivshmem
// BAR in a VM) and its rings of descriptors and completions, the buffers
// in each queue pair's window (shared/ring's layout).
//
// The package owns the region's life: the file's lock (a second agent
// names the first one's pid and leaves it alone), its mode (the agent's
// user's alone), mapping and formatting (only once everything else that
// can fail is held), marking it stopped when the agent stops, and
// unmapping it last. Serving the rings is the agent's poller's, a
// handoff.RingServer: it decides which ops run inline and how workers
// share the cores among queue pairs, which no other transport has to.
package shm
