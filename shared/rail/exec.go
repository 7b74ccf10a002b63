package rail

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
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
	inline := -1 // the share run here: the host's, else the last one not a Starter
	for i, s := range plan.Shares {
		r := runners[s.Rail]
		if r == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoRunner, s.Rail)
		}
		if _, starts := r.(Starter); !starts && (inline < 0 || plan.Shares[inline].Kind != HostCPU) {
			inline = i
		}
	}
	took := make([]time.Duration, len(plan.Shares))
	t0 := time.Now()
	if len(plan.Shares) == 1 {
		s := plan.Shares[0]
		if err := runners[s.Rail].Run(ctx, s.Offset, s.Bytes); err != nil {
			return took, fmt.Errorf("%s rail: %w", s.Rail, err)
		}
		took[0] = time.Since(t0)
		return took, nil
	}
	errs := make([]error, len(plan.Shares))
	started := make([]Started, len(plan.Shares))
	run := func(i int) {
		s := plan.Shares[i]
		if err := runners[s.Rail].Run(ctx, s.Offset, s.Bytes); err != nil {
			errs[i] = fmt.Errorf("%s rail: %w", s.Rail, err)
			return
		}
		took[i] = time.Since(t0)
	}
	// wait waits for the started shares (and the goroutines), noting when
	// each ended where no piece saw it.
	var wg sync.WaitGroup
	wait := func() {
		for i, st := range started {
			if st == nil {
				continue
			}
			if err := st.Wait(); err != nil {
				errs[i], took[i] = fmt.Errorf("%s rail: %w", plan.Shares[i].Rail, err), 0
			} else if took[i] == 0 {
				took[i] = time.Since(t0)
			}
		}
		wg.Wait()
	}
	for i, s := range plan.Shares {
		if i == inline {
			continue
		}
		if st, ok := runners[s.Rail].(Starter); ok {
			var err error
			if started[i], err = st.Start(ctx, s.Offset, s.Bytes); err != nil {
				started[i] = nil
				wait()
				return took, fmt.Errorf("%s rail: %w", s.Rail, err)
			}
			continue
		}
		wg.Go(func() { run(i) })
	}
	if inline >= 0 {
		s := plan.Shares[inline]
		if pw, ok := runners[s.Rail].(Piecewise); ok {
			err := pw.RunPieces(ctx, s.Offset, s.Bytes, func() {
				for i, st := range started {
					if st != nil && took[i] == 0 && st.Done() {
						took[i] = time.Since(t0)
					}
				}
			})
			if err != nil {
				errs[inline] = fmt.Errorf("%s rail: %w", s.Rail, err)
			} else {
				took[inline] = time.Since(t0)
			}
		} else {
			run(inline)
		}
	}
	wait()
	return took, errors.Join(errs...)
}
