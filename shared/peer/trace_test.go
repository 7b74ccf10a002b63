package peer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/test/testutil"
)

// While a recording is under way, a link test's frames are recorded on
// both ends under one id (seal and write where sent, read and open where
// received), and a frame sent for a traced op under that op; nothing is
// recorded while no one records, nor for a send that names no op.
func TestFramesAreTraced(t *testing.T) {
	recs := []*trace.Recorder{trace.NewRecorder(0), trace.NewRecorder(0)}
	var nodes []*Node
	for i, rec := range recs {
		nodes = append(nodes, startNodeWith(t, Config{ID: uint32(i + 1), Listen: "127.0.0.1:0", Key: testKey, Deadline: time.Second, Trace: rec}))
	}
	link(nodes[0], nodes[1])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const frames, frame = 4, 1 << 20
	if _, err := nodes[0].Transfer(ctx, 2, frames*frame, frame, 0); err != nil {
		t.Fatal(err)
	}
	var ends []func()
	for _, rec := range recs {
		ends = append(ends, rec.Begin())
	}
	if spans, _ := recs[0].Since(0); len(spans) != 0 {
		t.Fatalf("spans recorded before the recording: %v", spans)
	}
	if _, err := nodes[0].Transfer(ctx, 2, frames*frame, frame, 0); err != nil {
		t.Fatal(err)
	}
	sent := spansOf(t, recs[0])
	testutil.WaitFor(t, 10*time.Second, "the receiver's spans", func() bool { return len(spansOf(t, recs[1])) >= 2*frames })
	got := spansOf(t, recs[1])
	id := sent[0].ID
	if !strings.HasPrefix(id, "link 1 #") {
		t.Fatalf("a link test's id %q, want link 1 #COMM", id)
	}
	count := map[string]int{}
	for i, s := range append(sent, got...) {
		count[s.Stage]++
		wantPeer := "node 2"
		if i >= len(sent) {
			wantPeer = "node 1"
		}
		if s.ID != id || s.Name != trace.NameLink || s.Peer != wantPeer || s.Dur < 0 || s.Bytes < frame || s.Status != "" {
			t.Errorf("span %+v: want id %q, kind %q, peer %q, at least %d bytes", s, id, trace.NameLink, wantPeer, frame)
		}
	}
	for _, stage := range []string{trace.StageSeal, trace.StageWrite, trace.StageRead, trace.StageOpen} {
		if count[stage] != frames {
			t.Errorf("%d %s spans, want one per frame (%d): %v", count[stage], stage, frames, count)
		}
	}
	// Read then open, back to back (within the wall clock's rounding:
	// durations are the monotonic clock's).
	for i := 0; i+1 < len(got); i += 2 {
		if gap := got[i+1].Start - got[i].End(); got[i].Stage != trace.StageRead || got[i+1].Stage != trace.StageOpen || gap < -1000 || gap > 1000 {
			t.Errorf("receiver's spans %d, %d: %+v then %+v, want a read then its open", i, i+1, got[i], got[i+1])
		}
	}

	// A frame sent under an op is recorded under it; one sent under none
	// is not.
	mark := recs[0].Mark()
	h := Header{Type: TypeData, Comm: nodes[0].NewComm()}
	if err := nodes[0].Send(ctx, 2, h, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].Send(trace.WithOp(ctx, trace.Op{ID: "coll 7 #3", Name: "allreduce"}), 2, h, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	spans, _ := recs[0].Since(mark)
	if len(spans) != 2 || spans[0].Stage != trace.StageSeal || spans[1].Stage != trace.StageWrite {
		t.Fatalf("spans of two sends, one under an op: %+v, want its seal and write", spans)
	}
	for _, s := range spans {
		if s.ID != "coll 7 #3" || s.Name != "allreduce" || s.Peer != "node 2" {
			t.Errorf("%+v: want the op's id and kind, the peer", s)
		}
	}

	// Off again: nothing.
	for _, end := range ends {
		end()
	}
	mark = recs[0].Mark()
	if _, err := nodes[0].Transfer(ctx, 2, frame, frame, 0); err != nil {
		t.Fatal(err)
	}
	if spans, _ := recs[0].Since(mark); len(spans) != 0 {
		t.Fatalf("spans recorded after the recording ended: %v", spans)
	}
}

// spansOf is what rec holds (heartbeats and acks belong to no op: they
// are not there).
func spansOf(t *testing.T, rec *trace.Recorder) []trace.Span {
	t.Helper()
	spans, lost := rec.Since(0)
	if lost != 0 {
		t.Fatalf("%d spans lost", lost)
	}
	return spans
}

// TestPingsMeasureThePeersClock: a peer whose clock runs 5 s ahead is
// measured 5 s ahead by pings to it (within half the round trip), and
// this node 5 s behind by its pings back; the status shows it.
func TestPingsMeasureThePeersClock(t *testing.T) {
	const skew = 5 * time.Second
	a := startNodeWith(t, Config{ID: 1, Listen: "127.0.0.1:0", Key: testKey, Deadline: time.Second})
	b := startNodeWith(t, Config{ID: 2, Listen: "127.0.0.1:0", Key: testKey, Deadline: time.Second,
		Clock: func() time.Time { return time.Now().Add(skew) }})
	link(a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, ok := a.Clock(2); ok {
		t.Fatal("a clock offset before any ping")
	}
	for _, c := range []struct {
		from *Node
		to   uint32
		want time.Duration
	}{{a, 2, skew}, {b, 1, -skew}} {
		for range 5 {
			if _, err := c.from.Ping(ctx, c.to); err != nil {
				t.Fatal(err)
			}
		}
		off, rtt, ok := c.from.Clock(c.to)
		// Half the round trip bounds the error; the clock reads add a
		// little beside it.
		if slack := rtt/2 + time.Millisecond; !ok || rtt <= 0 || off < c.want-slack || off > c.want+slack {
			t.Errorf("node %d's clock as node %d measured it: %v (rtt %v, %v), want %v", c.to, c.from.ID(), off, rtt, ok, c.want)
		}
	}
	st := a.Peers()
	if len(st) != 1 || time.Duration(st[0].ClockOffsetNs) < skew-time.Second || st[0].ClockRTTNs <= 0 {
		t.Errorf("node 1's status of node 2: %+v, want its clock %v ahead", st, skew)
	}
}
