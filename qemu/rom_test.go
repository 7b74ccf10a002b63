package qemu

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hecsys/hec/shared/bundle"
)

// TestBootROM: the harness's boot ROM reads the slots' record off an ext4
// state disk and boots the machine slot it names, verified with the key
// on the disk; a slot on trial is booted its tries, then given up for the
// committed machine; a committed slot that no longer verifies is given up
// for the image's own kernel.
func TestBootROM(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (make test installs e2fsprogs as root)", tool)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	if err := ensureDisk(ctx, disk, 32<<20); err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	put := func(path string, data []byte) {
		t.Helper()
		src := filepath.Join(t.TempDir(), "f")
		os.WriteFile(src, data, 0o644)
		exec.Command("debugfs", "-w", "-R", "rm "+path, disk).Run()
		if out, err := exec.Command("debugfs", "-w", "-R", "write "+src+" "+path, disk).CombinedOutput(); err != nil || strings.Contains(string(out), "rror") {
			t.Fatalf("write %s: %v %s", path, err, out)
		}
	}
	for _, d := range []string{"/slots", "/slots/a", "/slots/b"} {
		exec.Command("debugfs", "-w", "-R", "mkdir "+d, disk).Run()
	}
	put("/slots/trusted.pub", []byte(hex.EncodeToString(pub)+"\n"))
	// A machine bundle in slot a: a stand-in kernel and initramfs, signed.
	src := t.TempDir()
	m := bundle.Manifest{Version: "v2.0.0", Target: bundle.TargetQEMU, Arch: "arm64", Parts: map[string]bundle.Part{}}
	for _, p := range bundle.MachineParts {
		os.WriteFile(filepath.Join(src, p), []byte("stand-in "+p), 0o644)
		part, _ := bundle.HashFile(filepath.Join(src, p))
		m.Parts[p] = part
	}
	if err := bundle.Sign(src, m, priv); err != nil {
		t.Fatal(err)
	}
	for _, f := range append([]string{bundle.ManifestFile, bundle.SignatureFile}, bundle.MachineParts...) {
		b, _ := os.ReadFile(filepath.Join(src, f))
		put("/slots/a/"+f, b)
	}
	record := func(r bundle.BootRecord) {
		b, _ := json.Marshal(r)
		put("/slots/record.json", b)
	}
	o := Options{Bundle: "/image", StateDir: dir}
	boot := func(wantSlot, wantParams string) {
		t.Helper()
		c, err := o.bootROM(ctx, disk)
		if err != nil {
			t.Fatal(err)
		}
		if c.slot != wantSlot || c.params != wantParams {
			t.Fatalf("booted %s (%s), want %s (%s)", c.slot, c.params, wantSlot, wantParams)
		}
		if wantSlot == "base" && c.kernel != "/image/Image" {
			t.Fatalf("base boots %s", c.kernel)
		}
		if wantSlot != "base" {
			if b, _ := os.ReadFile(c.kernel); string(b) != "stand-in Image" {
				t.Fatalf("slot %s boots a kernel reading %q", wantSlot, b)
			}
		}
	}
	machines := map[string]string{"a": bundle.TargetQEMU, "b": bundle.TargetAgent}

	boot("base", "hec.boot_slot=base") // no record yet

	// On trial: its two tries, then the committed machine (the image's).
	record(bundle.BootRecord{Active: "a", Committed: "", Targets: machines, Versions: map[string]string{"a": "v2.0.0"}})
	boot("a", "hec.boot_slot=a")
	boot("a", "hec.boot_slot=a")
	boot("base", "hec.boot_slot=base hec.boot_gaveup=a:boots")

	// Committed: booted every time, nothing counted.
	record(bundle.BootRecord{Active: "a", Committed: "a", Machine: "a", Targets: machines})
	for range 3 {
		boot("a", "hec.boot_slot=a")
	}
	// An agent slot on top runs on the committed machine.
	record(bundle.BootRecord{Active: "b", Committed: "b", Machine: "a", Targets: machines})
	boot("a", "hec.boot_slot=a")

	// The committed machine's kernel changed on the disk: not booted.
	put("/slots/a/Image", []byte("stand-in Imagf"))
	boot("base", "hec.boot_slot=base hec.boot_gaveup=a:verify")

	// A record that does not parse boots the image.
	put("/slots/record.json", []byte("{"))
	boot("base", "hec.boot_slot=base")
}
