package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Concurrent sync writers share commits: many writes per transaction.
func TestGroupCommitSharesCommits(t *testing.T) {
	s := open(t) // Sync
	const writers, each = 32, 40
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := s.Put([]byte(fmt.Sprintf("g%d/%d", g, i)), []byte("v"), PutOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	if st.Writes != writers*each {
		t.Fatalf("writes %d, want %d", st.Writes, writers*each)
	}
	t.Logf("%d writes in %d commits (%.1f per commit), %v committing", st.Writes, st.Commits, float64(st.Writes)/float64(st.Commits), st.CommitTime)
	if st.Commits*2 > st.Writes {
		t.Fatalf("%d commits for %d concurrent writes: not grouped", st.Commits, st.Writes)
	}
	if n, _ := s.Count(); n != writers*each {
		t.Fatalf("count %d", n)
	}
}

// A write that fails on its own (NX on a present key) or is too big for a
// transaction fails alone; the writes grouped with it commit.
func TestGroupedWritesFailAlone(t *testing.T) {
	s := open(t, WithDurability(Async), WithMemory(1<<20, 1<<20, 1<<20)) // a transaction holds ~150 KiB
	s.Put([]byte("taken"), []byte("x"), PutOptions{})
	big := make([]Op, 400) // values under the value-log threshold: all in the transaction
	for i := range big {
		big[i] = Op{Key: []byte(fmt.Sprintf("big%d", i)), Value: bytes.Repeat([]byte{1}, 900)}
	}
	var wg sync.WaitGroup
	var pending []Pending
	for i := 0; i < 200; i++ {
		pending = append(pending, s.PutAsync([]byte(fmt.Sprintf("k%d", i)), []byte("v"), PutOptions{}))
		if i == 100 {
			pending = append(pending, s.PutAsync([]byte("taken"), []byte("y"), PutOptions{IfAbsent: true}))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Batch(big); err == nil {
					t.Error("a 360 KiB batch fit a 150 KiB transaction")
				}
			}()
		}
	}
	var failed int
	for _, p := range pending {
		if err := p.Wait(); errors.Is(err, ErrExists) {
			failed++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if failed != 1 {
		t.Fatalf("%d NX failures, want 1", failed)
	}
	if n, _ := s.Count(); n != 201 {
		t.Fatalf("count %d, want 201 (200 + taken, nothing of the big batch)", n)
	}
	if e, _ := s.Get([]byte("taken"), nil); string(e.Value) != "x" {
		t.Fatalf("taken = %q", e.Value)
	}
}

// Readers racing writers through the read cache never see a value older
// than the last one acknowledged before their read began.
func TestCacheNeverStale(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
	}{
		{"async writes acknowledged from the cache", []Option{WithDurability(Async)}},
		{"writes through the committer", []Option{WithDurability(Sync), WithInMemory()}},
	} {
		t.Run(tt.name, func(t *testing.T) { testCacheNeverStale(t, open(t, tt.opts...)) })
	}
}

func testCacheNeverStale(t *testing.T, s *Store) {
	const keys = 8
	var acked [keys]atomic.Uint64 // highest value acknowledged per key
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < keys; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte{'k', byte(w)}
			for v := uint64(1); !stop.Load(); v++ {
				if _, err := s.Put(key, binary.BigEndian.AppendUint64(nil, v), PutOptions{}); err != nil {
					t.Error(err)
					return
				}
				acked[w].Store(v)
				if v%64 == 0 {
					runtime.Gosched() // as a client would, waiting for its network
				}
			}
		}()
	}
	var stale atomic.Int64
	var reads atomic.Int64
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []byte
			for i := 0; !stop.Load(); i++ {
				k := i % keys
				floor := acked[k].Load()
				e, err := s.Get([]byte{'k', byte(k)}, dst)
				if errors.Is(err, ErrNotFound) && floor == 0 {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
				if binary.BigEndian.Uint64(e.Value) < floor {
					stale.Add(1)
				}
				dst = e.Value
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); reads.Load() < 200000 && !t.Failed() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	_, _, hits := s.cache.stats()
	t.Logf("%d reads, %d cache hits, %d stale", reads.Load(), hits, stale.Load())
	if stale.Load() != 0 {
		t.Fatalf("%d stale reads", stale.Load())
	}
	if hits == 0 {
		t.Fatal("the cache was never hit: the test did not test it")
	}
}

