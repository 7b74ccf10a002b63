package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/rail"
)

// hostRates is the host rail's calibration, cached between runs.
type hostRates struct {
	Version    int       `json:"version"` // of the measurement; others are redone
	MeasuredAt time.Time `json:"measured_at"`
	Cores      int       `json:"cores"`
	Copy       float64   `json:"copy_bytes_per_second"`
	CRC32C     float64   `json:"crc32c_bytes_per_second"`
}

// hostCalibrationMaxAge: an older cached host calibration is redone.
const hostCalibrationMaxAge = 10 * time.Minute

const hostRatesVersion = 2

func hostCalibration(recalibrate bool) (hostRates, string) {
	path := ""
	if dir, err := os.UserCacheDir(); err == nil {
		path = filepath.Join(dir, "hec", "rails.json")
	}
	var r hostRates
	if b, err := os.ReadFile(path); err == nil && !recalibrate && path != "" {
		if json.Unmarshal(b, &r) == nil && r.Version == hostRatesVersion && time.Since(r.MeasuredAt) < hostCalibrationMaxAge && r.CRC32C > 0 {
			return r, "cached in " + path
		}
	}
	// One core: the host's share of a multi-rail op runs on one goroutine.
	r = hostRates{Version: hostRatesVersion, Cores: 1, MeasuredAt: time.Now()}
	r.Copy, r.CRC32C = rail.MeasureCPU(128<<20, 1, 200*time.Millisecond)
	if path != "" {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if b, err := json.Marshal(r); err == nil {
			os.WriteFile(path, b, 0o644)
		}
	}
	return r, "measured now"
}

func gbps(r float64) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f GB/s", r/1e9)
}

func age(d time.Duration) string {
	if d < time.Second {
		return "now"
	}
	return d.Round(time.Second).String() + " ago"
}

func railsCmd(a *app) *cobra.Command {
	var recalibrate bool
	cmd := &cobra.Command{
		Use:   "rails",
		Short: "this host's CPUs, NICs, DPUs and GPUs, the agent's platform and DPU profile, and each rail's rates",
		Args:  wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.rails(cmd.Context(), recalibrate)
		},
	}
	cmd.Flags().BoolVar(&recalibrate, "recalibrate", false, "measure the host rail now, not from the cache")
	cmd.AddCommand(railsPlanCmd(a), railsTuneCmd(a))
	return uses(cmd, useAgent|useMgmt|useOutput)
}

// railsPlanCmd is rails plan: what auto does with a collective of a size
// among N ranks on this machine, and why.
func railsPlanCmd(a *app) *cobra.Command {
	var o benchOptions
	var size string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "where auto runs a collective (--op) of --size among --world ranks here, and why: each candidate's predicted and measured time",
		Long: `plan starts --world ranks as coll bench does (each a host process and an
agent; as root in network namespaces), has auto calibrate the rails and
tune the size's band as a job's first collectives would — or takes the
table rails tune kept for this topology (--retune: measure again) — runs
it three times, and prints the row and the planner's table: for every
size band the plan, the model's time on each rail, and for a band tuned
the candidates' measured and predicted times.`,
		Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Sizes, o.Rails, o.Explain, o.Iters = []string{size}, []string{rail.Auto}, true, 6
			return a.collBench(cmd.Context(), o)
		}}
	collBenchFlags(cmd, &o)
	f := cmd.Flags()
	f.StringVar(&size, "size", "16M", "the collective's size in bytes, as coll bench counts it (K, M, G: powers of 1024)")
	for _, name := range []string{"rails", "rail", "sizes", "iters", "plot", "explain"} {
		f.MarkHidden(name) //nolint:errcheck // set by plan
	}
	return uses(cmd, useOutput)
}

