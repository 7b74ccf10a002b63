package dpu

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

func openECService(t testing.TB) *ecService {
	t.Helper()
	s := newECService(ECConfig{}, "none")
	env := &Env{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Dispatcher: NewDispatcher(slog.New(slog.NewTextHandler(io.Discard, nil)), 2),
		Metrics: prometheus.NewRegistry(), Shared: &Shared{}}
	if err := s.Open(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	return s
}

// ecLayout places shards in a window: each shard at its own offset, with
// gaps, so the SGL form names scattered memory.
type ecLayout struct {
	mem  []byte
	offs []uint32
	w    uint32
}

func newECLayout(n int, w uint32, rng *rand.Rand) *ecLayout {
	l := &ecLayout{w: w}
	off := uint32(64)
	for range n {
		l.offs = append(l.offs, off)
		off += w + 64 + uint32(rng.IntN(8))*8
	}
	l.mem = make([]byte, off+4096)
	for i := range l.mem {
		l.mem[i] = byte(rng.Uint32())
	}
	return l
}

func (l *ecLayout) shard(i int) []byte { return l.mem[l.offs[i] : l.offs[i]+l.w] }
func (l *ecLayout) span(i int) wire.Span {
	return wire.Span{Off: l.offs[i], Len: l.w}
}

// sglAt writes spans' list at the end of the window and returns its span.
func (l *ecLayout) sglAt(spans []wire.Span, extra []byte) wire.Span {
	b := wire.AppendSGL(nil, spans)
	off := uint32(len(l.mem) - 4096)
	copy(l.mem[off:], b)
	return wire.Span{Off: off, Len: uint32(len(b))}
}

func accessors(mem []byte) map[string]ring.Accessor {
	return map[string]ring.Accessor{
		"mapped": ring.NewMappedWindow(mem),
		"staged": &ring.StagedWindow{Under: ring.NewMappedWindow(mem), Chunk: 4096},
	}
}

func TestECOpsMatchTheLibrary(t *testing.T) {
	s := openECService(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, shape := range []struct{ k, m int }{{4, 2}, {10, 4}, {6, 3}} {
		for _, w := range []uint32{1000, 64, 300 << 10} {
			for name := range accessors(nil) {
				for _, form := range []string{"plain", "sgl"} {
					t.Run(fmt.Sprintf("%d+%d/w%d/%s/%s", shape.k, shape.m, w, name, form), func(t *testing.T) {
						k, m := shape.k, shape.m
						c, _ := ec.New(k, m)
						var l *ecLayout
						if form == "plain" {
							l = &ecLayout{w: w, mem: make([]byte, int(w)*(k+m)+4096)}
							for i := range k + m {
								l.offs = append(l.offs, uint32(i)*w)
							}
							for i := range l.mem {
								l.mem[i] = byte(rng.Uint32())
							}
						} else {
							l = newECLayout(k+m, w, rng)
						}
						want := make([][]byte, k+m)
						for i := range want {
							want[i] = bytes.Clone(l.shard(i))
						}
						if err := c.Encode(want); err != nil {
							t.Fatal(err)
						}
						req := Request{Desc: wire.Desc{Op: wire.OpECEncode, Arg0: wire.ECShards(k, m)}, Mem: accessors(l.mem)[name], Transport: "shm"}
						if form == "plain" {
							req.NSpan, req.Spans[0], req.Spans[1] = 2, wire.Span{Off: 0, Len: uint32(k) * w}, wire.Span{Off: uint32(k) * w, Len: uint32(m) * w}
						} else {
							var spans []wire.Span
							for i := range k + m {
								spans = append(spans, l.span(i))
							}
							req.NSpan, req.Flags, req.Spans[0] = 1, wire.FlagSGL, l.sglAt(spans, nil)
						}
						var resp wire.Desc
						s.serveAndAccount(ctx, s.serveEncode, &req, &resp)
						if resp.Status != wire.StatusOK || resp.Arg0 != uint64(w) {
							t.Fatalf("encode: %s, arg0 %d", resp.Status, resp.Arg0)
						}
						for i := range k + m {
							if !bytes.Equal(l.shard(i), want[i]) {
								t.Fatalf("shard %d differs from the library's", i)
							}
						}
						// Lose the first data shard and the last parity one;
						// rebuild them from k others.
						lost := []int{0, k + m - 1}
						for _, i := range lost {
							clear(l.shard(i))
						}
						present := []int{}
						for i := 1; len(present) < k; i++ {
							present = append(present, i)
						}
						idx := append(append([]byte{}, bytesOf(present)...), bytesOf(lost)...)
						req = Request{Desc: wire.Desc{Op: wire.OpECReconstruct, Arg0: wire.ECShards(k, m)}, Mem: req.Mem, Transport: "shm"}
						if form == "plain" {
							// Present shards back to back, then the indices, then room.
							p := make([]byte, 0, int(w)*k)
							for _, i := range present {
								p = append(p, want[i]...)
							}
							base := uint32(0)
							copy(l.mem[base:], p)
							idxOff := base + uint32(len(p))
							copy(l.mem[idxOff:], idx)
							outOff := (idxOff + uint32(len(idx)) + 63) / 64 * 64
							if int(outOff)+2*int(w) > len(l.mem) {
								l.mem = append(l.mem, make([]byte, int(outOff)+2*int(w)-len(l.mem))...)
								req.Mem = accessors(l.mem)[name]
							}
							req.NSpan = 3
							req.Spans[0], req.Spans[1], req.Spans[2] = wire.Span{Off: base, Len: uint32(len(p))}, wire.Span{Off: idxOff, Len: uint32(len(idx))}, wire.Span{Off: outOff, Len: 2 * w}
							s.serveAndAccount(ctx, s.serveReconstruct, &req, &resp)
							if resp.Status != wire.StatusOK || resp.Spans[0] != req.Spans[2] {
								t.Fatalf("reconstruct: %s %+v", resp.Status, resp.Spans[0])
							}
							for j, i := range lost {
								if got := l.mem[outOff+uint32(j)*w : outOff+uint32(j+1)*w]; !bytes.Equal(got, want[i]) {
									t.Fatalf("rebuilt shard %d differs", i)
								}
							}
							return
						}
						var spans []wire.Span
						for _, i := range append(present, lost...) {
							spans = append(spans, l.span(i))
						}
						idxOff := uint32(len(l.mem) - 1024)
						copy(l.mem[idxOff:], idx)
						spans = append(spans, wire.Span{Off: idxOff, Len: uint32(len(idx))})
						req.NSpan, req.Flags, req.Spans[0] = 1, wire.FlagSGL, l.sglAt(spans, nil)
						s.serveAndAccount(ctx, s.serveReconstruct, &req, &resp)
						if resp.Status != wire.StatusOK {
							t.Fatalf("reconstruct: %s", resp.Status)
						}
						for _, i := range lost {
							if !bytes.Equal(l.shard(i), want[i]) {
								t.Fatalf("rebuilt shard %d differs", i)
							}
						}
					})
				}
			}
		}
	}
	if s.encoded.Load() == 0 || s.rebuilt.Load() == 0 {
		t.Fatalf("counters: encoded %d rebuilt %d", s.encoded.Load(), s.rebuilt.Load())
	}
}

func bytesOf(idx []int) []byte {
	b := make([]byte, len(idx))
	for i, v := range idx {
		b[i] = byte(v)
	}
	return b
}

func TestECOpsRefuseBadDescriptors(t *testing.T) {
	s := openECService(t)
	mem := make([]byte, 1<<16)
	next := uint32(60000) // each row's list at its own place
	sg := func(spans ...wire.Span) wire.Span {
		b := wire.AppendSGL(nil, spans)
		copy(mem[next:], b)
		next += uint32(len(b))
		return wire.Span{Off: next - uint32(len(b)), Len: uint32(len(b))}
	}
	copy(mem[50000:], []byte{0, 1, 2, 3, 3, 9, 200})
	sp := func(off, n uint32) wire.Span { return wire.Span{Off: off, Len: n} }
	for _, tc := range []struct {
		name  string
		op    wire.Op
		arg0  uint64
		flags uint16
		spans []wire.Span
	}{
		{"no data shards", wire.OpECEncode, wire.ECShards(0, 2), 0, []wire.Span{sp(0, 400), sp(400, 200)}},
		{"no parity", wire.OpECEncode, wire.ECShards(4, 0), 0, []wire.Span{sp(0, 400), sp(400, 0)}},
		{"over 256 shards", wire.OpECEncode, wire.ECShards(250, 10), 0, []wire.Span{sp(0, 2500), sp(2500, 100)}},
		{"high bits", wire.OpECEncode, wire.ECShards(4, 2) | 1<<40, 0, []wire.Span{sp(0, 400), sp(400, 200)}},
		{"one span", wire.OpECEncode, wire.ECShards(4, 2), 0, []wire.Span{sp(0, 400)}},
		{"data not divisible", wire.OpECEncode, wire.ECShards(4, 2), 0, []wire.Span{sp(0, 401), sp(401, 200)}},
		{"empty data", wire.OpECEncode, wire.ECShards(4, 2), 0, []wire.Span{sp(0, 0), sp(0, 0)}},
		{"parity short", wire.OpECEncode, wire.ECShards(4, 2), 0, []wire.Span{sp(0, 400), sp(400, 199)}},
		{"sgl count", wire.OpECEncode, wire.ECShards(4, 2), wire.FlagSGL, []wire.Span{sg(sp(0, 100), sp(100, 100))}},
		{"sgl lengths differ", wire.OpECEncode, wire.ECShards(1, 1), wire.FlagSGL, []wire.Span{sg(sp(0, 100), sp(100, 99))}},
		{"sgl empty shards", wire.OpECEncode, wire.ECShards(1, 1), wire.FlagSGL, []wire.Span{sg(sp(0, 0), sp(100, 0))}},
		{"sgl outside", wire.OpECEncode, wire.ECShards(1, 1), wire.FlagSGL, []wire.Span{sg(sp(1<<16-10, 100), sp(100, 100))}},
		{"rebuild two spans", wire.OpECReconstruct, wire.ECShards(4, 2), 0, []wire.Span{sp(0, 400), sp(50000, 5)}},
		{"rebuild index count", wire.OpECReconstruct, wire.ECShards(4, 2), 0, []wire.Span{sp(0, 400), sp(50000, 4), sp(1000, 100)}},
		{"rebuild duplicate index", wire.OpECReconstruct, wire.ECShards(4, 2), 0, []wire.Span{sp(0, 400), sp(50001, 5), sp(1000, 100)}},
		{"rebuild index out of range", wire.OpECReconstruct, wire.ECShards(4, 2), 0, []wire.Span{sp(0, 400), sp(50002, 5), sp(1000, 100)}},
		{"rebuild more than m", wire.OpECReconstruct, wire.ECShards(2, 1), 0, []wire.Span{sp(0, 200), sp(50000, 4), sp(1000, 200)}},
		{"rebuild out not whole shards", wire.OpECReconstruct, wire.ECShards(4, 2), 0, []wire.Span{sp(0, 400), sp(50000, 5), sp(1000, 150)}},
		{"rebuild sgl without out", wire.OpECReconstruct, wire.ECShards(2, 1), wire.FlagSGL, []wire.Span{sg(sp(0, 100), sp(100, 100), sp(50000, 2))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := Request{Desc: wire.Desc{Op: tc.op, Arg0: tc.arg0, Flags: tc.flags, NSpan: uint8(len(tc.spans))}, Mem: ring.NewMappedWindow(mem), Transport: "shm"}
			copy(req.Spans[:], tc.spans)
			var resp wire.Desc
			if tc.op == wire.OpECEncode {
				s.serveAndAccount(context.Background(), s.serveEncode, &req, &resp)
			} else {
				s.serveAndAccount(context.Background(), s.serveReconstruct, &req, &resp)
			}
			if resp.Status == wire.StatusOK {
				t.Fatal("completed OK")
			}
			t.Logf("%s", resp.Status)
		})
	}
}

// FuzzECOps serves descriptors of any content over a small window: no
// panic, no access outside it, and an OK only where the shapes agree.
func FuzzECOps(f *testing.F) {
	s := openECService(f)
	f.Add(uint16(wire.OpECEncode), uint16(0), uint64(wire.ECShards(4, 2)), uint8(2), uint64(400), uint64(400|200<<32), []byte{})
	f.Add(uint16(wire.OpECReconstruct), uint16(0), uint64(wire.ECShards(2, 1)), uint8(3), uint64(200), uint64(3000|3<<32), []byte{0, 1, 2})
	f.Add(uint16(wire.OpECEncode), uint16(wire.FlagSGL), uint64(wire.ECShards(1, 1)), uint8(1), uint64(3000|16<<32), uint64(0), []byte{0, 0, 0, 0, 64, 0, 0, 0, 64, 0, 0, 0, 64, 0, 0, 0})
	f.Fuzz(func(t *testing.T, op, flags uint16, arg0 uint64, nspan uint8, s0, s1 uint64, head []byte) {
		mem := make([]byte, 4096)
		copy(mem[3000:], head)
		d := wire.Desc{Op: wire.Op(op), Flags: flags, Arg0: arg0, NSpan: nspan % 5,
			Spans: [4]wire.Span{{Off: uint32(s0), Len: uint32(s0 >> 32)}, {Off: uint32(s1), Len: uint32(s1 >> 32)}, {Off: 3000, Len: 3}}}
		if d.Validate(uint64(len(mem))) != nil {
			return // the dispatcher completes these before a handler sees them
		}
		for _, acc := range accessors(mem) {
			req := Request{Desc: d, Mem: acc, Transport: "shm"}
			var resp wire.Desc
			if d.Op == wire.OpECEncode {
				s.serveAndAccount(context.Background(), s.serveEncode, &req, &resp)
			} else {
				s.serveAndAccount(context.Background(), s.serveReconstruct, &req, &resp)
			}
		}
	})
}

func BenchmarkECEncodeOp(b *testing.B) {
	s := openECService(b)
	for _, size := range []int{1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			k, m := 10, 4
			w := uint32(ec.ShardSize(int64(size), k))
			mem := make([]byte, int(w)*(k+m))
			if os.Getenv("HEC_EC_BENCH_SHM") != "" {
				f, _ := os.Create("/dev/shm/hec-ec-bench")
				defer os.Remove(f.Name())
				f.Truncate(int64(len(mem)))
				mem, _ = unix.Mmap(int(f.Fd()), 0, len(mem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
			}
			req := Request{Desc: wire.Desc{Op: wire.OpECEncode, Arg0: wire.ECShards(k, m), NSpan: 2,
				Spans: [4]wire.Span{{Off: 0, Len: uint32(k) * w}, {Off: uint32(k) * w, Len: uint32(m) * w}}}, Mem: ring.NewMappedWindow(mem), Transport: "shm"}
			b.SetBytes(int64(size))
			for b.Loop() {
				var resp wire.Desc
				s.serveAndAccount(context.Background(), s.serveEncode, &req, &resp)
			}
		})
	}
}

// TestECRoundsAreEven: an op is coded in rounds of about ecRound of input
// until the coder's rate is known, then of about ecRoundTime within
// [ecRound, ecRoundMax]; none a sliver, each a multiple of ec.Align but
// the last, and together exactly the op's columns.
func TestECRoundsAreEven(t *testing.T) {
	cols := func(b int) int { return b / 10 / ec.Align * ec.Align }        // 10 data shards
	fast := uint64(2 * ecRoundMax * 4 / int(ecRoundTime/time.Microsecond)) // a round of ecRoundTime: twice ecRoundMax
	slow := uint64(1)                                                      // a round of ecRoundTime: less than ecRound
	for _, tc := range []struct {
		name   string
		rate   uint64 // 0: not known yet
		w      int
		rounds int
		most   int // columns
	}{
		{"one column", 0, 1, 1, cols(ecRound)},
		{"one Align", 0, ec.Align, 1, cols(ecRound)},
		{"a 1 MiB 10+4 stripe (104,896 columns)", 0, 104896, 1, cols(ecRound)},
		{"just over a round", 0, cols(ecRound) + ec.Align, 1, cols(ecRound)},
		{"half as much again", 0, cols(ecRound) + cols(ecRound)/2 - ec.Align, 1, cols(ecRound)},
		{"two rounds' worth", 0, 2 * cols(ecRound), 2, cols(ecRound)},
		{"a 64 MiB stripe", 0, 6710912, 64, cols(ecRound)},
		{"an odd width", 0, 3*cols(ecRound) + 17, 3, cols(ecRound)},
		{"a 16 MiB stripe on a fast core", fast, 1677760, 4, cols(ecRoundMax)},
		{"a 64 MiB stripe on a fast core", fast, 6710912, 16, cols(ecRoundMax)},
		{"a 16 MiB stripe on a slow core", slow, 1677760, 16, cols(ecRound)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &ecService{}
			s.rate.Store(tc.rate)
			cw := s.roundWidth(tc.w, 10, 4)
			if cw%ec.Align != 0 {
				t.Fatalf("round of %d columns, not a multiple of %d", cw, ec.Align)
			}
			n, last := 0, 0
			for c := 0; c < tc.w; c += cw {
				n, last = n+1, min(cw, tc.w-c)
			}
			if n != tc.rounds {
				t.Fatalf("%d columns in %d rounds of %d, want %d rounds", tc.w, n, cw, tc.rounds)
			}
			if n > 1 && last < cw/2 {
				t.Fatalf("%d columns: a last round of %d after rounds of %d", tc.w, last, cw)
			}
			if cw > tc.most+tc.most/2+ec.Align {
				t.Fatalf("rounds of %d columns, more than half again the %d wanted", cw, tc.most)
			}
		})
	}
}

// TestECRateIsLearnt: the coder's rate follows the rounds it codes, and a
// round too short to time leaves it alone.
func TestECRateIsLearnt(t *testing.T) {
	s := &ecService{}
	s.observe(1<<20, 4, time.Microsecond)
	if r := s.rate.Load(); r != 0 {
		t.Fatalf("a 1 µs round set the rate to %d", r)
	}
	s.observe(1<<20, 4, 100*time.Microsecond) // 41,943 bytes × outputs per µs
	if r := s.rate.Load(); r != 41943 {
		t.Fatalf("rate %d after one round, want 41943", r)
	}
	for range 64 {
		s.observe(1<<20, 4, 400*time.Microsecond)
	}
	if r := s.rate.Load(); r < 10485 || r > 10485*11/10 {
		t.Fatalf("rate %d after rounds 4× slower, want about 10485", r)
	}
}

// TestInlineReadsTheSGLOnce: the poller runs an EC op inline when the
// spans its scatter-gather list names hold at most the handler's
// InlineMax, and the handler then codes the spans the poller read, not a
// list the host rewrote meanwhile to name more (which would have the
// poller code a large stripe while every other pair waits). Before, a
// list was never read to size the op: every EC op with one went to a
// worker, however small.
func TestInlineReadsTheSGLOnce(t *testing.T) {
	s := openECService(t)
	h := &Handler{InlineMax: 16 << 10}
	const k, m = 4, 2
	rng := rand.New(rand.NewPCG(3, 4))
	for name := range accessors(nil) {
		t.Run(name, func(t *testing.T) {
			// A small stripe (6 × 256 bytes) and a large one (6 × 8 KiB)
			// in one window.
			small, large := newECLayout(k+m, 256, rng), newECLayout(k+m, 8<<10, rng)
			base := uint32(len(small.mem))
			mem := append(small.mem, large.mem...)
			var smallSpans, largeSpans []wire.Span
			for i := range k + m {
				smallSpans = append(smallSpans, small.span(i))
				largeSpans = append(largeSpans, wire.Span{Off: base + large.offs[i], Len: large.w})
			}
			listAt := uint32(len(small.mem) - 4096) // small's spare 4 KiB
			put := func(spans []wire.Span) wire.Span {
				b := wire.AppendSGL(nil, spans)
				copy(mem[listAt:], b)
				return wire.Span{Off: listAt, Len: uint32(len(b))}
			}
			acc := accessors(mem)[name]
			desc := func(list wire.Span) wire.Desc {
				d := wire.Desc{Op: wire.OpECEncode, Flags: wire.FlagSGL, Arg0: wire.ECShards(k, m), NSpan: 1}
				d.Spans[0] = list
				return d
			}
			var l shmLoop
			large0 := desc(put(largeSpans))
			if _, _, ok := l.inline(h, &large0, acc); ok {
				t.Fatalf("a list naming %d bytes runs inline (InlineMax %d)", 6*large.w, h.InlineMax)
			}
			// With one P, up to InlineAlone runs inline, and is long
			// (published at once); more does not.
			l.oneP = true
			for _, c := range []struct {
				alone          uint64
				long, isInline bool
			}{{0, false, false}, {6 * uint64(large.w), true, true}, {6*uint64(large.w) - 1, false, false}} {
				h := &Handler{InlineMax: h.InlineMax, InlineAlone: c.alone}
				if _, long, ok := l.inline(h, &large0, acc); ok != c.isInline || long != c.long {
					t.Fatalf("one P, InlineAlone %d: a list naming %d bytes runs inline %v (long %v), want %v (%v)",
						c.alone, 6*large.w, ok, long, c.isInline, c.long)
				}
			}
			l.oneP = false
			bad := desc(wire.Span{Off: listAt, Len: 12})
			if _, _, ok := l.inline(h, &bad, acc); ok {
				t.Fatal("a list that does not decode runs inline")
			}
			d := desc(put(smallSpans))
			sgl, long, ok := l.inline(h, &d, acc)
			if !ok || long || len(sgl) != k+m {
				t.Fatalf("a list naming %d bytes: inline %v (long %v), %d spans", 6*small.w, ok, long, len(sgl))
			}
			// The host rewrites the list to name the large stripe before
			// the handler runs.
			put(largeSpans)
			want := make([][]byte, k+m)
			for i := range want {
				want[i] = bytes.Clone(mem[small.offs[i] : small.offs[i]+small.w])
			}
			c, _ := ec.New(k, m)
			if err := c.Encode(want); err != nil {
				t.Fatal(err)
			}
			largeBefore := bytes.Clone(mem[base:])
			req := Request{Desc: d, Mem: acc, Transport: "shm", sgl: sgl}
			var resp wire.Desc
			s.serveAndAccount(context.Background(), s.serveEncode, &req, &resp)
			if resp.Status != wire.StatusOK || resp.Arg0 != uint64(small.w) {
				t.Fatalf("encode: %s, arg0 %d, want OK and %d", resp.Status, resp.Arg0, small.w)
			}
			for i := range k + m {
				if !bytes.Equal(mem[small.offs[i]:small.offs[i]+small.w], want[i]) {
					t.Fatalf("shard %d of the small stripe differs from the library's", i)
				}
			}
			if !bytes.Equal(mem[base:], largeBefore) {
				t.Fatal("the handler coded the list the host wrote after the poller read it")
			}
		})
	}
}

// serveAndAccount serves req with serve, then accounts for it, as the
// dispatcher does.
func (s *ecService) serveAndAccount(ctx context.Context, serve func(context.Context, *Request, *wire.Desc), req *Request, resp *wire.Desc) {
	serve(ctx, req, resp)
	s.account(req, resp, time.Now())
}
