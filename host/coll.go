package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/shared/wire"
)

// DefaultCollPiece is the most bytes of one buffer block a collective
// hands its agent in one op, when the communicator's spec does not say
// (wire.CollSpec.Piece): a larger collective goes in pieces of this size,
// each a collective of the agents' own, cut alike on every rank.
const DefaultCollPiece = 1 << 20

// Bounds of a communicator's pipeline: pieces in flight at once, and how
// many of them may be staged (copied through the window) at once.
const (
	collMaxFlight = 16
	collSlots     = 2
	collRoom      = 256 // bytes for the agent's reason, per piece in flight
)

// ErrCommBroken is returned for collectives on a communicator that an
// earlier collective's failure (or Leave) left unusable: join it again.
var ErrCommBroken = errors.New("host: coll: the communicator is unusable since an earlier failure; join it again")

// DPUComm is a communicator whose collectives this host's agent runs with
// the other ranks' agents (the DPU rail): the host hands its buffers over
// and its cores are free until the completion comes back.
//
// Any buffers do, of any length (whole elements) and anywhere: buffers in
// the window (Client.Alloc) are handed over in place, others go through
// staging buffers in the window, which the communicator holds only while
// collectives are in flight. Collectives may be started asynchronously
// (Start), any number at once, from any goroutine: they are numbered in
// the order Start was called, and every agent runs them in that order,
// so they match across ranks as long as every rank starts the same
// collectives in the same order (NCCL's and gloo's rule).
type DPUComm struct {
	c          *Client
	id         uint64
	rank, size int
	piece      int

	mu      sync.Mutex
	seq     uint32        // the last sequence number given out
	queue   []*CollOp     // started, with pieces not yet submitted, in order
	driving bool          // a goroutine submits the queue's pieces
	idle    chan struct{} // closed when the driver stops (nil while none runs)
	broken  error
	slots   [collSlots][]byte // staging (window), while collectives are in flight
	rooms   []byte            // collMaxFlight rooms for reasons, likewise
}

// JoinColl makes this host's agent a rank of the communicator spec names
// (every rank's host joins with the same spec: its id, epoch and the
// ranks' agents by peer-layer id, in rank order). Joining an id this
// agent already has replaces that communicator: a job restarted with its
// old id joins anew.
func (c *Client) JoinColl(ctx context.Context, spec wire.CollSpec) (*DPUComm, error) {
	if spec.Piece%wire.CollPieceUnit != 0 || spec.Piece > wire.MaxCollPiece {
		return nil, fmt.Errorf("host: coll join: pieces of %d bytes (want a multiple of %d up to %d)", spec.Piece, wire.CollPieceUnit, wire.MaxCollPiece)
	}
	room := make([]byte, 512)
	var r Result
	var err error
	// Busy: the agent is still dropping this id's communicator of an
	// earlier host that went away (a job restarted at once).
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		r, err = c.Do(ctx, Request{Op: wire.OpCollJoin, In: [][]byte{spec.Marshal()}, Out: [][]byte{room}})
		if !errors.Is(err, wire.StatusBusy) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, collErr("join", r, err)
		case <-time.After(wait):
		}
	}
	if err != nil {
		return nil, collErr("join", r, err)
	}
	d := &DPUComm{c: c, id: spec.Comm, rank: int(r.Arg0), size: len(spec.Nodes), piece: int(spec.Piece)}
	if d.piece == 0 {
		d.piece = DefaultCollPiece
	}
	return d, nil
}

// CollNode returns the peer-layer node id of this host's agent: what a
// rank contributes to the spec of a communicator (CollSpec.Nodes).
func (c *Client) CollNode(ctx context.Context) (uint32, error) {
	room := make([]byte, 512)
	r, err := c.Do(ctx, Request{Op: wire.OpCollJoin, Arg1: wire.CollJoinNodeOnly, In: [][]byte{nil}, Out: [][]byte{room}})
	if err != nil {
		return 0, collErr("node", r, err)
	}
	return uint32(r.Arg0), nil
}

// Rank is this host's rank; Size the number of ranks.
func (d *DPUComm) Rank() int { return d.rank }
func (d *DPUComm) Size() int { return d.size }

// Piece is the most bytes of a buffer block one op carries.
func (d *DPUComm) Piece() int { return d.piece }

func collErr(what string, r Result, err error) error {
	if err == nil {
		return nil
	}
	if len(r.Out) == 1 && r.Arg1 == uint64(len(r.Out[0])) && len(r.Out[0]) > 0 {
		return fmt.Errorf("host: coll %s: %s: %w", what, r.Out[0], err)
	}
	return fmt.Errorf("host: coll %s: %w", what, err)
}

