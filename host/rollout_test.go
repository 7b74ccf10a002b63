package host

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
	"github.com/hecsys/hec/shared/sysinfo"
)

// fakeAgent answers the management API's status and update routes as an
// agent under a loader does: a dry run verifies, an update restarts it
// into the new version, which commits, or rolls back when it breaks.
type fakeAgent struct {
	mu            sync.Mutex
	version, arch string
	refuse        string // POST /v1/update answers 400 with this
	breaks        bool   // a new version rolls back
	installs      int    // updates other than dry runs
	last          *api.UpdateOutcome
}

func (f *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/v1/status":
		json.NewEncoder(w).Encode(api.Status{Version: f.version, Ready: true,
			Platform: &api.Platform{CPU: sysinfo.CPU{Arch: f.arch}}, Update: &api.UpdateStatus{Last: f.last}})
	case "/v1/update":
		var m bundle.Manifest
		tr := tar.NewReader(r.Body)
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			if h.Name == bundle.ManifestFile {
				json.NewDecoder(tr).Decode(&m)
			}
		}
		if f.refuse != "" {
			http.Error(w, f.refuse, http.StatusBadRequest)
			return
		}
		dry := r.URL.Query().Get("dry_run") != ""
		json.NewEncoder(w).Encode(api.UpdateReply{Version: m.Version, From: f.version, DryRun: dry})
		if dry {
			return
		}
		f.installs++
		if f.breaks {
			f.last = &api.UpdateOutcome{Version: m.Version, Result: api.UpdateRolledBack, Reason: "started 2 times without becoming ready"}
			return
		}
		f.last = &api.UpdateOutcome{Version: m.Version, From: f.version, Result: api.UpdateCommitted}
		f.version = m.Version
	default:
		http.NotFound(w, r)
	}
}

func testBundle(t *testing.T, version, arch string) string {
	t.Helper()
	dir := t.TempDir()
	b, _ := json.Marshal(bundle.Manifest{Version: version, Target: "agent", Arch: arch})
	if err := os.WriteFile(filepath.Join(dir, bundle.ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRollout: the batches, the stop at the first failure, and the checks
// before anything is installed, against fake agents.
func TestRollout(t *testing.T) {
	const committed, rolledBack = api.UpdateCommitted, api.UpdateRolledBack
	type node struct {
		version, arch, refuse string
		breaks, down          bool
	}
	ok := node{version: "v1.0.0", arch: "amd64"}
	for _, c := range []struct {
		name     string
		nodes    []node
		max      int
		dryRun   bool
		results  []string
		installs []int
		err      string // "" none
	}{
		{"one at a time", []node{ok, ok, ok}, 1, false,
			[]string{committed, committed, committed}, []int{1, 1, 1}, ""},
		{"a rollback stops the rollout", []node{ok, {version: "v1.0.0", arch: "amd64", breaks: true}, ok, ok}, 1, false,
			[]string{committed, rolledBack, RolloutNotTried, RolloutNotTried}, []int{1, 1, 0, 0}, "2 rolled back; left on their version: 3, 4"},
		{"a batch of two ends together", []node{ok, ok, {version: "v1.0.0", arch: "amd64", breaks: true}, ok, ok}, 2, false,
			[]string{committed, committed, rolledBack, committed, RolloutNotTried}, []int{1, 1, 1, 1, 0}, "3 rolled back; left on their version: 5"},
		{"a refusal: nothing installed", []node{ok, {version: "v1.0.0", arch: "amd64", refuse: "not newer than v1.5.0"}, ok}, 1, false,
			[]string{RolloutNotTried, RolloutRefused, RolloutNotTried}, []int{0, 0, 0}, "nothing installed: 2 refused"},
		{"an agent down: nothing installed", []node{ok, ok, {down: true}}, 1, false,
			[]string{RolloutNotTried, RolloutNotTried, RolloutFailed}, []int{0, 0, 0}, "nothing installed: 3 failed"},
		{"no bundle for its architecture", []node{ok, {version: "v1.0.0", arch: "arm64"}}, 1, false,
			[]string{RolloutNotTried, RolloutRefused}, []int{0, 0}, "nothing installed: 2 refused"},
		{"one serves the version already", []node{ok, {version: "v1.1.0", arch: "amd64"}, ok}, 1, false,
			[]string{committed, RolloutCurrent, committed}, []int{1, 0, 1}, ""},
		{"a dry run installs nothing", []node{ok, ok}, 1, true,
			[]string{RolloutVerified, RolloutVerified}, []int{0, 0}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var targets []RolloutTarget
			var fakes []*fakeAgent
			for i, n := range c.nodes {
				f := &fakeAgent{version: n.version, arch: n.arch, refuse: n.refuse, breaks: n.breaks}
				srv := httptest.NewServer(f)
				t.Cleanup(srv.Close)
				if n.down {
					srv.Close()
				}
				fakes = append(fakes, f)
				targets = append(targets, RolloutTarget{Name: string(rune('1' + i)), Mgmt: NewMgmt(strings.TrimPrefix(srv.URL, "http://"))})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rows, err := Rollout(ctx, targets, RolloutOptions{Bundles: []string{testBundle(t, "v1.1.0", "amd64")},
				MaxUnavailable: c.max, DryRun: c.dryRun})
			if c.err == "" && err != nil || c.err != "" && (!errors.Is(err, ErrRollout) || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("err %v, want %q", err, c.err)
			}
			for i, r := range rows {
				if r.Result != c.results[i] || fakes[i].installs != c.installs[i] {
					t.Errorf("node %s: %+v, %d installs; want %s, %d", r.Node, r, fakes[i].installs, c.results[i], c.installs[i])
				}
				want := "v1.1.0"
				if r.Result != committed && r.Result != RolloutCurrent {
					want = r.Before
				}
				if r.After != want {
					t.Errorf("node %s: after %q, want %q", r.Node, r.After, want)
				}
			}
		})
	}

	// Bad bundle lists, before any agent is asked.
	for _, bundles := range [][]string{nil, {t.TempDir()}, {testBundle(t, "v2", "amd64"), testBundle(t, "v3", "amd64")}} {
		if _, err := Rollout(context.Background(), nil, RolloutOptions{Bundles: bundles}); err == nil {
			t.Errorf("bundles %v: no error", bundles)
		}
	}
}
