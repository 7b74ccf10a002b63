package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/rail"
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
