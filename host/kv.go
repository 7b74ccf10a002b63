package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hecsys/hec/shared/wire"
)

// KV is the agent's key-value store reached over the handoff. Keys and
// values in buffers from Alloc travel without a copy; others are copied
// into the window once.
type KV struct{ c *Client }

// KV returns the key-value API of the client.
func (c *Client) KV() *KV { return &KV{c: c} }

// IsNotFound reports whether err says the key does not exist.
func IsNotFound(err error) bool { return errors.Is(err, wire.StatusNotFound) }

// Get returns key's value, read into buf when it fits (a buffer from Alloc
// is written in place), otherwise into a buffer of the right size. It also
// returns the value's version.
func (k *KV) Get(ctx context.Context, key, buf []byte) ([]byte, uint64, error) {
	if buf == nil {
		buf = make([]byte, 4096)
	}
	for {
		r, err := k.c.Do(ctx, Request{Op: wire.OpKVGet, In: [][]byte{key}, Out: [][]byte{buf}})
		if errors.Is(err, wire.StatusTooLarge) && r.Arg0 > uint64(len(buf)) && r.Arg0 <= uint64(k.c.t.Window()) {
			buf = make([]byte, r.Arg0) // the value grew past buf: once more with room
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		if len(r.Out) != 1 || uint64(len(r.Out[0])) != r.Arg0 {
			return nil, 0, fmt.Errorf("host: kv get: the agent wrote %d parts for a value of %d bytes: %w", len(r.Out), r.Arg0, wire.StatusInternal)
		}
		return r.Out[0], r.Arg1, nil
	}
}

// PutOptions qualify Put.
type PutOptions struct {
	TTL       time.Duration // 0: never expires (the agent rounds up to seconds)
	IfAbsent  bool
	IfPresent bool
}

// Put stores value under key. A failed IfAbsent/IfPresent condition is
// wire.StatusExists / wire.StatusNotFound.
func (k *KV) Put(ctx context.Context, key, value []byte, o PutOptions) error {
	var flags uint64
	if o.IfAbsent {
		flags |= wire.KVIfAbsent
	}
	if o.IfPresent {
		flags |= wire.KVIfPresent
	}
	_, err := k.c.Do(ctx, Request{Op: wire.OpKVPut, Arg0: uint64(o.TTL / time.Millisecond), Arg1: flags, In: [][]byte{key, value}})
	return err
}

// Delete removes key and reports whether it existed.
func (k *KV) Delete(ctx context.Context, key []byte) (bool, error) {
	r, err := k.c.Do(ctx, Request{Op: wire.OpKVDelete, In: [][]byte{key}})
	return r.Arg0 == 1, err
}

// Pair is a key and its value from Scan.
type Pair struct{ Key, Value []byte }

// Scan returns up to limit pairs whose keys start with prefix, from cursor
// (nil: the start), and the cursor to continue from (nil when done).
func (k *KV) Scan(ctx context.Context, prefix, cursor []byte, limit int) ([]Pair, []byte, error) {
	room := make([]byte, 256<<10)
	for {
		r, err := k.c.Do(ctx, Request{Op: wire.OpKVScan, Arg0: uint64(limit), In: [][]byte{prefix, cursor}, Out: [][]byte{room}})
		if errors.Is(err, wire.StatusTooLarge) && r.Arg0 > uint64(len(room)) && r.Arg0 <= uint64(k.c.t.Window()) {
			room = make([]byte, r.Arg0*2)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if len(r.Out) != 2 {
			return nil, nil, fmt.Errorf("host: kv scan: %d output parts: %w", len(r.Out), wire.StatusInternal)
		}
		var pairs []Pair
		b := r.Out[0]
		for len(b) > 0 {
			if len(b) < 8 {
				return nil, nil, fmt.Errorf("host: kv scan: truncated record: %w", wire.StatusInternal)
			}
			kl, vl := int(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
			if kl+vl > len(b)-8 {
				return nil, nil, fmt.Errorf("host: kv scan: record past the results: %w", wire.StatusInternal)
			}
			pairs = append(pairs, Pair{Key: append([]byte(nil), b[8:8+kl]...), Value: append([]byte(nil), b[8+kl:8+kl+vl]...)})
			b = b[8+kl+vl:]
		}
		var next []byte
		if len(r.Out[1]) > 0 {
			next = append([]byte(nil), r.Out[1]...)
		}
		return pairs, next, nil
	}
}

// BatchOp is one write of Batch.
type BatchOp struct {
	Delete     bool
	Key, Value []byte
	TTL        time.Duration
}

// Batch applies ops atomically on the agent: all or none.
func (k *KV) Batch(ctx context.Context, ops []BatchOp) error {
	var b []byte
	for _, o := range ops {
		kind := byte(0)
		if o.Delete {
			kind = 1
		}
		b = append(b, kind)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(o.Key)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(o.Value)))
		b = binary.LittleEndian.AppendUint64(b, uint64(o.TTL/time.Millisecond))
		b = append(b, o.Key...)
		b = append(b, o.Value...)
	}
	_, err := k.c.Do(ctx, Request{Op: wire.OpKVBatch, In: [][]byte{b}})
	return err
}
