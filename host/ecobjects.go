package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hecsys/hec/ec/object"
	"github.com/hecsys/hec/shared/wire"
)

// Erasure-coded objects across agents: the local agent codes each
// object's stripes and places the shards on k+m agents over the peer
// layer; the host hands it the bytes over the handoff and goes on. See
// package ec/object for placement, versions and what a reader sees.

// objectChunk bounds the bytes of one Put or Get op: a part of the
// window, so that other ops find room beside it.
func (e *EC) objectChunk() int {
	return max(64<<10, min(4<<20, e.c.WindowSize()/3))
}

// reasonErr is the error of a failed object op, with the agent's reason
// when it wrote one.
func reasonErr(op string, r Result, err error) error {
	if err == nil {
		return nil
	}
	if len(r.Out) == 1 && r.Arg1 == uint64(len(r.Out[0])) && len(r.Out[0]) > 0 {
		return fmt.Errorf("host: ec %s: %s: %w", op, r.Out[0], err)
	}
	return fmt.Errorf("host: ec %s: %w", op, err)
}

// do runs an object op, its waiter sleeping rather than spinning: the
// agent waits on other agents.
func (e *EC) do(ctx context.Context, req Request) (Result, error) {
	call, err := e.c.Go(ctx, req)
	if err != nil {
		return Result{}, err
	}
	call.SetLong(true)
	return e.c.Wait(ctx, call)
}

// Put stores data as object name, coded with this EC's k+m, and returns
// the version written once a write quorum of shards is durable.
func (e *EC) Put(ctx context.Context, name string, data []byte) (object.Header, error) {
	if err := object.CheckName(name); err != nil {
		return object.Header{}, err
	}
	r, err := e.do(ctx, Request{Op: wire.OpECPutBegin, Arg0: uint64(len(data)), Arg1: wire.ECShards(e.k, e.m), In: [][]byte{[]byte(name)}})
	if err != nil {
		return object.Header{}, reasonErr("put", r, err)
	}
	handle := r.Arg0
	abort := func() {
		e.c.Do(context.WithoutCancel(ctx), Request{Op: wire.OpECPutEnd, Arg0: handle, Arg1: 1})
	}
	err = e.chunked(ctx, len(data), func(off, end int) (*Call, error) {
		return e.c.Go(ctx, Request{Op: wire.OpECPutData, Arg0: handle, Arg1: uint64(off), In: [][]byte{data[off:end]}})
	}, func(_ int, r Result, err error) error { return reasonErr("put", r, err) })
	if err != nil {
		abort()
		return object.Header{}, err
	}
	r, err = e.do(ctx, Request{Op: wire.OpECPutEnd, Arg0: handle, Out: [][]byte{make([]byte, 4096)}})
	if err != nil {
		return object.Header{}, reasonErr("put", r, err)
	}
	h := object.Header{Name: name, Size: int64(len(data)), K: e.k, M: e.m}
	if len(r.Out) == 1 {
		h.Version = object.Version(r.Out[0])
	}
	return h, nil
}

// Stat reports the object's current version and where each shard lives
// and whether it is healthy.
func (e *EC) Stat(ctx context.Context, name string) (object.Stat, error) {
	var st object.Stat
	err := e.jsonOp(ctx, "stat", wire.OpECStat, name, &st)
	return st, err
}

// List returns the objects whose names start with prefix.
func (e *EC) List(ctx context.Context, prefix string) ([]object.Header, error) {
	var l []object.Header
	err := e.jsonOp(ctx, "list", wire.OpECList, prefix, &l)
	return l, err
}

func (e *EC) jsonOp(ctx context.Context, what string, op wire.Op, arg string, v any) error {
	room := make([]byte, 64<<10)
	for {
		r, err := e.do(ctx, Request{Op: op, In: [][]byte{[]byte(arg)}, Out: [][]byte{room}})
		if errors.Is(err, wire.StatusTooLarge) && r.Arg0 > uint64(len(room)) && r.Arg0 <= uint64(e.c.WindowSize()/2) {
			room = make([]byte, r.Arg0)
			continue
		}
		if err != nil {
			return reasonErr(what, r, err)
		}
		if len(r.Out) != 1 {
			return fmt.Errorf("host: ec %s: %d output parts: %w", what, len(r.Out), wire.StatusInternal)
		}
		return json.Unmarshal(r.Out[0], v)
	}
}

