package dpu

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

func TestChecksumParallelAndStagedAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	mem := make([]byte, parallelChecksum*2+12345)
	for i := range mem {
		mem[i] = byte(rng.Uint32())
	}
	for _, tt := range []struct {
		name  string
		span  wire.Span
		cores int
	}{
		{"small", wire.Span{Off: 7, Len: 1000}, 4},
		{"large one core", wire.Span{Off: 1, Len: uint32(len(mem) - 1)}, 1},
		{"large two cores", wire.Span{Off: 1, Len: uint32(len(mem) - 1)}, 2},
		{"large seven cores", wire.Span{Off: 0, Len: uint32(len(mem))}, 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := crc32c.Update(5, mem[tt.span.Off:tt.span.End()])
			for _, acc := range []ring.Accessor{ring.NewMappedWindow(mem), &ring.StagedWindow{Under: ring.NewMappedWindow(mem)}} {
				req := Request{Desc: wire.Desc{Op: wire.OpChecksum, NSpan: 1, Arg0: 5, Spans: [4]wire.Span{tt.span}}, Mem: acc}
				var resp wire.Desc
				serveChecksum(context.Background(), &req, &resp, tt.cores)
				if resp.Status != wire.StatusOK || uint32(resp.Arg0) != want {
					t.Fatalf("%T: status %s crc %#x want %#x", acc, resp.Status, resp.Arg0, want)
				}
			}
		})
	}
}

func FuzzDecodeKVBatch(f *testing.F) {
	rec := []byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'k', 'v'}
	f.Add(rec)
	f.Add(append(rec, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'k'))
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := DecodeKVBatch(b)
		if err != nil {
			return
		}
		total := 0
		for _, o := range ops {
			total += 17 + len(o.Key) + len(o.Value)
		}
		if total != len(b) {
			t.Fatalf("decoded %d bytes of %d", total, len(b))
		}
	})
}
