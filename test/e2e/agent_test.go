package e2e

import (
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/test/testutil"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TestMain lets the test binary serve as a client process.
func TestMain(m *testing.M) {
	switch mode := os.Getenv("HEC_E2E_HELPER"); mode {
	case "":
	case "agent":
		os.Exit(runAgentHelper())
	default:
		os.Exit(runHelper(mode))
	}
	os.Exit(testutil.Main(m))
}

// testAgent is an agent running in this process on a private region and
// ephemeral loopback ports.
type testAgent struct {
	*dpu.Agent
	cfg    dpu.Config
	cancel context.CancelFunc
	done   chan error
}

// agentConfig is a small agent on loopback with its region in /dev/shm.
// Its lease timeout is the default (3 s): with 1 s, a CI run that held
// the whole test process off its cores for a second fenced a client of
// TestFloodBesideWellBehaved ("lease fenced"); no test here waits for a
// lease to run out (dead holders are found by their pid).
func agentConfig(t *testing.T) dpu.Config {
	shm := "/dev/shm"
	if st, err := os.Stat(shm); err != nil || !st.IsDir() {
		shm = t.TempDir()
	}
	path := filepath.Join(shm, fmt.Sprintf("hec-e2e-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { os.Remove(path) })
	return dpu.Config{
		Agent: dpu.AgentConfig{Shm: path, RegionSize: 16 << 20, QueuePairs: 8, RingEntries: 64,
			TCP: "127.0.0.1:0", Mgmt: "127.0.0.1:0", StateDir: t.TempDir()},
		RESP: dpu.RESPConfig{Addr: dpu.Off}, UDP: dpu.UDPConfig{Addr: dpu.Off},
	}
}

func startAgent(t *testing.T, cfg dpu.Config) *testAgent {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := dpu.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testAgent{Agent: a, cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { ta.done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-ta.done:
		t.Fatalf("agent did not start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("agent not ready after 10s")
	}
	t.Cleanup(ta.stop)
	return ta
}

// startRESPAgent starts an agent of cfg with its RESP front end on a free
// loopback port, and a go-redis client of it (closed at cleanup).
func startRESPAgent(t *testing.T, cfg dpu.Config) (*testAgent, *redis.Client) {
	t.Helper()
	cfg.RESP.Addr = "127.0.0.1:0"
	a := startAgent(t, cfg)
	rc := redis.NewClient(&redis.Options{Addr: a.Addr("resp"), PoolSize: 16})
	t.Cleanup(func() { rc.Close() })
	return a, rc
}

// status is the agent's GET /v1/status.
func (ta *testAgent) status(t *testing.T) api.Status {
	t.Helper()
	st, err := host.NewMgmt(ta.Addr("mgmt")).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (ta *testAgent) stop() {
	ta.cancel()
	<-ta.done
	ta.done <- nil // a second stop returns at once
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func dial(t *testing.T, target string) *host.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := host.Dial(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// helperCmd runs this test binary as a client process.
func helperCmd(t *testing.T, mode string, env ...string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), "HEC_E2E_HELPER="+mode), env...)
	cmd.Stderr = os.Stderr
	return cmd
}
