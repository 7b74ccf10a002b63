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

// Runners are a service's runners by rail name.
type Runners map[string]Runner

// ErrNoRunner is returned when a plan names a rail the service has no
// runner for.
var ErrNoRunner = errors.New("rail: no runner for the rail")

// Execute runs plan's shares at once, each on its rail's runner, and
// returns when every one has ended: how long each share took from the
// start (for the rails' estimators: zero for one that failed), and the
// shares' errors joined. The host rail's share (HostCPU: the calling
// goroutine's core is that rail) runs on the calling goroutine, the
// others each on a goroutine of its own; a plan of one share runs on the
// calling goroutine alone, so that a small operation pays nothing for
// having been planned. Nothing runs when the plan names a rail runners
// lacks.
func Execute(ctx context.Context, plan Plan, runners Runners) ([]time.Duration, error) {
	inline := len(plan.Shares) - 1
	for i, s := range plan.Shares {
		if runners[s.Rail] == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoRunner, s.Rail)
		}
		if s.Kind == HostCPU {
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
	run := func(i int) {
		s := plan.Shares[i]
		if err := runners[s.Rail].Run(ctx, s.Offset, s.Bytes); err != nil {
			errs[i] = fmt.Errorf("%s rail: %w", s.Rail, err)
			return
		}
		took[i] = time.Since(t0)
	}
	var wg sync.WaitGroup
	for i := range plan.Shares {
		if i != inline {
			wg.Go(func() { run(i) })
		}
	}
	if inline >= 0 {
		run(inline)
	}
	wg.Wait()
	return took, errors.Join(errs...)
}
