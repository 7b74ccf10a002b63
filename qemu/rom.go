package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hecsys/hec/shared/bundle"
)

// The boot ROM: before each boot the harness reads the A/B slots' record
// off the state disk and boots the kernel and initramfs of the slot it
// names (bundle.BootSlot), as a DPU's boot ROM boots the slot its
// environment names. A machine slot on trial is booted at most its tries
// (hec.loader_tries, default bundle.DefaultTries) times; after that, or
// when its bundle does not verify with the trusted key on the disk, the
// ROM boots the committed machine instead and tells process 1 which slot
// it gave up (hec.boot_gaveup), which rolls it back. The boots are counted
// here, outside the guest: a kernel that panics never reaches process 1.

// bootChoice is what the ROM boots.
type bootChoice struct {
	slot           string // "base" (the image's own), "a" or "b"
	kernel, initrd string
	params         string // for the kernel command line
}

// romState is the ROM's memory of the slot on trial it booted (its
// NVRAM): StateDir/boot-rom.json.
type romState struct {
	Slot    string `json:"slot"`
	Version string `json:"version"`
	Boots   int    `json:"boots"`
}

// bootROM chooses what to boot from disk, for o.
func (o Options) bootROM(ctx context.Context, disk string) (bootChoice, error) {
	base := bootChoice{slot: "base", kernel: filepath.Join(o.Bundle, "Image"), initrd: filepath.Join(o.Bundle, "initramfs.cpio"),
		params: bundle.BootSlotParam + "=base"}
	// Replay the journal a power cut may have left, so that what is read
	// here is what the guest will see.
	e2fsck, err := exec.LookPath("e2fsck")
	if err != nil {
		return base, fmt.Errorf("e2fsck not found (apt-get install e2fsprogs): %w", err)
	}
	if out, err := exec.CommandContext(ctx, e2fsck, "-p", disk).CombinedOutput(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() > 2 {
			return base, fmt.Errorf("check the state disk: %v: %s", err, out)
		}
	}
	var rec bundle.BootRecord
	if b := debugfsCat(ctx, disk, "/slots/record.json"); len(b) > 0 {
		if err := json.Unmarshal(b, &rec); err != nil {
			o.progress("boot ROM: the slots' record does not parse (%v): booting the image", err)
			return base, nil
		}
	}
	want := bundle.BootSlot(rec.Active, rec.Machine, rec.Targets)
	if want == "" {
		return base, nil
	}
	// The committed machine is what the ROM falls back to.
	fallback := bundle.BootSlot(rec.Committed, rec.Machine, rec.Targets)
	var gaveUp []string
	romFile := filepath.Join(o.StateDir, "boot-rom.json")
	if rec.Active == want && rec.Active != rec.Committed {
		var st romState
		if b, err := os.ReadFile(romFile); err == nil {
			json.Unmarshal(b, &st)
		}
		if st.Slot != want || st.Version != rec.Versions[want] {
			st = romState{Slot: want, Version: rec.Versions[want]}
		}
		st.Boots++
		b, _ := json.Marshal(st)
		if err := os.WriteFile(romFile, b, 0o644); err != nil {
			return base, fmt.Errorf("boot ROM: %w", err)
		}
		if tries := o.loaderTries(); st.Boots > tries {
			o.progress("boot ROM: slot %s (%s) did not come up in %d boots: booting the committed machine", want, st.Version, tries)
			gaveUp = append(gaveUp, want+":"+bundle.GaveUpBoots)
			want = fallback
		}
	} else {
		os.Remove(romFile)
	}
	for _, slot := range []string{want, fallback} {
		if slot == "" || slices.ContainsFunc(gaveUp, func(g string) bool { return strings.HasPrefix(g, slot+":") }) {
			continue // the image's own, or given up already
		}
		c, err := o.loadSlot(ctx, disk, slot)
		if err == nil {
			if len(gaveUp) > 0 {
				c.params += " " + bundle.BootGaveUpParam + "=" + strings.Join(gaveUp, ",")
			}
			return c, nil
		}
		o.progress("boot ROM: slot %s: %v: not booting it", slot, err)
		gaveUp = append(gaveUp, slot+":"+bundle.GaveUpVerify)
	}
	if len(gaveUp) > 0 {
		base.params += " " + bundle.BootGaveUpParam + "=" + strings.Join(gaveUp, ",")
	}
	return base, nil
}

// loadSlot copies slot's machine bundle off the disk and verifies it
// with the key the disk trusts.
func (o Options) loadSlot(ctx context.Context, disk, slot string) (bootChoice, error) {
	dir := filepath.Join(o.StateDir, "boot", slot)
	if err := os.RemoveAll(filepath.Join(o.StateDir, "boot")); err != nil { // the other slot's copy too
		return bootChoice{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return bootChoice{}, err
	}
	for _, name := range append([]string{bundle.ManifestFile, bundle.SignatureFile}, bundle.MachineParts...) {
		out, err := exec.CommandContext(ctx, "debugfs", "-R", "dump /slots/"+slot+"/"+name+" "+filepath.Join(dir, name), disk).CombinedOutput()
		if _, serr := os.Stat(filepath.Join(dir, name)); err != nil || serr != nil {
			return bootChoice{}, fmt.Errorf("%s is not on the state disk: %v %s", name, err, strings.TrimSpace(string(out)))
		}
	}
	pub, err := bundle.ParsePublicKey(debugfsCat(ctx, disk, "/slots/trusted.pub"))
	if err != nil {
		return bootChoice{}, fmt.Errorf("the trusted key: %w", err)
	}
	m, err := bundle.Verify(dir, pub)
	if err != nil {
		return bootChoice{}, err
	}
	if !bundle.IsMachine(m.Target) {
		return bootChoice{}, fmt.Errorf("a bundle for target %q, not a machine", m.Target)
	}
	o.progress("boot ROM: booting slot %s (%s)", slot, m.Version)
	return bootChoice{slot: slot, kernel: filepath.Join(dir, "Image"), initrd: filepath.Join(dir, "initramfs.cpio"),
		params: bundle.BootSlotParam + "=" + slot}, nil
}

// loaderTries is hec.loader_tries of the kernel arguments, else the
// default: the ROM counts boots against the loader's count of starts.
func (o Options) loaderTries() int {
	for _, f := range strings.Fields(o.KernelArgs) {
		if v, ok := strings.CutPrefix(f, bundle.LoaderTriesParam+"="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	return bundle.DefaultTries
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// debugfsCat is the file at path on the ext4 image disk (nil when absent).
func debugfsCat(ctx context.Context, disk, path string) []byte {
	out, err := exec.CommandContext(ctx, "debugfs", "-R", "cat "+path, disk).Output()
	if err != nil {
		return nil
	}
	return out
}
