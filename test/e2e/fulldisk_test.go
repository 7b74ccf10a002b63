package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/testutil"
)

// TestFullDiskAsAClientSeesIt: an agent whose state directory is a 64 MiB
// tmpfs, filled by RESP SETs of 900 bytes beside a ballast file. Writes
// are answered MISCONF over RESP and StatusNoSpace over the handoff; GETs
// go on; /v1/status and /metrics say why; once the ballast is removed
// both write again, without a restart.
func TestFullDiskAsAClientSeesIt(t *testing.T) {
	mnt, ballast := testutil.SmallDisk(t, 64<<20, 16<<20)
	cfg := agentConfig(t)
	cfg.Agent.StateDir = filepath.Join(mnt, "state")
	a, rc := startRESPAgent(t, cfg)
	ctx := context.Background()
	value := strings.Repeat("x", 900)
	n := 0
	var full error
	for ; n < 200_000; n += 16 {
		p := rc.Pipeline()
		for i := range 16 {
			p.Set(ctx, fmt.Sprintf("k%06d", n+i), value, 0)
		}
		if _, full = p.Exec(ctx); full != nil {
			break
		}
	}
	if full == nil || !strings.HasPrefix(full.Error(), "MISCONF") || !strings.Contains(full.Error(), "disk full") {
		t.Fatalf("after %d SETs: %v, want MISCONF … disk full", n, full)
	}
	t.Logf("after %d SETs: %v", n, full)
	if got, err := rc.Get(ctx, "k000000").Result(); err != nil || got != value {
		t.Fatalf("GET on a full disk: %d bytes, %v", len(got), err)
	}
	kv := dial(t, "tcp://"+a.Addr("tcp")).KV()
	if err := kv.Put(ctx, []byte("h"), []byte("v"), host.PutOptions{}); !errors.Is(err, wire.StatusNoSpace) {
		t.Fatalf("handoff PUT on a full disk: %v, want StatusNoSpace", err)
	}
	if v, _, err := kv.Get(ctx, []byte("k000001"), nil); err != nil || len(v) != 900 {
		t.Fatalf("handoff GET on a full disk: %d bytes, %v", len(v), err)
	}
	note := ""
	for _, s := range a.status(t).Services {
		if s.Name == "kv" {
			note = s.Note
		}
	}
	if !strings.Contains(note, "disk full") {
		t.Fatalf("/v1/status kv note %q says nothing of the full disk", note)
	}
	m := host.NewMgmt(a.Addr("mgmt"))
	if v, ok, err := m.Metric(ctx, `hec_kv_writes_refused{reason="disk_full"}`); err != nil || !ok || v != 1 {
		t.Fatalf("hec_kv_writes_refused{disk_full} = %v %v %v", v, ok, err)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rc.Set(ctx, "again", "v", 0).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no SET succeeded within 5 s of freeing space: %v", rc.Set(ctx, "again", "v", 0).Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := kv.Put(ctx, []byte("h"), []byte("v"), host.PutOptions{}); err != nil {
		t.Fatalf("handoff PUT once space returned: %v", err)
	}
	if v, ok, err := m.Metric(ctx, `hec_kv_writes_refused{reason="disk_full"}`); err != nil || !ok || v != 0 {
		t.Fatalf("after space returned, hec_kv_writes_refused{disk_full} = %v %v %v", v, ok, err)
	}
}
