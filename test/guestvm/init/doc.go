// Command init is process 1 of a guestvm guest: it loads the modules the
// initramfs lists, mounts this machine's root (9p, read-only) and the
// test's work directory (9p, read-write) on it, changes root into it and
// runs /mnt/run.sh there, its output in /mnt/out.log, then powers off.
package main
