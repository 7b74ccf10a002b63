// Package shm is the host's shared-memory transport (shm:///PATH): a
// queue pair leased in the agent's region (package ring), whose window is
// mapped in this process, so that buffers from Alloc reach the agent with
// zero copy. Waiters spin, yield, then sleep on the pair's completion
// bell; a detached transport (the agent restarted, stopped or fenced the
// pair) attaches again on the next op, preferring the pair it had.
package shm
