package host

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/rail"
	"github.com/hecsys/hec/shared/wire"
)

// Rail names used by the multi-rail operations.
const (
	RailHost = "host"
	RailDPU  = "dpu"
)

// CalibrateChecksum measures, now, the checksum rails this client can use:
// the host's CPU (crc32c in this process) and the agent (the CHECKSUM op on
// a buffer in the window; its fixed cost from a tiny op). It takes a few
// milliseconds.
func (c *Client) CalibrateChecksum(ctx context.Context) ([]rail.Rail, error) {
	const n = 4 << 20
	buf, err := c.Alloc(n)
	if err != nil {
		buf = make([]byte, n) // TCP, or a full window: staged, and measured as such
	} else {
		defer c.Free(buf)
	}
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	best := func(f func() error) (time.Duration, error) {
		b := time.Duration(1<<63 - 1)
		for i := 0; i < 3; i++ {
			t0 := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			b = min(b, time.Since(t0))
		}
		return b, nil
	}
	host, _ := best(func() error { crc32c.Checksum(buf); return nil })
	alpha, err := best(func() error { _, err := c.Checksum(ctx, buf[:64]); return err })
	if err != nil {
		return nil, fmt.Errorf("calibrate the agent rail: %w", err)
	}
	agent, err := best(func() error { _, err := c.Checksum(ctx, buf); return err })
	if err != nil {
		return nil, fmt.Errorf("calibrate the agent rail: %w", err)
	}
	net := max(agent-alpha, time.Microsecond)
	return []rail.Rail{
		{Name: RailHost, Kind: rail.HostCPU, Rate: n / host.Seconds(), Confidence: 0.5},
		{Name: RailDPU, Kind: rail.DPUCores, Alpha: alpha, Rate: n / net.Seconds(), Confidence: 0.5},
	}, nil
}

// ChecksumSplit computes the CRC-32C of b with the planner's split across
// rails (RailHost computed here, RailDPU by the agent), all at once, and
// combines the parts exactly: the result equals a single-rail checksum.
func (c *Client) ChecksumSplit(ctx context.Context, b []byte, rails []rail.Rail) (uint32, rail.Plan, error) {
	plan := rail.Split(rails, int64(len(b)), 4096)
	parts := make([]uint32, len(plan.Shares))
	errs := make([]error, len(plan.Shares))
	var wg sync.WaitGroup
	for i, s := range plan.Shares {
		part := b[s.Offset : s.Offset+s.Bytes]
		switch s.Rail {
		case RailHost:
			wg.Add(1)
			go func() { defer wg.Done(); parts[i] = crc32c.Checksum(part) }()
		case RailDPU:
			wg.Add(1)
			go func() { defer wg.Done(); parts[i], errs[i] = c.Checksum(ctx, part) }()
		default:
			return 0, plan, fmt.Errorf("host: checksum on rail %q: %w", s.Rail, wire.StatusUnsupported)
		}
	}
	wg.Wait()
	var crc uint32
	for i, s := range plan.Shares {
		if errs[i] != nil {
			return 0, plan, errs[i]
		}
		if i == 0 {
			crc = parts[0]
			continue
		}
		crc = crc32c.Combine(crc, parts[i], s.Bytes)
	}
	return crc, plan, nil
}
