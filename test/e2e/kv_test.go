package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/wire"
)

// TestKVEverywhere: one agent, its store reached over shared memory, TCP,
// RESP — a write by one path is read by the others.
func TestKVEverywhere(t *testing.T) {
	cfg := agentConfig(t)
	a, rc := startRESPAgent(t, cfg)
	ctx := context.Background()
	for _, target := range []string{"shm://" + cfg.Agent.Shm, "tcp://" + a.Addr("tcp")} {
		t.Run(target[:3], func(t *testing.T) {
			kv := dial(t, target).KV()
			key := []byte("k:" + target[:3])
			if _, _, err := kv.Get(ctx, key, nil); !host.IsNotFound(err) {
				t.Fatalf("get missing: %v", err)
			}
			if err := kv.Put(ctx, key, []byte("v1"), host.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := kv.Put(ctx, key, []byte("x"), host.PutOptions{IfAbsent: true}); !errors.Is(err, wire.StatusExists) {
				t.Fatalf("put NX on present: %v", err)
			}
			v, ver, err := kv.Get(ctx, key, nil)
			if err != nil || string(v) != "v1" || ver == 0 {
				t.Fatalf("get: %q %d %v", v, ver, err)
			}
			if got, _ := rc.Get(ctx, string(key)).Result(); got != "v1" {
				t.Fatalf("RESP sees %q", got)
			}
			// A value larger than the buffer given: the client retries.
			big := bytes.Repeat([]byte("b"), 10000)
			rc.Set(ctx, string(key), big, 0)
			if v, _, err := kv.Get(ctx, key, make([]byte, 16)); err != nil || !bytes.Equal(v, big) {
				t.Fatalf("grown value: %d bytes, %v", len(v), err)
			}
			// Zero copy: key and value buffers in the window.
			kb, _ := dial(t, target).Alloc(16)
			_ = kb
			var ops []host.BatchOp
			for i := 0; i < 40; i++ {
				ops = append(ops, host.BatchOp{Key: []byte(fmt.Sprintf("b:%s:%02d", target[:3], i)), Value: []byte{byte(i)}})
			}
			if err := kv.Batch(ctx, ops); err != nil {
				t.Fatal(err)
			}
			var all []host.Pair
			var cursor []byte
			for {
				page, next, err := kv.Scan(ctx, []byte("b:"+target[:3]+":"), cursor, 15)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, page...)
				if next == nil {
					break
				}
				cursor = next
			}
			if len(all) != 40 || all[39].Value[0] != 39 {
				t.Fatalf("scan found %d", len(all))
			}
			if ok, err := kv.Delete(ctx, key); !ok || err != nil {
				t.Fatalf("delete: %v %v", ok, err)
			}
			if err := kv.Put(ctx, []byte("ttl"), []byte("v"), host.PutOptions{TTL: 10 * time.Second}); err != nil {
				t.Fatal(err)
			}
			if ttl, _ := rc.TTL(ctx, "ttl").Result(); ttl <= 0 {
				t.Fatalf("TTL over RESP %v", ttl)
			}
		})
	}
}

// TestHandoffServesStringsOnly: a list, set, hash or sorted set written
// over RESP is never handed to a host as bytes: its GET is refused as a
// bad argument, SCAN passes over it, and a host's PUT replaces it (as
// Redis's SET does).
func TestHandoffServesStringsOnly(t *testing.T) {
	cfg := agentConfig(t)
	_, rc := startRESPAgent(t, cfg)
	ctx := context.Background()
	rc.RPush(ctx, "typed:list", "a", "b")
	rc.SAdd(ctx, "typed:set", "m")
	rc.HSet(ctx, "typed:hash", "f", "v")
	rc.ZAdd(ctx, "typed:zset", redis.Z{Score: 1, Member: "m"})
	rc.Set(ctx, "typed:string", "s", 0)
	kv := dial(t, "shm://"+cfg.Agent.Shm).KV()
	for _, k := range []string{"typed:list", "typed:set", "typed:hash", "typed:zset"} {
		if v, _, err := kv.Get(ctx, []byte(k), nil); !errors.Is(err, wire.StatusBadArg) {
			t.Errorf("handoff GET of %s: %q %v, want a bad-argument refusal", k, v, err)
		}
	}
	pairs, next, err := kv.Scan(ctx, []byte("typed:"), nil, 10)
	if err != nil || next != nil || len(pairs) != 1 || string(pairs[0].Key) != "typed:string" {
		t.Fatalf("handoff SCAN typed:: %q %q %v, want the string alone", pairs, next, err)
	}
	if err := kv.Put(ctx, []byte("typed:list"), []byte("bytes"), host.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, err := rc.Get(ctx, "typed:list").Result(); err != nil || v != "bytes" {
		t.Errorf("RESP GET after the host's PUT over a list: %q %v", v, err)
	}
}

// TestExecIsolatedFromTheHandoff: a RESP client runs MULTI; SET iso:a v;
// SET iso:b v; EXEC with v counting up, while a handoff client scans
// iso: over and over. Every scan sees a and b equal: no handoff op runs
// between an EXEC's commands (the store's gate), though each SET is a
// commit of its own.
func TestExecIsolatedFromTheHandoff(t *testing.T) {
	cfg := agentConfig(t)
	a, rc := startRESPAgent(t, cfg)
	ctx := context.Background()
	kv := dial(t, "tcp://"+a.Addr("tcp")).KV()
	// An empty scan over TCP (no records, no cursor: two empty parts).
	if pairs, next, err := kv.Scan(ctx, []byte("iso:"), nil, 10); err != nil || len(pairs) != 0 || next != nil {
		t.Fatalf("empty scan: %v %q %v", pairs, next, err)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			v := strconv.Itoa(i)
			if _, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "iso:a", v, 0)
				p.Set(ctx, "iso:b", v, 0)
				return nil
			}); err != nil {
				done <- err
				return
			}
		}
	}()
	scans, torn := 0, 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); scans++ {
		pairs, _, err := kv.Scan(ctx, []byte("iso:"), nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(pairs) == 2 && !bytes.Equal(pairs[0].Value, pairs[1].Value) {
			if torn < 3 {
				t.Logf("scan %d: a=%s b=%s", scans, pairs[0].Value, pairs[1].Value)
			}
			torn++
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d scans, %d saw an EXEC half done", scans, torn)
	if torn > 0 {
		t.Fatalf("%d of %d scans over the handoff ran between an EXEC's commands", torn, scans)
	}
}
