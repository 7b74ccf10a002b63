package slots

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
	"github.com/hecsys/hec/shared/durable"
)

// The slots. Base is the loader's own binary.
const (
	A    = "a"
	B    = "b"
	Base = ""
)

// LoaderEnv is set in the environment of an agent started by a loader
// that keeps the slots (its value: the slot, "a", "b" or "base"): the
// agent may then install an update and exit for the loader to start it.
const LoaderEnv = "HEC_LOADER_SLOT"

// BootsEnv is set ("1") besides LoaderEnv by a loader that boots machine
// bundles (process 1 of a VM, whose boot ROM is the QEMU harness): the
// agent may then take them.
const BootsEnv = "HEC_LOADER_BOOTS"

// DefaultTries is how often a new slot is started before the loader falls
// back to the committed one.
const DefaultTries = bundle.DefaultTries

// Errors, checked with errors.Is.
var (
	ErrNoKey = errors.New("slots: no trusted key installed")
)

// Record is the loader's state, replaced whole on every change.
type Record struct {
	// Active is the slot the loader starts; Committed, the slot that last
	// passed the health gate. They differ while an update is tried.
	Active    string `json:"active"`
	Committed string `json:"committed"`
	// Tries counts the starts of Active since it was marked for a try.
	Tries int `json:"tries"`
	// Floor is the highest version ever committed: anything not newer is
	// refused.
	Floor string `json:"floor,omitempty"`
	// Versions are the versions installed in slots A and B.
	Versions map[string]string `json:"versions,omitempty"`
	// Last is the latest update's outcome (its slot is A or B).
	Last *api.UpdateOutcome `json:"last,omitempty"`
	// Targets are the bundle targets of slots A and B: agent bundles, or
	// machine bundles (a kernel and an initramfs, booted by a boot ROM).
	// Machine is the committed machine slot: the one the machine boots
	// when no machine slot is on trial (Base: the image's own). A boot ROM
	// reads Active, Committed, Machine, Targets and Versions
	// (bundle.BootRecord).
	Targets map[string]string `json:"targets,omitempty"`
	Machine string            `json:"machine,omitempty"`
}

// Name is a slot's name for people: "a", "b" or "base".
func Name(slot string) string {
	if slot == Base {
		return "base"
	}
	return slot
}

// Inactive is the slot an update is written to: never the committed one,
// nor the one running, nor the one whose kernel the machine boots; ""
// when both slots are one of those.
func (r *Record) Inactive() string {
	for _, s := range []string{A, B} {
		if s != r.Committed && s != r.Active && s != r.Machine {
			return s
		}
	}
	return ""
}

// Try marks slot, holding a bundle of target and version, to be started
// next (after from).
func (r *Record) Try(slot, target, version, from string, now time.Time) {
	if r.Versions == nil {
		r.Versions = map[string]string{}
	}
	if r.Targets == nil {
		r.Targets = map[string]string{}
	}
	r.Versions[slot], r.Targets[slot] = version, target
	r.Active, r.Tries = slot, 0
	r.Last = &api.UpdateOutcome{Version: version, From: from, Slot: slot, Result: api.UpdateTrying, At: now}
}

// Start decides which slot the loader runs now and counts the try. A slot
// on trial that has used maxTries is given up, with last (how its last
// start ended) in the reason: the record falls back to the committed slot
// (rolledBack says so).
func (r *Record) Start(maxTries int, last string, now time.Time) (slot string, rolledBack bool) {
	if r.Active != r.Committed {
		if r.Tries >= maxTries {
			r.RollBack(fmt.Sprintf("started %d times without becoming ready (last: %s)", r.Tries, last), now)
			return r.Active, true
		}
		r.Tries++
	}
	return r.Active, false
}

// Commit records that the slot on trial passed the health gate.
func (r *Record) Commit(now time.Time) {
	r.Committed, r.Tries = r.Active, 0
	if bundle.IsMachine(r.Targets[r.Active]) {
		r.Machine = r.Active
	}
	v := r.Versions[r.Active]
	if c, err := bundle.CompareVersions(v, r.Floor); r.Floor == "" || err == nil && c > 0 {
		r.Floor = v
	}
	if r.Last != nil && r.Last.Slot == r.Active && r.Last.Result == api.UpdateTrying {
		r.Last.Result, r.Last.At = api.UpdateCommitted, now
	}
}

// RollBack gives up the slot on trial: the committed slot runs again.
func (r *Record) RollBack(reason string, now time.Time) {
	if r.Last != nil && r.Last.Slot == r.Active && r.Last.Result == api.UpdateTrying {
		r.Last.Result, r.Last.Reason, r.Last.At = api.UpdateRolledBack, reason, now
	}
	r.Active, r.Tries = r.Committed, 0
}

