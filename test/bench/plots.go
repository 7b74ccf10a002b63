package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// A figure is a grouped bar chart drawn from the report's rows: for each
// group (a position on the x axis) one bar per series. A row missing from
// the report (its scenario did not run) leaves its bar out; a figure with
// no bar at all is not drawn. A distribution is drawn as lines instead,
// a point per group, on a logarithmic axis.
type figure struct {
	file, title, unit string
	groups, series    []string
	metric            func(group, series string) string // the row's metric name
	scenario          string
	distribution      bool
}

// figures are the pictures make bench writes beside results.md.
var figures = []figure{
	{
		file: "handoff.png", title: "Round-trip latency distribution: the ring beside the floor and a Unix socket", unit: "ns (log)", scenario: "",
		groups: []string{"p10", "p50", "p90", "p99", "p99.9"}, distribution: true,
		series: []string{"shared-memory ping-pong (floor)", "ring round trip, 64 B descriptor", "PING through the dispatcher (shm)", "unix socket round trip, 64 B"},
		metric: func(g, s string) string { return s + " " + g },
	},
	{
		file: "kv.png", title: "KV requests per second, hecd against Redis, by pipeline depth", unit: "req/s", scenario: "kv",
		groups: []string{"GET -P 1", "GET -P 16", "SET async -P 1", "SET async -P 16", "SET sync -P 1", "SET sync -P 16"},
		series: []string{"hecd", "redis"},
		metric: func(g, s string) string {
			f := strings.Fields(g) // op [mode] -P n
			op, mode, depth := f[0], "async", f[len(f)-1]
			if len(f) == 4 {
				mode = f[1]
			}
			label := mode
			if s == "redis" {
				label = map[string]string{"async": "no persistence", "sync": "appendfsync always"}[mode]
			}
			return fmt.Sprintf("%s %s (%s) -P %s", s, op, label, depth)
		},
	},
	{
		file: "xdp.png", title: "Serving CPU per 100k UDP GETs, by path", unit: "CPU-seconds", scenario: "xdp",
		groups: []string{"hecd, hot GETs answered in XDP", "hecd, XDP on, hot GETs off (user space)", "memcached 1.6 UDP, same node (one thread)"},
		series: []string{"serving CPU"},
		metric: func(g, _ string) string { return "serving CPU-seconds per 100k UDP GETs at * GET/s, " + g },
	},
	{
		file: "rails.png", title: "256 MiB checksum across rails (bf2 profile): predicted and achieved", unit: "ms", scenario: "rails",
		groups: []string{"split, learned model", "one-shot", "host alone", "dpu alone"},
		series: []string{"predicted", "achieved"},
		metric: func(g, s string) string {
			return map[string]string{
				"split, learned model/predicted": "256 MiB checksum: planner's predicted time",
				"split, learned model/achieved":  "256 MiB checksum: achieved (median of split runs)",
				"one-shot/predicted":             "256 MiB one-shot (calibrate, then ChecksumAuto): predicted (median of 3)",
				"one-shot/achieved":              "256 MiB one-shot: achieved (median of 3)",
				"host alone/achieved":            "256 MiB checksum: host rail alone (median)",
				"dpu alone/achieved":             "256 MiB checksum: dpu rail alone, bf2 profile (median)",
			}[g+"/"+s]
		},
	},
	{
		file: "rails-sizes.png", title: "Checksum across rails by size (bf2 profile): the planner's prediction and what the split achieved", unit: "GB/s", scenario: "rails",
		groups: []string{"16 MiB", "64 MiB", "256 MiB"},
		series: []string{"predicted", "achieved (split)", "host alone", "dpu alone"},
		metric: func(g, s string) string { return g + " checksum, learned model: " + s },
	},
	{
		file: "ec-auto.png", title: "EC 10+4 encode across rails by size (bf2 profile): each rail alone and auto", unit: "GB/s", scenario: "ec",
		groups: []string{"1 MiB", "16 MiB", "64 MiB"},
		series: []string{"host rail alone", "dpu rail alone", "split, achieved (median)"},
		metric: func(g, s string) string { return "10+4 " + g + " bf2: " + s },
	},
	{
		file: "coll-auto-4.png", title: "Allreduce among 4 ranks sharing the cores: each rail and auto, over the better single rail's busbw", unit: "×", scenario: "coll-auto",
		groups: []string{"16 B", "64 KiB", "1 MiB", "16 MiB", "64 MiB"},
		series: []string{"host", "dpu", "auto"},
		metric: func(g, s string) string { return collAutoMetric(4, g, s) },
	},
	{
		file: "coll-auto-2.png", title: "Allreduce among 2 ranks sharing the cores: each rail and auto, over the better single rail's busbw", unit: "×", scenario: "coll-auto",
		groups: []string{"8 B", "64 KiB", "1 MiB", "16 MiB", "64 MiB"},
		series: []string{"host", "dpu", "auto"},
		metric: func(g, s string) string { return collAutoMetric(2, g, s) },
	},
	{
		file: "torch-step.png", title: "PyTorch DDP step time: HEC's DPU rail (the \"hec\" backend) beside gloo", unit: "ms", scenario: "torch",
		groups: []string{"N=2 10M", "N=2 50M", "N=4 10M", "N=4 50M"},
		series: []string{"gloo", "hec"},
		metric: func(g, s string) string { return g + " model (* params) DDP step, " + s },
	},
	{
		file: "torch-cpu.png", title: "Host CPU a DDP step spends communicating: HEC's DPU rail beside gloo", unit: "ms per step", scenario: "torch",
		groups: []string{"N=2 10M", "N=2 50M", "N=4 10M", "N=4 50M"},
		series: []string{"gloo", "hec"},
		metric: func(g, s string) string { return g + " model host CPU communicating per step, " + s },
	},
	{
		file: "hostile.png", title: "1 MiB checksums per second: alone, beside a flooding pair, beside CPU burners", unit: "ops/s", scenario: "hostile",
		groups: []string{"alone", "beside a pair flooding costly descriptors", "beside two CPU-burning threads of another process (no agent work: the machine's share)"},
		series: []string{"1 MiB checksums"},
		metric: func(g, s string) string { return s + " " + g },
	},
}

