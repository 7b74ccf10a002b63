package wire

import (
	"encoding/binary"
	"fmt"
)

// MaxCollRanks bounds a communicator's ranks in a CollSpec.
const MaxCollRanks = 4096

// CollSpec is what OpCollJoin carries: a communicator of the agents Nodes
// (peer-layer ids, in rank order).
//
//	0 comm u64 | 8 epoch u64 | 16 algorithm u8 | 17 pad [3] | 20 chunk u32 |
//	24 n u32 | 28 nodes [n]u32
type CollSpec struct {
	Comm      uint64
	Epoch     uint64
	Algorithm uint8  // coll.Algorithm; 0 picks per call
	Chunk     uint32 // bytes per message; 0 the default
	Nodes     []uint32
}

// Marshal encodes s.
func (s *CollSpec) Marshal() []byte {
	b := make([]byte, 28+4*len(s.Nodes))
	binary.LittleEndian.PutUint64(b[0:], s.Comm)
	binary.LittleEndian.PutUint64(b[8:], s.Epoch)
	b[16] = s.Algorithm
	binary.LittleEndian.PutUint32(b[20:], s.Chunk)
	binary.LittleEndian.PutUint32(b[24:], uint32(len(s.Nodes)))
	for i, n := range s.Nodes {
		binary.LittleEndian.PutUint32(b[28+4*i:], n)
	}
	return b
}

// ParseCollSpec decodes and checks a CollSpec: its length, a rank count in
// 1..MaxCollRanks, no node id 0.
func ParseCollSpec(b []byte) (CollSpec, error) {
	if len(b) < 28 {
		return CollSpec{}, fmt.Errorf("%w: coll spec of %d bytes", ErrMalformed, len(b))
	}
	s := CollSpec{Comm: binary.LittleEndian.Uint64(b[0:]), Epoch: binary.LittleEndian.Uint64(b[8:]), Algorithm: b[16],
		Chunk: binary.LittleEndian.Uint32(b[20:])}
	n := binary.LittleEndian.Uint32(b[24:])
	if n == 0 || n > MaxCollRanks || uint64(len(b)) != 28+4*uint64(n) {
		return CollSpec{}, fmt.Errorf("%w: coll spec of %d ranks in %d bytes", ErrMalformed, n, len(b))
	}
	s.Nodes = make([]uint32, n)
	for i := range s.Nodes {
		if s.Nodes[i] = binary.LittleEndian.Uint32(b[28+4*i:]); s.Nodes[i] == 0 {
			return CollSpec{}, fmt.Errorf("%w: coll spec names node 0", ErrMalformed)
		}
	}
	return s, nil
}

// CollArgs packs OpCollRun's Arg1: the collective, element type and
// reduction (coll.Kind, coll.DType, coll.Op) and the root rank.
func CollArgs(kind, dtype, op uint8, root uint16) uint64 {
	return uint64(kind) | uint64(dtype)<<8 | uint64(op)<<16 | uint64(root)<<24
}

// CollArgsOf unpacks CollArgs; ok is false when bits beyond them are set.
func CollArgsOf(a uint64) (kind, dtype, op uint8, root uint16, ok bool) {
	return uint8(a), uint8(a >> 8), uint8(a >> 16), uint16(a >> 24), a>>40 == 0
}