// GiveUpBoot applies what the boot ROM said of slot at this boot
// (bundle.BootGaveUpParam): a slot on trial that booted its tries (why
// bundle.GaveUpBoots) or does not verify is rolled back; a committed
// machine slot that does not verify is dropped, and the image's own
// kernel and agent are committed in its place, so that the record names
// what the ROM can boot (else the loader would reboot into it for ever).
func (r *Record) GiveUpBoot(slot, why string, tries int, now time.Time) {
	if slot != A && slot != B {
		return
	}
	reason := fmt.Sprintf("its kernel and initramfs did not bring the agent up in %d boots", tries)
	if why != bundle.GaveUpBoots {
		reason = "its bundle on the state disk does not verify (the boot ROM did not boot it)"
	}
	if r.Active == slot && r.Active != r.Committed {
		r.RollBack(reason, now)
	}
	if r.Machine == slot {
		r.Machine = Base
	}
	if r.Committed == slot && bundle.IsMachine(r.Targets[slot]) {
		r.Committed = Base
		if r.Active == slot {
			r.Active, r.Tries = Base, 0
		}
	}
}

// Store is the slots directory of the agent's state.
type Store struct {
	dir string
}

// Open returns the store under stateDir (its slots directory is created).
func Open(stateDir string) (*Store, error) {
	dir := filepath.Join(stateDir, "slots")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("slots: %w", err)
	}
	return &Store{dir: dir}, nil
}

func (s *Store) recordPath() string { return filepath.Join(s.dir, "record.json") }

// Dir is where slot's bundle lives.
func (s *Store) Dir(slot string) string { return filepath.Join(s.dir, slot) }

// Read returns the record; a store never written reads as the base
// running and committed.
func (s *Store) Read() (Record, error) {
	var r Record
	b, err := os.ReadFile(s.recordPath())
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("slots: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("slots: record %s: %w", s.recordPath(), err)
	}
	for _, slot := range []string{r.Active, r.Committed} {
		if slot != A && slot != B && slot != Base {
			return r, fmt.Errorf("slots: record %s names slot %q", s.recordPath(), slot)
		}
	}
	return r, nil
}

// Write replaces the record (durably: old or new after a power cut).
func (s *Store) Write(r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(s.recordPath(), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("slots: write the record: %w", err)
	}
	return nil
}

func (s *Store) keyPath() string { return filepath.Join(s.dir, "trusted.pub") }

// TrustedKey returns the public key bundles must be signed with.
func (s *Store) TrustedKey() (ed25519.PublicKey, error) {
	b, err := os.ReadFile(s.keyPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoKey
	}
	if err != nil {
		return nil, err
	}
	k, err := bundle.ParsePublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("slots: %s: %w", s.keyPath(), err)
	}
	return k, nil
}

// SetTrustedKey replaces the trusted key.
func (s *Store) SetTrustedKey(pub ed25519.PublicKey) error {
	return durable.WriteFile(s.keyPath(), []byte(hex.EncodeToString(pub)+"\n"), 0o600)
}

// Verify checks slot's bundle with the trusted key.
func (s *Store) Verify(slot string) (bundle.Manifest, error) {
	pub, err := s.TrustedKey()
	if err != nil {
		return bundle.Manifest{}, err
	}
	return bundle.Verify(s.Dir(slot), pub)
}

// Stage returns an empty directory to unpack an upload for slot into;
// Install moves it into place. A stage left by a power cut is removed.
func (s *Store) Stage(slot string) (string, error) {
	dir := s.Dir(slot) + ".new"
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return dir, os.Mkdir(dir, 0o700)
}

// Clear removes slot's bundle: the loader must neither run it nor
// have it committed.
func (s *Store) Clear(slot string) error {
	if slot != A && slot != B {
		return fmt.Errorf("slots: clear slot %q", slot)
	}
	if err := os.RemoveAll(s.Dir(slot)); err != nil {
		return fmt.Errorf("slots: clear slot %s: %w", slot, err)
	}
	return durable.SyncDir(s.dir)
}

// Install replaces slot's bundle with the staged one, durably.
func (s *Store) Install(slot, staged string) error {
	dst := s.Dir(slot)
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("slots: clear slot %s: %w", slot, err)
	}
	if err := os.Rename(staged, dst); err != nil {
		return fmt.Errorf("slots: install slot %s: %w", slot, err)
	}
	return durable.SyncDir(s.dir)
}
