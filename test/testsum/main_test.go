package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"a"}`,
		`{"Action":"run","Package":"a","Test":"TestOK"}`,
		`{"Action":"output","Package":"a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"a","Test":"TestOK","Output":"--- PASS: TestOK (2.50s)\n"}`,
		`{"Action":"pass","Package":"a","Test":"TestOK","Elapsed":2.5}`,
		`{"Action":"run","Package":"a","Test":"TestBad"}`,
		`{"Action":"output","Package":"a","Test":"TestBad","Output":"    a_test.go:9: broken\n"}`,
		`{"Action":"output","Package":"a","Test":"TestBad","Output":"--- FAIL: TestBad (0.10s)\n"}`,
		`{"Action":"fail","Package":"a","Test":"TestBad","Elapsed":0.1}`,
		`{"Action":"output","Package":"a","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"a","Output":"FAIL\ta\t2.7s\n"}`,
		`{"Action":"fail","Package":"a","Elapsed":2.7}`,
		`{"Action":"run","Package":"b","Test":"TestSlow"}`,
		`{"Action":"output","Package":"b","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}`,
		`{"Action":"pass","Package":"b","Test":"TestSlow","Elapsed":9}`,
		`{"Action":"output","Package":"b","Output":"PASS\n"}`,
		`{"Action":"output","Package":"b","Output":"ok  \tb\t9.1s\n"}`,
		`{"Action":"pass","Package":"b","Elapsed":9.1}`,
		`{"Action":"run","Package":"c","Test":"TestHangs"}`,
		`{"Action":"output","Package":"c","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}`,
		`{"Action":"output","Package":"c","Output":"panic: test timed out after 1s\n"}`,
		`{"Action":"output","Package":"c","Output":"FAIL\tc\t1.0s\n"}`,
		`{"Action":"fail","Package":"c","Elapsed":1}`,
		`# d`,
		`d/x.go:3:1: syntax error`,
	}, "\n")
	var out bytes.Buffer
	s := &summary{w: &out, output: map[string][]string{}}
	for _, l := range strings.Split(in, "\n") {
		s.line([]byte(l))
	}
	s.slowest(2)
	got := out.String()
	for _, want := range []string{"a_test.go:9: broken\n--- FAIL: TestBad", "FAIL\ta\t2.7s", "ok  \tb\t9.1s",
		"=== RUN   TestHangs\npanic: test timed out after 1s\nFAIL\tc\t1.0s", "d/x.go:3:1: syntax error",
		"slowest 2 tests:\n      9.0s  b  TestSlow\n      2.5s  a  TestOK\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	for _, not := range []string{"--- PASS: TestOK", "=== RUN   TestOK", "=== RUN   TestSlow"} {
		if strings.Contains(got, not) {
			t.Errorf("%q printed:\n%s", not, got)
		}
	}
	if !s.failed {
		t.Error("a failed test and package: not failed")
	}
}
