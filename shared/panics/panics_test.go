package panics

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func serve(log *slog.Logger, where string, f func()) (err error) {
	defer func() { err = Recovered(log, where, recover()) }()
	f()
	return nil
}

func TestRecovered(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	where := "test/" + t.Name()
	if err := serve(log, where, func() {}); err != nil {
		t.Fatalf("no panic: %v", err)
	}
	for i := 0; i < 3; i++ {
		err := serve(log, where, func() { panic("a bug") })
		if !errors.Is(err, ErrPanic) || !strings.Contains(err.Error(), where) {
			t.Fatalf("error %v: want ErrPanic naming %s", err, where)
		}
	}
	if n := Count(where); n != 3 || Counts()[where] != 3 {
		t.Errorf("Count(%q) = %d, Counts %v; want 3", where, n, Counts())
	}
	// The stack once; the second and third within 10 s: quiet.
	if n := strings.Count(buf.String(), "[running]"); n != 1 {
		t.Errorf("%d stacks logged, want 1:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "panicked"); n != 1 {
		t.Errorf("%d lines logged, want 1:\n%s", n, buf.String())
	}
}
