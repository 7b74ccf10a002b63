package shm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/dpu/handoff"
	"github.com/hecsys/hec/dpu/lockfile"
	"github.com/hecsys/hec/shared/ring"
)

// Config is the region's: where it is, how big, how its pairs are
// leased.
type Config struct {
	// Path is the region's file (a file under /dev/shm, or an ivshmem
	// BAR's resource file with MapExisting).
	Path string
	// MapExisting maps Path whole as it is instead of creating and sizing
	// a file; Size is then ignored.
	MapExisting bool
	// Size is the region's size in bytes.
	Size uint64
	// QueuePairs and RingEntries shape it (ring.GeometryForSize; zero:
	// its defaults).
	QueuePairs, RingEntries int
	// LeaseTimeout fences a queue pair whose holder's heartbeat is older;
	// CheckPIDs one whose holder's pid is gone.
	LeaseTimeout time.Duration
	CheckPIDs    bool
	// Log takes the region's notices (one left by an agent that is gone).
	Log *slog.Logger
}

// HeldError is Open's error when another agent serves the region.
type HeldError struct {
	PID int // 0: unknown
}

func (e *HeldError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("served by another agent (pid %d); leaving it alone", e.PID)
	}
	return "served by another process; leaving it alone"
}

// SizeError is Format's error when the region's size cannot hold the
// configured pairs (the size asked for, or the existing file's).
type SizeError struct {
	Size uint64
	Err  error
}

func (e *SizeError) Error() string { return fmt.Sprintf("region size %d: %v", e.Size, e.Err) }
func (e *SizeError) Unwrap() error { return e.Err }

// Transport is the region served to the hosts that share the agent's
// memory. Its life is Open (the file held), Format (the region mapped
// and formatted), Run (its rings served by a handoff.RingServer), Close
// (the region marked stopped: hosts fail what is in flight with a
// retryable status) and Release (unmapped last, the file removed where
// Open made it, the lock let go).
type Transport struct {
	cfg     Config
	lock    *os.File
	created bool // Open made the file: Release removes it

	region *ring.Region
	geom   ring.Geometry
	beat   atomic.Int64 // unix nanos of the poller's last housekeeping

	mu      sync.Mutex
	agent   *ring.Agent // the agent side served (the last one, once Run returned)
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run returns
	closed  bool
	stopped bool // the region marked stopped (once)
}

var _ handoff.Transport = (*Transport)(nil)

// Open takes the region's file: it locks it (another agent's lock is a
// HeldError naming its pid, and the file is left alone), creating it
// unless cfg.MapExisting, and makes a file it may create the agent's
// user's alone (mode 0600: the region's access control). Nothing in the
// region is touched until Format.
func Open(cfg Config) (*Transport, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	_, statErr := os.Stat(cfg.Path)
	lock, err := lockfile.Lock(cfg.Path, !cfg.MapExisting, 0o600)
	if err != nil {
		var held *lockfile.HeldError
		if errors.As(err, &held) {
			return nil, &HeldError{PID: held.PID}
		}
		return nil, err
	}
	t := &Transport{cfg: cfg, lock: lock, created: errors.Is(statErr, os.ErrNotExist)}
	if statErr == nil && !cfg.MapExisting {
		cfg.Log.Warn("the region was left by an agent that is gone: formatting it anew", "region", cfg.Path)
	}
	if !cfg.MapExisting {
		if err := ownRegion(lock); err != nil {
			t.Release()
			return nil, err
		}
	}
	return t, nil
}

// ownRegion makes the region file f the agent's alone: mode 0600, owned
// by the agent's user (a file someone else made beforehand is taken over,
// or refused when the agent may not).
func ownRegion(f *os.File) error {
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("make the region file 0600: %w", err)
	}
	if err := f.Chown(os.Geteuid(), os.Getegid()); err != nil {
		return fmt.Errorf("the region file belongs to another user and cannot be taken over: %w", err)
	}
	return nil
}

