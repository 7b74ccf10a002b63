package shm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hecsys/hec/dpu/handoff"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// echoRings is a handoff.RingServer of the test's: it answers every
// descriptor with its tag and Arg0+1, housekeeping every millisecond, and
// formats the region again (a new generation) before it serves when
// rebuild is set, as the agent's poller does with a region it lost.
type echoRings struct {
	handoff.Server // only ServeRings is called
	rebuild        bool
	served         atomic.Int64
}

func (e *echoRings) ServeRings(ctx context.Context, a *ring.Agent, beat *atomic.Int64) *ring.Agent {
	if e.rebuild {
		b, err := a.Rebuild()
		if err != nil {
			panic(err)
		}
		a = b
	}
	var in [8]ring.Incoming
	var last time.Time
	for ctx.Err() == nil {
		if now := time.Now(); now.Sub(last) > time.Millisecond {
			a.Housekeep(now)
			beat.Store(now.UnixNano())
			last = now
		}
		for _, q := range a.QueuePairs() {
			n := q.Take(in[:])
			for _, d := range in[:n] {
				q.Complete(&wire.Desc{Op: d.Desc.Op, Tag: d.Desc.Tag, Arg0: d.Desc.Arg0 + 1})
				e.served.Add(1)
			}
			q.Publish()
		}
		time.Sleep(20 * time.Microsecond)
	}
	return a
}

func config(t *testing.T) Config {
	return Config{Path: filepath.Join(t.TempDir(), "region"), Size: 1 << 20, QueuePairs: 2, RingEntries: 8,
		LeaseTimeout: time.Hour}
}

// asked is a host's pair of the region, leased for ask's descriptor.
type asked struct {
	r *ring.Region
	h *ring.Host
	q *ring.HostQP
}

func (a *asked) close() {
	if a.q != nil {
		a.q.Release()
	}
	a.r.Close()
}

