package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host/collbench"
	"github.com/hecsys/hec/shared/rail"
)

func collCmd(a *app) *cobra.Command {
	c := groupCmd("coll", "collectives on the host rail, the DPU rail or both: bench, status")
	c.AddCommand(collBenchCmd(a), collRankCmd(), collStatusCmd(a))
	return c
}

// benchOptions are coll bench's flags: the driver's options, and the
// picture.
type benchOptions struct {
	collbench.Options
	plot string
}

func collBenchCmd(a *app) *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{Use: "bench", Short: "start N ranks (a host process and an agent each) and print nccl-tests' table for each rail",
		Long: `bench starts --world ranks on this machine: each a host process and, for
the dpu and auto rails, an agent (hecd) of its own. Rail host: the host
processes run the collective among themselves. Rail dpu: each hands its
buffer to its agent and the agents run it over the peer layer. Rail auto:
the planner runs each size where its table puts it — one rail, or split
between the two, both at once — from a calibration of each and the
tuning of the size's first collectives (kept per topology under the
state directory: --retune measures again; hecctl rails tune).

All the rails of a run work on the same buffers (in the agent's window
where there is one), and each size's timed iterations interleave them,
one collective of each rail per iteration, in each of the rails' orders
by turns: what the machine does meanwhile weighs on every rail alike.

As root (--net netns, the default then) each rank is a network namespace
of a cluster made for the run (hecctl cluster): its agent on the agents'
bridge (eth0), its host process also on a second bridge (eth1) for the
host rail, so --dpu-rate and --host-rate can limit the two rails apart
(tc rates: 200mbit, 1gbit), and --vm N makes the last N agents arm64 VMs
(make image first). Otherwise (--net loopback) everything runs on
loopback. Each host process and each agent gets a core's share of the
machine (GOMAXPROCS = cores / N, at least 1; an explicit GOMAXPROCS
holds), as MPI binds a rank to a core and a DPU's agent has its own.
With --bind (the default) rank i's host process and agent run on the
i-th N-th of the cores where the ranks fit them, else on core i mod
cores, as mpirun binds ranks to cores (--bind-to core:overload-allowed,
which the bench gives Open MPI too); VMs are not bound.

Columns as nccl-tests prints them: size (bytes), count (elements), type,
redop, time (µs, the slowest rank's mean), algbw and busbw (GB/s), and
wrong (elements that differ from the expected result, over every rank and
iteration), plus host-cpu: the host process's CPU per collective (ms, mean
over the ranks) — what offloading to the DPU frees.

A rank or agent that dies makes every other rank fail within --deadline
with an error naming it: the command then stops them all and says so.`,
		Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.collBench(cmd.Context(), o) }}
	collBenchFlags(cmd, &o)
	return uses(cmd, useOutput)
}

// collBenchFlags defines coll bench's flags on cmd (rails plan's too).
func collBenchFlags(cmd *cobra.Command, o *benchOptions) {
	f := cmd.Flags()
	f.IntVar(&o.World, "world", 4, "ranks (1 to 64)")
	railsFlag(f, &o.Rails, rail.Choices, rail.Choices, "rails to run, in order: host, dpu, auto (comma-separated)")
	f.Var(f.Lookup("rails").Value, "rail", "")
	f.MarkDeprecated("rail", "use --rails")
	f.StringVar(&o.Kind, "op", "allreduce", "collective: allreduce, reducescatter, allgather, broadcast, reduce, alltoall")
	f.StringVar(&o.Objective, "objective", "time", "what auto chooses for: time, or host-cpu (the least host CPU within 1.1× of the fastest)")
	f.BoolVar(&o.Explain, "explain", false, "after the rows, print auto's plan for every size band and why (each candidate's predicted and measured time)")
	f.StringVar(&o.DType, "dtype", "float32", "float32, float64, float16, bfloat16, int32, int64, uint8")
	f.StringVar(&o.Redop, "redop", "sum", "sum, prod, min, max, avg")
	f.StringSliceVar(&o.Sizes, "sizes", []string{"8", "64K", "1M", "16M", "64M"}, "sizes in bytes (K, M, G: powers of 1024)")
	f.IntVar(&o.Iters, "iters", 6, "timed iterations per size, the rails interleaved in each of their orders by turns (a multiple of 6 gives three rails every order alike)")
	f.IntVar(&o.Warmup, "warmup", 1, "untimed iterations first")
	f.StringVar(&o.plot, "plot", "", "draw busbw against size for each rail into this PNG")
	f.StringVar(&o.Hecd, "hecd", "", "agent binary (default: hecd beside hecctl)")
	f.DurationVar(&o.Deadline, "deadline", 3*time.Second, "a rank or agent silent this long while others wait on it is declared dead")
	f.StringVar(&o.Net, "net", "auto", "where the ranks run: netns (root only), loopback, or auto (netns when root)")
	f.StringVar(&o.HostRate, "host-rate", "", "limit each rank's host-rail link to this tc rate (netns only)")
	f.StringVar(&o.DPURate, "dpu-rate", "", "limit each agent's link to this tc rate (netns only)")
	f.IntVar(&o.VMs, "vm", 0, "the last N agents are arm64 VMs (netns only; make image first)")
	f.StringVar(&o.Bundle, "bundle", "", "the VMs' image bundle (default .cache/images/qemu)")
	f.BoolVar(&o.Retune, "retune", false, "have auto measure and tune the rails again, even where the state directory keeps tables for this topology (hecctl rails tune)")
	f.BoolVar(&o.Bind, "bind", true, "run each rank's host process and agent on its share of the cores (core i mod cores where the ranks outnumber them)")
}

