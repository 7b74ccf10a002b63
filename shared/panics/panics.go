package panics

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// ErrPanic is wrapped by the error of a request whose serving panicked.
var ErrPanic = errors.New("internal error (a panic, logged by the agent)")

// counts are the panics contained so far, by where (*atomic.Uint64).
var counts sync.Map

// Count is how many panics were contained at where.
func Count(where string) uint64 {
	if n, ok := counts.Load(where); ok {
		return n.(*atomic.Uint64).Load()
	}
	return 0
}

// Counts are the panics contained so far, by where (the agent exports
// them as hec_panics_total).
func Counts() map[string]uint64 {
	out := map[string]uint64{}
	counts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

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
	n, _ := counts.LoadOrStore(where, new(atomic.Uint64))
	n.(*atomic.Uint64).Add(1)
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
