package dpu

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/ec/object"
	"github.com/hecsys/hec/shared/peer"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/testutil"
)

// objectServices runs n ec services, each with a peer node on loopback,
// members of one another: agents without the rest of an agent.
func objectServices(t testing.TB, n int) []*ecService {
	t.Helper()
	key := []byte("0123456789abcdef-objects-test")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var nodes []*peer.Node
	members := map[uint32]string{}
	for i := 1; i <= n; i++ {
		node, err := peer.NewNode(peer.Config{ID: uint32(i), Listen: "127.0.0.1:0", Key: key})
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
	var out []*ecService
	for _, node := range nodes {
		node.SetPeers(members)
		cfg := ECConfig{}
		cfg.withDefaults()
		s := newECService(cfg, "none")
		env := &Env{Log: log, Dispatcher: NewDispatcher(log, 2), Metrics: prometheus.NewRegistry(), Shared: &Shared{Peer: node},
			StateDir: t.TempDir()}
		if err := s.Open(context.Background(), env); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// window is a request's memory: spans laid out one after another.
type window struct {
	mem   []byte
	spans []wire.Span
}

func (w *window) add(b []byte, room int) {
	off := uint32(len(w.mem))
	w.mem = append(w.mem, b...)
	w.mem = append(w.mem, make([]byte, room)...)
	w.spans = append(w.spans, wire.Span{Off: off, Len: uint32(len(b) + room)})
}

func (w *window) req(op wire.Op, arg0, arg1 uint64) *Request {
	d := wire.Desc{Op: op, Arg0: arg0, Arg1: arg1, NSpan: uint8(len(w.spans))}
	copy(d.Spans[:], w.spans)
	return &Request{Desc: d, Mem: ring.NewMappedWindow(w.mem), Transport: "shm"}
}

func serveOp(t *testing.T, f func(context.Context, *Request, *wire.Desc), r *Request) (wire.Desc, []byte) {
	t.Helper()
	var resp wire.Desc
	f(context.Background(), r, &resp)
	var out []byte
	if resp.NSpan == 1 {
		b, _ := r.Mem.View(resp.Spans[0])
		out = append([]byte(nil), b...)
	}
	return resp, out
}

// TestObjectOps drives the object ops as a host would: a Put in pieces,
// stat, a read by offsets of the version stat gave, list, delete; a Put
// of a bad name, an unknown handle, data out of order; and an agent
// without the peer layer, which says why it cannot.
func TestObjectOps(t *testing.T) {
	svcs := objectServices(t, 3)
	o := svcs[0].obj
	data := bytes.Repeat([]byte("0123456789abcdefghij"), 150000) // 3 MB: two stripes of 2+1
	var w window
	w.add([]byte("tests/one"), 0)
	resp, _ := serveOp(t, o.servePutBegin, w.req(wire.OpECPutBegin, uint64(len(data)), wire.ECShards(2, 1)))
	if resp.Status != wire.StatusOK {
		t.Fatalf("begin: %v", resp.Status)
	}
	handle := resp.Arg0
	for off := 0; off < len(data); off += 700000 {
		var d window
		d.add(data[off:min(len(data), off+700000)], 0)
		if resp, _ := serveOp(t, o.servePutData, d.req(wire.OpECPutData, handle, uint64(off))); resp.Status != wire.StatusOK {
			t.Fatalf("data at %d: %v", off, resp.Status)
		}
	}
	var e window
	e.add(nil, 64)
	resp, ver := serveOp(t, o.servePutEnd, e.req(wire.OpECPutEnd, handle, 0))
	if resp.Status != wire.StatusOK || len(ver) != 32 {
		t.Fatalf("end: %v %q", resp.Status, ver)
	}
	var s window
	s.add([]byte("tests/one"), 0)
	s.add(nil, 8192)
	resp, js := serveOp(t, o.serveStat, s.req(wire.OpECStat, 0, 0))
	var st object.Stat
	if resp.Status != wire.StatusOK || json.Unmarshal(js, &st) != nil || string(st.Version) != string(ver) || st.Healthy != 3 {
		t.Fatalf("stat: %v %s", resp.Status, js)
	}
	var got []byte
	for len(got) < len(data) {
		var g window
		g.add([]byte("tests/one"), 0)
		g.add(ver, 0)
		g.add(nil, 1<<20)
		resp, b := serveOp(t, svcs[2].obj.serveGet, g.req(wire.OpECGet, uint64(len(got)), 0))
		if resp.Status != wire.StatusOK || len(b) == 0 {
			t.Fatalf("get at %d: %v", len(got), resp.Status)
		}
		got = append(got, b...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the object read by offsets is not what was put")
	}
	var l window
	l.add([]byte("tests/"), 0)
	l.add(nil, 8192)
	if resp, js := serveOp(t, svcs[1].obj.serveList, l.req(wire.OpECList, 0, 0)); resp.Status != wire.StatusOK || !bytes.Contains(js, []byte("tests/one")) {
		t.Fatalf("list: %v %s", resp.Status, js)
	}
	var d window
	d.add([]byte("tests/one"), 0)
	d.add(nil, 256)
	if resp, _ := serveOp(t, o.serveDelete, d.req(wire.OpECDelete, 0, 0)); resp.Status != wire.StatusOK {
		t.Fatalf("delete: %v", resp.Status)
	}
	if resp, _ := serveOp(t, o.serveStat, s.req(wire.OpECStat, 0, 0)); resp.Status != wire.StatusNotFound {
		t.Fatalf("stat after delete: %v", resp.Status)
	}

	var bad window
	bad.add([]byte("bad\x00name"), 0)
	if resp, _ := serveOp(t, o.servePutBegin, bad.req(wire.OpECPutBegin, 10, 0)); resp.Status != wire.StatusBadArg {
		t.Fatalf("a name with a control character: %v", resp.Status)
	}
	var x window
	x.add([]byte("abc"), 0)
	if resp, _ := serveOp(t, o.servePutData, x.req(wire.OpECPutData, 12345, 0)); resp.Status != wire.StatusNotFound {
		t.Fatalf("data for an unknown handle: %v", resp.Status)
	}
	if resp, why := serveOp(t, o.servePutBegin, w.req(wire.OpECPutBegin, 100, 0)); resp.Status != wire.StatusBadArg {
		t.Fatalf("the default 4+2 on three agents: %v %q", resp.Status, why)
	}
	resp, _ = serveOp(t, o.servePutBegin, w.req(wire.OpECPutBegin, 100, wire.ECShards(2, 1)))
	if resp, _ := serveOp(t, o.servePutData, x.req(wire.OpECPutData, resp.Arg0, 50)); resp.Status != wire.StatusBadArg {
		t.Fatalf("data at an offset ahead of the bytes given: %v", resp.Status)
	}

	alone := openECService(t) // no peer layer
	var r window
	r.add([]byte("x"), 0)
	r.add(nil, 512)
	resp, why := serveOp(t, alone.obj.serveStat, r.req(wire.OpECStat, 0, 0))
	if resp.Status != wire.StatusUnsupported || !bytes.Contains(why, []byte("--peer")) {
		t.Fatalf("an agent without peers: %v %q", resp.Status, why)
	}
}

// FuzzObjectOps: whatever a host puts in an object op's descriptor and
// window, the agent answers without crashing.
func FuzzObjectOps(f *testing.F) {
	svcs := objectServices(f, 3)
	o := svcs[0].obj
	ops := []func(context.Context, *Request, *wire.Desc){o.servePutBegin, o.servePutData, o.servePutEnd, o.serveGet, o.serveStat,
		o.serveDelete, o.serveList, o.serveShard}
	f.Add(uint8(0), uint64(100), uint64(0), uint8(1), uint64(0|5<<32), uint64(0), []byte("hello"))
	f.Add(uint8(3), uint64(0), uint64(0), uint8(3), uint64(0|5<<32), uint64(5|32<<32), []byte("hello0123456789abcdef0123456789abcdef"))
	f.Add(uint8(7), uint64(0), uint64(0), uint8(2), uint64(0|40<<32), uint64(100|200<<32), []byte{6, 0, 0, 0})
	f.Fuzz(func(t *testing.T, op uint8, arg0, arg1 uint64, nspan uint8, s0, s1 uint64, head []byte) {
		mem := make([]byte, 4096)
		copy(mem, head)
		d := wire.Desc{Arg0: arg0, Arg1: arg1, NSpan: nspan % 4,
			Spans: [4]wire.Span{{Off: uint32(s0), Len: uint32(s0 >> 32)}, {Off: uint32(s1), Len: uint32(s1 >> 32)}, {Off: 3000, Len: 1000}}}
		if d.Validate(uint64(len(mem))) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var resp wire.Desc
		ops[int(op)%len(ops)](ctx, &Request{Desc: d, Mem: ring.NewMappedWindow(mem), Transport: "shm"}, &resp)
		if resp.NSpan > 0 && !resp.Spans[0].Within(uint64(len(mem))) {
			t.Fatalf("completion names memory outside the window: %+v", resp.Spans[0])
		}
	})
}
