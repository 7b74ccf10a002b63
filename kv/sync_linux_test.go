package kv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLogSyncer: a sync through AIO returns once the file's pages are
// written back — none dirty, none under writeback, as the kernel's page
// cache reports them (cachestat) — and reports a bad descriptor as
// fdatasync does, without giving up AIO; the fallback syncs as well.
func TestLogSyncer(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func() *logSyncer
		kind string
	}{
		{"aio", newLogSyncer, "aio"},
		{"fdatasync", func() *logSyncer { return &logSyncer{} }, "fdatasync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.make()
			defer s.close()
			if got := s.kind(); got != tc.kind {
				t.Fatalf("kind %q, want %q (this kernel refused an AIO context?)", got, tc.kind)
			}
			f, err := os.Create(filepath.Join(t.TempDir(), "log"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, 1<<20)
			for i := range buf {
				buf[i] = byte(i)
			}
			for off := int64(0); off < 8<<20; off += int64(len(buf)) {
				if _, err := pwriteShort(f, buf, off); err != nil {
					t.Fatal(err)
				}
			}
			before, ok := pageCache(t, f)
			if err := s.sync(f); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if after, _ := pageCache(t, f); ok {
				if before.Dirty == 0 {
					t.Fatalf("nothing dirty before the sync: the test shows nothing (%+v)", before)
				}
				if after.Dirty != 0 || after.Writeback != 0 {
					t.Fatalf("after the sync %d pages dirty and %d under writeback, want none (before: %d dirty)",
						after.Dirty, after.Writeback, before.Dirty)
				}
			}
			g, err := os.Create(filepath.Join(t.TempDir(), "closed"))
			if err != nil {
				t.Fatal(err)
			}
			g.Close()
			if err := s.sync(g); !errors.Is(err, unix.EBADF) {
				t.Fatalf("sync of a closed file: %v, want EBADF", err)
			}
			if got := s.kind(); got != tc.kind {
				t.Fatalf("after a bad descriptor kind %q, want %q", got, tc.kind)
			}
			if err := s.sync(f); err != nil {
				t.Fatalf("sync after a bad descriptor: %v", err)
			}
		})
	}
}

// pageCache is f's page-cache state, and false (logged) where the kernel
// has no cachestat (before 6.5).
func pageCache(t *testing.T, f *os.File) (unix.Cachestat_t, bool) {
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &st, 0); err != nil {
		t.Logf("cachestat: %v: not checking that the sync wrote the pages back", err)
		return st, false
	}
	return st, true
}
