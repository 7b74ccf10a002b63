package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/test/testutil"
)

// TestStoreFailureRestartsTheAgent: under hecd supervise, a panic in the
// store's committer (the test hook arms one for the next write) fails
// that write — its client hears an error, not OK — and stops the agent,
// which exits with the error; the supervisor starts it again, and every
// write acknowledged before is there.
func TestStoreFailureRestartsTheAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts an agent under its supervisor: not in -short")
	}
	mgmtPort, respPort := portPair(t)
	mgmt, resp := fmt.Sprintf("127.0.0.1:%d", mgmtPort), fmt.Sprintf("127.0.0.1:%d", respPort)
	work := t.TempDir()
	tokenFile := filepath.Join(work, "token")
	region := filepath.Join("/dev/shm", fmt.Sprintf("hec-e2e-storefail-%d", os.Getpid()))
	t.Cleanup(func() { os.Remove(region) })
	startLoader(t, testutil.Hecd(t), nil, []string{"--shm", region, "--region-size", "8388608", "--queue-pairs", "2",
		"--state-dir", filepath.Join(work, "state"), "--tcp", "off", "--udp", "off", "--mgmt", mgmt, "--resp", resp,
		"--token-file", tokenFile, "--test-hooks", "--log-level", "warn"})
	testutil.WaitFor(t, 20*time.Second, "the token file", func() bool { _, err := os.Stat(tokenFile); return err == nil })
	tok, _ := os.ReadFile(tokenFile)
	m := host.NewMgmt(mgmt)
	m.Token = strings.TrimSpace(string(tok))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: resp, Password: m.Token, MaxRetries: -1})
	defer rc.Close()
	for i := range 20 {
		if err := rc.Set(ctx, fmt.Sprint("acked", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := m.Do(ctx, http.MethodPost, "/v1/debug/store-panic", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if err := rc.Set(ctx, "boom", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Fatalf("the write whose commit panicked answered %v, want an internal error", err)
	}
	testutil.WaitFor(t, 60*time.Second, "the agent restarted by its supervisor", func() bool {
		st, err := m.Status(ctx)
		return err == nil && st.PID != before.PID && st.Ready
	})
	for i := range 20 {
		if v, err := rc.Get(ctx, fmt.Sprint("acked", i)).Result(); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("acked%d after the restart: %q, %v", i, v, err)
		}
	}
	if err := rc.Set(ctx, "after", "1", 0).Err(); err != nil {
		t.Fatalf("a write after the restart: %v", err)
	}
}
