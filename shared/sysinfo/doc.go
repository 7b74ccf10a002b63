// Package sysinfo reads what a Linux machine has — CPUs and their SIMD
// features, memory, network interfaces and their link speeds, PCI devices,
// the state of a process (Ended: gone, or a zombie) — from /proc and /sys
// under a root directory, so tests read recorded trees (testdata/) and the
// host and the agent share one reader. Standard library only: it runs on
// the host and on the DPU.
package sysinfo
