package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"
)

// child runs this binary as the named child with args and decodes the JSON
// it prints into out.
func child(name string, out any, args ...string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, append([]string{"child", name}, args...)...)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("child %s: %w", name, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("child %s said %q: %w", name, b, err)
	}
	return nil
}

func emit(v any) error { return json.NewEncoder(os.Stdout).Encode(v) }

// Latency is a child's answer for a round-trip scenario.
type Latency struct {
	P10, P50, P90, P99, P999 float64 // nanoseconds
	N                        int
}

// percentiles name Latency's fields as the report's rows do.
var percentiles = []struct {
	name string
	of   func(Latency) float64
}{
	{"p10", func(l Latency) float64 { return l.P10 }},
	{"p50", func(l Latency) float64 { return l.P50 }},
	{"p90", func(l Latency) float64 { return l.P90 }},
	{"p99", func(l Latency) float64 { return l.P99 }},
	{"p99.9", func(l Latency) float64 { return l.P999 }},
}

// latencies turns consecutive timestamps' deltas into percentiles.
func latencies(d []time.Duration) Latency {
	slices.Sort(d)
	at := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) }
	return Latency{P10: at(0.10), P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999), N: len(d)}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(fmt.Sprintf("bench: bad number %q", s))
	}
	return n
}

func shmPath(tag string) string {
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = os.TempDir()
	}
	return fmt.Sprintf("%s/hec-bench-%s-%d", dir, tag, os.Getpid())
}
