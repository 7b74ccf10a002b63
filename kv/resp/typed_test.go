package resp

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/kv"
)

// TestTypedValuesWithGoRedis drives lists, sets, hashes and sorted sets
// through go-redis's own typed methods, as an application would.
func TestTypedValuesWithGoRedis(t *testing.T) {
	addr, _ := startServerWith(t, "", kv.Sync)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()

	// A job queue: producers push, a worker pops from the other end.
	if n, err := c.LPush(ctx, "jobs", "j1", "j2", "j3").Result(); err != nil || n != 3 {
		t.Fatalf("LPUSH: %d %v", n, err)
	}
	if v, err := c.RPop(ctx, "jobs").Result(); err != nil || v != "j1" {
		t.Errorf("RPOP: %q %v", v, err)
	}
	if v, _ := c.LRange(ctx, "jobs", 0, -1).Result(); !slices.Equal(v, []string{"j3", "j2"}) {
		t.Errorf("LRANGE: %q", v)
	}
	if v, err := c.LMove(ctx, "jobs", "done", "RIGHT", "LEFT").Result(); err != nil || v != "j2" {
		t.Errorf("LMOVE: %q %v", v, err)
	}

	if n, _ := c.SAdd(ctx, "ranks", 0, 1, 2, 2).Result(); n != 3 {
		t.Errorf("SADD: %d", n)
	}
	if ok, _ := c.SIsMember(ctx, "ranks", 1).Result(); !ok {
		t.Error("SISMEMBER 1: false")
	}
	if v, _ := c.SInter(ctx, "ranks", "nope").Result(); len(v) != 0 {
		t.Errorf("SINTER with a missing set: %q", v)
	}

	if err := c.HSet(ctx, "job:1", "state", "running", "rank", "3").Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.HIncrBy(ctx, "job:1", "retries", 2).Result(); n != 2 {
		t.Errorf("HINCRBY: %d", n)
	}
	if m, _ := c.HGetAll(ctx, "job:1").Result(); m["state"] != "running" || m["rank"] != "3" || m["retries"] != "2" {
		t.Errorf("HGETALL: %v", m)
	}

	for i, m := range []string{"slow", "mid", "fast"} {
		c.ZAdd(ctx, "latency", redis.Z{Score: float64(30 - 10*i), Member: m})
	}
	if v, _ := c.ZRange(ctx, "latency", 0, -1).Result(); !slices.Equal(v, []string{"fast", "mid", "slow"}) {
		t.Errorf("ZRANGE: %q", v)
	}
	if v, _ := c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: "latency", Start: "(10", Stop: "+inf", ByScore: true}).Result(); !slices.Equal(v, []string{"mid", "slow"}) {
		t.Errorf("ZRANGE (10 +inf BYSCORE: %q", v)
	}
	if v, _ := c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: "latency", Start: "+inf", Stop: "(10", ByScore: true, Rev: true, Count: 1}).Result(); !slices.Equal(v, []string{"slow"}) {
		t.Errorf("ZRANGE +inf (10 BYSCORE REV LIMIT 0 1: %q", v)
	}
	if s, _ := c.ZIncrBy(ctx, "latency", 25, "fast").Result(); s != 35 {
		t.Errorf("ZINCRBY: %v", s)
	}
	if r, _ := c.ZRevRank(ctx, "latency", "fast").Result(); r != 0 {
		t.Errorf("ZREVRANK after ZINCRBY: %d", r)
	}

	for key, want := range map[string]string{"jobs": "list", "ranks": "set", "job:1": "hash", "latency": "zset"} {
		if v, _ := c.Type(ctx, key).Result(); v != want {
			t.Errorf("TYPE %s: %q, want %q", key, v, want)
		}
	}
	keys, _, err := c.ScanType(ctx, 0, "*", 100, "zset").Result()
	if err != nil || !slices.Equal(keys, []string{"latency"}) {
		t.Errorf("SCAN TYPE zset: %q %v", keys, err)
	}

	// A removed last element removes the key.
	c.LPop(ctx, "jobs")
	if n, _ := c.Exists(ctx, "jobs").Result(); n != 0 {
		t.Error("an emptied list is still there")
	}
}

// TestWrongKindRefused: a string command on a typed value, and a typed
// command on a string or another type, are refused with WRONGTYPE and
// change nothing; SET replaces any kind.
func TestWrongKindRefused(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	c.RPush(ctx, "l", "a", "b")
	c.Set(ctx, "s", "v", 0)
	for _, cmd := range [][]any{
		{"GET", "l"}, {"APPEND", "l", "x"}, {"INCR", "l"}, {"SETRANGE", "l", "0", "x"}, {"GETEX", "l", "EX", "10"},
		{"STRLEN", "l"}, {"GETSET", "l", "x"}, {"SET", "l", "x", "GET"}, {"GETDEL", "l"}, {"SETBIT", "l", "0", "1"},
		{"LPUSH", "s", "x"}, {"SADD", "l", "x"}, {"HGET", "l", "f"}, {"ZADD", "l", "1", "m"}, {"LLEN", "s"},
	} {
		err := c.Do(ctx, cmd...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Errorf("%v: %v, want WRONGTYPE", cmd, err)
		}
	}
	if v, _ := c.LRange(ctx, "l", 0, -1).Result(); !slices.Equal(v, []string{"a", "b"}) {
		t.Errorf("the list after refused commands: %q", v)
	}
	if v, _ := c.MGet(ctx, "l", "s").Result(); v[0] != nil || v[1] != "v" {
		t.Errorf("MGET of a list and a string: %v", v)
	}
	if err := c.Set(ctx, "l", "now a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Get(ctx, "l").Result(); v != "now a string" {
		t.Errorf("GET after SET over a list: %q", v)
	}
}