// railsTuneCmd is rails tune: auto's tables measured and tuned now, for
// every size band a job of the topology will meet, and kept.
func railsTuneCmd(a *app) *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "tune",
		Short: "measure the rails and tune auto's plan for each size of --op among --world ranks here, and keep it for later jobs of this topology",
		Long: `tune starts --world ranks as coll bench does, has auto measure each rail
and both at once, and tunes each of --sizes' bands as a job's first
collectives would (each candidate the model cannot rule out, tried and
timed on every rank). The table it makes, tuned bands included, is kept
under the state directory ($XDG_STATE_HOME/hec/rails-tables.json) per
topology, collective and objective: later coll bench and rails plan runs
of the same topology take it without measuring (--retune on them
measures again). It prints the table and one row per size as auto now
runs it.`,
		Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Rails, o.Explain, o.Iters, o.Retune = []string{rail.Auto}, true, 6, true
			return a.collBench(cmd.Context(), o)
		}}
	collBenchFlags(cmd, &o)
	for _, name := range []string{"rails", "rail", "iters", "explain", "retune"} {
		cmd.Flags().MarkHidden(name) //nolint:errcheck // set by tune
	}
	return uses(cmd, useOutput)
}

// railsReport is what rails prints with -o json.
type railsReport struct {
	Host      *host.Inventory `json:"host"`
	HostRates hostRates       `json:"host_rates"`
	Agent     *api.Status     `json:"agent,omitempty"`
	AgentErr  string          `json:"agent_error,omitempty"`
}

