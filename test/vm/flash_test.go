package vm

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hecsys/hec/images"
	"github.com/hecsys/hec/test/testutil"
)

// arm64Bundle builds pkg for linux/arm64 with ldflags and signs it as an
// agent bundle of version with the image's key.
func arm64Bundle(t *testing.T, pkg, ldflags, version string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "hecd")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w "+ldflags, "-o", bin, pkg)
	cmd.Dir = testutil.ModuleRoot()
	cmd.Env = append(cmd.Environ(), "GOARCH=arm64", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s for arm64: %v\n%s", pkg, err, b)
	}
	out := filepath.Join(dir, "bundle")
	if _, err := images.BuildAgent(images.AgentOptions{Agent: bin, Out: out, KeyPath: filepath.Join(bundle(t), "dev.ed25519"), Version: version}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFlashTheVM flashes the arm64 agent in the VM over its management
// API: process 1, its loader, runs the new agent from a slot on the state
// disk and commits it once ready (the new version serves the host over
// ivshmem); a bundle whose agent exits at start is rolled back by process
// 1, and the committed version serves again.
func TestFlashTheVM(t *testing.T) {
	vm, _ := boot(t, "flash")
	good := arm64Bundle(t, "./dpu/cmd/hecd", "-X github.com/hecsys/hec/dpu.Version=v1.1.0", "v1.1.0")
	bad := arm64Bundle(t, "./test/e2e/testdata/badagent", "-X main.mode=exit", "v1.2.0")
	m := mgmtOf(vm)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Update == nil || st.Update.Slot != "base" {
		t.Fatalf("the image's agent: update status %+v, want the base slot", st.Update)
	}
	from := st.Version

	for _, c := range []struct {
		bundle, version, result, serving string
	}{
		{good, "v1.1.0", "committed", "v1.1.0"},
		{bad, "v1.2.0", "rolled back", "v1.1.0"},
	} {
		t0 := time.Now()
		reply, err := m.Update(ctx, c.bundle, false, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.version, err)
		}
		out, st, err := m.WaitUpdate(ctx, reply.Version)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s (%s) after %v; %s serving", c.version, out.Result, out.Reason, time.Since(t0).Round(time.Millisecond), st.Version)
		if out.Result != c.result || st.Version != c.serving {
			t.Fatalf("%s: %s, %s serving; want %s, %s serving", c.version, out.Result, st.Version, c.result, c.serving)
		}
		if err := m.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if err := dial(t, vm).Ping(ctx); err != nil {
			t.Fatalf("ping after %s: %v", c.version, err)
		}
	}
	if st, err := m.Status(ctx); err != nil || st.Update.Committed != "a" || st.Update.Last.From != "v1.1.0" {
		t.Fatalf("after both: %+v, %v (the image ran %s)", st.Update, err, from)
	}
}