// Format maps the region (creating and sizing the file, unless it maps an
// existing device whole) and formats it with a generation of at least
// minGen, which it returns. The agent calls it once everything else that
// can fail is held: hosts attached to a region left by an agent that is
// gone see it formatted only by one that will serve it.
func (t *Transport) Format(minGen uint32) (uint32, error) {
	c := &t.cfg
	want := c.Size
	var region *ring.Region
	var err error
	if c.MapExisting {
		if region, err = ring.Map(c.Path, 0, false); err != nil {
			return 0, err
		}
		want = region.Len()
	}
	g, err := ring.GeometryForSize(want, c.QueuePairs, c.RingEntries)
	if err != nil {
		if region != nil {
			region.Close()
		}
		return 0, &SizeError{Size: want, Err: err}
	}
	if region == nil {
		size, _ := g.Size()
		if region, err = ring.Map(c.Path, size, true); err != nil {
			return 0, err
		}
	}
	a, err := ring.Format(region, ring.AgentConfig{Geometry: g, LeaseTimeout: c.LeaseTimeout,
		CheckPIDs: c.CheckPIDs, MinGeneration: minGen})
	if err != nil {
		region.Close()
		return 0, err
	}
	t.region, t.geom = region, g
	t.beat.Store(time.Now().UnixNano())
	t.mu.Lock()
	t.agent = a
	t.mu.Unlock()
	return a.Generation(), nil
}

// Geometry is the formatted region's (zero before Format).
func (t *Transport) Geometry() ring.Geometry { return t.geom }

// Addr is the region's file.
func (t *Transport) Addr() string { return t.cfg.Path }

// LastBeat is when the poller last did its housekeeping (Format's time
// until it runs): a poller that stopped is an agent that is stuck.
func (t *Transport) LastBeat() time.Time { return time.Unix(0, t.beat.Load()) }

// Run hands the formatted region's rings to srv, which must be a
// handoff.RingServer (the rings' scheduling is the agent's poller's), and
// returns when ctx ends or Close is called, the work taken from the rings
// completed or dropped. It runs once.
func (t *Transport) Run(ctx context.Context, srv handoff.Server) error {
	rs, ok := srv.(handoff.RingServer)
	if !ok {
		return fmt.Errorf("shm: %T does not serve rings", srv)
	}
	t.mu.Lock()
	a := t.agent
	switch {
	case t.closed:
		t.mu.Unlock()
		return nil
	case a == nil:
		t.mu.Unlock()
		return errors.New("shm: Run before Format")
	case t.done != nil:
		t.mu.Unlock()
		return errors.New("shm: Run twice")
	}
	ctx, t.cancel = context.WithCancel(ctx)
	t.done = make(chan struct{})
	t.mu.Unlock()
	last := rs.ServeRings(ctx, a, &t.beat)
	t.mu.Lock()
	t.agent = last
	t.cancel()
	close(t.done)
	t.mu.Unlock()
	return nil
}

// Close stops serving: Run returns (the poller completes what workers
// hold, for a bounded time), then the region is marked stopped, and
// hosts fail what they have in flight with the retryable
// wire.StatusUnavailable. The region stays mapped (handlers that run
// detached may still write it) until Release. Close may be called more
// than once, and before Run.
func (t *Transport) Close() {
	t.mu.Lock()
	t.closed = true
	if t.cancel != nil {
		t.cancel()
	}
	done := t.done
	t.mu.Unlock()
	if done != nil {
		<-done
	}
	t.mu.Lock()
	a := t.agent
	stop := a != nil && !t.stopped
	t.stopped = true
	t.mu.Unlock()
	if stop {
		a.Stop()
	}
}

// Release unmaps the region, removes its file where Open made it, and
// lets go of its lock, in that order (no other agent has the file before
// it is gone), closing the transport first if it was not. It comes last,
// after every handler that may write the region has returned.
func (t *Transport) Release() {
	t.Close()
	if t.region != nil {
		t.region.Close()
		t.region = nil
	}
	if t.created {
		os.Remove(t.cfg.Path)
	}
	if t.lock != nil {
		t.lock.Close()
		t.lock = nil
	}
}
