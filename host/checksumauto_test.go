package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/rail"
	"github.com/hecsys/hec/shared/trace"
)

// TestChecksumObjectiveHostCPU: where the host alone is the fastest plan
// but the agent alone is within 1.1× of it, objective time checksums on
// the host and host-cpu on the agent; both answers are exact.
func TestChecksumObjectiveHostCPU(t *testing.T) {
	shm, _, stop := startAgentWith(nil)
	defer stop()
	ctx := context.Background()
	c, err := host.Dial(ctx, "shm://"+shm)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, 100_000)
	for i := range b {
		b[i] = byte(i * 31)
	}
	want := crc32c.Checksum(b)
	// 100 KB: the host 10 µs, the agent 11 µs (its α alone 10 µs, too much
	// for a split).
	rails := []rail.Rail{{Name: rail.Host, Kind: rail.HostCPU, Rate: 10e9},
		{Name: rail.DPU, Kind: rail.DPUCores, Alpha: 10 * time.Microsecond, Rate: 100e9}}
	for _, c0 := range []struct {
		o    rail.Objective
		want string
	}{{rail.Time, rail.Host}, {rail.HostCPUTime, rail.DPU}} {
		got, d, err := c.ChecksumAutoFor(ctx, b, rails, c0.o)
		if err != nil || got != want {
			t.Fatalf("objective %v: crc %08x, %v; want %08x", c0.o, got, err, want)
		}
		if d.Choice != c0.want {
			t.Errorf("objective %v ran on %q (%s), want %s", c0.o, d.Choice, d.Reason, c0.want)
		}
	}
}

// TestSplitSharesAreTraced: while the process records, a checksum split
// across the rails records each rail's share under one id, from the op's
// start to the share's end, beside the planner's time for it; a checksum
// on one rail records no share, and nothing is recorded while no one
// records.
func TestSplitSharesAreTraced(t *testing.T) {
	shm, _, stop := startAgentWith(nil)
	defer stop()
	ctx := context.Background()
	rec := trace.NewRecorder(0)
	c, err := host.Dial(ctx, "shm://"+shm, host.WithTrace(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, 4<<20)
	for i := range b {
		b[i] = byte(i * 31)
	}
	want := crc32c.Checksum(b)
	// Equal rails: the planner splits the buffer in two.
	even := []rail.Rail{{Name: rail.Host, Kind: rail.HostCPU, Rate: 1e9},
		{Name: rail.DPU, Kind: rail.DPUCores, Rate: 1e9}}
	hostOnly := []rail.Rail{{Name: rail.Host, Kind: rail.HostCPU, Rate: 1e9}}
	split := func(rails []rail.Rail) rail.Plan {
		t.Helper()
		got, plan, err := c.ChecksumSplit(ctx, b, rails)
		if err != nil || got != want {
			t.Fatalf("crc %08x, %v; want %08x", got, err, want)
		}
		return plan
	}
	split(even)
	end := rec.Begin()
	t0 := time.Now()
	plan := split(even)
	split(hostOnly)
	end()
	split(even)
	if len(plan.Shares) != 2 {
		t.Fatalf("plan %s: want a split", plan.Explain())
	}
	spans, _ := rec.Since(0)
	var shares []trace.Span
	for _, s := range spans {
		if s.Stage == trace.StageShare {
			shares = append(shares, s)
		}
	}
	if len(shares) != 2 {
		t.Fatalf("share spans %+v: want the split's two", shares)
	}
	for i, s := range shares {
		p := plan.Shares[i]
		if s.ID != shares[0].ID || !strings.HasPrefix(s.ID, "split ") || s.Name != "checksum" || s.Peer != p.Rail ||
			s.Bytes != p.Bytes || s.Predicted != int64(p.Predicted) || s.Predicted <= 0 || s.Dur <= 0 ||
			s.Start < t0.UnixNano() || s.Status != "" {
			t.Errorf("share %d: %+v; want the plan's %+v under one split id, after %d", i, s, p, t0.UnixNano())
		}
	}
}
