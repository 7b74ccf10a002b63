package coll

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFlightRecorderNamesTheRankThatStopped: among four ranks, rank 2
// stops before the fourth allreduce (as a process under SIGSTOP would:
// alive, silent). The others' fourth call fails at its deadline with an
// error that says which collective it was and the rank its neighbour
// last heard at the third; every rank's Status shows three completed,
// and the recorder holds each call with its kind, size, type and state.
func TestFlightRecorderNamesTheRankThatStopped(t *testing.T) {
	const n, stopped = 4, 2
	ts := Local(n)
	comms := make([]*Comm, n)
	for r := range n {
		c, err := New(ts[r], Config{Chunk: 1024, Algorithm: Ring, History: 8})
		if err != nil {
			t.Fatal(err)
		}
		comms[r] = c
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			b := make([]byte, 64<<10)
			for k := range 4 {
				if r == stopped && k == 3 {
					return // stopped: never calls the fourth
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := c.AllReduce(ctx, b, b, Float32, Sum)
				cancel()
				if err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if r == stopped {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "allreduce #4") || !strings.Contains(err.Error(), "last completed: #3") {
			t.Errorf("rank %d: %v, want the failure of allreduce #4 after #3", r, err)
		}
	}
	// The ring: rank 3 receives from rank 2, so it names it.
	if want := fmt.Sprintf("rank %d last heard at #3", stopped); !strings.Contains(fmt.Sprint(errs[stopped+1]), want) {
		t.Errorf("rank %d (rank %d's right neighbour): %v, want %q", stopped+1, stopped, errs[stopped+1], want)
	}
	st := comms[stopped+1].Status()
	if st.Completed != 3 || st.Started != 4 || st.Calls != 4 || len(st.Recent) != 4 {
		t.Fatalf("rank %d's status: %+v", stopped+1, st)
	}
	if stuck := st.Stuck(); len(stuck) != 1 || stuck[0] != (RankHeard{Rank: stopped, Seq: 3}) {
		t.Errorf("Stuck: %+v, want rank %d at #3", stuck, stopped)
	}
	last := st.Recent[3]
	if last.Kind != "allreduce" || last.Bytes != 64<<10 || last.DType != Float32 || last.State != Failed || last.Seq != 4 || last.Err == "" {
		t.Errorf("the failed record: %+v", last)
	}
	if first := st.Recent[0]; first.State != Completed || first.Messages == 0 || !first.Ended.After(first.Started) {
		t.Errorf("a completed record: %+v", first)
	}
	if st.Broken == "" {
		t.Error("Status of a broken communicator: no Broken")
	}
	if s := comms[stopped].Status(); s.Completed != 3 || s.Calls != 3 {
		t.Errorf("the stopped rank's own status: %+v", s)
	}
	b, err := json.Marshal(st)
	if err != nil || !strings.Contains(string(b), `"state":"failed"`) || !strings.Contains(string(b), `"dtype":"float32"`) {
		t.Errorf("JSON: %s %v", b, err)
	}
}

// TestFlightRecorderKeepsTheLast: the ring holds the last History calls.
func TestFlightRecorderKeepsTheLast(t *testing.T) {
	ts := Local(1)
	c, err := New(ts[0], Config{History: 3})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	for range 5 {
		if err := c.Broadcast(context.Background(), b, Uint8, 0); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Status()
	if st.Calls != 5 || len(st.Recent) != 3 || st.Recent[0].Seq != 3 || st.Recent[2].Seq != 5 || st.Completed != 5 {
		t.Fatalf("after 5 calls with room for 3: %+v", st)
	}
}
