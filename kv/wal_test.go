package kv

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestLogBringsBackWhatBadgerLost: a store is SIGKILLed right after
// acknowledging writes that sit, logged, in the cache — not yet in Badger,
// which does not sync. Reopened, every acknowledged write is there: the
// log's replay put them back. In Async mode the helper waits out
// walWriteEvery first (what Async may lose is the records not yet
// written).
func TestLogBringsBackWhatBadgerLost(t *testing.T) {
	for _, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) { testLogCrash(t, mode) })
	}
}

func testLogCrash(t *testing.T, mode string) {
	dir := t.TempDir()
	argv := append(strings.Fields(os.Getenv("HEC_TEST_EXEC")), os.Args[0], "-test.run=^TestLogCrashHelper$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HEC_KV_CRASH_DIR="+dir, "HEC_KV_CRASH_MODE="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]string{} // key: last acknowledged value
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "acked" {
			acked[f[1]] = f[2]
		}
	}
	cmd.Wait()
	if len(acked) < 100 {
		t.Fatalf("the helper acknowledged only %d keys", len(acked))
	}
	fi, err := os.Stat(filepath.Join(dir, walName))
	if err != nil || fi.Size() == 0 {
		t.Fatalf("no log left behind by the crash (%v): the test would not test the replay", err)
	}
	s, err := Open(dir, WithCache(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lost := 0
	for k, v := range acked {
		if e, err := s.Lookup([]byte(k), nil); err != nil || string(e.Value) != v || e.Kind != kindOf(k) {
			if lost < 3 {
				t.Errorf("%s = %q (%v), acknowledged %q", k, e.Value, err, v)
			}
			lost++
		}
	}
	t.Logf("%s: %d keys acknowledged, a %d-byte log, %d lost", mode, len(acked), fi.Size(), lost)
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged keys lost", lost, len(acked))
	}
	// Replayed, checkpointed: reopened again, nothing replays.
	s.Close()
	l, err := openWAL(filepath.Join(dir, walName))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := l.replay(func(walRecord) error { return nil }); err != nil || n != 0 {
		t.Fatalf("after a clean close %d records would replay (%v)", n, err)
	}
	l.close()
	r, err := Open(dir, WithCache(0))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for k, v := range acked {
		if e, err := r.Lookup([]byte(k), nil); err != nil || string(e.Value) != v || e.Kind != kindOf(k) {
			t.Fatalf("after a second open %s = %q (%v), acknowledged %q", k, e.Value, err, v)
		}
	}
}

// kindOf is the kind TestLogCrashHelper writes key as.
func kindOf(key string) Kind {
	if strings.HasPrefix(key, "list/") {
		return KindList
	}
	return KindString
}

