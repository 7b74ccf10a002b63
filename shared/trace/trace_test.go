package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestRecorderKeepsSpansOnlyWhileRecording(t *testing.T) {
	r := NewRecorder(4)
	r.Add(Span{ID: "before"})
	m := r.Mark()
	end := r.Begin()
	end2 := r.Begin()
	r.Add(Span{ID: "a"})
	end()
	end() // once only: the other recording goes on
	r.Add(Span{ID: "b"})
	end2()
	r.Add(Span{ID: "after"})
	got, lost := r.Since(m)
	if ids := spanIDs(got); !slices.Equal(ids, []string{"a", "b"}) || lost != 0 {
		t.Fatalf("got %v (lost %d), want [a b]: spans are kept while a recording is under way, and only then", ids, lost)
	}
	if r.On() {
		t.Fatal("on after every recording ended")
	}
	var nilRec *Recorder
	if nilRec.On() {
		t.Fatal("a nil recorder is on")
	}
}

func TestRecorderCountsWhatItDropped(t *testing.T) {
	tests := []struct {
		name      string
		cap, add  int
		wantFirst string
		wantN     int
		wantLost  uint64
	}{
		{"fits", 4, 3, "0", 3, 0},
		{"full", 4, 4, "0", 4, 0},
		{"wrapped", 4, 10, "6", 4, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRecorder(tt.cap)
			defer r.Begin()()
			m := r.Mark()
			for i := range tt.add {
				r.Add(Span{ID: string(rune('0' + i))})
			}
			got, lost := r.Since(m)
			if len(got) != tt.wantN || got[0].ID != tt.wantFirst || lost != tt.wantLost {
				t.Fatalf("got %v, lost %d; want %d from %q, lost %d", spanIDs(got), lost, tt.wantN, tt.wantFirst, tt.wantLost)
			}
			for i := 1; i < len(got); i++ {
				if got[i].ID <= got[i-1].ID {
					t.Fatalf("not oldest first: %v", spanIDs(got))
				}
			}
		})
	}
}

func TestRecorderConcurrentAdds(t *testing.T) {
	r := NewRecorder(1 << 12)
	defer r.Begin()()
	m := r.Mark()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				r.Add(Span{ID: "x"})
			}
		}()
	}
	wg.Wait()
	if got, lost := r.Since(m); len(got) != 2000 || lost != 0 {
		t.Fatalf("%d spans, %d lost; want 2000, 0", len(got), lost)
	}
}

