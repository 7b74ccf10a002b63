package panics

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrPanic is wrapped by the error of a request whose serving panicked.
var ErrPanic = errors.New("internal error (a panic, logged by the agent)")

// Total counts the panics contained, by where; the agent registers it.
var Total = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "hec_panics_total",
	Help: "Panics contained while serving one request (the request failed with an internal error; the agent went on), by where.",
}, []string{"where"})

// quietFor is how long a place that panicked again stays quiet in the log
// after a line about it.
const quietFor = 10 * time.Second

var (
	mu     sync.Mutex
	logged = map[string]time.Time{} // where → when its last line was written
)

// Recovered accounts for v, a value recover returned while serving a
// request at where (a constant naming the service and the op, never a
// client's words), and returns the request's error, which wraps ErrPanic.
// A nil v returns nil.
func Recovered(log *slog.Logger, where string, v any) error {
	if v == nil {
		return nil
	}
	Total.WithLabelValues(where).Inc()
	now := time.Now()
	mu.Lock()
	last, seen := logged[where]
	quiet := seen && now.Sub(last) < quietFor
	if !quiet {
		logged[where] = now
	}
	mu.Unlock()
	if log == nil {
		log = slog.Default()
	}
	switch {
	case !seen:
		log.Error("a request panicked; it failed, the agent goes on (stack logged once per place)",
			"where", where, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	case !quiet:
		log.Error("a request panicked again; it failed, the agent goes on", "where", where, "panic", fmt.Sprint(v))
	}
	return fmt.Errorf("%s: %w: %v", where, ErrPanic, v)
}
