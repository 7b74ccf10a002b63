package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/dpu/pid1"
	"github.com/hecsys/hec/shared/bundle"
)

// TestCmdlineLeavesProcess1sParameters: the agent under process 1 takes
// hec.NAME=VALUE parameters as its flags, says which it could not take,
// and leaves those process 1 (and the boot ROM before it) read alone:
// a VM booted by the boot ROM carries hec.boot_slot, which once made
// every boot warn "parameter ignored".
func TestCmdlineLeavesProcess1sParameters(t *testing.T) {
	var hf hecdFlags
	cfg, fs, err := dpu.ParseArgs("hecd", nil, hf.register)
	if err != nil {
		t.Fatal(err)
	}
	// What the boot ROM (qemu.bootROM) and the image put there for process
	// 1, and what pid1 says it reads.
	cmdline := []string{bundle.BootSlotParam + "=base", bundle.BootGaveUpParam + "=b:boots", "hec.ip=10.0.2.15/24", "hec.state=/dev/vda"}
	for _, p := range pid1.Params {
		cmdline = append(cmdline, p+"=x")
	}
	cmdline = append(cmdline, "console=ttyAMA0", "quiet", "hec.lease_timeout=7s", "hec.loglevel=debug",
		"hec.no_such=1", "hec.queue_pairs=many")
	ignored := setFromCmdline(fs, strings.Join(cmdline, " "))
	var got []string
	for _, p := range ignored {
		got = append(got, p.param)
	}
	if want := []string{"hec.no_such=1", "hec.queue_pairs=many"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ignored %q, want %q", got, want)
	}
	if cfg.Agent.LeaseTimeout.Duration != 7*time.Second {
		t.Errorf("hec.lease_timeout=7s gave lease timeout %v", cfg.Agent.LeaseTimeout)
	}
	if hf.logLevel != "debug" {
		t.Errorf("hec.loglevel=debug gave log level %q", hf.logLevel)
	}
}
