package host

import (
	"context"
	"fmt"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/shared/wire"
)

// DPUComm is a communicator whose collectives this host's agent runs with
// the other ranks' agents (the DPU rail): the host hands its buffer over
// and its cores are free until the completion comes back.
type DPUComm struct {
	c          *Client
	id         uint64
	rank, size int
	bufs       [2][]byte // window buffers pieces are staged in, used in turn
	room       []byte    // for the agent's reason when a collective fails
}

// JoinColl makes this host's agent a rank of the communicator spec names
// (every rank's host joins with the same spec: its id, epoch and the
// ranks' agents by peer-layer id, in rank order).
func (c *Client) JoinColl(ctx context.Context, spec wire.CollSpec) (*DPUComm, error) {
	room := make([]byte, 512)
	r, err := c.Do(ctx, Request{Op: wire.OpCollJoin, In: [][]byte{spec.Marshal()}, Out: [][]byte{room}})
	if err != nil {
		return nil, collErr("join", r, err)
	}
	d := &DPUComm{c: c, id: spec.Comm, rank: int(r.Arg0), size: len(spec.Nodes)}
	if d.room, err = c.Alloc(512); err != nil {
		d.room = make([]byte, 512)
	}
	return d, nil
}

// Rank is this host's rank; Size the number of ranks.
func (d *DPUComm) Rank() int { return d.rank }
func (d *DPUComm) Size() int { return d.size }

func collErr(what string, r Result, err error) error {
	if err == nil {
		return nil
	}
	if len(r.Out) == 1 && r.Arg1 == uint64(len(r.Out[0])) && len(r.Out[0]) > 0 {
		return fmt.Errorf("host: coll %s: %s: %w", what, r.Out[0], err)
	}
	return fmt.Errorf("host: coll %s: %w", what, err)
}

// Go starts one collective on buffers that fit one op and returns at
// once: send and recv as coll.Comm.Run takes them. Buffers from Alloc are
// handed over in place; others are copied into the window and back. Do
// not touch them until Wait returns.
func (d *DPUComm) Go(ctx context.Context, k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) (*Call, error) {
	if root < 0 || root >= d.size || root > 0xffff {
		return nil, fmt.Errorf("host: coll %v: root %d of %d ranks", k, root, d.size)
	}
	call, err := d.c.Go(ctx, Request{Op: wire.OpCollRun, Arg0: d.id, Arg1: wire.CollArgs(uint8(k), uint8(dt), uint8(op), uint16(root)),
		In: [][]byte{send}, Out: [][]byte{recv, d.room}})
	if err != nil {
		return nil, fmt.Errorf("host: coll %v: %w", k, err)
	}
	call.long = true // the agents take milliseconds: sleep, do not spin
	return call, nil
}

// Wait waits for a collective started with Go.
func (d *DPUComm) Wait(ctx context.Context, call *Call) error {
	r, err := d.c.Wait(ctx, call)
	if err != nil {
		// The reason, when the agent wrote one, is the last Out buffer.
		if len(r.Out) == 1 && &r.Out[0][0] == &d.room[0] {
			return fmt.Errorf("host: %s: %w", r.Out[0], err) // the reason starts "coll: "
		}
		return collErr("run", r, err)
	}
	return nil
}

// Run runs one collective and waits for it. An AllReduce larger than what
// one op can carry goes in pieces, each a collective of its own, two in
// flight (the host stages the next while the agents reduce one); the
// other collectives must fit one op.
func (d *DPUComm) Run(ctx context.Context, k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) error {
	win := d.c.WindowSize()
	if k != coll.KindAllReduce || 2*len(send)+1024 <= win || d.inWindow(send, recv) {
		call, err := d.Go(ctx, k, send, recv, dt, op, root)
		if err != nil {
			return err
		}
		return d.Wait(ctx, call)
	}
	if len(send) != len(recv) {
		return fmt.Errorf("host: coll allreduce of %d bytes into %d", len(send), len(recv))
	}
	// Two staging buffers of a third of the window each (in place: the
	// agent reads and writes the same span).
	piece := (win/3 - 1024) &^ 63
	if piece < 64 {
		return fmt.Errorf("host: coll: a window of %d bytes is too small", win)
	}
	for i := range d.bufs {
		if len(d.bufs[i]) < piece {
			b, err := d.c.Alloc(piece)
			if err != nil {
				return fmt.Errorf("host: coll: staging buffer: %w", err)
			}
			d.bufs[i] = b
		}
	}
	type inflight struct {
		call     *Call
		buf, out []byte
	}
	var pending []inflight
	finish := func(f inflight) error {
		if err := d.Wait(ctx, f.call); err != nil {
			return err
		}
		copy(f.out, f.buf)
		return nil
	}
	for off, i := 0, 0; off < len(send); off, i = off+piece, i+1 {
		end := min(off+piece, len(send))
		buf := d.bufs[i%2][:end-off]
		if len(pending) == 2 {
			if err := finish(pending[0]); err != nil {
				return err
			}
			pending = pending[1:]
		}
		copy(buf, send[off:end])
		call, err := d.Go(ctx, k, buf, buf, dt, op, root)
		if err != nil {
			return err
		}
		pending = append(pending, inflight{call, buf, recv[off:end]})
	}
	for _, f := range pending {
		if err := finish(f); err != nil {
			return err
		}
	}
	return nil
}

func (d *DPUComm) inWindow(bs ...[]byte) bool {
	for _, b := range bs {
		if !d.c.t.inWindow(b) {
			return false
		}
	}
	return true
}

// AllReduce is Run of coll.KindAllReduce.
func (d *DPUComm) AllReduce(ctx context.Context, send, recv []byte, dt coll.DType, op coll.Op) error {
	return d.Run(ctx, coll.KindAllReduce, send, recv, dt, op, 0)
}

// Leave drops the communicator on the agent.
func (d *DPUComm) Leave(ctx context.Context) error {
	for i, b := range d.bufs {
		if b != nil {
			d.c.Free(b)
			d.bufs[i] = nil
		}
	}
	_, err := d.c.Do(ctx, Request{Op: wire.OpCollLeave, Arg0: d.id})
	return err
}
