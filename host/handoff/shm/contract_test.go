package shm_test

import (
	"context"
	"testing"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/host/handoff/shm"
	"github.com/hecsys/hec/test/handofftest"
)

// TestContract: the shared-memory transport against an agent's region.
func TestContract(t *testing.T) {
	a := handofftest.Start(t, handofftest.Serve{Shm: true})
	handofftest.Run(t, func(ctx context.Context, o handoff.Options) (handoff.Transport, error) {
		return shm.Dial(ctx, a.Shm, o)
	})
}