// TestLogCrashHelper runs in the helper process: 8 writers, each plain
// Puts of its own keys (cached), INCRs of its own counter (through the
// committer, which flushes the cache first) and updates of a typed value
// of its own, each printed once acknowledged; then SIGKILL.
func TestLogCrashHelper(t *testing.T) {
	dir := os.Getenv("HEC_KV_CRASH_DIR")
	if dir == "" {
		t.Skip("helper for TestLogBringsBackWhatBadgerLost")
	}
	d, err := ParseDurability(os.Getenv("HEC_KV_CRASH_MODE"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, WithDurability(d))
	if err != nil {
		t.Fatal(err)
	}
	acks := make(chan string, 64)
	for w := range 8 {
		go func() {
			ctr := fmt.Sprintf("ctr/%d", w)
			for i := range 100 {
				k := fmt.Sprintf("crash/%d/%d", w, i)
				if _, err := s.Put([]byte(k), []byte("v-"+k), PutOptions{}); err != nil {
					panic(err)
				}
				acks <- k + " v-" + k
				if i%10 == 9 {
					n, err := s.IncrBy([]byte(ctr), 1)
					if err != nil {
						panic(err)
					}
					acks <- fmt.Sprintf("%s %d", ctr, n)
					list, v := fmt.Sprintf("list/%d", w), fmt.Sprintf("items-%d", i)
					err = s.Update([][]byte{[]byte(list)}, 64, func(c []Cell) error {
						c[0].Value, c[0].Kind, c[0].Write = []byte(v), KindList, true
						return nil
					})
					if err != nil {
						panic(err)
					}
					acks <- list + " " + v
				}
			}
		}()
	}
	for range 8 * 120 {
		fmt.Printf("acked %s\n", <-acks)
	}
	if d == Async {
		// What Async may lose is the records not yet written: wait until
		// the committer has taken them (it writes them next), then a little.
		for s.commit.wal.pending.Load() > 0 {
			time.Sleep(walWriteEvery)
		}
		time.Sleep(5 * walWriteEvery)
	}
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestLogTornTail: a record cut short (a power loss mid-append), a
// corrupt one, zeros or a record of an earlier generation end the replay;
// the records before it are applied.
func TestLogTornTail(t *testing.T) {
	for _, tt := range []struct {
		name string
		tail func(rec []byte) []byte
	}{
		{"cut short", func(rec []byte) []byte { return rec[:len(rec)-3] }},
		{"bit flipped", func(rec []byte) []byte { rec[len(rec)-2] ^= 1; return rec }},
		{"zeros", func(rec []byte) []byte { return make([]byte, len(rec)) }},
		{"huge length", func(rec []byte) []byte { rec[7] = 0xff; return rec }},
		{"earlier generation", func(rec []byte) []byte { rec[8]--; return rec }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := openWAL(filepath.Join(dir, walName))
			if err != nil {
				t.Fatal(err)
			}
			l.add(walSet, []byte("a"), []byte("1"), 0)
			l.add(walSet, []byte("b"), []byte("2"), 0)
			l.add(walDelete, []byte("a"), nil, 0)
			if err := l.commit(true, true); err != nil {
				t.Fatal(err)
			}
			rec := appendRecord(nil, walSet, []byte("c"), []byte("3"), 0)
			binary.LittleEndian.PutUint64(rec[8:], l.gen)
			if _, err := l.f.WriteAt(tt.tail(rec), l.size); err != nil {
				t.Fatal(err)
			}
			l.close()
			s, err := Open(dir, WithCache(0))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for k, want := range map[string]string{"a": "", "b": "2", "c": ""} {
				e, err := s.Get([]byte(k), nil)
				if got := string(e.Value); got != want || (want == "") != (err != nil) {
					t.Errorf("%s = %q (%v), want %q", k, got, err, want)
				}
			}
		})
	}
}

func FuzzWALBody(f *testing.F) {
	l := &wal{}
	l.add(walSet, []byte("key"), []byte("value"), 12345)
	f.Add(l.buf[walHeader:])
	f.Add([]byte{walDelete, 1, 'k', 0, 0})
	f.Add([]byte{walSetKind | byte(KindHash), 1, 'k', 1, 'v', 0})
	f.Add(appendCommit(nil, 2, 0xfeedface, 0)[walHeader:])
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeWALBody(b)
		if err != nil {
			return
		}
		if rec.op == walCommit {
			// A round's end: no key, what it counts and their checksum.
			if again := appendCommit(nil, rec.count, rec.sum, 0); string(again[walHeader:]) != string(b) {
				t.Fatalf("%x decodes to %+v, which encodes as %x", b, rec, again[walHeader:])
			}
			return
		}
		if len(rec.key) == 0 || len(rec.key) > MaxKeySize || len(rec.value) > MaxValueSize {
			t.Fatalf("accepted a record out of bounds: key %d, value %d bytes", len(rec.key), len(rec.value))
		}
		// What decodes re-encodes to the same bytes.
		var again wal
		again.add(rec.op, rec.key, rec.value, rec.expires)
		if string(again.buf[walHeader:]) != string(b) {
			t.Fatalf("%x decodes to %+v, which encodes as %x", b, rec, again.buf[walHeader:])
		}
	})
}

// TestLogRecycled: after a checkpoint the log starts over at offset 0 in
// a new generation; the old records past the new ones never replay.
func TestLogRecycled(t *testing.T) {
	l, err := openWAL(filepath.Join(t.TempDir(), walName))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	for i := range 50 {
		l.add(walSet, []byte(fmt.Sprint("old", i)), []byte("x"), 0)
	}
	if err := l.commit(true, true); err != nil {
		t.Fatal(err)
	}
	l.reset()
	l.add(walSet, []byte("new"), []byte("y"), 0)
	if err := l.commit(true, true); err != nil {
		t.Fatal(err)
	}
	var got []string
	n, err := l.replay(func(r walRecord) error { got = append(got, string(r.key)); return nil })
	if err != nil || n != 1 || len(got) != 1 || got[0] != "new" {
		t.Fatalf("replayed %d records %q (%v), want only the new one", n, got, err)
	}
}