// CollOp is a collective started with Start.
type CollOp struct {
	d          *DPUComm
	ctx        context.Context
	kind       coll.Kind
	dt         coll.DType
	op         coll.Op
	root       int
	send, recv []byte
	lay        collLayout
	seq0       uint32 // its first piece's sequence number
	next       int    // pieces submitted
	left       int    // pieces not yet completed (the driver's)
	done       chan struct{}
	err        error
}

// Done is closed when the collective has completed.
func (o *CollOp) Done() <-chan struct{} { return o.done }

// Wait waits for the collective (or ctx) and returns its error. A
// collective whose wait ends with ctx goes on: its buffers are the
// agent's until Done is closed.
func (o *CollOp) Wait(ctx context.Context) error {
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return fmt.Errorf("host: coll %v: %w", o.kind, ctx.Err())
	}
}

// Err is the collective's error once Done is closed.
func (o *CollOp) Err() error { return o.err }

// collLayout is how a collective's buffers are cut into pieces: each
// buffer is blocks of blk bytes (one, or one per rank), and piece i is
// bytes [i·q, (i+1)·q) of every block, each piece a collective of its own.
type collLayout struct {
	sendBlocks, recvBlocks int
	blk, q, pieces         int
	inPlace                bool // staged in one buffer, send then result
	copyIn, copyOut        bool // this rank's send and recv bytes matter
}

// layout checks a collective's buffers and cuts them into pieces: by
// their lengths, the element size, the rank count and the piece size
// alone, which every rank of the communicator shares.
func (d *DPUComm) layout(k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) (collLayout, error) {
	switch {
	case !k.Valid():
		return collLayout{}, fmt.Errorf("host: coll: unknown collective %v", k)
	case !dt.Valid():
		return collLayout{}, fmt.Errorf("host: coll %v: unknown element type %v", k, dt)
	case k.Reduces() && !op.Valid():
		return collLayout{}, fmt.Errorf("host: coll %v: unknown reduction %v", k, op)
	case root < 0 || root >= d.size || root > 0xffff:
		return collLayout{}, fmt.Errorf("host: coll %v: root %d of %d ranks", k, root, d.size)
	}
	p, es := d.size, dt.Size()
	l := collLayout{sendBlocks: 1, recvBlocks: 1, copyIn: true, copyOut: true}
	bad := func(what string) (collLayout, error) {
		return collLayout{}, fmt.Errorf("host: coll %v of %d bytes into %d (%d ranks of %v): %s", k, len(send), len(recv), p, dt, what)
	}
	switch k {
	case coll.KindAllReduce:
		if len(send) != len(recv) {
			return bad("want equal lengths")
		}
		l.blk, l.inPlace = len(send), true
	case coll.KindBroadcast:
		if len(send) != len(recv) {
			return bad("want equal lengths")
		}
		l.blk, l.inPlace, l.copyIn = len(recv), true, d.rank == root
	case coll.KindReduce:
		if d.rank == root && len(recv) != len(send) || d.rank != root && len(recv) != 0 && len(recv) != len(send) {
			return bad("want recv as long as send (or empty, off the root)")
		}
		l.blk, l.inPlace, l.copyOut = len(send), true, d.rank == root
	case coll.KindReduceScatter:
		if len(send) != p*len(recv) {
			return bad("want send to be one block of len(recv) per rank")
		}
		l.blk, l.sendBlocks = len(recv), p
	case coll.KindAllGather:
		if len(recv) != p*len(send) {
			return bad("want recv to be one block of len(send) per rank")
		}
		l.blk, l.recvBlocks = len(send), p
	case coll.KindAllToAll:
		if len(send) != len(recv) || len(send)%p != 0 {
			return bad("want equal lengths of one block per rank")
		}
		l.blk, l.sendBlocks, l.recvBlocks = len(send)/p, p, p
	case coll.KindBarrier:
		if len(send) != 0 || len(recv) != 0 {
			return bad("a barrier takes no buffers")
		}
		l.sendBlocks, l.recvBlocks, l.pieces = 0, 0, 1
		return l, nil
	}
	if l.blk%es != 0 {
		return bad("not a whole number of elements per block")
	}
	// A piece staged whole (send and recv, or one buffer in place) is at
	// most d.piece bytes, so that two staging slots fit a window of four.
	per := l.sendBlocks + l.recvBlocks
	if l.inPlace {
		per = 1
	}
	l.q = max(1, d.piece/(per*es)) * es
	l.pieces = max(1, (l.blk+l.q-1)/l.q)
	return l, nil
}

