package dpu

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// limitedLog rate-limits the log lines that a host or a network client can
// make the agent write (lease churn, bad connections, a region truncated
// again and again): per kind, at most logBurst lines per logEvery. The
// first line after a quiet spell says how many of its kind were
// suppressed; hec_log_suppressed_total counts them all.
type limitedLog struct {
	log        *slog.Logger
	suppressed *prometheus.CounterVec

	mu    sync.Mutex
	kinds map[string]*logWindow // keys are the agent's own constants, never a client's words
}

type logWindow struct {
	start      time.Time
	n          int
	suppressed uint64
}

const (
	logEvery = 10 * time.Second
	logBurst = 20
)

func newLimitedLog(log *slog.Logger) *limitedLog {
	return &limitedLog{
		log: log,
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hec_log_suppressed_total",
			Help: "Log lines a client could trigger that were not written (rate limit), by kind.",
		}, []string{"kind"}),
		kinds: map[string]*logWindow{},
	}
}

// allow reports whether a line of kind may be written now, and how many of
// its kind were suppressed since the last one written.
func (l *limitedLog) allow(kind string, now time.Time) (ok bool, suppressed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.kinds[kind]
	if w == nil {
		w = &logWindow{start: now}
		l.kinds[kind] = w
	}
	if now.Sub(w.start) >= logEvery {
		w.start, w.n = now, 0
	}
	if w.n >= logBurst {
		w.suppressed++
		l.suppressed.WithLabelValues(kind).Inc()
		return false, 0
	}
	w.n++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}

// Log writes msg at level unless kind is over its rate; msg is also the kind.
func (l *limitedLog) Log(level slog.Level, msg string, args ...any) {
	ok, suppressed := l.allow(msg, time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_before", suppressed)
	}
	l.log.Log(context.Background(), level, msg, args...)
}

// limitedWriter is an io.Writer for a log.Logger (http.Server's ErrorLog:
// failed TLS handshakes, bad requests) that writes each line through the
// rate limit, as kind.
type limitedWriter struct {
	l    *limitedLog
	kind string
}

func (w limitedWriter) Write(p []byte) (int, error) {
	w.l.Log(slog.LevelWarn, w.kind, "err", strings.TrimSpace(string(p)))
	return len(p), nil
}
