package vm

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/test/testutil"
)

// TestAgentDiesPID1Survives: the agent, killed by a Go fatal error (the
// test hook), is restarted by process 1 and serves again, with a new
// generation; the guest kernel does not panic. Then poweroff still works.
func TestAgentDiesPID1Survives(t *testing.T) {
	vm, _ := boot(t, "crash", "hec.test_hooks=true")
	c := dial(t, vm)
	ctx := context.Background()
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	gen := generation(t, vm)
	m := mgmtOf(vm)
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := st.PID
	if pid == 1 {
		t.Fatal("the agent runs as process 1: it should be process 1's child")
	}
	// Unauthenticated, the hook is refused; with the token it kills.
	if resp, err := http.Post("http://"+vm.Mgmt+"/v1/debug/fatal", "text/plain", nil); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /v1/debug/fatal without the token: %v %v, want 401", resp, err)
	}
	if resp, err := m.Do(ctx, http.MethodPost, "/v1/debug/fatal", nil); err == nil {
		resp.Body.Close()
	}
	// Process 1 restarts it: a new process, a new generation, served.
	testutil.WaitFor(t, 60*time.Second, "the agent back", func() bool {
		st, err := m.Status(ctx)
		return err == nil && st.PID != pid && st.Generation > gen && st.Ready
	})
	// The client library re-attaches (the generation moved).
	testutil.WaitFor(t, 30*time.Second, "the client serving again", func() bool { return c.Ping(ctx) == nil })
	console, _ := os.ReadFile(vm.Console)
	if _, panicked := vm.Panic(); panicked || !vm.Running() {
		t.Fatalf("the guest did not survive the agent's death:\n%s", console)
	}
	if !strings.Contains(string(console), "fatal error") || !strings.Contains(string(console), "agent exited; restarting") {
		t.Errorf("the console does not show the fatal error and the restart:\n%s", console)
	}
	if err := vm.Down(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, panicked := vm.Panic(); panicked {
		t.Fatal("the guest panicked powering off")
	}
}
