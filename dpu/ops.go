package dpu

import (
	"context"
	"hash/crc32"

	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/wire"
)

var castagnoli = crc32c.Table

// checksumChunk bounds one staged read when the memory is not mapped:
// one slice (YieldEvery).
const checksumChunk = YieldEvery

// parallelChecksum is the size from which a mapped span is checksummed by
// several cores at once (the DPU has many; one CRC stream uses one).
const parallelChecksum = 8 << 20

// parallelPiece is how much of a span the cores checksum together between
// yields: each piece ends in a barrier where the slowest core is waited
// for, so pieces are larger than a slice (on two cores, 32 MiB is about
// 3 ms of the pair's work, which it holds every core for).
const parallelPiece = 32 << 20

// registerAgentOps registers the ops the agent serves itself.
func registerAgentOps(d *Dispatcher) {
	// PING completes at once, echoing Arg0: the round trip through the
	// dispatcher, nothing else.
	d.Handle(wire.OpPing, Handler{Inline: true, Serve: func(_ context.Context, req *Request, resp *wire.Desc) {
		resp.Arg0 = req.Arg0
	}})
	// CHECKSUM returns in Arg0 the CRC-32C of Spans[0] (or of the
	// concatenation of an SGL's spans), continuing from the request's Arg0.
	// Proof that the agent read host memory.
	d.Handle(wire.OpChecksum, Handler{InlineMax: 64 << 10, Serve: func(ctx context.Context, req *Request, resp *wire.Desc) {
		serveChecksum(ctx, req, resp, d.workers)
	}})
}

func serveChecksum(_ context.Context, req *Request, resp *wire.Desc, cores int) {
	if req.NSpan != 1 {
		resp.Status = wire.StatusBadArg
		return
	}
	spans := req.Spans[:1]
	if req.Flags&wire.FlagSGL != 0 {
		var st wire.Status
		if spans, st = req.SGL(); st != wire.StatusOK {
			resp.Status = st
			return
		}
	}
	crc := uint32(req.Arg0)
	var scratch []byte
	touched := 0
	for _, s := range spans {
		if b, ok := req.Mem.View(s); ok {
			// In slices, yielding between them to other pairs' work.
			piece := YieldEvery
			if len(b) >= parallelChecksum && cores > 1 {
				piece = parallelPiece
			}
			for len(b) > 0 {
				if touched >= YieldEvery {
					req.Yield()
					touched = 0
				}
				p := b[:min(piece, len(b))]
				if len(p) >= parallelChecksum {
					crc = crc32c.UpdateParallel(crc, p, cores)
				} else {
					crc = crc32.Update(crc, castagnoli, p)
				}
				touched += len(p)
				b = b[len(p):]
			}
			continue
		}
		// Staged: read in chunks, as DMA would move them.
		if scratch == nil {
			scratch = make([]byte, min(int(s.Len), checksumChunk))
		}
		for off := uint64(0); off < uint64(s.Len); {
			if touched >= YieldEvery {
				req.Yield()
				touched = 0
			}
			n := min(uint64(len(scratch)), uint64(s.Len)-off)
			if err := req.Mem.ReadAt(scratch[:n], uint64(s.Off)+off); err != nil {
				resp.Status = wire.StatusBadSpan
				return
			}
			crc = crc32.Update(crc, castagnoli, scratch[:n])
			off += n
			touched += int(n)
		}
	}
	resp.Arg0 = uint64(crc)
	resp.Arg1 = uint64(len(spans))
}
