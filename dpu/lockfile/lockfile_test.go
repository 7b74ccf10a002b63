package lockfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLock: a file locked once is refused to a second lock, which names
// the holder's pid (this process: flock's locks are per open file), and
// free again once the first is closed; a file that is not there is made
// only where asked.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hecd.lock")
	if _, err := Lock(path, false, 0o600); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Lock of a missing file without create: %v, want not exist", err)
	}
	first, err := Lock(path, true, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(path, false, 0o600)
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Lock: %v, want a HeldError", err)
	}
	if held.PID != os.Getpid() || held.Path != path || !strings.Contains(err.Error(), "pid") {
		t.Errorf("second Lock: %+v (%v), want pid %d on %s", held, err, os.Getpid(), path)
	}
	first.Close()
	again, err := Lock(path, false, 0o600)
	if err != nil {
		t.Fatalf("Lock after the holder closed: %v", err)
	}
	again.Close()
}
