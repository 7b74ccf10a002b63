package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/images"
	"github.com/hecsys/hec/qemu"
	bundlepkg "github.com/hecsys/hec/shared/bundle"
	"github.com/hecsys/hec/test/testutil"
)

// arm64Bundle builds pkg for linux/arm64 with ldflags and signs it as an
// agent bundle of version with the image's key.
func arm64Bundle(t *testing.T, pkg, ldflags, version string) string {
	t.Helper()
	return archBundle(t, "arm64", pkg, ldflags, version)
}

// archBundle builds pkg for linux/goarch with ldflags and signs it as an
// agent bundle of version with the image's key.
func archBundle(t *testing.T, goarch, pkg, ldflags, version string) string {
	t.Helper()
	bin := archBinary(t, goarch, pkg, ldflags)
	out := filepath.Join(filepath.Dir(bin), "bundle")
	if _, err := images.BuildAgent(images.AgentOptions{Agent: bin, Out: out, KeyPath: filepath.Join(bundle(t), "dev.ed25519"), Version: version}); err != nil {
		t.Fatal(err)
	}
	return out
}

// archBinary builds pkg for linux/goarch with ldflags.
func archBinary(t *testing.T, goarch, pkg, ldflags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hecd")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w "+ldflags, "-o", bin, pkg)
	cmd.Dir = testutil.ModuleRoot()
	cmd.Env = append(cmd.Environ(), "GOARCH="+goarch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s for %s: %v\n%s", pkg, goarch, err, b)
	}
	return bin
}

