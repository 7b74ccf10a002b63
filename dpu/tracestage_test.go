package dpu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// TestServicesRecordTheirStages: while the agent records, an EC encode
// records each round of the coder's work (StageCode) under the op's id,
// within its serve span, over shared memory and over TCP alike (both map
// the op's bytes: nothing is staged); a KV put records the store's write
// (StageCommit). While nothing records, none of it is.
func TestServicesRecordTheirStages(t *testing.T) {
	dir := t.TempDir()
	shm := filepath.Join("/dev/shm", fmt.Sprintf("hec-dpu-stages-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { os.Remove(shm) })
	a := runAgent(t, Config{
		Agent: AgentConfig{Shm: shm, RegionSize: 64 << 20, QueuePairs: 2, TCP: "127.0.0.1:0", Mgmt: Off, StateDir: dir},
		RESP:  RESPConfig{Addr: Off}, UDP: UDPConfig{Addr: Off},
	})
	ctx := context.Background()
	rec := a.Dispatcher().Trace()
	for _, target := range []string{"shm://" + shm, "tcp://" + a.Addr("tcp")} {
		c, err := host.Dial(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		e, err := c.EC(10, 4, host.WithRails(host.RailsDPU))
		if err != nil {
			t.Fatal(err)
		}
		shards := make([][]byte, 14)
		buf, err := c.Alloc(14 * (400 << 10))
		if err != nil {
			buf = make([]byte, 14*(400<<10))
		}
		for i := range shards {
			shards[i] = buf[i*(400<<10) : (i+1)*(400<<10)]
			for j := range shards[i] {
				shards[i][j] = byte(i + j)
			}
		}
		kv := c.KV()
		run := func() {
			if _, err := e.Encode(ctx, shards); err != nil {
				t.Fatal(err)
			}
			if err := kv.Put(ctx, []byte("stage-key"), []byte("a value"), host.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		m := rec.Mark()
		run() // nothing records
		if spans, _ := rec.Since(m); len(spans) != 0 {
			t.Fatalf("%s: %d spans recorded while nothing recorded", target, len(spans))
		}
		end := rec.Begin()
		run()
		end()
		spans, _ := rec.Since(m)
		serve := map[string]trace.Span{}
		stages := map[string]map[string]int{} // by op name: stage → count
		for _, s := range spans {
			if stages[s.Name] == nil {
				stages[s.Name] = map[string]int{}
			}
			stages[s.Name][s.Stage]++
			if s.Stage == trace.StageServe {
				serve[s.ID] = s
			}
		}
		for _, s := range spans {
			if s.Stage != trace.StageCode && s.Stage != trace.StageCopy && s.Stage != trace.StageCommit {
				continue
			}
			sv, ok := serve[s.ID]
			if !ok || s.Start < sv.Start || s.Start+s.Dur > sv.Start+sv.Dur {
				t.Errorf("%s: %s %s span %+v outside its op's serve span %+v", target, s.Name, s.Stage, s, sv)
			}
		}
		t.Logf("%s: %v", target, stages)
		enc, put := stages["ec_encode"], stages["kv_put"]
		if enc[trace.StageServe] != 1 || enc[trace.StageCode] < 1 {
			t.Errorf("%s: encode's spans %v, want a serve and each round's code", target, enc)
		}
		if put[trace.StageCommit] != 1 {
			t.Errorf("%s: put's spans %v, want its commit", target, put)
		}
	}
}

// TestCollectiveMessagesAreTraced: three agents run a host's allreduce
// of 1 MiB and 12 bytes (two pieces: two collectives) while each records.
// Each agent's spans of a piece share its id, trace.CollID(comm, seq),
// with the other ranks' (as hecctl trace joins them across agents): each message sent to a peer (StageSend) and each
// step's receive from one (StageRecv), within the agent's serve span of
// the op that ran it; what one agent recorded sending to another is what
// that one recorded receiving from it, byte for byte.
func TestCollectiveMessagesAreTraced(t *testing.T) {
	agents := collAgents(t, 0, 0, 0)
	var clients []*host.Client
	for _, a := range agents {
		clients = append(clients, dialColl(t, a.shm))
	}
	const comm = 0x7ace
	comms := joinAll(t, wire.CollSpec{Comm: comm, Epoch: 1, Algorithm: uint8(coll.Ring), Nodes: []uint32{1, 2, 3}}, clients...)
	const size = 1<<20 + 12 // floats
	run := func() {
		t.Helper()
		errs := make([]error, len(comms))
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, size)
				errs[r] = c.AllReduce(context.Background(), buf, buf, coll.Float32, coll.Sum)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	run() // the communicators settle; nothing records
	marks, ends := make([]trace.Mark, len(agents)), make([]func(), len(agents))
	for i, a := range agents {
		rec := a.Dispatcher().Trace()
		marks[i], ends[i] = rec.Mark(), rec.Begin()
	}
	run()
	sent, got := map[string]int64{}, map[string]int64{}
	ids := map[string]bool{}
	for i, a := range agents {
		ends[i]()
		spans, _ := a.Dispatcher().Trace().Since(marks[i])
		var serves []trace.Span
		for _, s := range spans {
			if s.Stage == trace.StageServe && s.Name == wire.OpCollRun.String() {
				serves = append(serves, s)
			}
		}
		n := 0
		for _, s := range spans {
			if s.Stage != trace.StageSend && s.Stage != trace.StageRecv {
				continue
			}
			n++
			ids[s.ID] = true
			if s.Name != "allreduce" || s.Bytes <= 0 || s.Status != "" {
				t.Fatalf("agent %d: span %+v: want an allreduce's", i+1, s)
			}
			inside := false
			for _, v := range serves {
				inside = inside || (s.Start >= v.Start && s.End() <= v.End())
			}
			if !inside {
				t.Errorf("agent %d: %+v outside every serve span of %s (%d)", i+1, s, wire.OpCollRun, len(serves))
			}
			if s.Stage == trace.StageSend {
				sent[fmt.Sprintf("%s: rank %d → %s", s.ID, i, s.Peer)] += s.Bytes
			} else {
				got[fmt.Sprintf("%s: %s → rank %d", s.ID, s.Peer, i)] += s.Bytes
			}
		}
		if n == 0 {
			t.Fatalf("agent %d recorded no message of the allreduce: %+v", i+1, spans)
		}
		// The peer layer's seal and write of each message's frame,
		// inside the message's send, under the collective's id.
		frames := map[string]int{}
		for _, s := range spans {
			if s.Stage != trace.StageSeal && s.Stage != trace.StageWrite {
				continue
			}
			frames[s.Stage]++
			inside := false
			for _, v := range spans {
				inside = inside || (v.Stage == trace.StageSend && v.ID == s.ID && s.Start >= v.Start-1000 && s.End() <= v.End()+1000)
			}
			if !inside || s.Name != "allreduce" || !strings.HasPrefix(s.Peer, "node ") {
				t.Errorf("agent %d: %+v: want an allreduce's frame to a node, inside one of its sends", i+1, s)
			}
		}
		if frames[trace.StageSeal] == 0 || frames[trace.StageSeal] != frames[trace.StageWrite] {
			t.Errorf("agent %d: frames' stages %v: want a seal and a write of each", i+1, frames)
		}
	}
	// The first allreduce's pieces were #1 and #2.
	if len(ids) != 2 || !ids[trace.CollID(comm, 3)] || !ids[trace.CollID(comm, 4)] {
		t.Errorf("the second allreduce's spans are under %v, want its pieces #3 and #4", ids)
	}
	if len(sent) != 6 || len(got) != 6 {
		t.Fatalf("sent %v, received %v: want each of 3 ranks to its successor (ring), in each piece", sent, got)
	}
	for k, b := range sent {
		if got[k] != b {
			t.Errorf("%s: %d bytes sent, %d received", k, b, got[k])
		}
	}
}

// TestObjectMessagesAreTraced: an erasure-coded object put and read back
// through one of three agents while all three record. The agent the host
// asked records each request to an agent holding a shard (StageCall, its
// kind and node named) under the host's op id — a put's begin, a get's —
// and each holder records handling it (StageHandle) under the same id,
// within the call's time (the agents share this machine's clock): the id
// went with the request in its peer frame.
func TestObjectMessagesAreTraced(t *testing.T) {
	agents := collAgents(t, 64<<20, 0, 0)
	c := dialColl(t, agents[0].shm)
	e, err := c.EC(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	marks, ends := make([]trace.Mark, len(agents)), make([]func(), len(agents))
	for i, a := range agents {
		rec := a.Dispatcher().Trace()
		marks[i], ends[i] = rec.Mark(), rec.Begin()
	}
	if _, err := e.Put(ctx, "traced/one", data); err != nil {
		t.Fatal(err)
	}
	got, _, err := e.Get(ctx, "traced/one")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %v (%d bytes)", err, len(got))
	}
	calls := map[string][]trace.Span{}   // by id
	ops := map[string]string{}           // id → the host op's name, from the asked agent's serve spans
	handled := map[string][]trace.Span{} // by id, on the holders
	for i, a := range agents {
		ends[i]()
		spans, _ := a.Dispatcher().Trace().Since(marks[i])
		for _, s := range spans {
			switch {
			case i == 0 && s.Stage == trace.StageServe:
				ops[s.ID] = s.Name
			case i == 0 && s.Stage == trace.StageCall:
				calls[s.ID] = append(calls[s.ID], s)
			case i > 0 && s.Stage == trace.StageHandle:
				if want := "node 1"; s.Peer != want {
					t.Errorf("agent %d handled %+v: want it from %s", i+1, s, want)
				}
				handled[s.ID] = append(handled[s.ID], s)
			case s.Stage == trace.StageCall || s.Stage == trace.StageHandle:
				t.Errorf("agent %d: %+v", i+1, s)
			}
		}
	}
	kinds := map[string]map[string]int{} // host op → shard request kinds called
	for id, cs := range calls {
		op, ok := ops[id]
		if !ok {
			t.Fatalf("calls under %q, which no op the agent served has", id)
		}
		if kinds[op] == nil {
			kinds[op] = map[string]int{}
		}
		for _, s := range cs {
			kinds[op][s.Name]++
		}
		// Each holder's handling lies within one of the calls to it.
		for _, h := range handled[id] {
			in := false
			for _, s := range cs {
				in = in || (s.Name == h.Name && s.Start <= h.Start && h.End() <= s.End())
			}
			if !in {
				t.Errorf("%q: %+v within no call of it", id, h)
			}
		}
	}
	for id := range handled {
		if calls[id] == nil {
			t.Errorf("a holder handled requests under %q, which no call has", id)
		}
	}
	put, get := kinds[wire.OpECPutBegin.String()], kinds[wire.OpECGet.String()]
	if put["shard write"] < 4 || put["shard seal"] < 2 || put["shard commit"] < 2 || get["shard read"] < 2 {
		t.Fatalf("shard requests by host op: %v: want a put's writes, seals and commits under its begin, a get's reads under it", kinds)
	}
	if len(handled) == 0 {
		t.Fatal("no holder recorded handling a request")
	}
	t.Logf("shard requests by host op: %v; handled under %d ids", kinds, len(handled))
}
