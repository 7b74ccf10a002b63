package dpu

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/hecsys/hec/shared/trace"
)

// Recording the ops' spans over the management API (hecctl trace record):
//
//	GET /v1/trace?for=5s  records for the duration and answers the spans
//	                      (trace.Reply)
//	GET /v1/clock         the agent's clock (trace.Reply without spans),
//	                      for the reader's offset
//
// Recordings may overlap; the dispatcher records while any is under way,
// and nothing otherwise.

const (
	defaultTraceFor = 5 * time.Second
	maxTraceFor     = 10 * time.Minute
)

// traceProc names this agent's process in a trace.
func traceProc() string { return fmt.Sprintf("hecd pid %d", os.Getpid()) }

func (a *Agent) serveTrace(w http.ResponseWriter, r *http.Request) {
	d := defaultTraceFor
	if s := r.URL.Query().Get("for"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 || v > maxTraceFor {
			http.Error(w, fmt.Sprintf("for=%q: want a duration above 0 and up to %v", s, maxTraceFor), http.StatusBadRequest)
			return
		}
		d = v
	}
	rec := a.disp.Trace()
	m := rec.Mark()
	end := rec.Begin()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done(): // the reader went away: nothing to answer
		end()
		return
	}
	end()
	spans, lost := rec.Since(m)
	writeJSON(w, trace.Reply{Proc: traceProc(), Now: time.Now().UnixNano(), Spans: spans, Lost: lost})
}

func (a *Agent) serveClock(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, trace.Reply{Proc: traceProc(), Now: time.Now().UnixNano()})
}
