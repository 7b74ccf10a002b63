package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/testutil"
)

// The trace scenario (issue: see where an op's time goes): what recording
// costs the ops it records. A 1 MiB 10+4 EC encode and a 1 MiB checksum
// through the agent, and a 1 MiB allreduce among two agents peered on
// loopback (each rank a host client of its agent, the agents' messages
// recorded too), timed with nothing recording and with the agents (GET
// /v1/trace) and this host process (host.WithTrace) recording, the two
// phases alternating; each recorded phase's spans are counted against
// the ops it timed, so a phase the agents did not record does not pass
// for one that did. Off, an op pays one atomic load on each side (and a
// collective's message one more).
func benchTrace(ctx context.Context, rep *Report, quick bool) error {
	const s = "trace"
	dir, hecd, err := scratchHecd("trace")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rounds, phase := 16, 150*time.Millisecond
	if quick {
		rounds, phase = 3, 100*time.Millisecond
	}
	if err := traceOff(ctx, rep, s, dir, hecd, rounds, phase); err != nil {
		return err
	}
	if err := traceHandoff(ctx, rep, s, dir, hecd, rounds, phase); err != nil {
		return err
	}
	return traceAllReduce(ctx, rep, s, dir, hecd, rounds, phase)
}

// traceOff measures what recording costs while no one records: the
// agent as built against one built without recording (-tags hecnotrace:
// trace.Compiled false, every check of it gone), each pinned in turn to
// the last core, the same ops through each in phases (one of either,
// then the other again: the middle against the mean of the two around it,
// the order swapped every round): a ping, the smallest op, where the
// checks weigh most (hecctl ping on the first core), and a 1 MiB
// checksum from this process, pinned there too. The host side is the
// same in both: its share of the cost, one atomic load with HEC_TRACE=1
// and none without, is not in the ratio.
func traceOff(ctx context.Context, rep *Report, s, dir, hecd string, rounds int, phase time.Duration) error {
	bare := filepath.Join(dir, "hecd-notrace")
	build := exec.Command("go", "build", "-tags", "hecnotrace", "-o", bare, "./dpu/cmd/hecd")
	build.Dir = testutil.ModuleRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -tags hecnotrace ./dpu/cmd/hecd: %v\n%s", err, out)
	}
	hecctl, err := testutil.Build("./host/cmd/hecctl")
	if err != nil {
		return err
	}
	type agent struct {
		c         *host.Client
		sum       []byte
		shm, mgmt string
	}
	var agents [2]agent // the agent as built; without recording
	for i, bin := range []string{hecd, bare} {
		shm := shmPath(fmt.Sprintf("trace-off-%d", i))
		mgmt := fmt.Sprintf("127.0.0.1:%d", 26436+i)
		cmd := exec.Command("taskset", "-c", strconv.Itoa(runtime.NumCPU()-1), bin, "--shm", shm, "--region-size", strconv.Itoa(64<<20),
			"--queue-pairs", "2", "--tcp", "off", "--resp", "off", "--udp", "off", "--mgmt", mgmt,
			"--state-dir", filepath.Join(dir, fmt.Sprintf("state-off-%d", i)), "--log-level", "warn")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait(); os.Remove(shm) }()
		if err := calibrated(ctx, mgmt, bin); err != nil {
			return err
		}
		c, err := host.Dial(ctx, "shm://"+shm)
		if err != nil {
			return err
		}
		defer c.Close()
		sum, err := c.Alloc(1 << 20)
		if err != nil {
			return err
		}
		agents[i] = agent{c, sum, shm, mgmt}
	}
	old, err := pinAll(0) // the host side on the first core; the agents have the last
	if err != nil {
		return err
	}
	defer setAll(old)
	// A phase's median: a 1 MiB checksum from this process; pings from
	// a hecctl of their own on the first core (its p50 of 100,000), as
	// a process of the bench's both agents' clients moved a 0.6 µs ping
	// by several percent between two agents of one build.
	pings := func(a agent) (time.Duration, error) {
		out, err := exec.CommandContext(ctx, "taskset", "-c", "0", hecctl, "ping", "--agent", "shm://"+a.shm, "--mgmt", a.mgmt,
			"--n", "100000", "-o", "json").Output()
		var r struct {
			P50 int64 `json:"p50_ns"`
		}
		if err == nil {
			err = json.Unmarshal(out, &r)
		}
		if err == nil && r.P50 <= 0 {
			err = fmt.Errorf("hecctl ping measured %q", out)
		}
		return time.Duration(r.P50), err
	}
	checksums := func(a agent) (time.Duration, error) {
		ts, err := timeRuns(phase, func() error { _, err := a.c.Checksum(ctx, a.sum); return err })
		if err != nil {
			return 0, err
		}
		return median(ts), nil
	}
	for _, op := range []struct {
		name  string
		phase func(a agent) (time.Duration, error)
	}{
		{"ping (hecctl ping's p50)", pings},
		{"1 MiB checksum", checksums},
	} {
		var ratios []float64
		var on, off []time.Duration
		for r := range rounds {
			progress(s, "off: %s: round %d of %d", op.name, r+1, rounds)
			// Round r: x, y, x, with x the built agent on even rounds.
			x, y := 0, 1
			if r%2 == 1 {
				x, y = 1, 0
			}
			var med [3]time.Duration
			for i, who := range []int{x, y, x} {
				d, err := op.phase(agents[who])
				if err != nil {
					return fmt.Errorf("%s: %w", op.name, err)
				}
				med[i] = d
				if who == 0 {
					on = append(on, d)
				} else {
					off = append(off, d)
				}
			}
			mid, around := med[1].Seconds(), (med[0]+med[2]).Seconds()/2
			if y == 0 { // the built agent in the middle
				ratios = append(ratios, mid/around)
			} else {
				ratios = append(ratios, around/mid)
			}
		}
		rep.add(s, op.name+" through the agent as built, nothing recording: median of phases", float64(median(on).Nanoseconds())/1e3, "µs")
		rep.add(s, op.name+" through the agent built without recording (hecnotrace): median of phases", float64(median(off).Nanoseconds())/1e3, "µs")
		rep.atMostN(s, op.name+" through the agent: as built, nothing recording / built without recording, medians per phase", ratios, 1.01, "×")
	}
	return nil
}