// collAutoMetric is the coll-auto row of rail s's busbw over the better
// single rail's at size g among n ranks.
func collAutoMetric(n int, g, s string) string {
	return fmt.Sprintf("N=%d %s busbw over the better single rail's: %s", n, g, s)
}

// drawFigures draws every figure it has rows for into dir and returns the
// markdown that embeds them.
func drawFigures(dir string, rep *Report) (string, error) {
	var md strings.Builder
	for _, f := range figures {
		vals := make([][]float64, len(f.series))
		any := false
		for i, s := range f.series {
			vals[i] = make([]float64, len(f.groups))
			for j, g := range f.groups {
				if v, ok := rep.row(f.scenario, f.metric(g, s)); ok && v > 0 {
					vals[i][j], any = v, true
				}
			}
		}
		if !any {
			continue
		}
		draw := barChart
		if f.distribution {
			draw = distributionChart
		}
		if err := draw(filepath.Join(dir, f.file), f, vals); err != nil {
			return md.String(), fmt.Errorf("plot %s: %w", f.file, err)
		}
		fmt.Fprintf(&md, "\n![%s](%s)\n", f.title, f.file)
	}
	return md.String(), nil
}

// row returns the value of a metric, from the named scenario ("" any); a
// "*" in metric stands for any text (the load a scenario settled on).
func (r *Report) row(scenario, metric string) (float64, bool) {
	pre, post, wild := strings.Cut(metric, "*")
	for _, x := range r.Rows {
		match := x.Metric == metric
		if wild {
			match = len(x.Metric) >= len(pre)+len(post) && strings.HasPrefix(x.Metric, pre) && strings.HasSuffix(x.Metric, post)
		}
		if match && (scenario == "" || x.Scenario == scenario) {
			return x.Value, true
		}
	}
	return 0, false
}

func barChart(path string, f figure, vals [][]float64) error {
	p := plot.New()
	p.Title.Text = f.title
	p.Y.Label.Text = f.unit
	w := vg.Points(14)
	if len(f.series) > 2 {
		w = vg.Points(10)
	}
	for i, s := range f.series {
		b, err := plotter.NewBarChart(plotter.Values(vals[i]), w)
		if err != nil {
			return err
		}
		b.LineStyle.Width = vg.Length(0)
		b.Color = plotutil.Color(i)
		b.Offset = vg.Length(float64(i)-float64(len(f.series)-1)/2) * w
		p.Add(b)
		if len(f.series) > 1 {
			p.Legend.Add(s, b)
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(60)
	p.Y.Min, p.Y.Max = 0, p.Y.Max*1.2 // room for the legend above the bars
	names := make([]string, len(f.groups))
	for i, g := range f.groups {
		names[i] = wrap(g, 24)
	}
	p.NominalX(names...)
	if err := p.Save(9*vg.Inch, 4.5*vg.Inch, path); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// distributionChart draws a line per series through its groups'
// values (percentiles), on a logarithmic axis; missing values are left
// out.
func distributionChart(path string, f figure, vals [][]float64) error {
	p := plot.New()
	p.Title.Text = f.title
	p.Y.Label.Text = f.unit
	p.X.Label.Text = "percentile"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var args []any
	for i, s := range f.series {
		var pts plotter.XYs
		for j, v := range vals[i] {
			if v > 0 {
				pts = append(pts, plotter.XY{X: float64(j), Y: v})
			}
		}
		if len(pts) > 0 {
			args = append(args, s, pts)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.NominalX(f.groups...)
	if err := p.Save(9*vg.Inch, 4.5*vg.Inch, path); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// wrap breaks a label into lines of about n characters.
func wrap(s string, n int) string {
	var b strings.Builder
	line := 0
	for i, w := range strings.Fields(s) {
		if i > 0 {
			if line+1+len(w) > n {
				b.WriteByte('\n')
				line = 0
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(w)
		line += len(w)
	}
	return b.String()
}
