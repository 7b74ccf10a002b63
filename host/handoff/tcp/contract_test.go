package tcp_test

import (
	"context"
	"testing"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/host/handoff/tcp"
	"github.com/hecsys/hec/test/handofftest"
)

// TestContract: the TCP transport against an agent's TCP handoff.
func TestContract(t *testing.T) {
	a := handofftest.Start(t, handofftest.Serve{})
	handofftest.Run(t, func(ctx context.Context, o handoff.Options) (handoff.Transport, error) {
		return tcp.Dial(ctx, a.TCP, o)
	})
}