// TestEncodingsFollowRedisThresholds: OBJECT ENCODING says what Redis
// would, by the thresholds CONFIG SET changes, and a value that outgrew
// its compact encoding keeps the big one.
func TestEncodingsFollowRedisThresholds(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	enc := func(key string) string {
		t.Helper()
		v, err := c.ObjectEncoding(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	c.SAdd(ctx, "ints", 1, 2, 3)
	c.SAdd(ctx, "words", "a")
	c.HSet(ctx, "small", "f", "v")
	c.ZAdd(ctx, "z", redis.Z{Score: 1, Member: "m"})
	c.RPush(ctx, "l", "x")
	for key, want := range map[string]string{"ints": "intset", "words": "hashtable", "small": "listpack", "z": "listpack", "l": "quicklist"} {
		if got := enc(key); got != want {
			t.Errorf("OBJECT ENCODING %s: %q, want %q", key, got, want)
		}
	}
	c.SAdd(ctx, "ints", "x")
	c.SRem(ctx, "ints", "x")
	if got := enc("ints"); got != "hashtable" {
		t.Errorf("an intset that took a word and lost it: %q, want hashtable (kept)", got)
	}
	if err := c.ConfigSet(ctx, "hash-max-ziplist-entries", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.ConfigGet(ctx, "hash-max-listpack-entries").Result(); v["hash-max-listpack-entries"] != "1" {
		t.Errorf("CONFIG GET under the new name: %v", v)
	}
	c.HSet(ctx, "small", "g", "w")
	if got := enc("small"); got != "hashtable" {
		t.Errorf("a hash past hash-max-listpack-entries: %q", got)
	}
	for _, bad := range [][]any{{"CONFIG", "SET", "maxmemory", "1gb"}, {"CONFIG", "SET", "zset-max-listpack-value", "-1"},
		{"CONFIG", "SET", "hash-max-ziplist-entries", "1", "hash-max-listpack-entries", "2"}} {
		if err := c.Do(ctx, bad...).Err(); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// TestTypedValuesSurviveRestart: typed values, their kinds and expiries,
// come back when the store reopens (the log replayed, or Badger's own).
func TestTypedValuesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	serve := func() (*redis.Client, func()) {
		st, err := kv.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{Store: st}
		done := make(chan struct{})
		go func() { s.Serve(context.Background(), ln); close(done) }()
		c := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
		return c, func() { c.Close(); ln.Close(); <-done; s.Close(); st.Close() }
	}
	ctx := context.Background()
	c, stop := serve()
	c.RPush(ctx, "l", "a", "b")
	c.HSet(ctx, "h", "f", "v")
	c.Expire(ctx, "h", time.Hour)
	stop()
	c, stop = serve()
	defer stop()
	if v, _ := c.LRange(ctx, "l", 0, -1).Result(); !slices.Equal(v, []string{"a", "b"}) {
		t.Errorf("list after restart: %q", v)
	}
	if v, err := c.HGet(ctx, "h", "f").Result(); v != "v" || err != nil {
		t.Errorf("hash after restart: %q %v", v, err)
	}
	if ttl, _ := c.TTL(ctx, "h").Result(); ttl < 59*time.Minute {
		t.Errorf("hash's TTL after restart: %v", ttl)
	}
	if err := c.Get(ctx, "l").Err(); err == nil || errors.Is(err, redis.Nil) {
		t.Errorf("GET of the list after restart: %v, want WRONGTYPE", err)
	}
}

// FuzzTypedDecode: a typed value's bytes, whatever they are, decode to
// an error or to a value that encodes back to the same bytes.
func FuzzTypedDecode(f *testing.F) {
	for _, v := range []*typed{
		{kind: kv.KindList, items: [][]byte{[]byte("a"), nil}},
		{kind: kv.KindHash, big: true, items: [][]byte{[]byte("f")}, vals: [][]byte{[]byte("v")}},
		{kind: kv.KindZSet, items: [][]byte{[]byte("m")}, scores: []float64{1.5}},
	} {
		f.Add(byte(v.kind), v.encode())
	}
	f.Fuzz(func(t *testing.T, kind byte, b []byte) {
		k := kv.Kind(kind%4 + 1)
		v, err := decodeTyped(k, b)
		if err != nil {
			return
		}
		if again := v.encode(); string(again) != string(b) {
			t.Fatalf("%x decodes to %+v, which encodes as %x", b, v, again)
		}
	})
}
