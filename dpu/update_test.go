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
	s, st, key, exited := testUpdateService(t, mnt)

	post := func(size int) *httptest.ResponseRecorder {
		return postBundle(t, s, key, "v1.1.0", bundle.TargetAgent, map[string][]byte{bundle.AgentPart: make([]byte, size)})
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
	s, st, key, exited := testUpdateService(t, t.TempDir())
	post := func(target string, parts ...string) *httptest.ResponseRecorder {
		files := map[string][]byte{}
		for _, p := range parts {
			files[p] = []byte("stand-in " + p)
		}
		return postBundle(t, s, key, "v2.0.0", target, files)
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

// postBundle signs files as a bundle of target and version for this
// machine's architecture and posts it to s's update API.
func postBundle(t *testing.T, s *updateService, key ed25519.PrivateKey, version, target string, files map[string][]byte) *httptest.ResponseRecorder {
	t.Helper()
	dir := t.TempDir()
	m := bundle.Manifest{Version: version, Target: target, Arch: runtime.GOARCH, Parts: map[string]bundle.Part{}}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
		m.Parts[name], _ = bundle.HashFile(filepath.Join(dir, name))
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

// testUpdateService is the update service of an agent v1.0.0 run from the
// base slot by a loader, its slots in stateDir trusting key; exited hears
// of its exit for the loader.
func testUpdateService(t *testing.T, stateDir string) (s *updateService, st *slots.Store, key ed25519.PrivateKey, exited chan struct{}) {
	t.Helper()
	st, err := slots.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	key = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	if err := st.SetTrustedKey(key.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	s = newUpdateService(UpdateConfig{MaxBundle: "256MiB"})
	s.max, s.store, s.slot, s.guarded, s.version = 256<<20, st, "base", true, "v1.0.0"
	exited = make(chan struct{}, 1)
	s.exit = func() { exited <- struct{}{} }
	return s, st, key, exited
}