// traceHandoff measures the cost of recording a 1 MiB EC encode and a 1
// MiB checksum through one agent.
func traceHandoff(ctx context.Context, rep *Report, s, dir, hecd string, rounds int, phase time.Duration) error {
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
	served := func(spans []trace.Span) int {
		n := 0
		for _, sp := range spans {
			if sp.Stage == trace.StageServe {
				n++
			}
		}
		return n
	}
	for _, op := range []tracedOp{
		{"1 MiB EC encode 10+4", func() error { _, err := e.Encode(ctx, stripe); return err }, served},
		{"1 MiB checksum", func() error { _, err := c.Checksum(ctx, sum); return err }, served},
	} {
		ratios, spans, err := recordedRatios(ctx, s, op, []*host.Mgmt{mgmt}, rec, rounds, phase)
		if err != nil {
			return err
		}
		reportStages(rep, s, op.name, spans, trace.StageOp, trace.StageTransport, trace.StageQueue, trace.StageServe, trace.StageCode)
		rep.atMostN(s, op.name+" through the agent: recorded (host and agent) / not recorded, medians per phase", ratios, 1.03, "×")
	}
	return nil
}

// tracedOp is an op the scenario times with and without recording:
// recorded counts the ops of a phase in the agents' spans of it.
type tracedOp struct {
	name     string
	run      func() error
	recorded func(agents []trace.Span) int
}

// recordedRatios times op in phases of nothing recording and of the
// agents (mgmts) and rec recording, rounds times: not, recorded, not —
// the recorded phase against the mean of the two around it, so that the
// machine's speed drifting through a round weighs on both sides alike
// (one phase of each, in turns, put 0.63-1.52 between the medians of
// an EC encode's rounds). It returns each round's ratio of medians
// (recorded / not) and the
// recorded phases' spans, the host's and the agents'. A recorded phase
// whose agents recorded fewer ops than it timed fails it.
func recordedRatios(ctx context.Context, s string, op tracedOp, mgmts []*host.Mgmt, rec *trace.Recorder, rounds int, phase time.Duration) (
	ratios []float64, spans []trace.Span, err error) {
	for r := range rounds {
		progress(s, "%s: round %d of %d", op.name, r+1, rounds)
		before, err := timeRuns(phase, op.run)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", op.name, err)
		}
		// On: the agents record for longer than the phase, which begins
		// once their requests are surely in.
		replies := make([]trace.Reply, len(mgmts))
		errs := make([]error, len(mgmts))
		var wg sync.WaitGroup
		for i, m := range mgmts {
			wg.Add(1)
			go func() { defer wg.Done(); replies[i], errs[i] = m.Trace(ctx, phase+200*time.Millisecond) }()
		}
		time.Sleep(50 * time.Millisecond)
		mark := rec.Mark()
		end := rec.Begin()
		on, err := timeRuns(phase, op.run)
		end()
		wg.Wait()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", op.name, err)
		}
		after, err := timeRuns(phase, op.run)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", op.name, err)
		}
		var agents []trace.Span
		for i, err := range errs {
			if err != nil {
				return nil, nil, fmt.Errorf("%s: recording agent %d: %w", op.name, i+1, err)
			}
			agents = append(agents, replies[i].Spans...)
		}
		// Timed: len(on); the agents saw one more, timeRuns' warm-up.
		if got := op.recorded(agents); got < len(on) {
			return nil, nil, fmt.Errorf("%s: the agents recorded %d ops of the %d timed while they recorded", op.name, got, len(on))
		}
		ratios = append(ratios, 2*median(on).Seconds()/(median(before)+median(after)).Seconds())
		hostSpans, _ := rec.Since(mark)
		spans = append(append(spans, hostSpans...), agents...)
	}
	return ratios, spans, nil
}

