package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/hecsys/hec/ec/object"
	"github.com/hecsys/hec/shared/wire"
)

// NewClientSideObjects returns a coordinator of erasure-coded objects that
// codes in this process and sends every shard to its agent itself, over
// each agent's handoff (OpECShard), the way HDFS and MinIO clients write:
// the baseline that make bench sets beside the inline path, where the
// local agent codes and places. agents maps each agent's node id to a
// client of it. Objects it writes are the same objects: either path
// reads what the other wrote.
func NewClientSideObjects(agents map[uint32]*Client, cfg object.Config) (*object.Coordinator, error) {
	if len(agents) == 0 {
		return nil, errors.New("host: client-side objects need the agents' clients")
	}
	return object.NewCoordinator(shardTransport{agents: agents, ids: slices.Sorted(maps.Keys(agents))}, cfg)
}

type shardTransport struct {
	agents map[uint32]*Client
	ids    []uint32
}

func (t shardTransport) Members() []uint32 { return t.ids }

func (t shardTransport) Call(ctx context.Context, node uint32, req []byte) ([]byte, error) {
	c := t.agents[node]
	if c == nil {
		return nil, fmt.Errorf("host: no client of node %d", node)
	}
	room := make([]byte, 64<<10) // what every answer but a read's fits in
	if len(req) > 0 && object.Kind(req[0]) == object.KindRead {
		room = make([]byte, object.MaxChunk+4<<10)
	}
	for {
		r, err := c.Do(ctx, Request{Op: wire.OpECShard, In: [][]byte{req}, Out: [][]byte{room}})
		if errors.Is(err, wire.StatusTooLarge) && r.Arg0 > uint64(len(room)) && r.Arg0 <= uint64(c.WindowSize()/2) {
			room = make([]byte, r.Arg0)
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(r.Out) != 1 {
			return nil, fmt.Errorf("host: ec shard: %d output parts: %w", len(r.Out), wire.StatusInternal)
		}
		return r.Out[0], nil
	}
}
