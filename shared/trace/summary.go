package trace

import (
	"cmp"
	"slices"
	"strings"
)

// Derived stages: what Summarize computes from the spans of one op on
// several processes.
const (
	// StageTransport is a handed-off op's time on the host beyond the
	// agent's (queue and serve): the ring or the connection, both ways,
	// and the waiter's wake-up.
	StageTransport = "transport"
	// StageSkew is a collective's spread of arrival: the last rank's
	// start less the first's.
	StageSkew = "skew"
	// StagePredicted is the planner's time for a multi-rail op's share
	// on a rail, beside the share's own row ("share RAIL").
	StagePredicted = "predicted"
)

// Row is one stage of one kind of op: how many spans, and their
// durations' median, 99th percentile and largest, in nanoseconds.
type Row struct {
	Name, Stage   string
	Count         int
	P50, P99, Max int64
}

// Stages are the stages, recorded and derived, in the order of an op's
// way: Summarize's rows of a kind follow it.
var Stages = []string{StageOp, StageTransport, StageQueue, StageServe, StageCopy, StageCode, StageCommit, StageWait, StageRun, StageSend, StageSeal, StageWrite, StageRecv, StageRead, StageOpen, StageReduce, StageCall, StageHandle, StageSkew, StageShare, StagePredicted}

// Summarize returns, per kind of op and stage, where the time went: the
// recorded stages, and the derived ones (StageTransport for ops both the
// host and an agent recorded, StageSkew for collectives several ranks
// recorded). Rows are by kind, then stage in the order of an op's way.
func Summarize(spans []Span) []Row {
	type key struct{ name, stage string }
	durs := map[key][]int64{}
	type opParts struct {
		name        string
		host, agent int64
		hasHost     bool
		hasAgent    bool
		runStarts   []int64
	}
	ops := map[string]*opParts{}
	for _, s := range spans {
		if s.Stage == StageShare {
			// A row per rail, and one of what the planner predicted
			// for it beside.
			durs[key{s.Name, StageShare + " " + s.Peer}] = append(durs[key{s.Name, StageShare + " " + s.Peer}], s.Dur)
			if s.Predicted > 0 {
				durs[key{s.Name, StagePredicted + " " + s.Peer}] = append(durs[key{s.Name, StagePredicted + " " + s.Peer}], s.Predicted)
			}
			continue
		}
		durs[key{s.Name, s.Stage}] = append(durs[key{s.Name, s.Stage}], s.Dur)
		if s.ID == "" {
			continue
		}
		p := ops[s.ID]
		if p == nil {
			p = &opParts{name: s.Name}
			ops[s.ID] = p
		}
		switch s.Stage {
		case StageOp:
			p.host, p.hasHost = p.host+s.Dur, true
		case StageQueue, StageServe:
			p.agent, p.hasAgent = p.agent+s.Dur, true
		case StageRun:
			p.runStarts = append(p.runStarts, s.Start)
		}
	}
	for _, p := range ops {
		if p.hasHost && p.hasAgent {
			durs[key{p.name, StageTransport}] = append(durs[key{p.name, StageTransport}], max(0, p.host-p.agent))
		}
		if len(p.runStarts) > 1 {
			durs[key{p.name, StageSkew}] = append(durs[key{p.name, StageSkew}], slices.Max(p.runStarts)-slices.Min(p.runStarts))
		}
	}
	rows := make([]Row, 0, len(durs))
	for k, d := range durs {
		slices.Sort(d)
		rows = append(rows, Row{Name: k.name, Stage: k.stage, Count: len(d), P50: d[len(d)/2], P99: d[(len(d)*99)/100], Max: d[len(d)-1]})
	}
	rank := func(stage string) int {
		stage, _, _ = strings.Cut(stage, " ") // "share RAIL"
		if i := slices.Index(Stages, stage); i >= 0 {
			return i
		}
		return len(Stages)
	}
	slices.SortFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(rank(a.Stage), rank(b.Stage)), cmp.Compare(a.Stage, b.Stage))
	})
	return rows
}

// Slowest returns the IDs of the n ops that took longest, slowest first:
// an op's length is from its first span's start to its last span's end.
func Slowest(spans []Span, n int) []string {
	type extent struct {
		id         string
		start, end int64
	}
	byID := map[string]*extent{}
	for _, s := range spans {
		if s.ID == "" {
			continue
		}
		e := byID[s.ID]
		if e == nil {
			byID[s.ID] = &extent{s.ID, s.Start, s.End()}
			continue
		}
		e.start, e.end = min(e.start, s.Start), max(e.end, s.End())
	}
	all := make([]*extent, 0, len(byID))
	for _, e := range byID {
		all = append(all, e)
	}
	slices.SortFunc(all, func(a, b *extent) int {
		return cmp.Or(cmp.Compare(b.end-b.start, a.end-a.start), cmp.Compare(a.id, b.id))
	})
	ids := make([]string, 0, min(n, len(all)))
	for _, e := range all[:min(n, len(all))] {
		ids = append(ids, e.id)
	}
	return ids
}
