package kv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLogBringsBackWhatBadgerLost: a Sync store is SIGKILLed right after
// acknowledging writes that sit, logged, in the cache — not yet in Badger,
// which does not sync. Reopened, every acknowledged write is there: the
// log's replay put them back.
func TestLogBringsBackWhatBadgerLost(t *testing.T) {
	dir := t.TempDir()
	argv := append(strings.Fields(os.Getenv("HEC_TEST_EXEC")), os.Args[0], "-test.run=^TestLogCrashHelper$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HEC_KV_CRASH_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if k, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked = append(acked, k)
		}
	}
	cmd.Wait()
	if len(acked) < 100 {
		t.Fatalf("the helper acknowledged only %d writes", len(acked))
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
	for _, k := range acked {
		if e, err := s.Get([]byte(k), nil); err != nil || string(e.Value) != "v-"+k {
			lost++
		}
	}
	t.Logf("%d acknowledged writes, a %d-byte log, %d lost", len(acked), fi.Size(), lost)
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged writes lost", lost, len(acked))
	}
	if fi, err := os.Stat(filepath.Join(dir, walName)); err != nil || fi.Size() != 0 {
		t.Fatalf("the log was not emptied after the replay: %v", err)
	}
}

// TestLogCrashHelper runs in the helper process: plain Sync Puts from
// many writers (so rounds group), each printed once acknowledged, then
// SIGKILL.
func TestLogCrashHelper(t *testing.T) {
	dir := os.Getenv("HEC_KV_CRASH_DIR")
	if dir == "" {
		t.Skip("helper for TestLogBringsBackWhatBadgerLost")
	}
	s, err := Open(dir, WithDurability(Sync))
	if err != nil {
		t.Fatal(err)
	}
	acks := make(chan string, 64)
	for w := range 8 {
		go func() {
			for i := range 100 {
				k := fmt.Sprintf("crash/%d/%d", w, i)
				if _, err := s.Put([]byte(k), []byte("v-"+k), PutOptions{}); err != nil {
					panic(err)
				}
				acks <- k
			}
		}()
	}
	for range 800 {
		fmt.Printf("acked %s\n", <-acks)
	}
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestLogTornTail: a record cut short (a power loss mid-append) or a
// corrupt one ends the replay; the records before it are applied.
func TestLogTornTail(t *testing.T) {
	for _, tt := range []struct {
		name string
		tail func(rec []byte) []byte
	}{
		{"cut short", func(rec []byte) []byte { return rec[:len(rec)-3] }},
		{"bit flipped", func(rec []byte) []byte { rec[len(rec)-2] ^= 1; return rec }},
		{"zeros", func(rec []byte) []byte { return make([]byte, len(rec)) }},
		{"huge length", func(rec []byte) []byte { rec[7] = 0xff; return rec }},
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
			good := len(l.buf)
			l.add(walSet, []byte("c"), []byte("3"), 0)
			l.buf = append(l.buf[:good], tt.tail(append([]byte(nil), l.buf[good:]...))...)
			if err := l.commit(); err != nil {
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
	f.Add(l.buf[8:])
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
		if string(again.buf[8:]) != string(b) {
			t.Fatalf("%x decodes to %+v, which encodes as %x", b, rec, again.buf[8:])
		}
	})
}