// span returns piece i's bytes [off, end) within each block.
func (l *collLayout) span(i int) (off, end int) {
	off = i * l.q
	return off, min(off+l.q, l.blk)
}

// Start starts one collective and returns at once: send and recv as
// coll.Comm.Run takes them (Broadcast reads root's send and writes every
// rank's recv; Reduce writes root's recv, and recv may be empty off the
// root; Barrier takes none). Do not touch the buffers until the
// collective is done. Collectives are numbered, and run by every agent,
// in the order of their Start calls.
func (d *DPUComm) Start(ctx context.Context, k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) (*CollOp, error) {
	lay, err := d.layout(k, send, recv, dt, op, root)
	if err != nil {
		return nil, err
	}
	o := &CollOp{d: d, ctx: ctx, kind: k, dt: dt, op: op, root: root, send: send, recv: recv, lay: lay,
		left: lay.pieces, done: make(chan struct{})}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.broken != nil {
		return nil, fmt.Errorf("host: coll %v: %w", k, d.broken)
	}
	if d.c.closed.Load() {
		return nil, fmt.Errorf("host: coll %v: %w", k, ErrClosed)
	}
	o.seq0 = d.seq + 1
	d.seq += uint32(lay.pieces)
	d.queue = append(d.queue, o)
	if !d.driving {
		d.driving = true
		d.idle = make(chan struct{})
		go d.drive()
	}
	return o, nil
}

// Run runs one collective and waits for it (Start, then Wait).
func (d *DPUComm) Run(ctx context.Context, k coll.Kind, send, recv []byte, dt coll.DType, op coll.Op, root int) error {
	o, err := d.Start(ctx, k, send, recv, dt, op, root)
	if err != nil {
		return err
	}
	return o.Wait(ctx)
}

// AllReduce is Run of coll.KindAllReduce.
func (d *DPUComm) AllReduce(ctx context.Context, send, recv []byte, dt coll.DType, op coll.Op) error {
	return d.Run(ctx, coll.KindAllReduce, send, recv, dt, op, 0)
}

// flight is one piece with its agent.
type flight struct {
	o     *CollOp
	i     int    // which piece of o
	call  *Call  // nil: never submitted (failed before)
	slot  int    // its staging slot, or -1
	stage []byte // the staging buffer's bytes it uses
	room  []byte
}

// drive submits the queue's pieces in order, keeping at most
// collMaxFlight in flight and collSlots staged, and completes them in
// order; it returns once nothing is queued or in flight, giving the
// staging buffers back.
func (d *DPUComm) drive() {
	var fl []flight
	var free [collSlots]bool
	for i := range free {
		free[i] = true
	}
	for {
		d.mu.Lock()
		var o *CollOp
		if len(d.queue) > 0 {
			o = d.queue[0]
		}
		if o == nil && len(fl) == 0 {
			d.release()
			d.driving = false
			close(d.idle)
			d.mu.Unlock()
			return
		}
		broken := d.broken
		d.mu.Unlock()
		if o != nil && broken != nil {
			d.dequeue(o)
			d.fail(o, broken)
			continue
		}
		if o != nil && len(fl) < collMaxFlight {
			f, status := d.prepare(o, &free, len(fl) > 0)
			switch status {
			case prepared:
				if err := d.submit(&f); err != nil {
					d.breakOff(fmt.Errorf("%w: submitting #%d: %w", ErrCommBroken, o.seq0+uint32(f.i), err))
					d.releaseSlot(&f, &free)
					o.left-- // f, which never went
					d.dequeue(o)
					d.fail(o, err)
					continue
				}
				fl = append(fl, f)
				continue
			case failed:
				continue
			}
			// No room to stage: wait for the oldest piece.
		}
		if len(fl) == 0 { // cannot happen: with nothing in flight every slot is free
			d.dequeue(o)
			d.fail(o, fmt.Errorf("host: coll %v: nothing in flight and no staging slot free", o.kind))
			continue
		}
		f := fl[0]
		fl = fl[1:]
		d.finish(&f)
		d.releaseSlot(&f, &free)
	}
}

type prepStatus int

const (
	prepared prepStatus = iota
	noRoom              // nothing staged: wait for a piece in flight first
	failed              // the op failed (and left the queue)
)