func TestChromeRoundTrip(t *testing.T) {
	spans := []Span{
		{ID: OpID(Origin(42, 3), 0x10002), Proc: "host pid 42", Name: "checksum", Stage: StageOp, Start: 1_000_000, Dur: 50_000, Status: "ok", Bytes: 1 << 20},
		{ID: OpID(Origin(42, 3), 0x20002), Proc: "host pid 42", Name: "checksum", Stage: StageOp, Start: 1_010_000, Dur: 50_000, Status: "ok"},
		{ID: OpID(Origin(42, 3), 0x10002), Proc: "hecd a", Name: "checksum", Stage: StageServe, Start: 1_005_000, Dur: 30_000, Status: "ok"},
		{ID: CollID(7, 3), Proc: "hecd a", Name: "allreduce", Stage: StageSend, Start: 1_006_000, Dur: 2_000, Bytes: 4096, Peer: "rank 1"},
		{ID: SplitID(42, 1), Proc: "host pid 42", Name: "checksum", Stage: StageShare, Start: 1_020_000, Dur: 9_000, Bytes: 1 << 20, Peer: "dpu", Predicted: 8_000},
	}
	var b bytes.Buffer
	if err := WriteChrome(&b, spans); err != nil {
		t.Fatal(err)
	}
	var f chromeFile
	if err := json.Unmarshal(b.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	tids := map[string]int{}
	for _, e := range f.TraceEvents {
		if e.Ph == "X" {
			tids[e.Args.ID+" "+e.Args.Stage] = e.Tid
		}
	}
	// The host's two ops overlap: two lanes, or Chrome nests one in the other.
	if a, b := tids[spans[0].ID+" op"], tids[spans[1].ID+" op"]; a == b {
		t.Fatalf("overlapping spans of one process share lane %d", a)
	}
	got, err := ReadChrome(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(spans) {
		t.Fatalf("read %d spans, wrote %d", len(got), len(spans))
	}
	for _, w := range spans {
		w.Start -= 1_000_000 // from the file's start
		if !slices.Contains(got, w) {
			t.Fatalf("%+v not read back from %+v", w, got)
		}
	}
}

func TestReadChromeRefusesOtherFiles(t *testing.T) {
	for _, in := range []string{"", "{", `{"other": 1}`, "[]", `{"traceEvents": 3}`} {
		if _, err := ReadChrome(strings.NewReader(in)); !errors.Is(err, ErrNotATrace) {
			t.Errorf("%q: %v, want ErrNotATrace", in, err)
		}
	}
	// Another tool's events are skipped, not refused.
	got, err := ReadChrome(strings.NewReader(`{"traceEvents":[{"name":"x","ph":"B","ts":1,"pid":1,"tid":1}]}`))
	if err != nil || len(got) != 0 {
		t.Fatalf("%v, %v", got, err)
	}
}

func FuzzReadChrome(f *testing.F) {
	var b bytes.Buffer
	WriteChrome(&b, []Span{{ID: "a", Proc: "p", Name: "n", Stage: StageOp, Start: 5, Dur: 7}})
	f.Add(b.Bytes())
	f.Add([]byte(`{"traceEvents":[{"ph":"X","ts":1e300,"dur":-1,"args":{"stage":"op"}}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		spans, err := ReadChrome(bytes.NewReader(in))
		if err != nil {
			return
		}
		Summarize(spans)
		Slowest(spans, 3)
		WriteChrome(&bytes.Buffer{}, spans)
	})
}

func TestSummarize(t *testing.T) {
	id1, id2 := OpID("tcp 127.0.0.1:5", 1), OpID("tcp 127.0.0.1:5", 2)
	coll := CollID(0xabc, 7)
	spans := []Span{
		{ID: id1, Name: "checksum", Stage: StageOp, Start: 0, Dur: 100},
		{ID: id1, Name: "checksum", Stage: StageQueue, Start: 10, Dur: 20},
		{ID: id1, Name: "checksum", Stage: StageServe, Start: 30, Dur: 50},
		{ID: id2, Name: "checksum", Stage: StageOp, Start: 0, Dur: 300}, // the agent's spans not recorded
		{ID: coll, Proc: "a", Name: "allreduce", Stage: StageRun, Start: 1000, Dur: 500},
		{ID: coll, Proc: "b", Name: "allreduce", Stage: StageRun, Start: 1400, Dur: 100},
		{ID: SplitID(9, 1), Name: "checksum", Stage: StageShare, Peer: "host", Start: 0, Dur: 90, Predicted: 80},
		{ID: SplitID(9, 1), Name: "checksum", Stage: StageShare, Peer: "dpu", Start: 0, Dur: 120, Predicted: 81},
	}
	got := Summarize(spans)
	want := []Row{
		{Name: "allreduce", Stage: StageRun, Count: 2, P50: 500, P99: 500, Max: 500},
		{Name: "allreduce", Stage: StageSkew, Count: 1, P50: 400, P99: 400, Max: 400},
		{Name: "checksum", Stage: StageOp, Count: 2, P50: 300, P99: 300, Max: 300},
		{Name: "checksum", Stage: StageTransport, Count: 1, P50: 30, P99: 30, Max: 30},
		{Name: "checksum", Stage: StageQueue, Count: 1, P50: 20, P99: 20, Max: 20},
		{Name: "checksum", Stage: StageServe, Count: 1, P50: 50, P99: 50, Max: 50},
		{Name: "checksum", Stage: "share dpu", Count: 1, P50: 120, P99: 120, Max: 120},
		{Name: "checksum", Stage: "share host", Count: 1, P50: 90, P99: 90, Max: 90},
		{Name: "checksum", Stage: "predicted dpu", Count: 1, P50: 81, P99: 81, Max: 81},
		{Name: "checksum", Stage: "predicted host", Count: 1, P50: 80, P99: 80, Max: 80},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
	if s := Slowest(spans[:6], 2); !slices.Equal(s, []string{coll, id2}) {
		t.Fatalf("slowest %v", s)
	}
}

func spanIDs(spans []Span) []string {
	var ids []string
	for _, s := range spans {
		ids = append(ids, s.ID)
	}
	return ids
}
