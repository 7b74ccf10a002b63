// Package guestvm runs a shell script as root in a throwaway x86_64 Linux
// guest (qemu-system-x86_64, Debian's amd64 kernel) that sees this
// machine's root file system read-only and a work directory of the
// caller's read-write at /mnt: programs built here (test binaries, cgo
// ones included) run there unchanged, against a kernel that has what this
// machine's may lack — RDMA and soft-RoCE (rdma_rxe), to start with. Its
// NIC is a virtio-net on a QEMU network the caller names: two guests on
// one socket network reach each other, as two hosts on a link.
//
// The guest runs under KVM where KVM boots a guest here (Accel checks
// once per process), else under TCG, slower but the same.
package guestvm