// prepare readies o's next piece: its spans in place where its buffers
// are in the window, else a staging slot with the send bytes copied in.
// It takes the piece off the queue's books (o leaves the queue with its
// last piece).
func (d *DPUComm) prepare(o *CollOp, free *[collSlots]bool, inFlight bool) (flight, prepStatus) {
	if err := o.ctx.Err(); err != nil {
		// Abandoned before its turn: its pieces will never come, so the
		// agents could only wait for them; break the communicator off.
		d.dequeue(o)
		d.breakOff(fmt.Errorf("%w: collective #%d abandoned: %w", ErrCommBroken, o.seq0+uint32(o.next), err))
		d.fail(o, err)
		return flight{}, failed
	}
	if d.rooms == nil {
		room, err := d.c.Alloc(collMaxFlight * collRoom)
		if err != nil {
			room = make([]byte, collMaxFlight*collRoom) // copied back by the transport
		}
		d.rooms = room
	}
	i := o.next
	seq := o.seq0 + uint32(i)
	r := int(seq%collMaxFlight) * collRoom
	f := flight{o: o, i: i, slot: -1, room: d.rooms[r : r+collRoom]}
	l := &o.lay
	if !d.direct(o, i) {
		s := -1
		for j := range free {
			if free[j] {
				s = j
				break
			}
		}
		if s < 0 {
			return flight{}, noRoom
		}
		off, end := l.span(i)
		w := end - off
		need := w * (l.sendBlocks + l.recvBlocks)
		if l.inPlace {
			need = w
		}
		if len(d.slots[s]) < need {
			if d.slots[s] != nil {
				d.c.Free(d.slots[s])
				d.slots[s] = nil
			}
			b, err := d.c.Alloc(max(need, 64))
			if err != nil && !inFlight {
				// Nothing in flight: the other slots are idle; give them
				// back too, which may leave a hole large enough.
				for j := range d.slots {
					if d.slots[j] != nil {
						d.c.Free(d.slots[j])
						d.slots[j] = nil
					}
				}
				b, err = d.c.Alloc(max(need, 64))
			}
			if err != nil {
				if inFlight {
					return flight{}, noRoom
				}
				d.dequeue(o)
				err = fmt.Errorf("host: coll %v: a staging buffer of %d bytes (the communicator's piece: %d; window %d): %w", o.kind, need, d.piece, d.c.WindowSize(), err)
				d.breakOff(fmt.Errorf("%w: %w", ErrCommBroken, err))
				d.fail(o, err)
				return flight{}, failed
			}
			d.slots[s] = b
		}
		free[s] = false
		f.slot, f.stage = s, d.slots[s][:need]
		if l.copyIn {
			for b := 0; b < l.sendBlocks; b++ {
				copy(f.stage[b*w:(b+1)*w], o.send[b*l.blk+off:b*l.blk+end])
			}
		}
	}
	o.next++
	if o.next == l.pieces {
		d.dequeue(o)
	}
	return f, prepared
}

// direct reports whether piece i of o is handed over in place: its bytes
// are in the window, contiguous (one block, or the whole collective in
// one piece).
func (d *DPUComm) direct(o *CollOp, i int) bool {
	l := &o.lay
	if l.pieces > 1 && (l.sendBlocks > 1 || l.recvBlocks > 1) {
		return false
	}
	s, r := o.pieceBufs(i)
	return (len(s) == 0 || d.c.InWindow(s)) && (len(r) == 0 || d.c.InWindow(r))
}

// pieceBufs returns the caller's bytes of piece i where they are
// contiguous: a piece of a one-block collective, or the whole of one
// that goes in one piece.
func (o *CollOp) pieceBufs(i int) (send, recv []byte) {
	l := &o.lay
	if l.sendBlocks > 1 || l.recvBlocks > 1 || l.sendBlocks == 0 {
		return o.send, o.recv
	}
	off, end := l.span(i)
	send, recv = o.send[off:end], o.recv
	if len(recv) > 0 {
		recv = recv[off:end]
	}
	return send, recv
}

// submit hands piece f to the agent.
func (d *DPUComm) submit(f *flight) error {
	o, l := f.o, &f.o.lay
	var send, recv []byte
	switch {
	case f.slot < 0:
		send, recv = o.pieceBufs(f.i)
	case l.inPlace:
		send, recv = f.stage, f.stage
	default:
		w := len(f.stage) / (l.sendBlocks + l.recvBlocks)
		send, recv = f.stage[:l.sendBlocks*w], f.stage[l.sendBlocks*w:]
	}
	seq := o.seq0 + uint32(f.i)
	call, err := d.c.Go(context.WithoutCancel(o.ctx), Request{Op: wire.OpCollRun, Arg0: d.id,
		Arg1: wire.CollArgs(uint8(o.kind), uint8(o.dt), uint8(o.op), uint16(o.root), seq),
		In:   [][]byte{send}, Out: [][]byte{recv, f.room}})
	if err != nil {
		return err
	}
	call.SetLong(true) // the agents take milliseconds: sleep, do not spin
	f.call = call
	return nil
}

