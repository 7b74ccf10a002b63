package dpu

import (
	"bytes"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hecsys/hec/dpu/slots"
	"github.com/hecsys/hec/shared/bundle"
	"github.com/hecsys/hec/test/testutil"
)

// TestUpdateFitsTheStateDisk: on a small state disk a bundle larger than
// its room (free space less the margin) is refused before it fills the
// disk, with the reason, and what was staged is removed; one that fits is
// installed.
func TestUpdateFitsTheStateDisk(t *testing.T) {
	mnt, _ := testutil.SmallDisk(t, 32<<20, 8<<20)
	st, err := slots.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	st.SetTrustedKey(key.Public().(ed25519.PublicKey))
	s := newUpdateService(UpdateConfig{MaxBundle: "256MiB"})
	s.max, s.store, s.slot, s.guarded, s.version = 256<<20, st, "base", true, "v1.0.0"
	exited := make(chan struct{}, 1)
	s.exit = func() { exited <- struct{}{} }

	post := func(size int) *httptest.ResponseRecorder {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, bundle.AgentPart), make([]byte, size), 0o755)
		p, _ := bundle.HashFile(filepath.Join(dir, bundle.AgentPart))
		m := bundle.Manifest{Version: "v1.1.0", Target: "agent", Arch: runtime.GOARCH, Parts: map[string]bundle.Part{bundle.AgentPart: p}}
		if err := bundle.Sign(dir, m, key); err != nil {
			t.Fatal(err)
		}
		var tarball bytes.Buffer
		if err := bundle.Pack(&tarball, dir); err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		s.serveUpdate(w, httptest.NewRequest(http.MethodPost, "/v1/update", &tarball))
		return w
	}
	w := post(30 << 20)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "room on the state disk") {
		t.Fatalf("30 MiB onto 24 MiB free: %d %s", w.Code, w.Body)
	}
	if entries, _ := os.ReadDir(filepath.Join(mnt, "slots")); len(entries) != 1 { // trusted.pub
		t.Fatalf("left in the slots: %v", entries)
	}
	w = post(4 << 20)
	if w.Code != http.StatusAccepted {
		t.Fatalf("4 MiB: %d %s", w.Code, w.Body)
	}
	<-exited
	if rec, _ := st.Read(); rec.Active != slots.A || rec.Versions[slots.A] != "v1.1.0" {
		t.Fatalf("record %+v", rec)
	}
}

// TestUpdateTakesMachineBundlesWhereTheLoaderBoots: a machine bundle (a
// kernel and an initramfs) is refused by an agent whose loader cannot boot
// it (hecd supervise), and by any agent when it lacks a part or is for
// another target; where process 1 boots machine slots it is installed and
// recorded as a machine slot for the boot ROM.
func TestUpdateTakesMachineBundlesWhereTheLoaderBoots(t *testing.T) {
	st, err := slots.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	st.SetTrustedKey(key.Public().(ed25519.PublicKey))
	s := newUpdateService(UpdateConfig{MaxBundle: "256MiB"})
	s.max, s.store, s.slot, s.guarded, s.version = 256<<20, st, "base", true, "v1.0.0"
	exited := make(chan struct{}, 1)
	s.exit = func() { exited <- struct{}{} }
	post := func(target string, parts ...string) *httptest.ResponseRecorder {
		dir := t.TempDir()
		m := bundle.Manifest{Version: "v2.0.0", Target: target, Arch: runtime.GOARCH, Parts: map[string]bundle.Part{}}
		for _, p := range parts {
			os.WriteFile(filepath.Join(dir, p), []byte("stand-in "+p), 0o644)
			m.Parts[p], _ = bundle.HashFile(filepath.Join(dir, p))
		}
		if err := bundle.Sign(dir, m, key); err != nil {
			t.Fatal(err)
		}
		var tarball bytes.Buffer
		if err := bundle.Pack(&tarball, dir); err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		s.serveUpdate(w, httptest.NewRequest(http.MethodPost, "/v1/update", &tarball))
		return w
	}
	for _, c := range []struct {
		boots  bool
		target string
		parts  []string
		code   int
		says   string
	}{
		{false, bundle.TargetQEMU, bundle.MachineParts, http.StatusConflict, "booted by a VM's boot ROM"},
		{true, bundle.TargetQEMU, bundle.MachineParts[:1], http.StatusBadRequest, "without initramfs.cpio"},
		{true, "bf2", bundle.MachineParts, http.StatusBadRequest, `target "bf2"`},
		{true, bundle.TargetAgent, bundle.MachineParts, http.StatusBadRequest, "without hecd"},
	} {
		s.boots = c.boots
		if w := post(c.target, c.parts...); w.Code != c.code || !strings.Contains(w.Body.String(), c.says) {
			t.Errorf("%s %v (boots %v): %d %s; want %d, %q", c.target, c.parts, c.boots, w.Code, w.Body, c.code, c.says)
		}
	}
	s.boots = true
	if w := post(bundle.TargetQEMU, bundle.MachineParts...); w.Code != http.StatusAccepted {
		t.Fatalf("machine bundle where the loader boots: %d %s", w.Code, w.Body)
	}
	<-exited
	rec, _ := st.Read()
	if rec.Active != slots.A || rec.Targets[slots.A] != bundle.TargetQEMU || bundle.BootSlot(rec.Active, rec.Machine, rec.Targets) != slots.A {
		t.Fatalf("record %+v", rec)
	}
}