// benchRow is a row of the table, in nccl-tests' order.
const benchRow = "%5s %10s %9s %8s %5s %11s %11s %11s %6s %12s  %s\n"

// collBench runs the bench (host/collbench) with this binary's coll rank
// as each rank, and prints its rows: a table, or JSON lines with -o json.
func (a *app) collBench(ctx context.Context, o benchOptions) error {
	if err := o.Check(); err != nil {
		return usageError{err}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	o.RankCommand = []string{self, "coll", "rank"}
	var rows []collbench.Row
	var plan string // auto's table, as rank 0 explained it
	header := func(h collbench.Header) {
		if a.jsonOut() {
			return
		}
		bound := "not bound to cores"
		if h.Cores != nil {
			bound = "ranks bound to CPUs"
			for _, c := range h.Cores {
				bound += fmt.Sprint(" ", c)
			}
		}
		fmt.Fprintf(a.out, "# %s of %s (%s) among %d ranks %s (%s), rails %s; %d iterations per size; float sums in %s\n",
			o.Kind, o.DType, o.Redop, o.World, h.Where, bound, strings.Join(o.Rails, ", "), o.Iters, coll.SumKernel())
		fmt.Fprintf(a.out, benchRow, "rail", "size", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "wrong", "host-cpu(ms)", "auto's plan")
	}
	row := func(res collbench.Row) {
		if a.jsonOut() {
			json.NewEncoder(a.out).Encode(res)
		}
		if res.Explain != "" {
			plan = res.Explain
			return
		}
		rows = append(rows, res)
		if !a.jsonOut() {
			fmt.Fprintf(a.out, benchRow, res.Rail, strconv.Itoa(res.Size), strconv.Itoa(res.Count), res.Type, res.Redop,
				fmt.Sprintf("%.1f", res.TimeUS), fmt.Sprintf("%.3f", res.AlgBW), fmt.Sprintf("%.3f", res.BusBW),
				strconv.FormatInt(res.Wrong, 10), fmt.Sprintf("%.3f", res.HostCPU), res.Plan)
		}
	}
	if err := collbench.Run(ctx, o.Options, header, row); err != nil {
		return err
	}
	if plan != "" && !a.jsonOut() {
		fmt.Fprintf(a.out, "# auto's plan by size (the planner's table after calibrating and tuning):\n%s", plan)
	}
	if o.plot != "" {
		if err := plotBusBW(o, rows); err != nil {
			return err
		}
		if !a.jsonOut() {
			fmt.Fprintf(a.out, "# busbw against size: %s\n", o.plot)
		}
	}
	return nil
}

// plotBusBW draws bus bandwidth against size, a line per rail.
func plotBusBW(o benchOptions, rows []collbench.Row) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s of %s, %d ranks", o.Kind, o.DType, o.World)
	p.X.Label.Text = "size (bytes)"
	p.Y.Label.Text = "busbw (GB/s)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var args []any
	for _, r := range o.Rails {
		var pts plotter.XYs
		for _, row := range rows {
			if row.Rail == r {
				pts = append(pts, plotter.XY{X: float64(row.Size), Y: row.BusBW})
			}
		}
		if len(pts) > 0 {
			args = append(args, r, pts)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, o.plot); err != nil {
		return fmt.Errorf("--plot %s: %w", o.plot, err)
	}
	return nil
}
