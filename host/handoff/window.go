package handoff

import (
	"fmt"
	"unsafe"

	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// What the transports with a window (shared memory, RDMA) share: where a
// buffer lies in it, runs of buffers, staging the rest.

// WindowOffset returns b's offset in win, if b lies in it.
func WindowOffset(win, b []byte) (uint64, bool) {
	if len(win) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(win)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if len(b) == 0 {
		return 0, p >= base && p <= base+uintptr(len(win))
	}
	if p < base || p+uintptr(len(b)) > base+uintptr(len(win)) {
		return 0, false
	}
	return uint64(p - base), true
}

// WindowRun returns bufs as one slice of win, when every one lies in it
// and each starts where the one before it ends (a stripe's shards in one
// buffer, as ec lays them out): an op then names the group with one span.
func WindowRun(win []byte, bufs [][]byte) ([]byte, bool) {
	if len(bufs) == 0 {
		return nil, false
	}
	start, ok := WindowOffset(win, bufs[0])
	if !ok {
		return nil, false
	}
	end := start
	for _, b := range bufs {
		if off, ok := WindowOffset(win, b); !ok || off != end || len(b) == 0 {
			return nil, false
		}
		end += uint64(len(b))
	}
	return win[start:end:end], true
}

// WindowDesc builds c's descriptor over win: buffers in it are named in
// place, others are staged in buffers of arena (inputs copied in), which
// the call keeps until Unstage. Its tag is the caller's to set.
func WindowDesc(c *Call, win []byte, arena *ring.Allocator) (wire.Desc, error) {
	nIn := len(c.Req.In)
	d := wire.Desc{Op: c.Req.Op, Flags: c.Req.Flags, Arg0: c.Req.Arg0, Arg1: c.Req.Arg1, NSpan: uint8(nIn + len(c.Req.Out))}
	c.staged = c.staged[:0]
	// In and Out in one list, on the stack (the client checked that they
	// are at most a descriptor's spans).
	var bufsA [wire.MaxSpans][]byte
	for i, b := range append(append(bufsA[:0], c.Req.In...), c.Req.Out...) {
		off, ok := WindowOffset(win, b)
		if !ok {
			so, err := arena.Alloc(uint64(len(b)))
			if err != nil {
				Unstage(c, arena)
				return d, fmt.Errorf("stage %d bytes for %s: %w", len(b), c.Req.Op, err)
			}
			if i < nIn {
				copy(win[so:], b)
			}
			c.staged = append(c.staged, so)
			off = so
		}
		d.Spans[i] = wire.Span{Off: uint32(off), Len: uint32(len(b))}
		if i >= nIn {
			c.outSpans[i-nIn] = d.Spans[i]
		}
	}
	return d, nil
}

// StreamDesc builds c's descriptor for a stream transport, its inputs
// inline after it: the spans count from the payload's start, the Out
// buffers' after the inputs (room the agent appends, reserve bytes in
// all). Its tag is the caller's to set.
func StreamDesc(c *Call) (d wire.Desc, reserve int) {
	nIn := len(c.Req.In)
	d = wire.Desc{Op: c.Req.Op, Flags: c.Req.Flags, Arg0: c.Req.Arg0, Arg1: c.Req.Arg1, NSpan: uint8(nIn + len(c.Req.Out))}
	off := 0
	for i, b := range c.Req.In {
		d.Spans[i] = wire.Span{Off: uint32(off), Len: uint32(len(b))}
		off += len(b)
	}
	for j, b := range c.Req.Out {
		d.Spans[nIn+j] = wire.Span{Off: uint32(off), Len: uint32(len(b))}
		c.outSpans[j] = d.Spans[nIn+j]
		off += len(b)
		reserve += len(b)
	}
	return d, reserve
}

// Unstage frees c's staging buffers.
func Unstage(c *Call, arena *ring.Allocator) {
	for _, off := range c.staged {
		arena.Free(off)
	}
	c.staged = c.staged[:0]
}

// WindowResult is a completion's result for c, its outputs copied from
// the spans of win the agent wrote (named in d).
func WindowResult(c *Call, d *wire.Desc, win []byte) Result {
	res := Result{Status: d.Status, Arg0: d.Arg0, Arg1: d.Arg1}
	if len(c.Req.Out) > 0 { // on error too: a reason, when the op writes one
		c.PlaceOutputs(&res, d.SpanList(), func(sp wire.Span) []byte {
			if !sp.Within(uint64(len(win))) {
				return nil
			}
			return win[sp.Off:sp.End()]
		})
	}
	return res
}

// StreamResult is a completion's result for c, its outputs copied from
// payload, where the agent wrote the spans d names one after another.
func StreamResult(c *Call, d *wire.Desc, payload []byte) Result {
	res := Result{Status: d.Status, Arg0: d.Arg0, Arg1: d.Arg1}
	if len(c.Req.Out) > 0 { // on error too: a reason, when the op writes one
		pos := 0
		c.PlaceOutputs(&res, d.SpanList(), func(sp wire.Span) []byte {
			if pos+int(sp.Len) > len(payload) {
				return nil
			}
			b := payload[pos : pos+int(sp.Len)]
			pos += int(sp.Len)
			return b
		})
	}
	return res
}
