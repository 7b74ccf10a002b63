package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of test2json's output.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// timed is a test that ended, and how long it ran.
type timed struct {
	pkg, test string
	took      time.Duration
}

// summary reads the events and writes the plain output to w; it returns
// whether anything failed and every test's time.
type summary struct {
	w      io.Writer
	failed bool
	output map[string][]string // by package and test ("" for the package's own)
	tests  []timed
}

func key(pkg, test string) string { return pkg + "\x00" + test }

// line takes one line of input.
func (s *summary) line(b []byte) {
	var e event
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil {
		fmt.Fprintf(s.w, "%s\n", b) // not an event: go test's own words (a build error)
		return
	}
	k := key(e.Package, e.Test)
	switch e.Action {
	case "output":
		s.output[k] = append(s.output[k], e.Output)
	case "build-output":
		fmt.Fprint(s.w, e.Output)
	case "build-fail":
		s.failed = true
	case "pass", "skip":
		if e.Test != "" {
			s.tests = append(s.tests, timed{e.Package, e.Test, time.Duration(e.Elapsed * float64(time.Second))})
			delete(s.output, k)
			return
		}
		s.packageEnd(e)
	case "fail":
		s.failed = true
		if e.Test != "" {
			s.tests = append(s.tests, timed{e.Package, e.Test, time.Duration(e.Elapsed * float64(time.Second))})
			for _, o := range s.output[k] {
				fmt.Fprint(s.w, o)
			}
			delete(s.output, k)
			return
		}
		s.packageEnd(e)
	}
}

// packageEnd prints a package's closing line (ok, FAIL, no test files);
// for a failed one, first what it printed outside its tests (a panic, a
// timeout's goroutines) and the output of tests it never ended — its
// ended tests' failures are out already.
func (s *summary) packageEnd(e event) {
	own := s.output[key(e.Package, "")]
	delete(s.output, key(e.Package, ""))
	closing := func(o string) bool {
		return strings.HasPrefix(o, "ok  ") || strings.HasPrefix(o, "FAIL\t") || strings.HasPrefix(o, "?   ")
	}
	if e.Action == "fail" {
		var open []string
		for k := range s.output {
			if strings.HasPrefix(k, e.Package+"\x00") {
				open = append(open, k)
			}
		}
		slices.Sort(open)
		for _, k := range open {
			for _, o := range s.output[k] {
				fmt.Fprint(s.w, o)
			}
			delete(s.output, k)
		}
		for _, o := range own {
			if !closing(o) && o != "FAIL\n" && o != "PASS\n" && !strings.HasPrefix(o, "=== ") {
				fmt.Fprint(s.w, o)
			}
		}
	}
	for _, o := range own {
		if closing(o) {
			fmt.Fprint(s.w, o)
		}
	}
}

// slowest prints the n tests that took longest (subtests apart).
func (s *summary) slowest(n int) {
	var top []timed
	for _, t := range s.tests {
		if !strings.Contains(t.test, "/") {
			top = append(top, t)
		}
	}
	slices.SortFunc(top, func(a, b timed) int { return int(b.took - a.took) })
	if len(top) > n {
		top = top[:n]
	}
	if len(top) == 0 {
		return
	}
	fmt.Fprintf(s.w, "\nslowest %d tests:\n", len(top))
	for _, t := range top {
		fmt.Fprintf(s.w, "%9.1fs  %s  %s\n", t.took.Seconds(), t.pkg, t.test)
	}
}

func main() {
	n := flag.Int("slowest", 10, "how many of the slowest tests to list")
	flag.Parse()
	s := &summary{w: os.Stdout, output: map[string][]string{}}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		s.line(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		s.failed = true
	}
	s.slowest(*n)
	if s.failed {
		os.Exit(1)
	}
}