// traceAllReduce measures the cost of recording a 1 MiB allreduce among
// two agents peered on loopback: this process is both ranks' host, each
// a client of its agent, handing over a buffer of its window.
func traceAllReduce(ctx context.Context, rep *Report, s, dir, hecd string, rounds int, phase time.Duration) error {
	const n, size, comm = 2, 1 << 20, 0x7ace
	key := filepath.Join(dir, "cluster.key")
	if err := os.WriteFile(key, []byte("the trace scenario's cluster key"), 0o600); err != nil {
		return err
	}
	var ls []net.Listener
	for range 2 * n { // the agents' peer layer, then their management API
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer l.Close()
		ls = append(ls, l)
	}
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("%d@%s", i+1, ls[i].Addr()))
	}
	for _, l := range ls {
		l.Close()
	}
	rec := trace.NewRecorder(0)
	mgmts := make([]*host.Mgmt, n)
	clients := make([]*host.Client, n)
	bufs := make([][]byte, n)
	for i := range n {
		shm := shmPath(fmt.Sprintf("trace-coll-%d", i))
		cmd := exec.Command(hecd, "--shm", shm, "--region-size", strconv.Itoa(64<<20), "--queue-pairs", "2",
			"--tcp", "off", "--resp", "off", "--udp", "off", "--mgmt", ls[n+i].Addr().String(),
			"--state-dir", filepath.Join(dir, fmt.Sprint("coll-agent", i)), "--peer", ls[i].Addr().String(),
			"--peers", peers[0]+","+peers[1], "--node-id", strconv.Itoa(i+1),
			"--cluster-key-file", key, "--log-level", "warn")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait(); os.Remove(shm) }()
		mgmts[i] = host.NewMgmt(ls[n+i].Addr().String())
		if err := calibrated(ctx, mgmts[i].Addr, fmt.Sprint("agent ", i+1)); err != nil {
			return err
		}
		c, err := host.Dial(ctx, "shm://"+shm, host.WithTrace(rec))
		if err != nil {
			return err
		}
		defer c.Close()
		if bufs[i], err = c.Alloc(size); err != nil {
			return err
		}
		defer c.Free(bufs[i])
		clients[i] = c
	}
	// Both ranks at once: joining, and each allreduce.
	comms := make([]*host.DPUComm, n)
	onBoth := func(f func(i int) error) error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = f(i) }()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("rank %d: %w", i, err)
			}
		}
		return nil
	}
	spec := wire.CollSpec{Comm: comm, Epoch: 1, Nodes: []uint32{1, 2}}
	if err := onBoth(func(i int) (err error) { comms[i], err = clients[i].JoinColl(ctx, spec); return err }); err != nil {
		return err
	}
	defer onBoth(func(i int) error { return comms[i].Leave(context.WithoutCancel(ctx)) })
	allreduce := func() error {
		return onBoth(func(i int) error { return comms[i].AllReduce(ctx, bufs[i], bufs[i], coll.Float32, coll.Sum) })
	}
	// The agents' recorded collectives: the ids of the messages they sent.
	collectives := func(spans []trace.Span) int {
		ids := map[string]bool{}
		for _, sp := range spans {
			if sp.Stage == trace.StageSend {
				ids[sp.ID] = true
			}
		}
		return len(ids)
	}
	// Settle (the communicators calibrate their model at the first).
	for range 20 {
		if err := allreduce(); err != nil {
			return err
		}
	}
	op := tracedOp{"1 MiB allreduce among 2 agents", allreduce, collectives}
	ratios, spans, err := recordedRatios(ctx, s, op, mgmts, rec, rounds, phase)
	if err != nil {
		return err
	}
	reportStages(rep, s, op.name, spans, trace.StageOp, trace.StageServe, trace.StageSend, trace.StageRecv, trace.StageReduce)
	rep.atMostN(s, op.name+": recorded (host and agents) / not recorded, medians per phase", ratios, 1.03, "×")
	return nil
}

// reportStages reports where name's time went in spans, as hecctl trace
// summary says it: each of stages' median.
func reportStages(rep *Report, s, name string, spans []trace.Span, stages ...string) {
	for _, row := range trace.Summarize(spans) {
		if slices.Contains(stages, row.Stage) {
			rep.add(s, fmt.Sprintf("%s, recorded: %s stage %s, median of %d", name, row.Name, row.Stage, row.Count), float64(row.P50)/1e3, "µs")
		}
	}
}
