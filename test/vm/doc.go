// Package vm holds the end-to-end tests against the arm64 agent booted in
// QEMU (TCG): the x86 host library talks to it over ivshmem as it would to
// a DPU. The tests build the image themselves (fetching the Debian arm64
// kernel into the repository's .cache when missing) and skip, saying why,
// only where QEMU or the kernel cannot be had (not root, nothing installed).
package vm
