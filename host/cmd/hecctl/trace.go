package main

import (
	"context"
	"fmt"
	"image/color"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/trace"
)

// traceCmd is trace: where an op's time goes, across the host processes
// and agents it passes through.
func traceCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "record the ops' spans on agents and traced host processes (Chrome trace JSON) and summarise them",
	}
	cmd.AddCommand(traceRecordCmd(a), traceSummaryCmd(a))
	return cmd
}

func traceRecordCmd(a *app) *cobra.Command {
	var clusterName, clusterState, out, hostDir string
	var hosts bool
	d := durationFlag{5 * time.Second}
	cmd := &cobra.Command{
		Use:   "record [MGMT-ADDR...]",
		Short: "record every op for a while on the agents and traced host processes, into a Chrome trace file",
		Long: `record asks the agents whose management addresses are given, else the agent
(--mgmt), or every agent of a test cluster (--cluster), to record the
spans of the ops they serve for --duration (GET /v1/trace), and every host
process started with HEC_TRACE=1 (listening in --host-dir) to record its
ops' spans alike. An op has one id on every process: where it came from
(the host's process and queue pair, or its TCP connection) and its
descriptor's tag; a collective is named by its communicator and sequence
number on every rank's agent (from the agents' flight recorders,
GET /v1/coll). Each agent's clock is aligned on this one's by the shortest
of five round trips (GET /v1/clock); where the agents are peers, those
whose clocks the peer layer measures more tightly through the links of
the agent nearest hecctl (five pings) are aligned through it.

The file is Chrome's trace-event JSON: Perfetto (ui.perfetto.dev) and
chrome://tracing open it, one track per process. The summary of
'hecctl trace summary' follows.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if d.d <= 0 || d.d > 10*time.Minute {
				return usageError{fmt.Errorf("--duration %v: want above 0 and up to 10m", d.d)}
			}
			targets, err := a.agentTargets(args, clusterName, clusterState)
			if err != nil {
				return err
			}
			if !hosts {
				hostDir = ""
			}
			return a.traceRecord(cmd.Context(), targets, hostDir, d.d, out)
		},
	}
	f := cmd.Flags()
	f.Var(&d, "duration", "how long to record")
	f.StringVar(&out, "out", "trace.json", "the trace file to write (Chrome trace-event JSON)")
	f.BoolVar(&hosts, "hosts", true, "also record the host processes started with HEC_TRACE=1")
	f.StringVar(&hostDir, "host-dir", host.TraceDir(), "where traced host processes listen ($HEC_TRACE_DIR)")
	f.StringVar(&clusterName, "cluster", "", "every agent of the test cluster NAME (--cluster=NAME; --cluster alone: hec)")
	f.Lookup("cluster").NoOptDefVal = "hec"
	f.StringVar(&clusterState, "cluster-state", "", "the cluster's state directory (default /run/hec/cluster-NAME)")
	return uses(cmd, useMgmt|useOutput)
}

// traceSource is one process's recording, its spans in this process's
// clock.
type traceSource struct {
	Name   string        `json:"name"`
	Spans  int           `json:"spans"`
	Lost   uint64        `json:"lost,omitempty"`
	Offset time.Duration `json:"clock_offset_ns,omitempty"` // its clock ahead of this one's
	RTT    time.Duration `json:"clock_rtt_ns,omitempty"`    // the round trips that bound the offset: within half of it
	// ClockVia names the agent whose peer link measured this one's
	// clock ("": hecctl's own management round trips).
	ClockVia string `json:"clock_via,omitempty"`
	Error    string `json:"error,omitempty"`
}

// agentClock is how far an agent's clock is ahead of this process's,
// within rtt/2.
type agentClock struct {
	offset, rtt time.Duration
	via         string
	err         error
}

// agentClocks measures each target's clock against this process's: by
// the shortest of five management round trips (GET /v1/clock), and, for
// agents that are peers of the one nearest this process, through that
// agent's peer links (five pings: the peer layer's measure of its
// peers' clocks, GET /v1/peers) added to its own offset — whichever
// bound is tighter. Agents of one cluster share a fabric that may be
// nearer each other than hecctl is to them.
func agentClocks(ctx context.Context, targets []agentTarget) []agentClock {
	clocks := make([]agentClock, len(targets))
	ids := make([]uint32, len(targets))
	near := -1
	for i, t := range targets {
		c := &clocks[i]
		c.offset, c.rtt, c.err = t.mgmt.ClockOffset(ctx, 5)
		if c.err != nil {
			continue
		}
		if st, err := t.mgmt.Status(ctx); err == nil {
			ids[i] = st.NodeID
		}
		if ids[i] != 0 && (near < 0 || c.rtt < clocks[near].rtt) {
			near = i
		}
	}
	if near < 0 || len(targets) < 2 {
		return clocks
	}
	ref := targets[near]
	for i := range targets {
		if i != near && ids[i] != 0 && clocks[i].err == nil {
			// Five pings: the peer layer keeps the clock they measure.
			// One that fails leaves that agent on its own round trips.
			ref.mgmt.TestPeer(ctx, ids[i], 5, 0) //nolint:errcheck // as said
		}
	}
	peers, err := ref.mgmt.Peers(ctx)
	if err != nil {
		return clocks
	}
	for _, p := range peers {
		i := slices.Index(ids, p.ID)
		if i < 0 || i == near || p.ClockRTTNs <= 0 {
			continue
		}
		rtt := clocks[near].rtt + time.Duration(p.ClockRTTNs)
		if rtt < clocks[i].rtt {
			clocks[i] = agentClock{offset: clocks[near].offset + time.Duration(p.ClockOffsetNs), rtt: rtt, via: ref.name}
		}
	}
	return clocks
}

func (a *app) traceRecord(ctx context.Context, targets []agentTarget, hostDir string, d time.Duration, out string) error {
	var (
		mu      sync.Mutex
		spans   []trace.Span
		sources []traceSource
		wg      sync.WaitGroup
	)
	add := func(src traceSource, got []trace.Span) {
		mu.Lock()
		defer mu.Unlock()
		src.Spans = len(got)
		sources = append(sources, src)
		spans = append(spans, got...)
	}
	clocks := agentClocks(ctx, targets)
	start := time.Now()
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := traceSource{Name: "hecd " + t.name}
			got, err := recordAgent(ctx, t, clocks[i], d, start, &src)
			if err != nil {
				src.Error = err.Error()
			}
			add(src, got)
		}()
	}
	if hostDir != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs, err := host.RecordProcesses(ctx, hostDir, d)
			if err != nil {
				add(traceSource{Name: "host processes in " + hostDir, Error: err.Error()}, nil)
				return
			}
			for _, p := range procs {
				src := traceSource{Name: p.Reply.Proc, Lost: p.Reply.Lost}
				if src.Name == "" {
					src.Name = p.Socket
				}
				if p.Err != nil {
					src.Error = p.Err.Error()
				}
				got := p.Reply.Spans
				for i := range got {
					got[i].Proc = src.Name
				}
				add(src, got)
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(sources, func(x, y traceSource) int { return strings.Compare(x.Name, y.Name) })
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := trace.WriteChrome(f, spans); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	failed := 0
	for _, s := range sources {
		if s.Error != "" {
			failed++
		}
	}
	if a.jsonOut() {
		if err := a.printJSON(struct {
			File    string        `json:"file"`
			Sources []traceSource `json:"sources"`
			Spans   int           `json:"spans"`
		}{out, sources, len(spans)}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROCESS\tSPANS\tLOST\tCLOCK OFFSET\tNOTE")
		for _, s := range sources {
			off := "-"
			if s.RTT > 0 {
				off = fmt.Sprintf("%v ± %v", s.Offset, s.RTT/2)
			}
			note := s.Error
			if s.ClockVia != "" && note == "" {
				note = "clock through " + s.ClockVia + "'s peer link"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", s.Name, s.Spans, s.Lost, off, note)
		}
		tw.Flush()
		fmt.Fprintf(a.out, "\n%d spans of %d processes over %v into %s (Perfetto or chrome://tracing opens it)\n\n", len(spans), len(sources), d, out)
		printTraceSummary(a.out, trace.Summarize(spans))
	}
	if failed == len(sources) {
		if len(sources) == 0 {
			return fmt.Errorf("nothing to record: no agent and no traced host process (HEC_TRACE=1) in %s", hostDir)
		}
		return fmt.Errorf("no process answered")
	}
	return nil
}

// recordAgent records t for d and returns its spans in this process's
// clock: its ops', and those of its communicators' collectives that ran
// since start.
func recordAgent(ctx context.Context, t agentTarget, clock agentClock, d time.Duration, start time.Time, src *traceSource) ([]trace.Span, error) {
	if clock.err != nil {
		return nil, clock.err
	}
	off := clock.offset
	src.Offset, src.RTT, src.ClockVia = off, clock.rtt, clock.via
	r, err := t.mgmt.Trace(ctx, d)
	if err != nil {
		return nil, err
	}
	src.Lost = r.Lost
	spans := r.Spans
	for i := range spans {
		spans[i].Proc = src.Name
		spans[i].Start -= int64(off)
	}
	comms, err := t.mgmt.Coll(ctx)
	if err != nil {
		return spans, fmt.Errorf("its collectives: %w", err)
	}
	for _, c := range comms {
		proc := fmt.Sprintf("%s rank %d", src.Name, c.Rank)
		for _, rec := range c.Recent {
			if rec.Started.IsZero() || rec.Started.Before(start.Add(off)) {
				continue
			}
			id := trace.CollID(c.Comm, rec.Seq)
			base := trace.Span{ID: id, Proc: proc, Name: rec.Kind, Bytes: int64(rec.Bytes)}
			wait := base
			wait.Stage, wait.Start, wait.Dur = trace.StageWait, rec.Enqueued.UnixNano()-int64(off), int64(rec.Started.Sub(rec.Enqueued))
			spans = append(spans, wait)
			if !rec.Ended.IsZero() {
				run := base
				run.Stage, run.Start, run.Dur, run.Status = trace.StageRun, rec.Started.UnixNano()-int64(off), int64(rec.Ended.Sub(rec.Started)), rec.State
				spans = append(spans, run)
			}
		}
	}
	return spans, nil
}

func traceSummaryCmd(a *app) *cobra.Command {
	var plotFile string
	var slowest int
	cmd := &cobra.Command{
		Use:   "summary TRACE.json",
		Short: "where the time went, per kind of op and stage (p50, p99), from a trace hecctl trace record wrote",
		Long: `summary reads a trace of hecctl trace record and prints, per kind of op, each
stage's count, median, 99th percentile and longest:

  op         the host's: from handing the op over to seeing it complete
  transport  the host's time beyond the agent's, for ops both recorded:
             the ring or connection both ways, and the waiter's wake-up
  queue      the agent's: taken from the ring, waiting for a worker
  serve      the agent's: the service's work, to the completion
  wait, run  a collective on one rank: called and not started; running
  skew       a collective's last rank to start less its first
  send, recv a collective's messages with a peer; reduce, each reduction
  seal, write  a peer frame's tag computed, and written (the sender's)
  read, open   a peer frame read, and its tag checked (the receiver's)
  share RAIL   a split op's share on one rail; predicted RAIL, the
             planner's time for it

--plot draws the slowest ops' spans on one timeline each (a PNG).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			spans, err := trace.ReadChrome(f)
			f.Close()
			if err != nil {
				return usageError{fmt.Errorf("%s: %w", args[0], err)}
			}
			rows := trace.Summarize(spans)
			if plotFile != "" {
				if err := plotSlowest(spans, slowest, plotFile); err != nil {
					return err
				}
			}
			if a.jsonOut() {
				return a.printJSON(rows)
			}
			if len(rows) == 0 {
				fmt.Fprintln(a.out, "no spans: nothing was served while it recorded")
				return nil
			}
			printTraceSummary(a.out, rows)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&plotFile, "plot", "", "draw the slowest ops' timelines into this PNG")
	f.IntVar(&slowest, "slowest", 20, "with --plot: how many ops")
	return uses(cmd, useOutput)
}

