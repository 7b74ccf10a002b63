package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Row is one measured figure.
type Row struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
}

// Check compares two figures of the same run against a target.
type Check struct {
	Scenario string  `json:"scenario"`
	What     string  `json:"what"`
	Value    float64 `json:"value"`
	Target   string  `json:"target"`
	Pass     bool    `json:"pass"`
}

// Report is what a run writes.
type Report struct {
	When    time.Time `json:"when"`
	Machine string    `json:"machine"`
	Quick   bool      `json:"quick"`
	Rows    []Row     `json:"rows"`
	Checks  []Check   `json:"checks"`

	ran []string // scenarios attempted in this run
}

func (r *Report) add(scenario, metric string, v float64, unit string) {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		// A measurement that came out infinite (a division by a zero
		// time): say so instead of failing the whole report.
		fmt.Fprintf(os.Stderr, "bench: %s: %s is %v: not recorded\n", scenario, metric, v)
		return
	}
	r.Rows = append(r.Rows, Row{scenario, metric, v, unit})
}

// atMost and atLeast record a check of value against a bound.
func (r *Report) atMost(scenario, what string, v, bound float64, unit string) {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		fmt.Fprintf(os.Stderr, "bench: %s: %s is %v: not checked\n", scenario, what, v)
		return
	}
	r.Checks = append(r.Checks, Check{scenario, what, v, fmt.Sprintf("≤ %g%s", bound, unit), v <= bound})
}

func (r *Report) atLeast(scenario, what string, v, bound float64, unit string) {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		fmt.Fprintf(os.Stderr, "bench: %s: %s is %v: not checked\n", scenario, what, v)
		return
	}
	r.Checks = append(r.Checks, Check{scenario, what, v, fmt.Sprintf("≥ %g%s", bound, unit), v >= bound})
}

type scenario struct {
	name string
	run  func(ctx context.Context, r *Report, quick bool) error
}

// scenarios in the order they run: later ones use figures of earlier ones
// (the floor, the Unix socket) from the same run. Later issues append theirs.
var scenarios = []scenario{
	{"handoff", benchHandoff},
	{"agent", benchAgent},
	{"idle", benchIdle},
	{"hostile", benchHostile},
	{"vm", benchVM},
	{"kv", benchKV},
	{"kv-clients", benchKVClients},
	{"rails", benchRails},
	{"peers", benchPeers},
	{"xdp", benchXDP},
}

// children are the second-process halves of scenarios, by name.
var children = map[string]func(args []string) error{}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "child" {
		f, ok := children[os.Args[2]]
		if !ok {
			fmt.Fprintln(os.Stderr, "bench: unknown child", os.Args[2])
			os.Exit(2)
		}
		if err := f(os.Args[3:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	out := flag.String("out", "bench-out", "directory for results.json and results.md")
	only := flag.String("run", "", "run only scenarios matching this regular expression")
	quick := flag.Bool("quick", false, "fewer iterations (for a smoke test)")
	flag.Parse()
	re, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -run:", err)
		os.Exit(2)
	}
	rep := &Report{When: time.Now().UTC(), Machine: machine(), Quick: *quick}
	ctx := context.Background()
	failed := false
	for _, s := range scenarios {
		if !re.MatchString(s.name) {
			continue
		}
		rep.ran = append(rep.ran, s.name)
		fmt.Fprintf(os.Stderr, "bench: %s ...\n", s.name)
		if err := s.run(ctx, rep, *quick); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.name, err)
			failed = true
		}
	}
	if err := write(*out, rep); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Print(markdown(rep))
	if failed {
		os.Exit(1)
	}
}

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, model, _ = strings.Cut(l, ": ")
				break
			}
		}
	}
	return fmt.Sprintf("%s/%s, %d CPUs, %s, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), model, runtime.Version())
}

func write(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	// Keep the rows of scenarios not run this time, so `-run` updates a
	// report rather than truncating it.
	path := filepath.Join(dir, "results.json")
	if old, err := os.ReadFile(path); err == nil {
		var prev Report
		if json.Unmarshal(old, &prev) == nil {
			ran := map[string]bool{}
			for _, s := range rep.ran {
				ran[s] = true
			}
			for _, r := range prev.Rows {
				if !ran[r.Scenario] {
					rep.Rows = append(rep.Rows, r)
				}
			}
			for _, c := range prev.Checks {
				if !ran[c.Scenario] {
					rep.Checks = append(rep.Checks, c)
				}
			}
		}
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(markdown(rep)), 0o644)
}

func markdown(rep *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# HEC benchmarks\n\n%s — %s", rep.When.Format(time.RFC3339), rep.Machine)
	if rep.Quick {
		b.WriteString(" (quick run)")
	}
	b.WriteString("\n\n| scenario | metric | value | unit |\n|---|---|---:|---|\n")
	rows := append([]Row(nil), rep.Rows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Scenario < rows[j].Scenario })
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Scenario, r.Metric, num(r.Value), r.Unit)
	}
	b.WriteString("\n| scenario | check | value | target | |\n|---|---|---:|---|---|\n")
	for _, c := range rep.Checks {
		mark := "met"
		if !c.Pass {
			mark = "**missed**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", c.Scenario, c.What, num(c.Value), c.Target, mark)
	}
	return b.String()
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1e6:
		return fmt.Sprintf("%.3g", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
