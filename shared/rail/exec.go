package rail

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hecsys/hec/shared/mono"
)

// Runner runs one rail's share of an operation: its bytes [off, off+n).
// A service has one per rail it can run on; a new rail is one more
// runner for each service it serves.
type Runner interface {
	Run(ctx context.Context, off, n int64) error
}

// RunnerFunc is a Runner made of a function.
type RunnerFunc func(ctx context.Context, off, n int64) error

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, off, n int64) error { return f(ctx, off, n) }

// Starter is a Runner that can hand its share off and return at once:
// Start submits it (to an agent, a device) and Started tells when it has
// ended. Execute starts such shares before it runs the host's, and waits
// for them after, so that no goroutine of the caller's competes with the
// host share for its core.
type Starter interface {
	Runner
	Start(ctx context.Context, off, n int64) (Started, error)
}

// Started is a share under way.
type Started interface {
	Done() bool  // whether it has ended, without waiting
	Wait() error // waits until it has ended
}

// Piecewise is a Runner that runs its share in pieces and calls between
// after each: there Execute notes which started shares have ended, so
// that each share's time is known to within a piece.
type Piecewise interface {
	Runner
	RunPieces(ctx context.Context, off, n int64, between func()) error
}

// Runners are a service's runners by rail name.
type Runners map[string]Runner

// ErrNoRunner is returned when a plan names a rail the service has no
// runner for.
var ErrNoRunner = errors.New("rail: no runner for the rail")

// Execute runs plan's shares at once, each on its rail's runner, and
// returns when every one has ended: how long each share took from the
// start (for the rails' estimators: zero for one that failed), and the
// shares' errors joined. The host rail's share (HostCPU: the calling
// goroutine's core is that rail; else the last share whose runner is not
// a Starter) runs on the calling goroutine — in pieces where its runner
// is Piecewise — after the others have been started: a Starter's by
// Start, any other's on a goroutine of its own. A
// plan of one share runs on the calling goroutine alone, so that a small
// operation pays nothing for having been planned. Nothing runs when the
// plan names a rail runners lacks; when a Start fails, the shares started
// are waited for and nothing else runs.
func Execute(ctx context.Context, plan Plan, runners Runners) ([]time.Duration, error) {
	took := make([]time.Duration, len(plan.Shares))
	err := ExecuteTo(ctx, plan, runners, mono.Now(), took)
	return took, err
}

// maxStackShares is how many shares ExecuteTo keeps its state for on the
// stack (a plan of more allocates it).
const maxStackShares = 4

// ExecuteTo is Execute writing each share's time since t0 (the caller's
// start of the operation: its clock read is the executor's too) to took
// (len(took) ≥ len(plan.Shares)), for a service that runs many small
// operations: a plan of one share allocates nothing (when its runner is a
// value the service keeps) and reads the clock once; one of several
// allocates a few words, for the piece-end notifier and any share that
// runs on a goroutine of its own.
func ExecuteTo(ctx context.Context, plan Plan, runners Runners, t0 time.Time, took []time.Duration) error {
	if len(took) < len(plan.Shares) {
		return fmt.Errorf("rail: room for %d shares' times, %d shares", len(took), len(plan.Shares))
	}
	took = took[:len(plan.Shares)]
	clear(took)
	if len(plan.Shares) == 1 {
		s := plan.Shares[0]
		r := runners[s.Rail]
		if r == nil {
			return fmt.Errorf("%w: %q", ErrNoRunner, s.Rail)
		}
		if err := r.Run(ctx, s.Offset, s.Bytes); err != nil {
			return railErr(s.Rail, err)
		}
		took[0] = time.Since(t0)
		return nil
	}
	inline := -1 // the share run here: the host's, else the last one not a Starter
	for i, s := range plan.Shares {
		r := runners[s.Rail]
		if r == nil {
			return fmt.Errorf("%w: %q", ErrNoRunner, s.Rail)
		}
		if _, starts := r.(Starter); !starts && (inline < 0 || plan.Shares[inline].Kind != HostCPU) {
			inline = i
		}
	}
	return executeShares(ctx, plan, runners, took, inline, t0)
}

// railErr is a share's error, naming its rail.
func railErr(rail string, err error) error { return fmt.Errorf("%s rail: %w", rail, err) }

// executeShares is ExecuteTo of a plan of several shares.
func executeShares(ctx context.Context, plan Plan, runners Runners, took []time.Duration, inline int, t0 time.Time) error {
	n := len(plan.Shares)
	var errsA [maxStackShares]error
	var startedA [maxStackShares]Started
	var cellsA [maxStackShares]*shareCell
	errs, started, cells := errsA[:n:n], startedA[:n:n], cellsA[:n:n]
	if n > maxStackShares {
		errs, started, cells = make([]error, n), make([]Started, n), make([]*shareCell, n)
	}
	var wg sync.WaitGroup
	// wait waits for the started shares and the goroutines, noting when
	// each ended where no piece saw it.
	wait := func() {
		for i, st := range started {
			if st == nil {
				continue
			}
			if err := st.Wait(); err != nil {
				errs[i], took[i] = railErr(plan.Shares[i].Rail, err), 0
			} else if took[i] == 0 {
				took[i] = time.Since(t0)
			}
		}
		wg.Wait()
		for i, c := range cells {
			if c != nil {
				took[i], errs[i] = c.took, c.err
			}
		}
	}
	for i, s := range plan.Shares {
		if i == inline {
			continue
		}
		r := runners[s.Rail]
		if st, ok := r.(Starter); ok {
			var err error
			if started[i], err = st.Start(ctx, s.Offset, s.Bytes); err != nil {
				started[i] = nil
				wait()
				return railErr(s.Rail, err)
			}
			continue
		}
		cells[i] = runOnGoroutine(ctx, &wg, r, s, t0)
	}
	if inline >= 0 {
		s := plan.Shares[inline]
		var err error
		if pw, ok := runners[s.Rail].(Piecewise); ok {
			err = pw.RunPieces(ctx, s.Offset, s.Bytes, func() {
				for i, st := range started {
					if st != nil && took[i] == 0 && st.Done() {
						took[i] = time.Since(t0)
					}
				}
			})
		} else {
			err = runners[s.Rail].Run(ctx, s.Offset, s.Bytes)
		}
		if err != nil {
			errs[inline] = railErr(s.Rail, err)
		} else {
			took[inline] = time.Since(t0)
		}
	}
	wait()
	return errors.Join(errs...)
}

// shareCell is where a share run on a goroutine of its own leaves its
// time and error.
type shareCell struct {
	took time.Duration
	err  error
}

// runOnGoroutine runs s on r on a new goroutine (wg counts it).
func runOnGoroutine(ctx context.Context, wg *sync.WaitGroup, r Runner, s Share, t0 time.Time) *shareCell {
	c := new(shareCell)
	wg.Go(func() {
		if err := r.Run(ctx, s.Offset, s.Bytes); err != nil {
			c.err = railErr(s.Rail, err)
			return
		}
		c.took = time.Since(t0)
	})
	return c
}
