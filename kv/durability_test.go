package kv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/hecsys/hec/test/testutil"
)

// openWALToReplay opens a log as openWAL does, with a syncer that calls
// fdatasync: the replays below never sync, and an AIO context's teardown
// (io_destroy waits out an RCU grace period) took some 30 ms a replay,
// 50 s of this test.
func openWALToReplay(path string) (*wal, error) { return openWALSyncer(path, &logSyncer{}) }

// TestReplayAppliesWholeRounds: a log of two committed rounds is cut at
// every byte of the second round, or has one of its bytes flipped, as a
// power cut inside the round would leave it: the replay applies the first
// round and all or nothing of the second — MSET a 1 b 2 never comes back
// half applied.
func TestReplayAppliesWholeRounds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, walName)
	l, err := openWAL(path)
	if err != nil {
		t.Fatal(err)
	}
	l.add(walSet, []byte("first"), []byte("1"), 0)
	if err := l.commit(true, true); err != nil {
		t.Fatal(err)
	}
	firstEnd := l.size
	for i := range 4 { // MSET k0 .. k3, DEL x: one round
		l.add(walSet, fmt.Appendf(nil, "k%d", i), bytes.Repeat([]byte{'v'}, 300), 0)
	}
	l.add(walDelete, []byte("x"), nil, 0)
	if err := l.commit(true, true); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	whole = whole[:l.size]
	l.close()

	replay := func(b []byte) (keys []string) {
		p := filepath.Join(t.TempDir(), walName)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := openWALToReplay(p)
		if err != nil {
			t.Fatal(err)
		}
		defer r.close()
		if _, err := r.replay(func(rec walRecord) error {
			keys = append(keys, string(rec.key))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	check := func(what string, keys []string) {
		t.Helper()
		if n := len(keys); n != 1 && n != 6 {
			t.Fatalf("%s: replayed %d records %q: want the first round alone (1) or both whole (6)", what, n, keys)
		}
	}
	if got := replay(whole); len(got) != 6 {
		t.Fatalf("the whole log replayed %q", got)
	}
	for cut := firstEnd; cut < int64(len(whole)); cut++ {
		check(fmt.Sprintf("cut at %d", cut), replay(whole[:cut]))
	}
	for at := firstEnd; at < int64(len(whole)); at += 7 {
		b := bytes.Clone(whole)
		b[at] ^= 0x40
		check(fmt.Sprintf("byte %d flipped", at), replay(b))
	}
	// A later round's records whose commit never came (sectors written
	// out of order): the round is left out, even with its tail intact.
	b := bytes.Clone(whole)
	copy(b[firstEnd:firstEnd+walHeader], make([]byte, walHeader))
	if got := replay(b); len(got) != 1 {
		t.Fatalf("with the round's first record lost, replayed %q", got)
	}
}

// TestFailedSyncRefusesWrites: an fdatasync of the log fails (as on a
// disk error): the write is not acknowledged, every later write is
// refused with ErrWritesRefused naming the cause, reads go on, and the
// store says why in its Stats.
func TestFailedSyncRefusesWrites(t *testing.T) {
	for _, d := range []Durability{Sync, Async} {
		t.Run(d.String(), func(t *testing.T) {
			var failing atomic.Bool
			s, err := Open(t.TempDir(), WithDurability(d), WithFlushInterval(10*1e6), func(c *config) {
				c.logSync = func(f *os.File) error {
					if failing.Load() {
						return syscall.EIO
					}
					return fdatasync(f)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Put([]byte("before"), []byte("v"), PutOptions{}); err != nil {
				t.Fatal(err)
			}
			s.settle()
			failing.Store(true)
			_, err = s.IncrBy([]byte("ctr"), 1) // through the committer in both modes
			if d == Sync && !errors.Is(err, ErrWritesRefused) {
				t.Fatalf("INCR after a failed sync: %v, want ErrWritesRefused", err)
			}
			if d == Async {
				// Async syncs only at checkpoints: force one.
				s.commit.checkpointAt.Store(0)
				s.IncrBy([]byte("ctr"), 1)
				s.IncrBy([]byte("ctr"), 1)
			}
			testutil.WaitFor(t, 2e9, "writes refused", func() bool { return s.WriteErr() != nil })
			for _, put := range []func() error{
				func() error { _, err := s.Put([]byte("after"), []byte("v"), PutOptions{}); return err },
				func() error { _, err := s.Delete([]byte("before")); return err },
				func() error { _, err := s.IncrBy([]byte("ctr"), 1); return err },
			} {
				if err := put(); !errors.Is(err, ErrWritesRefused) || !strings.Contains(err.Error(), "input/output error") {
					t.Fatalf("a write after a failed sync: %v, want ErrWritesRefused with the cause", err)
				}
			}
			if e, err := s.Get([]byte("before"), nil); err != nil || string(e.Value) != "v" {
				t.Fatalf("read after a failed sync: %q %v", e.Value, err)
			}
			if _, _, err := s.Scan(nil, nil, 10, true); err != nil {
				t.Fatalf("scan after a failed sync: %v", err)
			}
			if st := s.Stats(); !strings.Contains(st.WritesRefused, "input/output error") {
				t.Fatalf("Stats.WritesRefused = %q", st.WritesRefused)
			}
		})
	}
}

// TestFullDiskIsAState fills a 64 MiB tmpfs (which, like a full disk,
// answers a write into a memory-mapped hole with SIGBUS) with a store's
// SETs of 900 bytes beside a 16 MiB ballast file: the store refuses
// writes with ErrDiskFull before Badger can fault, serves reads, opens
// again on the still-full file system, and once the ballast is removed
// writes again without being reopened. Every acknowledged write is there.
func TestFullDiskIsAState(t *testing.T) {
	for _, d := range []Durability{Sync, Async} {
		t.Run(d.String(), func(t *testing.T) { testFullDisk(t, d) })
	}
}

func testFullDisk(t *testing.T, d Durability) {
	mnt, ballast := testutil.SmallDisk(t, 64<<20, 16<<20)
	dir := filepath.Join(mnt, "kv")
	s, err := Open(dir, WithDurability(d))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	acked := map[string]bool{}
	value := bytes.Repeat([]byte{'x'}, 900)
	var full error
	for i := 0; i < 200_000 && full == nil; i++ {
		k := fmt.Sprintf("key/%06d", i)
		if _, err := s.Put([]byte(k), value, PutOptions{}); err != nil {
			full = err
			break
		}
		acked[k] = true
	}
	if !errors.Is(full, ErrDiskFull) {
		t.Fatalf("after %d SETs: %v, want ErrDiskFull", len(acked), full)
	}
	if _, err := s.IncrBy([]byte("ctr"), 1); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("INCR on a full disk: %v", err)
	}
	st := s.Stats()
	t.Logf("%s: %d SETs acknowledged, then %v (free %s, reserve %s)", d, len(acked), full, mib(st.DiskFree), mib(st.DiskReserve))
	if len(acked) < 1000 {
		t.Fatalf("only %d SETs fitted", len(acked))
	}
	checkAll := func(s *Store, when string) {
		t.Helper()
		for k := range acked {
			if e, err := s.Get([]byte(k), nil); err != nil || len(e.Value) != len(value) {
				t.Fatalf("%s: %s: %d bytes, %v", when, k, len(e.Value), err)
			}
		}
	}
	checkAll(s, "full")

	// Closed and opened again on the still-full file system.
	if err := s.Close(); err != nil {
		t.Logf("close on a full disk: %v", err)
	}
	if s, err = Open(dir, WithDurability(d)); err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	checkAll(s, "reopened full")
	// Writes go on to the reserve (a little of it may have been freed by
	// the close), then are refused again.
	refused := false
	for i := range 20_000 {
		if _, err := s.Put(fmt.Appendf(nil, "more/%d", i), value, PutOptions{}); errors.Is(err, ErrDiskFull) {
			refused = true
			break
		} else if err != nil {
			t.Fatalf("reopened full, SET %d: %v", i, err)
		}
		acked[fmt.Sprintf("more/%d", i)] = true
	}
	if !refused {
		t.Fatal("reopened full, 20,000 SETs were all taken")
	}

	// Space returns: writes resume without a restart — once the free
	// space is back above the resume mark, which may wait for a flush or
	// compaction Badger had under way to delete what it replaced (on a
	// loaded machine, under the race detector, seconds).
	_, before, _ := fsSpace(dir)
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	_, after, _ := fsSpace(dir)
	t.Logf("%s: removing the ballast took the free space from %s to %s", d, mib(before), mib(after))
	start := time.Now()
	for s.WriteErr() != nil {
		if time.Since(start) > 30*time.Second {
			st := s.Stats()
			t.Fatalf("writes resume: not within 30s of removing the ballast: %v (free %s, reserve %s)", s.WriteErr(), mib(st.DiskFree), mib(st.DiskReserve))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%s: writes resumed %v after the ballast went", d, time.Since(start).Round(time.Millisecond))
	// The first writes may start a flush of the memtable the full disk
	// held back; until it has deleted what it replaced, its new table
	// takes some of the space back and the store may refuse again, for
	// a moment. Refused SETs are retried (bounded), never lost.
	refusals := 0
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 500; {
		k := fmt.Sprintf("again/%d", i)
		_, err := s.Put([]byte(k), value, PutOptions{})
		if errors.Is(err, ErrDiskFull) && time.Now().Before(deadline) {
			refusals++
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("after freeing space, SET %d: %v (%d refusals within 30s)", i, err, refusals)
		}
		acked[k] = true
		i++
	}
	if refusals > 0 {
		t.Logf("%s: %d SETs refused for a moment after the space returned (Badger's flush took some back)", d, refusals)
	}
	s.Close()
	if s, err = Open(dir, WithDurability(d)); err != nil {
		t.Fatal(err)
	}
	checkAll(s, "reopened")
}

// TestCheckpointLeavesNothingDirty: a checkpoint starts the log over, so
// everything the log held must then be on disk in Badger's files. A store
// sized for a 64 MiB disk (2 MiB value-log files) takes 3,000 values of
// 2 KiB — value-log files rotate, memtables fill — then checkpoints: no
// memtable log or value-log file may keep a dirty page in the page cache
// (cachestat(2), Linux 6.5), which a power cut would take. (Badger's own
// Sync covers only the active memtable and value-log file.)
func TestCheckpointLeavesNothingDirty(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, func(c *config) { c.diskSize = 64 << 20 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	value := bytes.Repeat([]byte{'v'}, 2048)
	for i := range 3000 {
		if _, err := s.IncrBy(fmt.Appendf(nil, "n%d", i), 1); err != nil { // through Badger, not the cache
			t.Fatal(err)
		}
		if _, err := s.Put(fmt.Appendf(nil, "k%d", i), value, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats().Checkpoints
	s.commit.checkpointAt.Store(0)
	if _, err := s.IncrBy([]byte("last"), 1); err != nil {
		t.Fatal(err)
	}
	// A round after the one that wrote "last" starts only once that one's
	// checkpoint is done. (Waiting for the count alone could see an
	// earlier round's checkpoint — any round checkpoints now — and look
	// while the one after "last" had not synced yet.)
	if err := s.update(nil, 0, 0, func(*wtxn) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Checkpoints <= before {
		t.Fatal("no checkpoint after the log's threshold was dropped to 0")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	mems, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	if len(files) < 2 {
		t.Fatalf("%d value-log files: the test would not test rotated ones", len(files))
	}
	for _, name := range append(files, mems...) {
		dirty, err := dirtyPages(name)
		if errors.Is(err, unix.ENOSYS) {
			t.Skip("cachestat(2) is not in this kernel (Linux 6.5 and later)")
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		t.Logf("%s: %d dirty pages", filepath.Base(name), dirty)
		if dirty > 0 {
			t.Errorf("%s has %d dirty pages after a checkpoint: a power cut would lose writes the log no longer holds", filepath.Base(name), dirty)
		}
	}
}

// dirtyPages is the number of name's pages dirty in the page cache.
func dirtyPages(name string) (uint64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var rng [2]uint64 // offset, length (0: to the end)
	var st [5]uint64  // cache, dirty, writeback, evicted, recently evicted
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, f.Fd(), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return st[1] + st[2], nil
}

// TestExpiryToTheMillisecond: a key set with a 300 ms TTL is there at
// once and gone at 350 ms (it used to live to the next whole second); one
// set with 1,500 ms has at most that left; an expiry written by an
// earlier store in Unix seconds still reads as that second; and expired
// keys leave Badger by themselves (the sweeper), not only from reads.
func TestExpiryToTheMillisecond(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Now()
	if _, err := s.Put([]byte("short"), []byte("v"), PutOptions{TTL: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put([]byte("long"), []byte("v"), PutOptions{TTL: 1500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get([]byte("long"), nil)
	if left := time.Until(e.ExpiresAt); err != nil || left > 1500*time.Millisecond || left < 1300*time.Millisecond {
		t.Fatalf("PX 1500 has %v left (%v)", left, err)
	}
	if _, err := s.Get([]byte("short"), nil); time.Since(t0) < 250*time.Millisecond && err != nil {
		t.Fatalf("PX 300 gone at %v: %v", time.Since(t0), err)
	}
	time.Sleep(time.Until(t0.Add(350 * time.Millisecond)))
	if _, err := s.Get([]byte("short"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("PX 300 still there at %v: %v", time.Since(t0), err)
	}
	if n, _ := s.Count(); n != 1 {
		t.Fatalf("Count with one key expired: %d", n)
	}

	// An expiry in seconds, as an earlier store wrote it.
	legacy := uint64(time.Now().Add(time.Hour).Unix())
	txn := s.db.NewTransaction(true)
	txn.SetEntry(badger.NewEntry([]byte("old"), []byte("v")).WithTTL(time.Hour))
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if e, err := s.Get([]byte("old"), nil); err != nil || e.ExpiresAt.Unix() < int64(legacy)-1 || e.ExpiresAt.Unix() > int64(legacy)+1 {
		t.Fatalf("a seconds expiry reads as %v (%v), want about %v", e.ExpiresAt, err, time.Unix(int64(legacy), 0))
	}

	// 500 keys of 2 s: a few seconds later Badger holds none of them.
	t0 = time.Now()
	for i := range 500 {
		if _, err := s.IncrBy(fmt.Appendf(nil, "gone/%d", i), 1); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Expire(fmt.Appendf(nil, "gone/%d", i), 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	raw := func() (n int) {
		s.view(func(txn *badger.Txn) error {
			o := badger.DefaultIteratorOptions
			o.Prefix, o.PrefetchValues = []byte("gone/"), false
			it := txn.NewIterator(o)
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			return nil
		})
		return n
	}
	if n := raw(); n != 500 && time.Since(t0) < 1500*time.Millisecond { // before any could expire
		t.Fatalf("Badger holds %d of the 500 keys just written", n)
	}
	testutil.WaitFor(t, 10*time.Second, "the sweeper to delete 500 expired keys", func() bool { return raw() == 0 })
}
