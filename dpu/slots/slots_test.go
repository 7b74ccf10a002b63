package slots

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
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
	r.Try(A, bundle.TargetAgent, "v1.1.0", "v1.0.0", now)
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

	r.Try(B, bundle.TargetAgent, "v1.2.0", "v1.1.0", now)
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
	r.Try(B, bundle.TargetAgent, "v1.3.0", "v1.1.0", now)
	r.Start(2, "exit 1", now)
	r.RollBack("not ready within 1m", now)
	if r.Active != A || r.Last.Reason != "not ready within 1m" {
		t.Fatalf("gate rollback: %+v", r)
	}
	// Commit never lowers the floor.
	r.Try(B, bundle.TargetAgent, "v1.0.9", "v1.1.0", now)
	r.Commit(now)
	if r.Floor != "v1.1.0" {
		t.Fatalf("floor %s after committing an older version", r.Floor)
	}
}

// TestMachineSlots: a machine bundle (kernel and initramfs) is booted
// while on trial and, once committed, is the machine an agent slot runs
// on; the slot it boots from is never written over, and a machine slot
// rolled back boots the committed machine again.
func TestMachineSlots(t *testing.T) {
	now := time.Unix(1700000000, 0)
	var r Record
	boot := func() string { return bundle.BootSlot(r.Active, r.Machine, r.Targets) }
	r.Try(A, bundle.TargetQEMU, "v2.0.0", "v1.0.0", now)
	if boot() != A {
		t.Fatalf("a machine slot on trial boots %q", boot())
	}
	r.Commit(now)
	if r.Machine != A || boot() != A || r.Inactive() != B {
		t.Fatalf("committed machine slot: %+v, boots %q, updates go to %q", r, boot(), r.Inactive())
	}
	// An agent bundle on top: the machine still boots a, and no slot is
	// free for the next update.
	r.Try(B, bundle.TargetAgent, "v2.1.0", "v2.0.0", now)
	r.Commit(now)
	if boot() != A || r.Inactive() != "" {
		t.Fatalf("agent on a machine slot: boots %q, updates go to %q", boot(), r.Inactive())
	}
	// A machine slot on trial that fails boots the committed machine.
	r = Record{}
	r.Try(A, bundle.TargetQEMU, "v2.0.0", "v1.0.0", now)
	r.Commit(now)
	r.Try(B, bundle.TargetQEMU, "v3.0.0", "v2.0.0", now)
	if boot() != B {
		t.Fatalf("new machine slot on trial boots %q", boot())
	}
	r.RollBack("did not come up", now)
	if boot() != A || r.Machine != A || r.Inactive() != B {
		t.Fatalf("after the rollback: boots %q, %+v", boot(), r)
	}

	// What the boot ROM gave up. A slot on trial that booted its tries is
	// rolled back, with the reason.
	r.Try(B, bundle.TargetQEMU, "v3.0.0", "v2.0.0", now)
	r.GiveUpBoot(B, bundle.GaveUpBoots, 2, now)
	if r.Active != A || boot() != A || !strings.Contains(r.Last.Reason, "in 2 boots") {
		t.Fatalf("trial given up: %+v %+v", r, r.Last)
	}
	// The committed machine that no longer verifies is dropped: the
	// image's own boots, and the record says so (else the loader would
	// reboot into it for ever).
	r.GiveUpBoot(A, bundle.GaveUpVerify, 2, now)
	if r.Active != Base || r.Committed != Base || r.Machine != Base || boot() != Base {
		t.Fatalf("committed machine given up: %+v, boots %q", r, boot())
	}
	// Nonsense from the command line changes nothing.
	before := r
	r.GiveUpBoot("../x", bundle.GaveUpBoots, 2, now)
	if r.Active != before.Active || r.Machine != before.Machine {
		t.Fatalf("a bad slot name changed the record: %+v", r)
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
	r.Try(A, bundle.TargetAgent, "v1.0.0", "dev", time.Now())
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
