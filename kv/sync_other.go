//go:build !linux

package kv

import "os"

// fdatasync syncs f (fsync where fdatasync is not at hand).
func fdatasync(f *os.File) error { return f.Sync() }

// logSyncer is fdatasync here (see the Linux one).
type logSyncer struct{}

func newLogSyncer() *logSyncer           { return &logSyncer{} }
func (*logSyncer) sync(f *os.File) error { return fdatasync(f) }
func (*logSyncer) close()                {}
func (*logSyncer) kind() string          { return "fdatasync" }

// pwriteShort is f.WriteAt here.
func pwriteShort(f *os.File, b []byte, off int64) (int, error) { return f.WriteAt(b, off) }