// rails prints the host's inventory, the agent's platform and profile, and
// the current model of each rail.
func (a *app) rails(ctx context.Context, recalibrate bool) error {
	out := a.out
	inv, err := host.Discover("/")
	if err != nil {
		return err
	}
	if a.jsonOut() {
		r := railsReport{Host: &inv}
		r.HostRates, _ = hostCalibration(recalibrate)
		if st, err := a.client().Status(ctx); err == nil {
			r.Agent = &st
		} else {
			r.AgentErr = err.Error()
		}
		return a.printJSON(r)
	}
	fmt.Fprintf(out, "host\n")
	fmt.Fprintf(out, "  cpu     %s, %d CPUs, %s, SIMD: %s\n", inv.CPU.Model, inv.CPU.Count, inv.CPU.Arch, strings.Join(inv.CPU.SIMD, " "))
	fmt.Fprintf(out, "  memory  %.1f GiB\n", float64(inv.MemoryBytes)/(1<<30))
	if len(inv.NICs) == 0 {
		fmt.Fprintf(out, "  nic     none but lo\n")
	}
	for _, n := range inv.NICs {
		speed := "speed not reported"
		if n.SpeedMbps > 0 {
			speed = fmt.Sprintf("%d Gb/s", n.SpeedMbps/1000)
			if n.SpeedMbps < 1000 {
				speed = fmt.Sprintf("%d Mb/s", n.SpeedMbps)
			}
		}
		dev := "virtual"
		if !n.Virtual {
			dev = strings.TrimSpace(n.Driver + " " + n.PCI)
		}
		fmt.Fprintf(out, "  nic     %-10s %-5s MTU %-5d %-18s %s\n", n.Name, n.State, n.MTU, speed, dev)
	}
	if len(inv.BlueFields) == 0 {
		fmt.Fprintf(out, "  dpu     no BlueField on the PCI bus\n")
	}
	for _, b := range inv.BlueFields {
		fmt.Fprintf(out, "  dpu     %s %s function at %s (NUMA node %d)\n", b.Generation, b.Function, b.PCI, b.NUMANode)
	}
	if len(inv.GPUs) == 0 {
		fmt.Fprintf(out, "  gpu     %s\n", inv.GPUStatus)
	}
	for _, g := range inv.GPUs {
		fmt.Fprintf(out, "  gpu     %d: %s, %.0f GiB, %s (NUMA node %d), %d NVLinks\n", g.Index, g.Name, float64(g.MemoryBytes)/(1<<30), g.PCI, g.NUMANode, g.NVLinks)
	}
	fmt.Fprintf(out, "  rdma    %s\n", inv.RDMAStatus)

	hr, hsrc := hostCalibration(recalibrate)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	defer tw.Flush()
	st, agentErr := a.client().Status(ctx)
	fmt.Fprintf(tw, "\nagent\n")
	if agentErr != nil {
		fmt.Fprintf(tw, "  not reachable: %v\n", agentErr)
	} else {
		if p := st.Platform; p != nil {
			fmt.Fprintf(tw, "  platform\t%s: %s, %d CPUs, %s, SIMD: %s\n", p.Generation, p.CPU.Model, p.CPU.Count, p.CPU.Arch, strings.Join(p.CPU.SIMD, " "))
		}
		if p := st.Profile; p != nil && p.Name != "none" {
			simd := "vector extensions on"
			if p.SIMDOff {
				simd = "off: " + strings.Join(p.GODEBUGOff, " ")
			}
			quota := fmt.Sprintf("quota %.2f cores", p.Quota)
			if p.Quota == 0 {
				quota = p.QuotaNote
			}
			fmt.Fprintf(tw, "  profile\t%s (%d× %s at %.2f of a host core): pinned to CPUs %v, GOMAXPROCS %d, %s, %s\n",
				p.Name, p.Cores, p.Core, p.CoreSpeed, p.CPUs, p.GOMAXPROCS, quota, simd)
		} else {
			fmt.Fprintf(tw, "  profile\tnone: the agent shares this host's cores at full speed (hecd --dpu-profile bf2|bf3)\n")
		}
	}
	fmt.Fprintf(tw, "\nRAIL\tKIND\tCORES\tALPHA\tCOPY\tCRC32C\tMEASURED\n")
	fmt.Fprintf(tw, "host\t%s\t%d\t-\t%s\t%s\t%s (%s)\n", rail.HostCPU, hr.Cores, gbps(hr.Copy), gbps(hr.CRC32C), age(time.Since(hr.MeasuredAt)), hsrc)
	for _, r := range st.Rails {
		fmt.Fprintf(tw, "%s\t%s\t%d\t-\t%s\t%s\t%s (the agent's own, in the background)\n", r.Rail, r.Kind, r.Cores, gbps(r.CopyRate), gbps(r.CRC32CRate), age(time.Duration(r.AgeSeconds*float64(time.Second))))
	}
	if agentErr != nil {
		return nil
	}
	switch {
	case len(st.Rails) == 0 && !st.ServesHandoff():
		fmt.Fprintf(tw, "dpu\t(the agent serves no handoff, so it calibrates no rail)\n")
	case len(st.Rails) == 0:
		fmt.Fprintf(tw, "dpu\t(the agent has not calibrated yet: it does in the background once ready)\n")
	}
	if st.RDMA != nil {
		fmt.Fprintf(tw, "rdma\t(%s)\n", st.RDMA.Rail)
		for _, e := range st.RDMA.Errors { // asked for and not had: a soft-RoCE link, the RDMA handoff
			fmt.Fprintf(tw, "rdma\t(error: %s)\n", e)
		}
	}
	cl, err := a.dial(ctx)
	if err != nil {
		fmt.Fprintf(tw, "handoff\tnot reachable: %v\n", err)
		return nil
	}
	defer cl.Close()
	model, err := cl.CalibrateChecksum(ctx, nil)
	if err != nil {
		fmt.Fprintf(tw, "handoff\tcalibration failed: %v\n", err)
		return nil
	}
	for _, r := range model {
		if r.Name == host.RailDPU {
			fmt.Fprintf(tw, "dpu via handoff\t%s\t-\t%v\t-\t%s\t%s (CHECKSUM through %s, 16 MiB in the window)\n", r.Kind, r.Alpha.Round(10*time.Nanosecond), gbps(r.Rate), "now", cl)
		}
	}
	tw.Flush()
	// The checksum model: host rail from its cached rate, dpu from the handoff.
	for i := range model {
		if model[i].Name == host.RailHost {
			model[i].Rate = hr.CRC32C
		}
	}
	plan := rail.Split(model, 256<<20, 4096)
	fmt.Fprintf(out, "\nmodel: a 256 MiB checksum: %s", plan.Explain())
	return nil
}