// TestWriteBack: Async plain Puts are acknowledged from the cache and
// reach Badger before any other write that needs the committer, before a
// scan, and at Close — in order.
func TestWriteBack(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithDurability(Async), WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	put := func(k, v string) {
		t.Helper()
		if _, err := s.Put([]byte(k), []byte(v), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		put(fmt.Sprintf("wb%03d", i), fmt.Sprint(i))
	}
	if st := s.Stats(); st.Flushed != 0 {
		t.Fatalf("%d writes reached Badger with nothing asking: not acknowledged from the cache", st.Flushed)
	}
	if err := s.db.View(func(txn *badger.Txn) error { _, err := txn.Get([]byte("wb000")); return err }); !errors.Is(err, badger.ErrKeyNotFound) {
		t.Fatalf("Badger already has a cached write (%v): not written back", err)
	}
	if e, err := s.Get([]byte("wb000"), nil); err != nil || string(e.Value) != "0" {
		t.Fatalf("a cached write reads back %q, %v", e.Value, err)
	}
	// A queued write sees the cached writes before it; a cached write after
	// it wins.
	put("n", "41")
	if n, err := s.IncrBy([]byte("n"), 1); err != nil || n != 42 {
		t.Fatalf("INCR after a cached SET: %d, %v", n, err)
	}
	if st := s.Stats(); st.Flushed < 101 {
		t.Fatalf("only %d cached writes reached Badger before a queued write", st.Flushed)
	}
	put("gone", "x")
	if n, err := s.Delete([]byte("gone")); err != nil || n != 1 {
		t.Fatalf("DEL of a cached key: %d, %v", n, err)
	}
	if _, err := s.Get([]byte("gone"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GET after DEL: %v", err)
	}
	put("wb000", "again")
	if n, err := s.Count(); err != nil || n != 101 {
		t.Fatalf("DBSIZE: %d, %v, want 101", n, err)
	}
	kvs, _, err := s.Scan([]byte("wb00"), nil, 100, false)
	if err != nil || len(kvs) != 10 || string(kvs[0].Value) != "again" {
		t.Fatalf("scan: %d entries, first %q, %v", len(kvs), kvs[0].Value, err)
	}
	put("last", "written just before Close")
	// Reopened (no cache): every write is in Badger.
	r := reopenUncached(t, s, dir)
	for k, want := range map[string]string{"wb000": "again", "wb099": "99", "n": "42", "last": "written just before Close"} {
		if e, err := r.Get([]byte(k), nil); err != nil || string(e.Value) != want {
			t.Errorf("after reopen %s = %q, %v; want %q", k, e.Value, err, want)
		}
	}
	if _, err := r.Get([]byte("gone"), nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted key back after reopen: %v", err)
	}
}

// TestWriteBackFlushesOnItsOwn: with no other write, cached Puts reach
// Badger after the flush interval.
func TestWriteBackFlushesOnItsOwn(t *testing.T) {
	s := open(t, WithDurability(Async), WithFlushInterval(20*time.Millisecond))
	if _, err := s.Put([]byte("k"), []byte("v"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Flushed < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a cached write never reached Badger on the flush timer")
		}
	}
}

// TestCachedPutOwnsItsBytes: a Put acknowledged from the cache keeps its
// own copy of key and value, an empty value included: the caller may reuse
// its buffers at once (a RESP loop's read buffer).
func TestCachedPutOwnsItsBytes(t *testing.T) {
	s, err := Open(t.TempDir(), WithDurability(Async), WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, v := range []string{"", "value"} {
		key, value := []byte("own/a"), []byte(v)
		if done, err := s.PutNoWait(key, value, PutOptions{}); !done || err != nil {
			t.Fatalf("value %q: not taken by the cache (%v, %v)", v, done, err)
		}
		key[len(key)-1] = 'b'
		for i := range value {
			value[i] = 'x'
		}
		if e, err := s.Get([]byte("own/a"), nil); err != nil || string(e.Value) != v {
			t.Fatalf("own/a = %q (%v), want %q", e.Value, err, v)
		}
		if _, err := s.Get([]byte("own/b"), nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("own/b: %v: the cache kept the caller's key buffer", err)
		}
	}
}

// TestOverwriteInPlaceBesideFlushes: a hot key's value is written into its
// cached entry in place — but never while a flush is reading that entry.
// Writers overwrite a few keys as fast as they can while a small cache
// flushes all the time; a reader sees only whole values, and reopened,
// Badger has each key's last value. (Under the race detector a flush
// reading a buffer being overwritten is reported.)
func TestOverwriteInPlaceBesideFlushes(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithDurability(Async), WithCache(64<<10), WithFlushInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	value := func(n int) []byte { return bytes.Repeat([]byte{byte(n)}, 300) }
	whole := func(v []byte) bool { return len(v) == 300 && bytes.Count(v, v[:1]) == 300 }
	const writers, keys, rounds = 4, 8, 3000
	last := make([][]int, writers)
	var wg sync.WaitGroup
	for w := range writers {
		last[w] = make([]int, keys)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				k := i % keys
				if _, err := s.Put(fmt.Appendf(nil, "hot/%d/%d", w, k), value(i), PutOptions{}); err != nil {
					t.Error(err)
					return
				}
				last[w][k] = i
			}
		}()
	}
	stop := make(chan struct{})
	read := make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				read <- nil
				return
			default:
			}
			if e, err := s.Get(fmt.Appendf(nil, "hot/%d/%d", n%writers, n%keys), nil); err == nil && !whole(e.Value) {
				read <- fmt.Errorf("a read saw a torn value: %q", e.Value)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Flushes < 10 {
		t.Fatalf("only %d flushes ran beside the writes: the test did not test them", st.Flushes)
	}
	r := reopenUncached(t, s, dir)
	for w := range writers {
		for k := range keys {
			e, err := r.Get(fmt.Appendf(nil, "hot/%d/%d", w, k), nil)
			if err != nil || !bytes.Equal(e.Value, value(last[w][k])) {
				t.Fatalf("hot/%d/%d: %.8q… (%v), want %d bytes of %d", w, k, e.Value, err, 300, byte(last[w][k]))
			}
		}
	}
}

// reopenUncached closes s and opens the store in dir again without a
// cache, so reads see what Badger holds (closed when the test ends).
func reopenUncached(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir, WithCache(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// Writers that come back with their next write one after another, as a
// server's clients do once their replies reach them, still share one sync
// per round: a round does not start with the first of them and leave the
// rest a whole sync to wait for the next. The same writers with the wait
// turned off, in the same store and run, are the yardstick: a loaded
// machine (CI runs every package at once, under -race) slows both. (Before
// rounds waited, 32 such writers made 11–13 writes per sync.)
func TestSyncRoundsWaitForTheirWriters(t *testing.T) {
	s := open(t) // Sync
	// The disk's sync time, once the store's files are made: the writers
	// come back spread over half of it.
	var base Stats
	for i := range 25 {
		if i == 5 {
			base = s.Stats()
		}
		if _, err := s.Put([]byte(fmt.Sprintf("lone%d", i)), []byte("v"), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lone := s.Stats()
	sync1 := (lone.CommitTime - base.CommitTime) / time.Duration(max(lone.Commits-base.Commits, 1))
	const writers, each = 32, 30
	gap := sync1 / 2 / writers
	perSync := func(phase string) float64 {
		base := s.Stats()
		acked := make(chan int, writers)
		again := make([]chan struct{}, writers)
		var wg sync.WaitGroup
		for g := range writers {
			again[g] = make(chan struct{}, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if _, err := s.Put([]byte(fmt.Sprintf("%s%d/%d", phase, g, i)), []byte("v"), PutOptions{}); err != nil {
						t.Error(err)
					}
					acked <- g
					<-again[g]
				}
			}()
		}
		// The writers' way back: writer g returns g gaps after its reply.
		type back struct {
			g  int
			at time.Time
		}
		var due []back
		for left := writers * each; left > 0 || len(due) > 0; {
			select {
			case g := <-acked:
				due = append(due, back{g, time.Now().Add(time.Duration(g) * gap)})
				left--
				continue
			default:
			}
			now := time.Now()
			kept := due[:0]
			for _, b := range due {
				if now.After(b.at) {
					again[b.g] <- struct{}{}
				} else {
					kept = append(kept, b)
				}
			}
			due = kept
			runtime.Gosched()
		}
		wg.Wait()
		st := s.Stats()
		syncs, writes := st.Commits-base.Commits, st.Writes-base.Writes
		t.Logf("%s: %d writes in %d syncs (%.1f per sync)", phase, writes, syncs, float64(writes)/float64(syncs))
		return float64(writes) / float64(syncs)
	}
	t.Logf("sync %v; writers back over %v", sync1, gap*writers)
	s.commit.gatherOff.Store(true)
	off := perSync("off")
	s.commit.gatherOff.Store(false)
	on := perSync("on")
	if on < 1.3*off {
		t.Fatalf("%.1f writes per sync for %d writers, %.1f without the wait: rounds did not wait for their writers", on, writers, off)
	}
}
