package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/trace"
)

// The trace scenario (issue: see where an op's time goes): what recording
// costs the ops it records. A 1 MiB 10+4 EC encode and a 1 MiB checksum
// through the agent, timed with nothing recording and with both the
// agent (GET /v1/trace) and this host process (host.WithTrace) recording,
// the two phases alternating; each recorded phase's spans are counted
// against the ops it timed, so a phase the agent did not record does not
// pass for one that did. Off, an op pays one atomic load on each side.
func benchTrace(ctx context.Context, rep *Report, quick bool) error {
	const s = "trace"
	dir, hecd, err := scratchHecd("trace")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c0, stop, err := ecAgent(ctx, hecd, dir, "trace")
	if err != nil {
		return err
	}
	defer stop()
	c0.Close() // the agent's pair for the traced client
	rec := trace.NewRecorder(0)
	c, err := host.Dial(ctx, "shm://"+shmPath("ec-trace"), host.WithTrace(rec))
	if err != nil {
		return err
	}
	defer c.Close()
	mgmt := host.NewMgmt("127.0.0.1:26430") // ecAgent's
	const k, m, size = 10, 4, 1 << 20
	buf, err := c.Alloc(int(ec.ShardSize(size, k)) * (k + m))
	if err != nil {
		return err
	}
	defer c.Free(buf)
	stripe := ecStripe(buf, k, m, size)
	e, err := c.EC(k, m, host.WithRails(host.RailsDPU))
	if err != nil {
		return err
	}
	sum, err := c.Alloc(size)
	if err != nil {
		return err
	}
	defer c.Free(sum)
	ops := []struct {
		name string
		run  func() error
	}{
		{"1 MiB EC encode 10+4", func() error { _, err := e.Encode(ctx, stripe); return err }},
		{"1 MiB checksum", func() error { _, err := c.Checksum(ctx, sum); return err }},
	}
	rounds, phase := 8, 250*time.Millisecond
	if quick {
		rounds, phase = 3, 100*time.Millisecond
	}
	for _, op := range ops {
		var ratios []float64
		var spans []trace.Span // the recorded phases', host and agent
		for r := range rounds {
			progress(s, "%s: round %d of %d", op.name, r+1, rounds)
			off, err := timeRuns(phase, op.run)
			if err != nil {
				return fmt.Errorf("%s: %w", op.name, err)
			}
			// On: the agent records for longer than the phase, which
			// begins once its request is surely in.
			type recorded struct {
				trace.Reply
				err error
			}
			got := make(chan recorded, 1)
			go func() {
				r, err := mgmt.Trace(ctx, phase+200*time.Millisecond)
				got <- recorded{r, err}
			}()
			time.Sleep(50 * time.Millisecond)
			mark := rec.Mark()
			end := rec.Begin()
			on, err := timeRuns(phase, op.run)
			end()
			if err != nil {
				return fmt.Errorf("%s: %w", op.name, err)
			}
			reply := <-got
			if reply.err != nil {
				return fmt.Errorf("%s: recording the agent: %w", op.name, reply.err)
			}
			n := len(on) // timed; the agent saw one more, timeRuns' warm-up
			served := 0
			for _, sp := range reply.Spans {
				if sp.Stage == trace.StageServe {
					served++
				}
			}
			if served < n {
				return fmt.Errorf("%s: the agent recorded %d ops of the %d timed while it recorded", op.name, served, n)
			}
			ratios = append(ratios, median(on).Seconds()/median(off).Seconds())
			hostSpans, _ := rec.Since(mark)
			spans = append(append(spans, hostSpans...), reply.Spans...)
		}
		// Where an op's time went, as hecctl trace summary says it.
		for _, row := range trace.Summarize(spans) {
			switch row.Stage {
			case trace.StageOp, trace.StageTransport, trace.StageQueue, trace.StageServe, trace.StageCode:
				rep.add(s, fmt.Sprintf("%s, recorded: %s stage %s, median of %d", op.name, row.Name, row.Stage, row.Count), float64(row.P50)/1e3, "µs")
			}
		}
		rep.atMostN(s, op.name+" through the agent: recorded (host and agent) / not recorded, medians per phase", ratios, 1.03, "×")
	}
	return nil
}
