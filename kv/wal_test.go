package kv

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
		if e, err := s.Get([]byte(k), nil); err != nil || string(e.Value) != v {
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
		if e, err := r.Get([]byte(k), nil); err != nil || string(e.Value) != v {
			t.Fatalf("after a second open %s = %q (%v), acknowledged %q", k, e.Value, err, v)
		}
	}
}

// TestLogCrashHelper runs in the helper process: 8 writers, each plain
// Puts of its own keys (cached) and INCRs of its own counter (through the
// committer, which flushes the cache first), each printed once
// acknowledged; then SIGKILL.
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
				}
			}
		}()
	}
	for range 8 * 110 {
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
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeWALBody(b)
		if err != nil {
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