// finish waits for piece f, copies its result out of staging and, with
// its collective's last piece, completes it.
func (d *DPUComm) finish(f *flight) {
	o, l := f.o, &f.o.lay
	// Not bounded by the op's context: the agent owns the buffers until it
	// answers, which the peer layer's deadline and the agent's stall
	// watchdog bound (and the transport, should the agent die).
	r, err := d.c.Wait(context.Background(), f.call)
	if err != nil {
		if len(r.Out) == 1 && len(r.Out[0]) > 0 && &r.Out[0][0] == &f.room[0] {
			err = fmt.Errorf("host: %s: %w", r.Out[0], err) // the reason starts "coll: "
		} else {
			err = collErr("run", r, err)
		}
		d.breakOff(fmt.Errorf("%w: %w", ErrCommBroken, err))
	} else if f.slot >= 0 && l.copyOut {
		off, end := l.span(f.i)
		w := end - off
		if l.inPlace {
			copy(o.recv[off:end], f.stage)
		} else {
			res := f.stage[l.sendBlocks*w:]
			for b := 0; b < l.recvBlocks; b++ {
				copy(o.recv[b*l.blk+off:b*l.blk+end], res[b*w:(b+1)*w])
			}
		}
	}
	if err != nil && o.err == nil {
		o.err = err
	}
	o.left--
	if o.left == 0 {
		d.complete(o)
	}
}

// fail ends o with err: at once when none of its pieces is in flight,
// else once they have come back.
func (d *DPUComm) fail(o *CollOp, err error) {
	if o.err == nil {
		o.err = err
	}
	o.left -= o.lay.pieces - o.next // the pieces never submitted
	o.next = o.lay.pieces
	if o.left == 0 {
		d.complete(o)
	}
}

func (d *DPUComm) complete(o *CollOp) {
	select {
	case <-o.done:
	default:
		close(o.done)
	}
}

func (d *DPUComm) dequeue(o *CollOp) {
	d.mu.Lock()
	if len(d.queue) > 0 && d.queue[0] == o {
		d.queue = d.queue[1:]
	}
	d.mu.Unlock()
}

// breakOff marks the communicator unusable (the first reason stays) and,
// the first time, has the agent drop it and tell the other ranks' agents,
// so that their collectives fail now rather than wait for ours.
func (d *DPUComm) breakOff(err error) {
	d.mu.Lock()
	first := d.broken == nil
	if first {
		d.broken = err
	}
	d.mu.Unlock()
	if first && !d.c.closed.Load() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), collLeaveTimeout)
			defer cancel()
			d.c.Do(ctx, Request{Op: wire.OpCollLeave, Arg0: d.id, Arg1: wire.CollLeaveAbort})
		}()
	}
}

// Abort gives the communicator up: collectives in flight fail soon on
// every rank (the agents are told), later ones at once.
func (d *DPUComm) Abort(why error) {
	d.breakOff(fmt.Errorf("%w: given up: %w", ErrCommBroken, why))
}

// collLeaveTimeout bounds the leave a broken communicator sends its agent.
const collLeaveTimeout = 5 * time.Second

// releaseSlot frees f's staging slot for the next piece.
func (d *DPUComm) releaseSlot(f *flight, free *[collSlots]bool) {
	if f.slot >= 0 {
		free[f.slot] = true
	}
}

// release gives the staging buffers back to the window (d.mu held,
// nothing in flight).
func (d *DPUComm) release() {
	for i, b := range d.slots {
		if b != nil {
			d.c.Free(b)
			d.slots[i] = nil
		}
	}
	if d.rooms != nil {
		if d.c.InWindow(d.rooms) {
			d.c.Free(d.rooms)
		}
		d.rooms = nil
	}
}

// Leave drops the communicator on the agent, after the collectives in
// flight (or ctx); collectives started after it fail.
func (d *DPUComm) Leave(ctx context.Context) error {
	d.mu.Lock()
	if d.broken == nil {
		d.broken = fmt.Errorf("%w (it was left)", ErrCommBroken)
	}
	idle := d.idle
	driving := d.driving
	d.mu.Unlock()
	if driving {
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("host: coll leave: waiting for the collectives in flight: %w", ctx.Err())
		}
	}
	_, err := d.c.Do(ctx, Request{Op: wire.OpCollLeave, Arg0: d.id})
	if errors.Is(err, wire.StatusNotFound) {
		return nil // dropped already (a failure broke it off)
	}
	return err
}
