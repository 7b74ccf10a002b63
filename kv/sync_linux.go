package kv

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync syncs f's data (and the metadata needed to read it back).
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
