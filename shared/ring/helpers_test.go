package ring

import (
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/wire"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TestMain lets the test binary serve as the other process of two-process
// tests: with HEC_RING_HELPER set it runs that helper and exits.
func TestMain(m *testing.M) {
	if mode := os.Getenv("HEC_RING_HELPER"); mode != "" {
		os.Exit(runHelper(mode, os.Getenv("HEC_RING_PATH")))
	}
	os.Exit(m.Run())
}

// helperCmd returns a command running this test binary as helper mode. Under
// qemu-user (arm64 tests on x86) HEC_TEST_EXEC names the emulator, since the
// binary cannot be executed directly without binfmt_misc.
func helperCmd(t *testing.T, mode, path string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{self}, args...)
	if w := os.Getenv("HEC_TEST_EXEC"); w != "" {
		argv = append(strings.Fields(w), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HEC_RING_HELPER="+mode, "HEC_RING_PATH="+path)
	cmd.Stderr = os.Stderr
	return cmd
}

// newRegion makes a region in Go memory, where the race detector sees every
// access, and formats it.
func newRegion(t testing.TB, g Geometry, cfg AgentConfig) (*Region, *Agent) {
	t.Helper()
	size, err := g.Size()
	if err != nil {
		t.Fatal(err)
	}
	r := NewHeapRegion(size)
	cfg.Geometry = g
	a, err := Format(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, a
}

// newFileRegion makes a region file in a temporary directory (on /dev/shm
// when it exists, as in production) and formats it, for tests with another
// process.
func newFileRegion(t testing.TB, g Geometry, cfg AgentConfig) (*Region, *Agent) {
	t.Helper()
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("hec-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { os.Remove(path) })
	size, err := g.Size()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Map(path, size, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	cfg.Geometry = g
	a, err := Format(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, a
}

// serve is a minimal agent loop for tests: PING echoes Arg0, CHECKSUM returns
// the crc32c of Spans[0], anything else fails with StatusBadOp. With shuffle
// set, completions of a batch are written in reverse order.
type server struct {
	a        *Agent
	accessor func(q *AgentQP) Accessor
	reverse  bool
	mu       sync.Mutex // guards Housekeep vs. tests peeking at state
}

func (s *server) run(ctx context.Context) {
	in := make([]Incoming, 64)
	out := make([]wire.Desc, 64)
	var w Waiter
	last := time.Now()
	var scratch []byte
	for ctx.Err() == nil {
		busy := false
		s.mu.Lock()
		if now := time.Now(); now.Sub(last) > 5*time.Millisecond {
			s.a.Housekeep(now)
			last = now
		}
		for _, q := range s.a.QueuePairs() {
			n := q.Take(in)
			if n == 0 {
				continue
			}
			busy = true
			acc := Accessor(q.Window())
			if s.accessor != nil {
				acc = s.accessor(q)
			}
			for i := 0; i < n; i++ {
				out[i] = in[i].Desc
				out[i].Status, out[i].Arg0 = execute(acc, &in[i], &scratch)
			}
			for i := 0; i < n; i++ {
				j := i
				if s.reverse {
					j = n - 1 - i
				}
				q.Complete(&out[j])
			}
			q.Publish()
		}
		s.mu.Unlock()
		if busy {
			w.Reset()
		} else {
			w.Wait()
		}
	}
}

func execute(acc Accessor, in *Incoming, scratch *[]byte) (wire.Status, uint64) {
	if in.Err != nil {
		return wire.StatusBadSpan, 0
	}
	switch in.Op {
	case wire.OpPing:
		return wire.StatusOK, in.Arg0
	case wire.OpChecksum:
		if in.NSpan != 1 {
			return wire.StatusBadArg, 0
		}
		b, err := Bytes(acc, in.Spans[0], *scratch)
		if err != nil {
			return wire.StatusBadSpan, 0
		}
		if cap(b) > cap(*scratch) {
			*scratch = b
		}
		return wire.StatusOK, uint64(crc32.Update(uint32(in.Arg0), castagnoli, b))
	}
	return wire.StatusBadOp, 0
}

func startServer(t testing.TB, s *server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// roundTrip submits ds and polls until all complete, with a deadline.
func roundTrip(q *HostQP, ds []wire.Desc, out []wire.Desc) error {
	sent, got := 0, 0
	deadline := time.Now().Add(10 * time.Second)
	var w Waiter
	for got < len(ds) {
		if sent < len(ds) {
			sent += q.Submit(ds[sent:])
		}
		n, err := q.Poll(out[got:])
		if err != nil {
			return err
		}
		got += n
		if n > 0 {
			w.Reset()
		} else {
			if time.Now().After(deadline) {
				return fmt.Errorf("round trip: %d of %d completions after 10s", got, len(ds))
			}
			w.Wait()
		}
	}
	return nil
}

func mustLease(t testing.TB, r *Region) (*Host, *HostQP) {
	t.Helper()
	h, err := Attach(r)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Lease(context.Background(), -1)
	if err != nil {
		t.Fatal(err)
	}
	return h, q
}

// setBindWait sets how long a lease waits for the agent to bind a pair,
// until the test ends.
func setBindWait(t testing.TB, d time.Duration) {
	old := bindWait
	bindWait = d
	t.Cleanup(func() { bindWait = old })
}

// everyMillisecond runs fn on a goroutine of its own every millisecond
// until the test ends: an agent's side that a test drives itself.
func everyMillisecond(t testing.TB, fn func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fn()
			time.Sleep(time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// leaseHousekeeping leases a pair while driving the agent's housekeeping
// itself, for tests without a server goroutine.
func leaseHousekeeping(t testing.TB, r *Region, a *Agent) *HostQP {
	t.Helper()
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
				a.Housekeep(time.Now())
			}
		}
	}()
	_, q := mustLease(t, r)
	close(done)
	<-exited
	return q
}
