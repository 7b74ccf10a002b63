package trace

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// chromeEvent is one event of Chrome's trace-event format: a complete
// event ("X", a span) or process metadata ("M"). Times are microseconds.
type chromeEvent struct {
	Name string     `json:"name"`
	Cat  string     `json:"cat,omitempty"`
	Ph   string     `json:"ph"`
	Ts   float64    `json:"ts"`
	Dur  float64    `json:"dur,omitempty"`
	Pid  int        `json:"pid"`
	Tid  int        `json:"tid"`
	Args chromeArgs `json:"args"`
}

// chromeArgs are a span's fields Chrome shows beside it, and what ReadChrome
// reads back.
type chromeArgs struct {
	Name   string `json:"name,omitempty"` // process_name's
	ID     string `json:"id,omitempty"`
	Op     string `json:"op,omitempty"`
	Stage  string `json:"stage,omitempty"`
	Status string `json:"status,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	Peer   string `json:"peer,omitempty"`
	// Predicted is the planner's time (µs), where it made one.
	Predicted float64 `json:"predicted_us,omitempty"`
}

type chromeFile struct {
	TraceEvents     []chromeEvent `json:"traceEvents"`
	DisplayTimeUnit string        `json:"displayTimeUnit"`
}

// WriteChrome writes spans as a Chrome trace-event file: a process
// (track) per Proc, spans that overlap on one process in lanes of their
// own (threads), times from the earliest span.
func WriteChrome(w io.Writer, spans []Span) error {
	spans = slices.Clone(spans)
	slices.SortStableFunc(spans, func(a, b Span) int {
		return cmp.Or(cmp.Compare(a.Proc, b.Proc), cmp.Compare(a.Start, b.Start), cmp.Compare(b.Dur, a.Dur))
	})
	f := chromeFile{TraceEvents: []chromeEvent{}, DisplayTimeUnit: "ns"}
	var t0 int64
	for i, s := range spans {
		if i == 0 || s.Start < t0 {
			t0 = s.Start
		}
	}
	pid := 0
	var laneEnds []int64 // per lane of the current process, when its last span ends
	for i, s := range spans {
		if i == 0 || s.Proc != spans[i-1].Proc {
			pid++
			laneEnds = laneEnds[:0]
			f.TraceEvents = append(f.TraceEvents, chromeEvent{Name: "process_name", Ph: "M", Pid: pid, Args: chromeArgs{Name: s.Proc}})
		}
		lane := slices.IndexFunc(laneEnds, func(end int64) bool { return end <= s.Start })
		if lane < 0 {
			lane = len(laneEnds)
			laneEnds = append(laneEnds, 0)
		}
		laneEnds[lane] = s.End()
		name := s.Name + " " + s.Stage
		if s.Peer != "" {
			name += " " + s.Peer
		}
		f.TraceEvents = append(f.TraceEvents, chromeEvent{Name: name, Cat: s.Stage, Ph: "X",
			Ts: float64(s.Start-t0) / 1e3, Dur: float64(s.Dur) / 1e3, Pid: pid, Tid: lane + 1,
			Args: chromeArgs{ID: s.ID, Op: s.Name, Stage: s.Stage, Status: s.Status, Bytes: s.Bytes, Peer: s.Peer, Predicted: float64(s.Predicted) / 1e3}})
	}
	enc := json.NewEncoder(w)
	return enc.Encode(f)
}

// ErrNotATrace: the file is not a trace WriteChrome wrote.
var ErrNotATrace = errors.New("trace: not a trace of ours")

// ReadChrome reads back the spans of a file WriteChrome wrote (times from
// the file's start, in nanoseconds). Events it did not write (another
// tool's) are skipped.
func ReadChrome(r io.Reader) ([]Span, error) {
	var f chromeFile
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotATrace, err)
	}
	procs := map[int]string{}
	for _, e := range f.TraceEvents {
		if e.Ph == "M" && e.Name == "process_name" {
			procs[e.Pid] = e.Args.Name
		}
	}
	var spans []Span
	for _, e := range f.TraceEvents {
		if e.Ph != "X" || e.Args.Stage == "" {
			continue
		}
		spans = append(spans, Span{ID: e.Args.ID, Proc: procs[e.Pid], Name: e.Args.Op, Stage: e.Args.Stage,
			Start: int64(math.Round(e.Ts * 1e3)), Dur: int64(math.Round(e.Dur * 1e3)), Status: e.Args.Status, Bytes: e.Args.Bytes, Peer: e.Args.Peer,
			Predicted: int64(math.Round(e.Args.Predicted * 1e3))})
	}
	if f.TraceEvents == nil {
		return nil, fmt.Errorf("%w: no traceEvents", ErrNotATrace)
	}
	return spans, nil
}
