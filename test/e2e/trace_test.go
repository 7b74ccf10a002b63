package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/test/testutil"
)

// TestTraceRecordsAnOpEndToEnd: two host processes started with
// HEC_TRACE=1 ping the agent, one over shared memory, one over TCP, while
// hecctl trace record records the agent and both: the file has each
// process's spans, an op of each transport under one id on the host and
// on the agent, and hecctl trace summary says where the time went, with
// the transport's share worked out from the two.
func TestTraceRecordsAnOpEndToEnd(t *testing.T) {
	region, mgmt, tcp, _ := startHecd(t)
	dir := t.TempDir()
	env := []string{"HEC_TRACE=1", "HEC_TRACE_DIR=" + dir}
	for _, target := range []string{"shm://" + region, "tcp://" + tcp} {
		cmd := exec.Command(testutil.Hecctl(t), "ping", "--agent", target, "--n", "100000000")
		cmd.Env = append(os.Environ(), env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	testutil.WaitFor(t, 10*time.Second, "both traced processes to listen in "+dir, func() bool {
		socks, _ := filepath.Glob(filepath.Join(dir, "host-*.sock"))
		return len(socks) == 2
	})

	file := filepath.Join(t.TempDir(), "trace.json")
	r := hecctl(t, nil, "trace", "record", "--mgmt", mgmt, "--duration", "1s", "--host-dir", dir, "--out", file, "-o", "json")
	if r.code != 0 {
		t.Fatalf("trace record: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var rec struct {
		Sources []struct {
			Name  string
			Spans int
			Error string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("trace record -o json: %v: %s", err, r.stdout)
	}
	if len(rec.Sources) != 3 {
		t.Fatalf("sources %+v: want the agent and two host processes", rec.Sources)
	}
	for _, s := range rec.Sources {
		if s.Spans == 0 || s.Error != "" {
			t.Errorf("source %+v: want spans and no error", s)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	spans, err := trace.ReadChrome(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	// One id on both sides, for an op of each transport.
	type sides struct{ host, agent bool }
	ids := map[string]*sides{}
	for _, s := range spans {
		if ids[s.ID] == nil {
			ids[s.ID] = &sides{}
		}
		switch {
		case s.Stage == trace.StageOp && strings.HasPrefix(s.Proc, "host pid"):
			ids[s.ID].host = true
		case s.Stage == trace.StageServe && strings.HasPrefix(s.Proc, "hecd"):
			ids[s.ID].agent = true
		}
	}
	both := map[string]int{}
	for id, s := range ids {
		if s.host && s.agent {
			both[strings.Fields(id)[0]]++ // "pid" (shared memory) or "tcp"
		}
	}
	if both["pid"] == 0 || both["tcp"] == 0 {
		t.Fatalf("ops recorded by host and agent under one id: %v (want some of each transport); %d spans", both, len(spans))
	}
	t.Logf("ops under one id on host and agent: %v of %d spans", both, len(spans))

	sum := hecctl(t, nil, "trace", "summary", file, "--plot", filepath.Join(dir, "slowest.png"))
	if sum.code != 0 {
		t.Fatalf("trace summary: exit %d\n%s%s", sum.code, sum.stdout, sum.stderr)
	}
	for _, want := range []string{"ping", trace.StageOp, trace.StageTransport, trace.StageServe} {
		if !strings.Contains(sum.stdout, want) {
			t.Errorf("trace summary lacks %q:\n%s", want, sum.stdout)
		}
	}
	t.Logf("trace summary:\n%s", sum.stdout)
	if png, err := os.ReadFile(filepath.Join(dir, "slowest.png")); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("--plot wrote no PNG: %v", err)
	}

	// Bad input: a usage error, one line.
	for _, args := range [][]string{
		{"trace", "record", "--mgmt", mgmt, "--duration", "0s"},
		{"trace", "summary", filepath.Join(dir, "host-nosuch.sock")},
		{"trace", "summary", "--plot", "x.png"},
	} {
		if r := hecctl(t, nil, args...); r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("hecctl %v: exit %d, stderr %q: want a failure in one line", args, r.code, r.stderr)
		}
	}
	// The agent's own checks of what it is asked.
	m := host.NewMgmt(mgmt)
	for _, q := range []string{"abc", "0s", "-1s", "11m", "1e9h"} {
		resp, err := m.Do(context.Background(), http.MethodGet, "/v1/trace?for="+url.QueryEscape(q), nil)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "400") {
			t.Errorf("GET /v1/trace?for=%s: %v, want 400 Bad Request", q, err)
		}
	}
	off, rtt, err := m.ClockOffset(context.Background(), 3)
	if err != nil || rtt <= 0 || off.Abs() > rtt+time.Millisecond {
		t.Errorf("an agent on this machine: clock offset %v ± %v, %v: want within the round trip", off, rtt, err)
	}
	notATrace := filepath.Join(dir, "not.json")
	os.WriteFile(notATrace, []byte(`{"a": 1}`), 0o644)
	if r := hecctl(t, nil, "trace", "summary", notATrace); r.code != 2 || !strings.Contains(r.stderr, "not a trace") {
		t.Errorf("summary of another file: exit %d, %q", r.code, r.stderr)
	}
}
