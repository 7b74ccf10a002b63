package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/qemu"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/test/testutil"
)

// TestTwoVMsFromAnyDirectory: two VMs of other names run at once, each
// reachable by what its hecctl qemu up printed (free ports of its own);
// hecctl qemu status works from any directory; --agent alone names a VM.
func TestTwoVMsFromAnyDirectory(t *testing.T) {
	b := bundle(t)
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // the VMs' state, for hecctl and this test alike
	hecctl := func(dir string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(testutil.Hecctl(t), args...)
		cmd.Dir = dir
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return out.String(), fmt.Errorf("%w: %s", err, bytes.TrimSpace(errb.Bytes()))
		}
		return out.String(), nil
	}
	var vms []*qemu.VM
	for _, name := range []string{"two-a", "two-b"} {
		t.Cleanup(func() {
			if vm, err := qemu.Load(qemu.StateDirFor(name)); err == nil {
				vm.PowerCut()
				os.Remove(vm.Shm)
			}
		})
		// Two emulated VMs beside the other test packages can take
		// minutes on a CI machine of two cores: the test is not about
		// how fast they boot.
		out, err := hecctl(t.TempDir(), "qemu", "up", "--name", name, "--bundle", b, "--ready-timeout", "4m")
		if err != nil {
			t.Fatalf("qemu up %s: %v\n%s", name, err, out)
		}
		t.Logf("%s", out)
		// The boot ROM's and process 1's parameters are not the agent's
		// flags: it does not warn about them.
		if console, err := os.ReadFile(filepath.Join(qemu.StateDirFor(name), "console.log")); err != nil || bytes.Contains(console, []byte("parameter ignored")) {
			t.Errorf("console of %s: %v\n%s", name, err, console)
		}
		// From another directory: its record, with the addresses printed.
		st, err := hecctl(t.TempDir(), "qemu", "status", "--name", name, "-o", "json")
		if err != nil {
			t.Fatalf("qemu status %s: %v", name, err)
		}
		var doc struct {
			VM      qemu.VM `json:"vm"`
			Running bool    `json:"running"`
		}
		if err := json.Unmarshal([]byte(st), &doc); err != nil || !doc.Running {
			t.Fatalf("qemu status %s -o json: %v %s", name, err, st)
		}
		for _, addr := range []string{doc.VM.Agent, doc.VM.Mgmt, doc.VM.RESP, doc.VM.UDP} {
			if !strings.Contains(out, addr) {
				t.Errorf("qemu up did not print %s", addr)
			}
		}
		vms = append(vms, &doc.VM)
	}
	if vms[0].Mgmt == vms[1].Mgmt || vms[0].Agent == vms[1].Agent {
		t.Fatalf("two VMs share addresses: %+v %+v", vms[0], vms[1])
	}
	for _, vm := range vms {
		// --agent alone: the management address follows from the VM's record.
		out, err := hecctl(t.TempDir(), "status", "--agent", vm.Agent, "-o", "json")
		var st api.Status
		if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Region == "" {
			t.Fatalf("status --agent %s: %v %s", vm.Agent, err, out)
		}
		if _, err := hecctl(t.TempDir(), "ping", "--agent", vm.Agent, "--n", "20"); err != nil {
			t.Fatalf("ping --agent %s: %v", vm.Agent, err)
		}
		// Over the network the agent asks for the token, which hecctl
		// takes from the VM's record; others are refused.
		if _, err := hecctl(t.TempDir(), "ping", "--agent", "tcp://"+vm.TCP, "--n", "20"); err != nil {
			t.Fatalf("ping --agent tcp://%s: %v", vm.TCP, err)
		}
		if resp, err := http.Post("http://"+vm.Mgmt+"/v1/poweroff", "text/plain", nil); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("POST /v1/poweroff without the token: %v %v, want 401", resp, err)
		}
		rc := redis.NewClient(&redis.Options{Addr: vm.RESP, MaxRetries: -1})
		if err := rc.Set(context.Background(), "a", "b", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
			t.Fatalf("RESP SET without AUTH: %v, want NOAUTH", err)
		}
		rc.Close()
	}
	for _, vm := range vms {
		if _, err := hecctl(t.TempDir(), "qemu", "down", "--name", vm.Name); err != nil {
			t.Fatalf("qemu down %s: %v", vm.Name, err)
		}
		if vm.Running() {
			t.Errorf("VM %s still runs after qemu down returned", vm.Name)
		}
		// Down powered it off through the API (with the token), not by
		// killing QEMU.
		if console, _ := os.ReadFile(vm.Console); !strings.Contains(string(console), "powering off") {
			t.Errorf("VM %s: qemu down did not power it off cleanly:\n%s", vm.Name, console)
		}
	}
}
