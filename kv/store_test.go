package kv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func open(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreOps(t *testing.T) {
	s := open(t)
	k := []byte("k")
	if _, err := s.Get(k, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := s.Put(k, []byte("v1"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	e1, err := s.Get(k, nil)
	if err != nil || string(e1.Value) != "v1" || !e1.ExpiresAt.IsZero() {
		t.Fatalf("get: %+v %v", e1, err)
	}
	s.Put(k, []byte("v2"), PutOptions{})
	e2, _ := s.Get(k, nil)
	if e2.Version <= e1.Version {
		t.Fatalf("version did not grow: %d then %d", e1.Version, e2.Version)
	}
	tests := []struct {
		name string
		o    PutOptions
		want error
	}{
		{"nx on present", PutOptions{IfAbsent: true}, ErrExists},
		{"xx on present", PutOptions{IfPresent: true}, nil},
	}
	for _, tt := range tests {
		if _, err := s.Put(k, []byte("x"), tt.o); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Fatalf("%s: %v", tt.name, err)
		}
	}
	if _, err := s.Put([]byte("absent"), []byte("x"), PutOptions{IfPresent: true}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("xx on absent: %v", err)
	}
	if _, err := s.Put(nil, []byte("x"), PutOptions{}); !errors.Is(err, ErrKeySize) {
		t.Fatalf("empty key: %v", err)
	}
	if n, err := s.Delete(k, []byte("absent")); n != 1 || err != nil {
		t.Fatalf("delete: %d %v", n, err)
	}
}

func TestStoreTTL(t *testing.T) {
	s := open(t)
	s.Put([]byte("t"), []byte("v"), PutOptions{TTL: time.Second})
	e, err := s.Get([]byte("t"), nil)
	if err != nil || e.ExpiresAt.IsZero() || time.Until(e.ExpiresAt) > 2*time.Second {
		t.Fatalf("ttl entry %+v %v", e, err)
	}
	if ok, _ := s.Expire([]byte("t"), 0); !ok {
		t.Fatal("persist of present key")
	}
	if e, _ := s.Get([]byte("t"), nil); !e.ExpiresAt.IsZero() {
		t.Fatal("persist kept the expiry")
	}
	s.Expire([]byte("t"), time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := s.Get([]byte("t"), nil); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("key did not expire")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestIncrAndCASConcurrent(t *testing.T) {
	s := open(t, WithDurability(Async))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, err := s.IncrBy([]byte("n"), 1); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n, _ := s.IncrBy([]byte("n"), 0); n != 400 {
		t.Fatalf("incr under contention: %d, want 400", n)
	}
	s.Put([]byte("s"), []byte("abc"), PutOptions{})
	if _, err := s.IncrBy([]byte("s"), 1); !errors.Is(err, ErrNotNumber) {
		t.Fatalf("incr of a string: %v", err)
	}
	if err := s.CompareAndSwap([]byte("s"), []byte("nope"), []byte("x")); !errors.Is(err, ErrMismatch) {
		t.Fatal(err)
	}
	if err := s.CompareAndSwap([]byte("s"), []byte("abc"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.CompareAndSwap([]byte("new"), nil, []byte("y")); err != nil {
		t.Fatal(err)
	}
}

func TestBatchAndScan(t *testing.T) {
	s := open(t)
	var ops []Op
	for i := 0; i < 25; i++ {
		ops = append(ops, Op{Key: []byte(fmt.Sprintf("user:%02d", i)), Value: []byte{byte(i)}})
	}
	ops = append(ops, Op{Key: []byte("other"), Value: []byte("o")})
	if err := s.Batch(ops); err != nil {
		t.Fatal(err)
	}
	var all []KV
	var cursor []byte
	for {
		page, next, err := s.Scan([]byte("user:"), cursor, 10, false)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == nil {
			break
		}
		cursor = next
	}
	if len(all) != 25 || string(all[24].Key) != "user:24" || all[3].Value[0] != 3 {
		t.Fatalf("scan got %d", len(all))
	}
	if n, _ := s.Count(); n != 26 {
		t.Fatalf("count %d", n)
	}
	// A batch with a bad key applies nothing.
	if err := s.Batch([]Op{{Key: []byte("a"), Value: []byte("1")}, {Key: nil}}); !errors.Is(err, ErrKeySize) {
		t.Fatal(err)
	}
	if _, err := s.Get([]byte("a"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatal("partial batch applied")
	}
}

func TestReopenKeepsSyncWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Put([]byte("durable"), []byte("yes"), PutOptions{})
	s.Close()
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if e, err := s.Get([]byte("durable"), nil); err != nil || string(e.Value) != "yes" {
		t.Fatalf("after reopen: %v", err)
	}
}

func TestDeleteAll(t *testing.T) {
	for _, d := range []Durability{Sync, Async} {
		t.Run(d.String(), func(t *testing.T) {
			var hooked atomic.Int64
			s, err := Open(t.TempDir(), WithDurability(d), WithWriteHook(func([]byte) { hooked.Add(1) }))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const n = 3000 // several pages
			for i := range n {
				if _, err := s.Put([]byte(fmt.Sprintf("k%05d", i)), []byte("v"), PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			before := hooked.Load()
			got, err := s.DeleteAll()
			if err != nil || got != n {
				t.Fatalf("DeleteAll: %d, %v", got, err)
			}
			if c, err := s.Count(); err != nil || c != 0 {
				t.Fatalf("after: %d keys, %v", c, err)
			}
			if _, err := s.Get([]byte("k00042"), nil); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get after: %v", err)
			}
			if hooked.Load()-before < n {
				t.Fatalf("write hook saw %d of %d deletes", hooked.Load()-before, n)
			}
			if got, err := s.DeleteAll(); err != nil || got != 0 {
				t.Fatalf("DeleteAll of nothing: %d, %v", got, err)
			}
		})
	}
}

// TestOpenOnFirstUse: the store checks itself in Open, runs no Badger
// until an operation needs it, and then serves what was written before.
func TestOpenOnFirstUse(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put([]byte("k"), []byte("v"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	lazy, err := Open(dir, WithOpenOnFirstUse())
	if err != nil {
		t.Fatal(err)
	}
	if lazy.awake.Load() {
		t.Fatal("Badger open before the first operation")
	}
	if st := lazy.Stats(); st.Gets != 0 {
		t.Fatalf("stats of a resting store: %+v", st)
	}
	e, err := lazy.Get([]byte("k"), nil)
	if err != nil || string(e.Value) != "v" || !lazy.awake.Load() {
		t.Fatalf("get: %q %v (awake %v)", e.Value, err, lazy.awake.Load())
	}
	if err := lazy.Close(); err != nil {
		t.Fatal(err)
	}
	// Closed without ever being used: nothing opens afterwards.
	unused, err := Open(dir, WithOpenOnFirstUse())
	if err != nil {
		t.Fatal(err)
	}
	unused.Close()
	if _, err := unused.Get([]byte("k"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
	if _, err := unused.Put([]byte("k"), []byte("w"), PutOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	// A store that cannot open says so in Open.
	bad := filepath.Join(t.TempDir(), "file")
	os.WriteFile(bad, []byte("x"), 0o644)
	if _, err := Open(bad, WithOpenOnFirstUse()); err == nil {
		t.Fatal("opened a store on a file")
	}
}

func TestModify(t *testing.T) {
	for _, d := range []Durability{Sync, Async} {
		t.Run(d.String(), func(t *testing.T) {
			var hooked atomic.Int64
			s, err := Open(t.TempDir(), WithDurability(d), WithWriteHook(func([]byte) { hooked.Add(1) }))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Put([]byte("k"), []byte("ab"), PutOptions{TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			before := hooked.Load()
			if err := s.Modify([]byte("k"), 10, func(cur []byte, ok bool) ([]byte, bool, error) {
				if !ok || string(cur) != "ab" {
					t.Errorf("Modify saw %q %v", cur, ok)
				}
				return append(cur, 'c'), false, nil
			}); err != nil {
				t.Fatal(err)
			}
			e, err := s.Get([]byte("k"), nil)
			if err != nil || string(e.Value) != "abc" || time.Until(e.ExpiresAt) < 50*time.Minute {
				t.Fatalf("after Modify: %q %v, expires in %v", e.Value, err, time.Until(e.ExpiresAt))
			}
			if hooked.Load() == before {
				t.Error("Modify did not call the write hook")
			}
			refuse := errors.New("no")
			if err := s.Modify([]byte("k"), 10, func([]byte, bool) ([]byte, bool, error) { return nil, false, refuse }); !errors.Is(err, refuse) {
				t.Fatalf("refusal: %v", err)
			}
			if err := s.Modify([]byte("k"), 2, func(cur []byte, _ bool) ([]byte, bool, error) { return append(cur, "xyz"...), false, nil }); !errors.Is(err, ErrValueSize) {
				t.Fatalf("over maxSize: %v", err)
			}
			if err := s.Modify([]byte("k"), 0, func([]byte, bool) ([]byte, bool, error) { return nil, true, nil }); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get([]byte("k"), nil); !errors.Is(err, ErrNotFound) {
				t.Fatalf("after a deleting Modify: %v", err)
			}
		})
	}
}
