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
	s := open(t, WithDurability(Async))
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
	for reads.Load() < 200000 && !t.Failed() {
		runtime.Gosched()
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
