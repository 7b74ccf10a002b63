package dpu

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestLimitedLog: a kind of line a client can cause is written at most
// logBurst times per logEvery; the next one written says how many were
// suppressed, and the counter has them all. Other kinds are not affected.
func TestLimitedLog(t *testing.T) {
	var buf bytes.Buffer
	l := newLimitedLog(slog.New(slog.NewTextHandler(&buf, nil)))
	t0 := time.Now()
	written := 0
	for range 1000 {
		if ok, _ := l.allow("queue pair", t0); ok {
			written++
		}
	}
	if written != logBurst {
		t.Fatalf("%d of 1000 lines written, want %d", written, logBurst)
	}
	if ok, _ := l.allow("tcp: closing connection", t0); !ok {
		t.Fatal("another kind was suppressed")
	}
	ok, suppressed := l.allow("queue pair", t0.Add(logEvery))
	if !ok || suppressed != 1000-logBurst {
		t.Fatalf("after the interval: ok %v, suppressed %d, want %d", ok, suppressed, 1000-logBurst)
	}
	var m dto.Metric
	if err := l.suppressed.WithLabelValues("queue pair").Write(&m); err != nil || m.GetCounter().GetValue() != 1000-logBurst {
		t.Fatalf("hec_log_suppressed_total = %v (%v)", m.GetCounter().GetValue(), err)
	}
	for range 2 * logBurst {
		l.Log(slog.LevelInfo, "region lost: formatting it again")
	}
	if n := strings.Count(buf.String(), "region lost"); n != logBurst {
		t.Fatalf("%d lines logged, want %d", n, logBurst)
	}
}
