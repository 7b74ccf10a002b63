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

	"github.com/hecsys/hec/test/testutil"
)

// Row is one measured figure: the median of N repetitions, with their
// spread (Min–Max) when there were several.
type Row struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Min      float64 `json:"min,omitempty"`
	Max      float64 `json:"max,omitempty"`
	N        int     `json:"n,omitempty"`
}

// Check compares two figures of the same run against a target: the
// median of N repetitions of their ratio, with its spread. A check whose
// spread is wider than its margin (the distance from the median to the
// bound) is Noisy: reported as such, not silently passed or failed.
type Check struct {
	Scenario string  `json:"scenario"`
	What     string  `json:"what"`
	Value    float64 `json:"value"`
	Target   string  `json:"target"`
	Pass     bool    `json:"pass"`
	Min      float64 `json:"min,omitempty"`
	Max      float64 `json:"max,omitempty"`
	N        int     `json:"n,omitempty"`
	Noisy    bool    `json:"noisy,omitempty"`
}

// spread returns the median, minimum and maximum of samples (which it
// sorts), or ok false when there are none or one is not finite.
func spread(samples []float64) (med, lo, hi float64, ok bool) {
	if len(samples) == 0 {
		return 0, 0, 0, false
	}
	for _, v := range samples {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return 0, 0, 0, false
		}
	}
	sort.Float64s(samples)
	n := len(samples)
	med = samples[n/2]
	if n%2 == 0 {
		med = (samples[n/2-1] + samples[n/2]) / 2
	}
	return med, samples[0], samples[n-1], true
}

// ratio pairs the repetitions of two figures: a[i]/b[i].
func ratio(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		out = append(out, a[i]/b[i])
	}
	return out
}

// scale returns each sample times k.
func scale(samples []float64, k float64) []float64 {
	out := make([]float64, len(samples))
	for i, v := range samples {
		out[i] = v * k
	}
	return out
}

// inverse returns k over each sample.
func inverse(samples []float64, k float64) []float64 {
	out := make([]float64, len(samples))
	for i, v := range samples {
		out[i] = k / v
	}
	return out
}

// Report is what a run writes.
type Report struct {
	When    time.Time `json:"when"`
	Machine string    `json:"machine"`
	Quick   bool      `json:"quick"`
	Rows    []Row     `json:"rows"`
	Checks  []Check   `json:"checks"`

	ran      []string // scenarios attempted in this run
	pictures string   // markdown embedding the figures drawn beside results.md
}

func (r *Report) add(scenario, metric string, v float64, unit string) {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		// A measurement that came out infinite (a division by a zero
		// time): say so instead of failing the whole report.
		fmt.Fprintf(os.Stderr, "bench: %s: %s is %v: not recorded\n", scenario, metric, v)
		return
	}
	r.Rows = append(r.Rows, Row{Scenario: scenario, Metric: metric, Value: v, Unit: unit})
}

// addN records the median of several repetitions of a figure, with their
// spread.
func (r *Report) addN(scenario, metric string, samples []float64, unit string) {
	med, lo, hi, ok := spread(samples)
	if !ok {
		fmt.Fprintf(os.Stderr, "bench: %s: %s has no finite samples (%v): not recorded\n", scenario, metric, samples)
		return
	}
	r.Rows = append(r.Rows, Row{Scenario: scenario, Metric: metric, Value: med, Unit: unit, Min: lo, Max: hi, N: len(samples)})
}

// atLeast records a check of one value against a bound.
func (r *Report) atLeast(scenario, what string, v, bound float64, unit string) {
	r.atLeastN(scenario, what, []float64{v}, bound, unit)
}

// atMostN and atLeastN check the median of several repetitions of a ratio
// against a bound, and flag it noisy when its spread is wider than its
// margin.
func (r *Report) atMostN(scenario, what string, samples []float64, bound float64, unit string) {
	r.check(scenario, what, samples, bound, fmt.Sprintf("≤ %g%s", bound, unit), func(v float64) bool { return v <= bound })
}

func (r *Report) atLeastN(scenario, what string, samples []float64, bound float64, unit string) {
	r.check(scenario, what, samples, bound, fmt.Sprintf("≥ %g%s", bound, unit), func(v float64) bool { return v >= bound })
}

