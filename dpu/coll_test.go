package dpu

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/shared/peer"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/testutil"
)

// collServices returns n coll services on peer nodes 1..n that know each
// other (n = 0: one without the peer layer).
func collServices(t *testing.T, n int) []*collService {
	t.Helper()
	key := []byte("0123456789abcdef-coll-dpu-test")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	members := map[uint32]string{}
	var nodes []*peer.Node
	for i := 1; i <= n; i++ {
		node, err := peer.NewNode(peer.Config{ID: uint32(i), Listen: "127.0.0.1:0", Key: key, Deadline: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { node.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		testutil.WaitFor(t, 10*time.Second, "peer listening", func() bool { return node.Addr() != "" })
		nodes = append(nodes, node)
		members[uint32(i)] = node.Addr()
	}
	var out []*collService
	for i := range max(n, 1) {
		env := &Env{Log: log, Dispatcher: NewDispatcher(log, 2), Metrics: prometheus.NewRegistry(), Shared: &Shared{}}
		if n > 0 {
			nodes[i].SetPeers(members)
			env.Shared.Peer = nodes[i]
		}
		s := newCollService()
		if err := s.Open(context.Background(), env); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		out = append(out, s)
	}
	return out
}

func f32s(vs ...float32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// TestCollOps drives the coll ops as hosts would: three agents join a
// communicator and allreduce their hosts' buffers; then bad input, an
// unknown communicator, an agent without the peer layer, and a
// collective whose other ranks never come (the stall watchdog ends it).
func TestCollOps(t *testing.T) {
	svcs := collServices(t, 3)
	spec := wire.CollSpec{Comm: 42, Epoch: 1, Nodes: []uint32{1, 2, 3}}
	for i, s := range svcs {
		var w window
		w.add(spec.Marshal(), 0)
		w.add(nil, 256)
		if resp, _ := serveOp(t, s.serveJoin, w.req(wire.OpCollJoin, 0, 0)); resp.Status != wire.StatusOK || resp.Arg0 != uint64(i) {
			t.Fatalf("join on agent %d: %v, rank %d", i+1, resp.Status, resp.Arg0)
		}
	}
	outs := make([][]byte, 3)
	var wg sync.WaitGroup
	for i, s := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w window
			w.add(f32s(float32(i), 1, 2, 3, 4), 0) // send
			w.add(nil, 20)                         // recv
			w.add(nil, 256)                        // reason
			resp, out := serveOp(t, s.serveRun, w.req(wire.OpCollRun, 42, wire.CollArgs(uint8(coll.KindAllReduce), uint8(coll.Float32), uint8(coll.Sum), 0, 1)))
			if resp.Status != wire.StatusOK {
				t.Errorf("agent %d: %v: %s", i+1, resp.Status, out)
			}
			outs[i] = out
		}()
	}
	wg.Wait()
	for i, out := range outs {
		if string(out) != string(f32s(3, 3, 6, 9, 12)) {
			t.Fatalf("agent %d wrote %x", i+1, out)
		}
	}

	// Where send and recv lie in the window: apart (the run works on the
	// window's bytes, send left as it was), one span (in place), partly
	// overlapping (the run works on copies).
	for seq, tc := range []struct {
		name    string
		recvOff uint32
	}{
		{"apart", 20},
		{"in place", 0},
		{"overlapping", 4},
	} {
		for i, s := range svcs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				send := f32s(float32(i), 1, 2, 3, 4)
				w := window{mem: make([]byte, 40+256)}
				copy(w.mem, send)
				w.spans = []wire.Span{{Off: 0, Len: 20}, {Off: tc.recvOff, Len: 20}, {Off: 40, Len: 256}}
				resp, out := serveOp(t, s.serveRun, w.req(wire.OpCollRun, 42, wire.CollArgs(uint8(coll.KindAllReduce), uint8(coll.Float32), uint8(coll.Sum), 0, uint32(seq+2))))
				if resp.Status != wire.StatusOK || string(out) != string(f32s(3, 3, 6, 9, 12)) {
					t.Errorf("%s, agent %d: %v, wrote %x", tc.name, i+1, resp.Status, out)
				}
				if tc.recvOff >= 20 && string(w.mem[:20]) != string(send) {
					t.Errorf("%s, agent %d: send changed to %x", tc.name, i+1, w.mem[:20])
				}
			}()
		}
		wg.Wait()
	}

	s := svcs[0]
	for _, tc := range []struct {
		name   string
		comm   uint64
		args   uint64
		send   []byte
		status wire.Status
		reason string
	}{
		// Agent 1 ran collectives #1 to #4: each of these takes the next turn.
		{"unknown communicator", 7, wire.CollArgs(1, 1, 1, 0, 5), f32s(1), wire.StatusNotFound, "no communicator"},
		{"unknown collective", 42, wire.CollArgs(99, 1, 1, 0, 5), f32s(1), wire.StatusBadArg, "kind(99)"},
		{"unknown type", 42, wire.CollArgs(1, 99, 1, 0, 6), f32s(1), wire.StatusBadArg, "dtype(99)"},
		{"a number behind", 42, wire.CollArgs(1, 1, 1, 0, 6), f32s(1), wire.StatusBadArg, "out of order"},
		{"odd bytes", 42, wire.CollArgs(1, 1, 1, 0, 7), []byte{1, 2, 3}, wire.StatusBadArg, "whole number"},
	} {
		var w window
		w.add(tc.send, 0)
		w.add(nil, len(tc.send))
		w.add(nil, 256)
		resp, out := serveOp(t, s.serveRun, w.req(wire.OpCollRun, tc.comm, tc.args))
		if resp.Status != tc.status || !strings.Contains(string(out), tc.reason) {
			t.Errorf("%s: %v %q, want %v %q", tc.name, resp.Status, out, tc.status, tc.reason)
		}
	}
	for name, b := range map[string][]byte{"short spec": {1, 2, 3}, "not a member": (&wire.CollSpec{Comm: 9, Nodes: []uint32{7, 8}}).Marshal()} {
		var w window
		w.add(b, 0)
		w.add(nil, 256)
		if resp, _ := serveOp(t, s.serveJoin, w.req(wire.OpCollJoin, 0, 0)); resp.Status != wire.StatusBadArg {
			t.Errorf("join, %s: %v", name, resp.Status)
		}
	}

	// Agent 1 alone in a communicator whose other rank never calls: the
	// stall watchdog ends it, naming why.
	s.stall = 300 * time.Millisecond
	lone := wire.CollSpec{Comm: 43, Epoch: 1, Nodes: []uint32{1, 2}}
	var w window
	w.add(lone.Marshal(), 0)
	serveOp(t, s.serveJoin, w.req(wire.OpCollJoin, 0, 0))
	var r window
	r.add(f32s(1, 2), 0)
	r.add(nil, 8)
	r.add(nil, 256)
	t0 := time.Now()
	resp, out := serveOp(t, s.serveRun, r.req(wire.OpCollRun, 43, wire.CollArgs(1, 1, 1, 0, 1)))
	if resp.Status == wire.StatusOK || !strings.Contains(string(out), "nothing received") || time.Since(t0) > 10*time.Second {
		t.Fatalf("a collective nobody else calls: %v %q after %v", resp.Status, out, time.Since(t0))
	}

	off := collServices(t, 0)[0]
	var j window
	j.add(spec.Marshal(), 0)
	j.add(nil, 256)
	if resp, out := serveOp(t, off.serveJoin, j.req(wire.OpCollJoin, 0, 0)); resp.Status != wire.StatusUnsupported || !strings.Contains(string(out), "--peer") {
		t.Fatalf("without the peer layer: %v %q", resp.Status, out)
	}
}