// TestFlashAMachineBundle flashes a whole machine into the VM: a kernel
// and an initramfs whose init is a new hecd. The agent installs it into
// a slot and exits; process 1 reboots; the QEMU harness, the boot ROM,
// boots the slot's kernel and initramfs, whose process 1 commits it once
// its agent is ready. A machine bundle whose init dies at start panics
// the guest kernel: the ROM boots it its two tries, then the committed
// machine, whose process 1 rolls the record back.
func TestFlashAMachineBundle(t *testing.T) {
	testutil.NeedLong(t, "three boots of the emulated machine, 75-90 s; make test flashes an agent bundle into the VM (TestFlashTheVM) and cuts the power during flashes")
	vm, o := boot(t, "machine")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	var err error
	defer cancel()
	k, err := images.FetchKernel(ctx, filepath.Join(testutil.ModuleRoot(), ".cache"))
	if err != nil {
		t.Fatal(err)
	}
	machine := func(version, agent string) string {
		out := filepath.Join(t.TempDir(), "machine-"+version)
		if _, err := images.Build(images.BuildOptions{Agent: agent, Kernel: k, Target: "qemu", Out: out,
			KeyPath: filepath.Join(bundle(t), "dev.ed25519"), Version: version}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	good := machine("v2.0.0", archBinary(t, "arm64", "./dpu/cmd/hecd", "-X github.com/hecsys/hec/dpu.Version=v2.0.0"))
	dies := machine("v3.0.0", archBinary(t, "arm64", "./test/e2e/testdata/badagent", "-X main.mode=exit"))

	// The harness as boot ROM: whenever the guest reboots (QEMU ends), it
	// boots what the slots' record names.
	var romLog testutil.SyncBuffer
	keep, stop := context.WithCancel(ctx)
	defer stop()
	go qemu.KeepBooted(keep, o.StateDir, &romLog)
	defer func() {
		if t.Failed() {
			t.Logf("boot ROM:\n%s", romLog.String())
		}
	}()

	m := mgmtOf(vm)
	for _, c := range []struct {
		bundle, version, result, serving, reason string
	}{
		{good, "v2.0.0", "committed", "v2.0.0", ""},
		{dies, "v3.0.0", "rolled back", "v2.0.0", "did not bring the agent up in 2 boots"},
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
		t.Logf("%s into slot %s: %s (%s) after %v; %s serving", c.version, reply.Slot, out.Result, out.Reason,
			time.Since(t0).Round(time.Millisecond), st.Version)
		if out.Result != c.result || st.Version != c.serving || !strings.Contains(out.Reason, c.reason) {
			t.Fatalf("%s: %s (%s), %s serving; want %s, %s serving", c.version, out.Result, out.Reason, st.Version, c.result, c.serving)
		}
		if st.Update.Machine != "a" {
			t.Fatalf("%s: the committed machine is %q, want a", c.version, st.Update.Machine)
		}
		now, err := qemu.Load(o.StateDir)
		if err != nil || now.Boot != "a" {
			t.Fatalf("%s: the VM booted %q (%v), want slot a", c.version, now.Boot, err)
		}
		if err := dial(t, now).Ping(ctx); err != nil {
			t.Fatalf("ping after %s: %v", c.version, err)
		}
	}

	// The committed machine's kernel changes on the disk while the VM is
	// off: the ROM does not boot it but the image's own, whose process 1
	// drops the slot from the record instead of rebooting into it again.
	stop()
	vm, err = qemu.Load(o.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Down(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	spoilt := filepath.Join(t.TempDir(), "Image")
	if err := os.WriteFile(spoilt, []byte("not the signed kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(o.StateDir, "disk.img")
	exec.Command("debugfs", "-w", "-R", "rm /slots/a/Image", disk).Run()
	if out, err := exec.Command("debugfs", "-w", "-R", "write "+spoilt+" /slots/a/Image", disk).CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v %s", err, out)
	}
	vm, err = qemu.Reboot(ctx, o.StateDir, &romLog)
	if err != nil {
		t.Fatal(err)
	}
	st, err := mgmtOf(vm).Status(ctx)
	if err != nil || vm.Boot != "base" || st.Update.Machine != "" || st.Update.Committed != "base" {
		t.Fatalf("after the committed machine was spoilt: booted %s, %+v, %v", vm.Boot, st.Update, err)
	}
	t.Logf("spoilt committed machine: booted %s, serving %s", vm.Boot, st.Version)
	t.Logf("boot ROM:\n%s", romLog.String())
}

// TestFlashTheVM flashes the arm64 agent in the VM over its management
// API: process 1, its loader, runs the new agent from a slot on the state
// disk and commits it once ready (the new version serves the host over
// ivshmem). Every bad bundle (a part or the manifest tampered with,
// another key, the other architecture, older than the floor, an unsigned
// file, too large, cut short, no token) is refused with the committed
// version serving after each. A bundle whose agent exits at start, and
// one that never becomes ready (the gate is hec.loader_gate=8s), are
// rolled back by process 1, and the committed version serves again.
func TestFlashTheVM(t *testing.T) {
	const limit = 48 << 20
	vm, _ := boot(t, "flash", "hec.loader_gate=8s", fmt.Sprintf("hec.update_max_bundle=%d", limit))
	const ver = "-X github.com/hecsys/hec/dpu.Version="
	good := arm64Bundle(t, "./dpu/cmd/hecd", ver+"v1.1.0", "v1.1.0")
	exits := arm64Bundle(t, "./test/e2e/testdata/badagent", "-X main.mode=exit", "v1.2.0")
	hangs := arm64Bundle(t, "./test/e2e/testdata/badagent", "-X main.mode=hang", "v1.3.0")
	m := mgmtOf(vm)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Update == nil || st.Update.Slot != "base" {
		t.Fatalf("the image's agent: update status %+v, want the base slot", st.Update)
	}
	from := st.Version
	serving := func(what, version string) {
		t.Helper()
		if err := m.WaitReady(ctx); err != nil {
			t.Fatalf("after %s: %v", what, err)
		}
		if st, err := m.Status(ctx); err != nil || st.Version != version {
			t.Fatalf("after %s: %s serving (%v), want %s", what, st.Version, err, version)
		}
		if err := dial(t, vm).Ping(ctx); err != nil {
			t.Fatalf("ping after %s: %v", what, err)
		}
	}
	flash := func(bundle, version, result, serves string) {
		t.Helper()
		t0 := time.Now()
		reply, err := m.Update(ctx, bundle, false, nil)
		if err != nil {
			t.Fatalf("%s: %v", version, err)
		}
		out, st, err := m.WaitUpdate(ctx, reply.Version)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s (%s) after %v; %s serving", version, out.Result, out.Reason, time.Since(t0).Round(time.Millisecond), st.Version)
		if out.Result != result || st.Version != serves {
			t.Fatalf("%s: %s, %s serving; want %s, %s serving", version, out.Result, st.Version, result, serves)
		}
		serving(version, serves)
	}

	flash(good, "v1.1.0", "committed", "v1.1.0")

	key := filepath.Join(bundle(t), "dev.ed25519")
	// Spoilt copies of the committed bundle: each is refused before its
	// version is looked at.
	for _, b := range testutil.SpoiledBundles(t, good, key, testutil.NewKey(t), "v1.1.0", limit, "") {
		t0 := time.Now()
		_, err := m.Update(ctx, b.Dir, false, nil)
		if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), b.Refusal) {
			t.Errorf("%s: %v; want refused, %q", b.Name, err, b.Refusal)
		}
		t.Logf("%s: refused in %v", b.Name, time.Since(t0).Round(time.Millisecond))
		serving(b.Name, "v1.1.0")
	}
	noToken := &host.Mgmt{Addr: vm.Mgmt}
	if _, err := noToken.Update(ctx, good, false, nil); !errors.Is(err, host.ErrDenied) {
		t.Errorf("no token: %v, want denied", err)
	}
	var tarball bytes.Buffer
	if err := bundlepkg.Pack(&tarball, good); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+vm.Mgmt+"/v1/update", bytes.NewReader(tarball.Bytes()[:tarball.Len()/2]))
	req.Header.Set("Authorization", "Bearer "+vm.Token())
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("cut short: %v %v; want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	serving("the refusals", "v1.1.0")

	flash(exits, "v1.2.0", "rolled back", "v1.1.0")
	flash(hangs, "v1.3.0", "rolled back", "v1.1.0")
	if st, err := m.Status(ctx); err != nil || st.Update.Committed != "a" || !strings.Contains(st.Update.Last.Reason, "not ready within 8s") {
		t.Fatalf("after the rollbacks: %+v, %v (the image ran %s)", st.Update, err, from)
	}
}

// TestPowerCutDuringFlash times one update, then cuts the power (SIGKILL
// of QEMU) right after the next one commits and at 1 random moment (19 in
// make test-long) of the ones after — the upload, the verification, the install, the
// agent's exit, the new slot's try, its commit — while a client writes to
// the kv store. Every boot after a cut brings up a valid agent, the old
// version or the new one, never neither, with every acknowledged write.
// HEC_FLASH_CUTS=N makes fewer cuts, for a quick look.
func TestPowerCutDuringFlash(t *testing.T) {
	cuts := testutil.Sized(2, 20)
	if n, err := strconv.Atoi(os.Getenv("HEC_FLASH_CUTS")); err == nil {
		cuts = n
	}
	vm, o := boot(t, "flashcut")
	// One arm64 build, signed again for each version.
	bin := filepath.Join(arm64Bundle(t, "./dpu/cmd/hecd", "", "v1.0.0"), "hecd")
	key := filepath.Join(bundle(t), "dev.ed25519")
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(cuts), 7))
	acked := map[string]string{}
	versions := map[string]int{}
	var whole time.Duration // an update, upload to commit
	for cut := range cuts + 1 {
		if cut > 0 {
			var err error
			if vm, err = qemu.Up(ctx, o); err != nil {
				t.Fatalf("boot after cut %d: never neither, yet no agent: %v", cut-1, err)
			}
		}
		m := mgmtOf(vm)
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The bundle's version the loader runs (the binary in every bundle
		// is the same build: its own version says nothing).
		serving := "the image's"
		if u := st.Update; u == nil {
			t.Fatalf("after cut %d: no slots", cut-1)
		} else if u.Slot != "base" {
			serving = u.Versions[u.Slot]
		}
		versions[serving]++
		// Everything acknowledged before is there.
		c := redis.NewClient(&redis.Options{Addr: vm.RESP, Password: vm.Token()})
		p := c.Pipeline()
		gets := map[string]*redis.StringCmd{}
		for k := range acked {
			gets[k] = p.Get(ctx, k)
		}
		p.Exec(ctx)
		for k, g := range gets {
			if got, err := g.Result(); err != nil || got != acked[k] {
				t.Fatalf("after cut %d: %s = %q, %v; acknowledged %q", cut-1, k, got, err, acked[k])
			}
		}
		// A version newer than any before: the floor only rises.
		v := fmt.Sprintf("v1.%d.0", cut+1)
		out := filepath.Join(t.TempDir(), v)
		if _, err := images.BuildAgent(images.AgentOptions{Agent: bin, Out: out, KeyPath: key, Version: v}); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		t0 := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		wg.Add(2)
		go func() { // the writer: acknowledged SETs only count
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, val := fmt.Sprintf("cut%d:%d", cut, i), fmt.Sprintf("%d-%d", cut, i)
				if err := c.Set(ctx, k, val, 0).Err(); err != nil {
					time.Sleep(20 * time.Millisecond) // restarting, or the power went
					continue
				}
				mu.Lock()
				acked[k] = val
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // a steady client, not a flood
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := m.Update(ctx, out, false, nil); err != nil {
				t.Logf("cut %d: update to %s: %v (after %v)", cut, v, err, time.Since(t0).Round(time.Millisecond))
			} else if o, _, err := m.WaitUpdate(ctxUntil(stop), v); err == nil {
				t.Logf("cut %d: %s %s after %v", cut, v, o.Result, time.Since(t0).Round(time.Millisecond))
			}
		}()
		// The first update runs to its end and times the whole; the
		// second is cut as soon as it has committed, so that a version
		// swapped in by an update is found serving after a cut (the
		// check below) whatever the others hit; the others are cut
		// anywhere in theirs, or a little after. (With two cuts, both
		// random, the second landed before its update took in one CI
		// run: its moment is a fixed share of the update's time, the
		// generator being seeded by the count, and that share fell on
		// either side of the swap from run to run.)
		var at time.Duration
		switch cut {
		case 0:
			m.WaitUpdate(ctx, v)
			whole = time.Since(t0)
			at = whole
		case 1:
			m.WaitUpdate(ctx, v)
			at = time.Since(t0)
		default:
			at = time.Duration(rng.Int64N(int64(whole) * 5 / 4))
			time.Sleep(at)
		}
		close(stop)
		vm.PowerCut()
		wg.Wait()
		c.Close()
		t.Logf("cut %d at %v into the update to %s (%s was serving)", cut, at.Round(time.Millisecond), v, serving)
	}
	if vm, err := qemu.Up(ctx, o); err != nil {
		t.Fatalf("boot after the last cut: %v", err)
	} else {
		vm.PowerCut()
	}
	t.Logf("versions found serving after the cuts: %v; %d acknowledged writes all there", versions, len(acked))
	if len(versions) < 3 {
		t.Errorf("the cuts landed before any update took: versions %v", versions)
	}
}

// ctxUntil is a context that ends when stop closes.
func ctxUntil(stop <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	return ctx
}