// ask leases a pair of the region at path and has one descriptor
// answered; the caller closes the pair (when err is nil).
func ask(ctx context.Context, path string, arg uint64) (wire.Desc, *asked, error) {
	r, err := ring.Map(path, 0, false)
	if err != nil {
		return wire.Desc{}, nil, err
	}
	a := &asked{r: r}
	fail := func(err error) (wire.Desc, *asked, error) { a.close(); return wire.Desc{}, nil, err }
	if a.h, err = ring.Attach(r); err != nil {
		return fail(err)
	}
	if a.q, err = a.h.Lease(ctx, -1); err != nil {
		return fail(err)
	}
	if a.q.Submit([]wire.Desc{{Op: wire.OpPing, Tag: 42, Arg0: arg}}) != 1 {
		return fail(errors.New("no room"))
	}
	var out [1]wire.Desc
	for {
		n, err := a.q.Poll(out[:])
		if err != nil {
			return fail(err)
		}
		if n == 1 {
			return out[0], a, nil
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestRegionLife: Open makes the file, the agent's alone, and holds it
// (a second Open names this process's pid); Format gives a generation at
// least the one asked for; Run hands the rings to the server, whose
// answers the host gets; Close returns once Run has and marks the region
// stopped, of the agent side served last (a rebuilt region's); Release
// removes the file it made and lets go of the lock.
func TestRegionLife(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		name := map[bool]string{false: "as formatted", true: "rebuilt while served"}[rebuild]
		t.Run(name, func(t *testing.T) {
			cfg := config(t)
			tr, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Release()
			if fi, err := os.Stat(cfg.Path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("region file after Open: %v, %v; want mode 0600", fi, err)
			}
			_, err = Open(cfg)
			var held *HeldError
			if !errors.As(err, &held) || held.PID != os.Getpid() || !strings.Contains(err.Error(), "another agent") {
				t.Fatalf("a second Open: %v, want a HeldError naming pid %d", err, os.Getpid())
			}
			gen, err := tr.Format(7)
			if err != nil {
				t.Fatal(err)
			}
			if gen < 7 || tr.Geometry().QueuePairs != 2 || tr.Addr() != cfg.Path {
				t.Fatalf("Format(7): generation %d, geometry %+v, addr %s", gen, tr.Geometry(), tr.Addr())
			}
			srv := &echoRings{rebuild: rebuild}
			ran := make(chan error, 1)
			go func() { ran <- tr.Run(context.Background(), srv) }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// A host attached before the region was formatted again
			// attaches anew, as the host library does.
			resp, host, err := ask(ctx, cfg.Path, 41)
			for err != nil && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
				resp, host, err = ask(ctx, cfg.Path, 41)
			}
			if err != nil || resp.Tag != 42 || resp.Arg0 != 42 || resp.Status != wire.StatusOK {
				t.Fatalf("ping through the rings: %+v, %v", resp, err)
			}
			defer host.close()
			want := gen
			if rebuild {
				want = gen + 1
			}
			if host.h.Generation() != want {
				t.Errorf("the host saw generation %d, want %d", host.h.Generation(), want)
			}
			if time.Since(tr.LastBeat()) > 5*time.Second {
				t.Errorf("LastBeat %v: the server's housekeeping not seen", tr.LastBeat())
			}
			tr.Close()
			select {
			case err := <-ran:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			default:
				t.Fatal("Close returned before Run did")
			}
			// Stopped: the host's pair says so (retryable), and a host
			// attaching now is told so too.
			if err := host.q.Check(); !errors.Is(err, wire.StatusUnavailable) {
				t.Errorf("the host's pair after Close: %v, want %v", err, wire.StatusUnavailable)
			}
			r, err := ring.Map(cfg.Path, 0, false)
			if err != nil {
				t.Fatal(err)
			}
			h, err := ring.Attach(r)
			if err == nil && !h.AgentStopped() {
				t.Errorf("after Close a host attaches to a region not marked stopped (generation %d)", h.Generation())
			}
			r.Close()
			tr.Close() // twice is fine
			tr.Release()
			if _, err := os.Stat(cfg.Path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the region file Open made is left after Release: %v", err)
			}
			again, err := Open(cfg)
			if err != nil {
				t.Fatalf("Open after Release: %v", err)
			}
			again.Release()
		})
	}
}

// TestLeftByAnAgentThatIsGone: a region file that was there before Open
// (an agent that died left it) is formatted anew, said in the log, and
// left in place by Release, as is a file mapped whole (MapExisting).
func TestLeftByAnAgentThatIsGone(t *testing.T) {
	for _, mapExisting := range []bool{false, true} {
		t.Run(map[bool]string{false: "created file", true: "mapped whole"}[mapExisting], func(t *testing.T) {
			cfg := config(t)
			if err := os.WriteFile(cfg.Path, make([]byte, 1<<20), 0o600); err != nil {
				t.Fatal(err)
			}
			var log strings.Builder
			cfg.Log = slog.New(slog.NewTextHandler(&log, nil))
			cfg.MapExisting = mapExisting
			tr, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Format(1); err != nil {
				t.Fatal(err)
			}
			if said := strings.Contains(log.String(), "left by an agent that is gone"); said == mapExisting {
				t.Errorf("log says it formats a stale region anew: %v, want %v:\n%s", said, !mapExisting, log.String())
			}
			tr.Close()
			tr.Release()
			if _, err := os.Stat(cfg.Path); err != nil {
				t.Fatalf("a file Open did not make was removed: %v", err)
			}
		})
	}
}

// TestBadStarts: what cannot start says why, and leaves nothing held.
func TestBadStarts(t *testing.T) {
	t.Run("a size that holds no pair", func(t *testing.T) {
		cfg := config(t)
		cfg.Size = 4096
		tr, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tr.Format(1)
		var size *SizeError
		if !errors.As(err, &size) || size.Size != 4096 {
			t.Fatalf("Format of 4 KiB: %v, want a SizeError of 4096", err)
		}
		tr.Close()
		tr.Release()
		if _, err := os.Stat(cfg.Path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the region file is left after a failed Format: %v", err)
		}
	})
	t.Run("a device that is not there", func(t *testing.T) {
		cfg := config(t)
		cfg.MapExisting = true
		if _, err := Open(cfg); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Open of a missing device: %v, want not exist", err)
		}
	})
	t.Run("run before format, by a server that serves no rings, after close", func(t *testing.T) {
		tr, err := Open(config(t))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Release()
		if err := tr.Run(context.Background(), &echoRings{}); err == nil {
			t.Error("Run before Format: no error")
		}
		if _, err := tr.Format(1); err != nil {
			t.Fatal(err)
		}
		if err := tr.Run(context.Background(), plainServer{}); err == nil || !strings.Contains(err.Error(), "does not serve rings") {
			t.Errorf("Run with a plain Server: %v", err)
		}
		tr.Close()
		done := make(chan error, 1)
		go func() { done <- tr.Run(context.Background(), &echoRings{}) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run after Close: %v, want nil at once", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run after Close serves on")
		}
	})
}

// plainServer is a handoff.Server that is not a RingServer.
type plainServer struct{ handoff.Server }
