//go:build !linux

package kv

import "os"

// fdatasync syncs f (fsync where fdatasync is not at hand).
func fdatasync(f *os.File) error { return f.Sync() }
