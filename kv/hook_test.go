package kv

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestWriteHookSeesEveryWrite checks that every write path calls the
// write hook with its keys, once the write is visible to Get and before
// the writer hears back.
func TestWriteHookSeesEveryWrite(t *testing.T) {
	for _, d := range []Durability{Sync, Async} {
		t.Run(d.String(), func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]string{} // key → what Get returned inside the hook
			var s *Store
			s = open(t, WithDurability(d), WithWriteHook(func(key []byte) {
				e, err := s.Get(key, nil)
				v := string(e.Value)
				if errors.Is(err, ErrNotFound) {
					v = "<none>"
				}
				mu.Lock()
				seen[string(key)] = v
				mu.Unlock()
			}))
			steps := []struct {
				name, key, want string
				do              func() error
			}{
				{"put", "a", "1", func() error { _, err := s.Put([]byte("a"), []byte("1"), PutOptions{}); return err }},
				{"put again", "a", "2", func() error { _, err := s.Put([]byte("a"), []byte("2"), PutOptions{}); return err }},
				{"put if absent", "b", "x", func() error { _, err := s.Put([]byte("b"), []byte("x"), PutOptions{IfAbsent: true}); return err }},
				{"put async", "c", "y", func() error { return s.PutAsync([]byte("c"), []byte("y"), PutOptions{}).Wait() }},
				{"put no wait", "c", "z", func() error {
					if done, err := s.PutNoWait([]byte("c"), []byte("z"), PutOptions{}); !done || err != nil {
						return s.PutAsync([]byte("c"), []byte("z"), PutOptions{}).Wait()
					}
					return nil
				}},
				{"incr", "n", "5", func() error { _, err := s.IncrBy([]byte("n"), 5); return err }},
				{"cas", "a", "3", func() error { return s.CompareAndSwap([]byte("a"), []byte("2"), []byte("3")) }},
				{"expire", "a", "3", func() error { _, err := s.Expire([]byte("a"), time.Hour); return err }},
				{"batch", "b", "<none>", func() error {
					return s.Batch([]Op{{Key: []byte("d"), Value: []byte("w")}, {Delete: true, Key: []byte("b")}})
				}},
				{"delete", "c", "<none>", func() error { _, err := s.Delete([]byte("c")); return err }},
			}
			for _, st := range steps {
				mu.Lock()
				delete(seen, st.key)
				mu.Unlock()
				if err := st.do(); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				mu.Lock()
				got, ok := seen[st.key]
				mu.Unlock()
				if !ok {
					t.Errorf("%s: the hook was not called for %q before the write returned", st.name, st.key)
				} else if got != st.want {
					t.Errorf("%s: inside the hook Get(%q) = %q, want %q", st.name, st.key, got, st.want)
				}
			}
		})
	}
}
