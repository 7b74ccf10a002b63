package coll

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/hecsys/hec/shared/trace"
)

// TestMessagesAreTraced: while a rank's recorder records, each message it
// sends and each step's receive land in it under the collective's id,
// naming the peer; what a rank recorded sending to another is, byte for
// byte, what that one recorded receiving from it. The first collective
// pays the model's calibration: its messages are named so, under that
// collective's id. Off, nothing is kept.
func TestMessagesAreTraced(t *testing.T) {
	const n, comm = 3, 0x7e
	ts := transports(t, n)
	recs := make([]*trace.Recorder, n)
	comms := make([]*Comm, n)
	for r := range n {
		recs[r] = trace.NewRecorder(0)
		c, err := New(ts[r], Config{Chunk: 64 << 10, Trace: recs[r], TraceComm: comm})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		comms[r] = c
	}
	const count = 1<<18 + 3 // floats: 1 MiB and 12 bytes, no multiple of the chunk
	run := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				buf := make([]byte, 4*count)
				if errs[r] = c.AllReduce(ctx, buf, buf, Float32, Sum); errs[r] == nil {
					errs[r] = c.Broadcast(ctx, buf, Float32, 1)
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	ends := make([]func(), n)
	marks := make([]trace.Mark, n)
	for r, rec := range recs {
		marks[r], ends[r] = rec.Mark(), rec.Begin()
	}
	run()
	// sent[a][b]: what rank a recorded sending to b; got[b][a]: what b
	// recorded receiving from a.
	sent, got, reduced := map[string]int64{}, map[string]int64{}, map[string]int64{}
	kinds := map[string]bool{}
	for r, rec := range recs {
		ends[r]()
		spans, lost := rec.Since(marks[r])
		if lost != 0 || len(spans) == 0 {
			t.Fatalf("rank %d: %d spans, %d lost", r, len(spans), lost)
		}
		for _, s := range spans {
			want := map[string]string{"calibrate": trace.CollID(comm, 1), "allreduce": trace.CollID(comm, 1),
				"broadcast": trace.CollID(comm, comms[r].Seq())}[s.Name]
			if s.ID != want || s.Status != "" || s.Dur < 0 || s.Start <= 0 {
				t.Fatalf("rank %d: span %+v, want id %q", r, s, want)
			}
			kinds[s.Name+" "+s.Stage] = true
			switch s.Stage {
			case trace.StageSend:
				sent[fmt.Sprintf("%s %d → %s", s.Name, r, s.Peer)] += s.Bytes
			case trace.StageRecv:
				got[fmt.Sprintf("%s %s → %d", s.Name, s.Peer, r)] += s.Bytes
			case trace.StageReduce:
				reduced[fmt.Sprintf("%s %s → %d", s.Name, s.Peer, r)] += s.Bytes
			default:
				t.Fatalf("rank %d: stage %q", r, s.Stage)
			}
		}
	}
	// An allreduce reduces what it receives in its first half (a ring's
	// reduce-scatter: (n-1)/n of the buffer from its predecessor); a
	// broadcast reduces nothing.
	if kinds["broadcast reduce"] {
		t.Error("a broadcast recorded reductions")
	}
	for r := range n {
		k := fmt.Sprintf("allreduce rank %d → %d", (r+n-1)%n, r)
		if rd, g := reduced[k], got[k]; rd <= 0 || rd >= g {
			t.Errorf("%s: %d bytes reduced of %d received", k, rd, g)
		}
	}
	for _, k := range []string{"calibrate send", "calibrate recv", "allreduce reduce", "allreduce send", "allreduce recv", "broadcast send", "broadcast recv"} {
		if !kinds[k] {
			t.Errorf("no %s span on any rank", k)
		}
	}
	if len(sent) != len(got) {
		t.Fatalf("sent %v, received %v", sent, got)
	}
	for k, b := range sent {
		var from, to int
		var name string
		fmt.Sscanf(k, "%s %d → rank %d", &name, &from, &to)
		if g := got[fmt.Sprintf("%s rank %d → %d", name, from, to)]; g != b || b == 0 {
			t.Errorf("%s: %d bytes sent, %d received", k, b, g)
		}
	}
	// Off: nothing.
	m := recs[0].Mark()
	run()
	if spans, _ := recs[0].Since(m); len(spans) != 0 {
		t.Fatalf("%d spans kept while nothing recorded", len(spans))
	}
}
