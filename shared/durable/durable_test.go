package durable

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, tc := range []struct {
		data string
		perm os.FileMode
	}{{"first\n", 0o600}, {"second, longer\n", 0o644}, {"", 0o600}} {
		if err := WriteFile(path, []byte(tc.data), tc.perm); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != tc.data {
			t.Fatalf("read %q, want %q", got, tc.data)
		}
	}
	// Each write is a new file with the mode given (the last: 0600,
	// which no umask narrows).
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v after a write with 0600", st.Mode())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
	if err := WriteFile(filepath.Join(dir, "no", "such", "dir"), nil, 0o600); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}