// TestAsyncLogKeptUpUnderLoad: Async writes reach the log within
// walWriteEvery while the committer never runs out of work — here four
// writers that keep queuing Puts without waiting (a RESP client's path
// once the writers' log records pile up past walMaxShared). The records
// waiting stay bounded, and after a SIGKILL in the middle of the load
// every write acknowledged well before it (500 ms: fifty times
// walWriteEvery, room for a slow machine and the race detector) is there.
// On the code before, a round of queued Puts took them into the cache and
// returned without writing the log: under such load the records waiting
// grew to 17–18 MB (six runs), and a SIGKILL lost acknowledged writes in
// four of six (up to 29,672 of them; whatever had not been flushed to
// Badger).
func TestAsyncLogKeptUpUnderLoad(t *testing.T) {
	dir := t.TempDir()
	argv := append(strings.Fields(os.Getenv("HEC_TEST_EXEC")), os.Args[0], "-test.run=^TestAsyncLoadCrashHelper$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HEC_KV_CRASH_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	type ack struct {
		key string
		at  time.Duration
	}
	var acks []ack
	var killedAt time.Duration
	var waiting int64 // the writers' log records waiting, at most
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var k string
		var ms float64
		if n, _ := fmt.Sscanf(sc.Text(), "acked %s %g", &k, &ms); n == 2 {
			acks = append(acks, ack{k, time.Duration(ms * float64(time.Millisecond))})
		}
		fmt.Sscanf(sc.Text(), "waiting %d", &waiting)
		if n, _ := fmt.Sscanf(sc.Text(), "kill %g", &ms); n == 1 {
			killedAt = time.Duration(ms * float64(time.Millisecond))
		}
	}
	cmd.Wait()
	if killedAt == 0 || len(acks) < 1000 {
		t.Fatalf("the helper acknowledged %d writes, kill at %v", len(acks), killedAt)
	}
	s, err := Open(dir, WithCache(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const margin = 500 * time.Millisecond
	lost, owed := 0, 0
	var firstLost time.Duration
	for _, a := range acks {
		if a.at > killedAt-margin {
			continue
		}
		owed++
		if _, err := s.Get([]byte(a.key), nil); err != nil {
			if lost == 0 {
				firstLost = a.at
			}
			lost++
		}
	}
	t.Logf("%d writes acknowledged in %v of load, %d more than %v before the kill: %d lost; log records waiting: at most %d bytes",
		len(acks), killedAt, owed, margin, lost, waiting)
	if waiting > 2*walMaxShared {
		t.Errorf("the writers' log records waiting reached %d bytes (writers go to the committer past %d)", waiting, walMaxShared)
	}
	if lost > 0 {
		t.Fatalf("%d of %d writes acknowledged more than %v before the kill are lost (the first acknowledged at %v of %v)",
			lost, owed, margin, firstLost.Round(time.Millisecond), killedAt.Round(time.Millisecond))
	}
}

// TestAsyncLoadCrashHelper runs in the helper process: 16 writers keep
// two runs of 16 queued Puts in flight each, noting each write once
// acknowledged with the time since the start; after a second and a half
// the notes so far are printed and the helper SIGKILLed, the writers
// still at it.
func TestAsyncLoadCrashHelper(t *testing.T) {
	dir := os.Getenv("HEC_KV_CRASH_DIR")
	if dir == "" {
		t.Skip("helper for TestAsyncLogKeptUpUnderLoad")
	}
	s, err := Open(dir, WithDurability(Async))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	type note struct {
		key string
		at  time.Duration
	}
	type writer struct {
		mu    sync.Mutex
		notes []note
	}
	writers := make([]writer, 4)
	for w := range writers {
		// A writer queues Puts without waiting (up to 4096 in flight); a
		// waiter of its own notes them acknowledged: the committer always
		// finds work.
		type queued struct {
			p   Pending
			key string
		}
		inflight := make(chan queued, 4096)
		go func() {
			val := []byte(strings.Repeat("v", 100))
			for i := 0; ; i++ {
				k := fmt.Sprintf("load/%d/%d", w, i)
				inflight <- queued{s.PutAsync([]byte(k), val, PutOptions{}), k}
			}
		}()
		go func() {
			for q := range inflight {
				if err := q.p.Wait(); err != nil {
					panic(err)
				}
				at := time.Since(start)
				writers[w].mu.Lock()
				writers[w].notes = append(writers[w].notes, note{q.key, at})
				writers[w].mu.Unlock()
			}
		}()
	}
	var most int64 // the writers' log records waiting, at most
	for end := start.Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		most = max(most, s.commit.wal.pending.Load())
	}
	var notes []note
	for w := range writers {
		writers[w].mu.Lock()
		notes = append(notes, writers[w].notes...)
		writers[w].mu.Unlock()
	}
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	for _, n := range notes {
		fmt.Fprintf(out, "acked %s %.3f\n", n.key, float64(n.at)/float64(time.Millisecond))
	}
	fmt.Fprintf(out, "waiting %d\n", most)
	fmt.Fprintf(out, "kill %.3f\n", float64(time.Since(start))/float64(time.Millisecond))
	out.Flush()
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