// Delete removes the object (a tombstone on every agent of its
// placement).
func (e *EC) Delete(ctx context.Context, name string) error {
	room := make([]byte, 4096)
	r, err := e.do(ctx, Request{Op: wire.OpECDelete, In: [][]byte{[]byte(name)}, Out: [][]byte{room}})
	return reasonErr("delete", r, err)
}

// ObjectRead is what a Get read: the version, and what the agent found
// wrong on the way — shards missing, unreachable or corrupted, which it
// read around; hecctl ec repair (or the agents' scrub) restores them.
type ObjectRead struct {
	object.Header
	Problems []string
}

// Get returns the object's current bytes. The agent reads any k valid
// shards (data shards first) and rebuilds what is missing; a version
// superseded twice over under the read is read again from the start.
func (e *EC) Get(ctx context.Context, name string) ([]byte, ObjectRead, error) {
	for try := 0; ; try++ {
		st, err := e.Stat(ctx, name)
		if err != nil {
			return nil, ObjectRead{}, err
		}
		buf := make([]byte, st.Size)
		found, err := e.read(ctx, st.Header, buf)
		if errors.Is(err, wire.StatusNotFound) && try < 8 {
			continue
		}
		res := ObjectRead{Header: st.Header}
		if err == nil && found > 0 {
			// The agent read around something: say what, as stat
			// sees it now (a corrupt stripe is marked by its holder).
			if after, serr := e.Stat(ctx, name); serr == nil {
				st = after
			}
			for _, sh := range st.Shards {
				if sh.State != object.StateOK {
					res.Problems = append(res.Problems, strings.TrimSpace(fmt.Sprintf("shard %d on node %d: %s %s", sh.Index, sh.Node, sh.State, sh.Detail)))
				}
			}
			res.Problems = append(res.Problems, st.Problems...)
		}
		return buf, res, err
	}
}

// read fills buf with version h of the object and returns how many
// things the agent found wrong reading it.
func (e *EC) read(ctx context.Context, h object.Header, buf []byte) (int, error) {
	name, ver := []byte(h.Name), []byte(h.Version)
	found := 0
	err := e.chunked(ctx, len(buf), func(off, end int) (*Call, error) {
		return e.c.Go(ctx, Request{Op: wire.OpECGet, Arg0: uint64(off), In: [][]byte{name, ver}, Out: [][]byte{buf[off:end]}})
	}, func(off int, r Result, err error) error {
		if want := min(e.objectChunk(), len(buf)-off); err == nil && int(r.Arg0) != want {
			err = fmt.Errorf("%d bytes at %d, want %d: %w", r.Arg0, off, want, wire.StatusInternal)
		}
		found = max(found, int(r.Arg1))
		return reasonErr("get", r, err)
	})
	return found, err
}

// chunked runs an op over each chunk of [0, size), two in flight: the next
// is in the window while the agent takes one. done sees each completion
// in order; the first error stops new ops, and chunked returns once every
// op submitted has completed (its buffers are the caller's again).
func (e *EC) chunked(ctx context.Context, size int, submit func(off, end int) (*Call, error), done func(off int, r Result, err error) error) error {
	chunk := e.objectChunk()
	type part struct {
		call *Call
		off  int
	}
	var parts []part
	var first error
	finish := func(p part) {
		r, err := e.c.Wait(ctx, p.call)
		if err := done(p.off, r, err); err != nil && first == nil {
			first = err
		}
	}
	for off := 0; off < size && first == nil; off += chunk {
		if len(parts) == 2 {
			finish(parts[0])
			if parts = parts[1:]; first != nil {
				break
			}
		}
		if e.progress != nil {
			e.progress(int64(off), int64(size))
		}
		call, err := submit(off, min(size, off+chunk))
		if err != nil {
			first = err
			break
		}
		call.SetLong(true) // it waits on other agents: sleep, do not spin
		parts = append(parts, part{call, off})
	}
	for _, p := range parts {
		finish(p)
	}
	return first
}
