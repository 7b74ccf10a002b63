package slots

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/api"
)

// TestRecordLifecycle walks the record through what a loader and an
// update do: a try that is committed, a try that uses its starts and is
// rolled back, and which slot each update is written to.
func TestRecordLifecycle(t *testing.T) {
	now := time.Unix(1700000000, 0)
	var r Record
	if slot, rb := r.Start(DefaultTries, "exit 1", now); slot != Base || rb || r.Tries != 0 {
		t.Fatalf("fresh record starts %q (rolled back %v, tries %d), want the base", slot, rb, r.Tries)
	}
	if r.Inactive() != A {
		t.Fatalf("first update goes to %q, want a", r.Inactive())
	}
	r.Try(A, "v1.1.0", "v1.0.0", now)
	for i := 1; i <= 2; i++ {
		if slot, rb := r.Start(2, "exit 1", now); slot != A || rb || r.Tries != i {
			t.Fatalf("start %d: %q rolled back %v tries %d", i, slot, rb, r.Tries)
		}
	}
	r.Commit(now)
	if r.Committed != A || r.Floor != "v1.1.0" || r.Last.Result != api.UpdateCommitted || r.Tries != 0 {
		t.Fatalf("after commit: %+v %+v", r, r.Last)
	}
	if r.Inactive() != B {
		t.Fatalf("with a committed, updates go to %q", r.Inactive())
	}

	r.Try(B, "v1.2.0", "v1.1.0", now)
	r.Start(2, "exit 1", now)
	r.Start(2, "exit 1", now)
	slot, rb := r.Start(2, "exit 1", now)
	if slot != A || !rb || r.Last.Result != api.UpdateRolledBack || r.Last.Version != "v1.2.0" || r.Floor != "v1.1.0" ||
		!strings.Contains(r.Last.Reason, "(last: exit 1)") {
		t.Fatalf("third start of a slot with two tries: %q rolled back %v, %+v", slot, rb, r.Last)
	}
	if r.Inactive() != B {
		t.Fatal("after a rollback to a, the next update must not go to a")
	}
	// A rollback by the health gate.
	r.Try(B, "v1.3.0", "v1.1.0", now)
	r.Start(2, "exit 1", now)
	r.RollBack("not ready within 1m", now)
	if r.Active != A || r.Last.Reason != "not ready within 1m" {
		t.Fatalf("gate rollback: %+v", r)
	}
	// Commit never lowers the floor.
	r.Try(B, "v1.0.9", "v1.1.0", now)
	r.Commit(now)
	if r.Floor != "v1.1.0" {
		t.Fatalf("floor %s after committing an older version", r.Floor)
	}
}

func TestStoreDurableAndChecked(t *testing.T) {
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Read()
	if err != nil || r.Active != Base {
		t.Fatalf("unwritten store: %+v, %v", r, err)
	}
	r.Try(A, "v1.0.0", "dev", time.Now())
	if err := st.Write(r); err != nil {
		t.Fatal(err)
	}
	got, err := st.Read()
	if err != nil || got.Active != A || got.Versions[A] != "v1.0.0" {
		t.Fatalf("read back %+v, %v", got, err)
	}
	// A stray temporary file (a power cut before the rename) changes
	// nothing; a record naming another slot is an error, not a guess.
	os.WriteFile(filepath.Join(st.dir, ".record.json.tmp"), []byte("{"), 0o600)
	if got, err := st.Read(); err != nil || got.Active != A {
		t.Fatalf("with a stray temporary: %+v, %v", got, err)
	}
	os.WriteFile(st.recordPath(), []byte(`{"active":"../x"}`), 0o600)
	if _, err := st.Read(); err == nil {
		t.Fatal("a record naming slot ../x was read")
	}
	if _, err := st.TrustedKey(); err != ErrNoKey {
		t.Fatalf("no key: %v", err)
	}
	// Stage and install.
	staged, err := st.Stage(B)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(staged, "hecd"), []byte("x"), 0o700)
	if err := st.Install(B, staged); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(st.Dir(B), "hecd")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Fatalf("stage left behind: %v", err)
	}
}
