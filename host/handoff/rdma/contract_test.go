package rdma_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/host/handoff/rdma"
	"github.com/hecsys/hec/shared/verbs/verbstest"
	"github.com/hecsys/hec/test/handofftest"
)

// TestRDMAContract: the RDMA transport against an agent's RDMA handoff,
// on this machine's RDMA device (soft-RoCE in test/vm's guest; skipped,
// saying why, where there is none).
func TestRDMAContract(t *testing.T) {
	listen := netip.AddrPortFrom(verbstest.Addr(t), 7481).String()
	a := handofftest.Start(t, handofftest.Serve{RDMA: listen})
	handofftest.Run(t, func(ctx context.Context, o handoff.Options) (handoff.Transport, error) {
		return rdma.Dial(ctx, a.RDMA, o)
	})
}