func (r *Report) check(scenario, what string, samples []float64, bound float64, target string, pass func(float64) bool) {
	n := len(samples)
	med, lo, hi, ok := spread(samples)
	if !ok {
		fmt.Fprintf(os.Stderr, "bench: %s: %s is %v: not checked\n", scenario, what, samples)
		return
	}
	c := Check{Scenario: scenario, What: what, Value: med, Target: target, Pass: pass(med)}
	if n > 1 {
		c.Min, c.Max, c.N = lo, hi, n
		c.Noisy = hi-lo > math.Abs(med-bound)
	}
	r.Checks = append(r.Checks, c)
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
	{"capi", benchCapi},
	{"idle", benchIdle},
	{"hostile", benchHostile},
	{"access", benchAccess},
	{"vm", benchVM},
	{"kv", benchKV},
	{"kv-clients", benchKVClients},
	{"rails", benchRails},
	{"ec", benchEC},
	{"ec-objects", benchECObjects},
	{"trace", benchTrace},
	{"peers", benchPeers},
	{"rdma", benchRDMA},
	{"coll", benchColl},
	{"coll-auto", benchCollAuto},
	{"torch", benchTorch},
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
	var chosen []scenario
	for _, s := range scenarios {
		if re.MatchString(s.name) {
			chosen = append(chosen, s)
		}
	}
	for i, s := range chosen {
		rep.ran = append(rep.ran, s.name)
		t0 := time.Now()
		progress(s.name, "scenario %d of %d", i+1, len(chosen))
		err := s.run(ctx, rep, *quick)
		if stderrIsTerminal {
			fmt.Fprintln(os.Stderr)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.name, err)
			failed = true
		}
		fmt.Fprintf(os.Stderr, "bench: %s took %v\n", s.name, time.Since(t0).Round(time.Second))
	}
	testutil.RemoveProcessDir() // the binaries the scenarios built
	fmt.Fprintf(os.Stderr, "bench: %d scenarios in %v\n", len(chosen), time.Since(started).Round(time.Second))
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
	pictures, err := drawFigures(dir, rep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err) // the figures are an extra: the report is still written
	}
	rep.pictures = pictures
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(markdown(rep)), 0o644)
}

func markdown(rep *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# HEC benchmarks\n\n%s — %s", rep.When.Format(time.RFC3339), rep.Machine)
	if rep.Quick {
		b.WriteString(" (quick run)")
	}
	b.WriteString("\n\nA value with a spread is the median of n repetitions (min–max). A check is noisy when its spread is wider than its margin (median to target).\n")
	b.WriteString("\n| scenario | metric | value | spread | unit |\n|---|---|---:|---|---|\n")
	rows := append([]Row(nil), rep.Rows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Scenario < rows[j].Scenario })
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Scenario, r.Metric, num(r.Value), spreadText(r.Min, r.Max, r.N), r.Unit)
	}
	b.WriteString("\n| scenario | check | value | spread | target | |\n|---|---|---:|---|---|---|\n")
	for _, c := range rep.Checks {
		mark := "met"
		if !c.Pass {
			mark = "**missed**"
		}
		if c.Noisy {
			mark = "noisy (" + strings.Trim(mark, "*") + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", c.Scenario, c.What, num(c.Value), spreadText(c.Min, c.Max, c.N), c.Target, mark)
	}
	b.WriteString(rep.pictures)
	return b.String()
}

func spreadText(lo, hi float64, n int) string {
	if n < 2 {
		return ""
	}
	return fmt.Sprintf("%s–%s (n=%d)", num(lo), num(hi), n)
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

// progress says what a scenario is doing now: one line per step on a pipe,
// a line rewritten in place on a terminal, with the time since the run
// began.
func progress(scenario, format string, args ...any) {
	line := fmt.Sprintf("bench: %s: %s [%s]", scenario, fmt.Sprintf(format, args...), time.Since(started).Round(time.Second))
	if stderrIsTerminal {
		fmt.Fprintf(os.Stderr, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(os.Stderr, line)
}

var (
	started          = time.Now()
	stderrIsTerminal = func() bool {
		st, err := os.Stderr.Stat()
		return err == nil && st.Mode()&os.ModeCharDevice != 0
	}()
)