func printTraceSummary(w io.Writer, rows []trace.Row) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OP\tSTAGE\tCOUNT\tP50\tP99\tMAX\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\t%v\t\n", r.Name, r.Stage, r.Count, roundDur(r.P50), roundDur(r.P99), roundDur(r.Max))
	}
	tw.Flush()
}

// roundDur shows d to three significant figures or so.
func roundDur(ns int64) time.Duration {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	case d >= time.Microsecond:
		return d.Round(10 * time.Nanosecond)
	}
	return d
}

// stageColors are the plot's colours by stage.
var stageColors = map[string]color.RGBA{
	trace.StageOp:     {R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	trace.StageQueue:  {R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
	trace.StageServe:  {R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
	trace.StageWait:   {R: 0xc4, G: 0x4e, B: 0x52, A: 0xff},
	trace.StageRun:    {R: 0x81, G: 0x72, B: 0xb3, A: 0xff},
	trace.StageCode:   {R: 0x93, G: 0x78, B: 0x60, A: 0xff},
	trace.StageCopy:   {R: 0xda, G: 0x8b, B: 0xc3, A: 0xff},
	trace.StageSend:   {R: 0x8c, G: 0x8c, B: 0x8c, A: 0xff},
	trace.StageRecv:   {R: 0xcc, G: 0xb9, B: 0x74, A: 0xff},
	trace.StageReduce: {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	trace.StageCall:   {R: 0x64, G: 0xb5, B: 0xcd, A: 0xff},
}

// plotSlowest draws the n slowest ops, one row each, their spans as bars
// from the op's first start.
func plotSlowest(spans []trace.Span, n int, file string) error {
	ids := trace.Slowest(spans, n)
	if len(ids) == 0 {
		return fmt.Errorf("--plot: no op in the trace")
	}
	row := map[string]int{}
	for i, id := range ids {
		row[id] = len(ids) - 1 - i // the slowest on top
	}
	first := map[string]int64{}
	for _, s := range spans {
		if _, ok := row[s.ID]; ok {
			if f, seen := first[s.ID]; !seen || s.Start < f {
				first[s.ID] = s.Start
			}
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("the %d slowest ops: their spans from each op's start", len(ids))
	p.X.Label.Text = "µs from the op's start"
	p.Y.Label.Text = "op (slowest on top)"
	legend := map[string]bool{}
	for _, s := range spans {
		r, ok := row[s.ID]
		if !ok {
			continue
		}
		// Stacked a little by stage so that a host's op and the agent's
		// spans inside it are both seen.
		y := float64(r) + 0.9*float64(slices.Index(trace.Stages, s.Stage)+1)/float64(len(trace.Stages)+1)
		x0 := float64(s.Start-first[s.ID]) / 1e3
		l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x0 + float64(s.Dur)/1e3, Y: y}})
		if err != nil {
			return err
		}
		l.Width = vg.Points(4)
		c, ok := stageColors[s.Stage]
		if !ok {
			c = color.RGBA{A: 0xff}
		}
		l.Color = c
		p.Add(l)
		if !legend[s.Stage] {
			legend[s.Stage] = true
			p.Legend.Add(s.Stage, l)
		}
	}
	p.Legend.Top = true
	if err := p.Save(10*vg.Inch, vg.Length(1.5+0.35*float64(len(ids)))*vg.Inch, file); err != nil {
		return fmt.Errorf("--plot %s: %w", file, err)
	}
	return nil
}
