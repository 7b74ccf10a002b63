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
//	0 comm u64 | 8 epoch u64 | 16 algorithm u8 | 17 piece u24 (4 KiB units) |
//	20 chunk u32 | 24 n u32 | 28 nodes [n]u32
type CollSpec struct {
	Comm      uint64
	Epoch     uint64
	Algorithm uint8  // coll.Algorithm; 0 picks per call
	Chunk     uint32 // bytes per message; 0 the default
	// Piece is the most bytes of one buffer block a single OpCollRun
	// carries: the host library cuts a larger collective into pieces of
	// this size, each a collective of its own, and every rank must cut
	// alike, so it is the communicator's (every rank joins with the same
	// spec), not a host's window. A multiple of CollPieceUnit up to
	// MaxCollPiece; 0 the library's default. The agent does not use it.
	Piece uint32
	Nodes []uint32
}

// CollPieceUnit is the unit of CollSpec.Piece on the wire; MaxCollPiece its
// largest value.
const (
	CollPieceUnit = 4096
	MaxCollPiece  = 1 << 30
)

// Marshal encodes s.
func (s *CollSpec) Marshal() []byte {
	b := make([]byte, 28+4*len(s.Nodes))
	binary.LittleEndian.PutUint64(b[0:], s.Comm)
	binary.LittleEndian.PutUint64(b[8:], s.Epoch)
	b[16] = s.Algorithm
	p := s.Piece / CollPieceUnit
	b[17], b[18], b[19] = byte(p), byte(p>>8), byte(p>>16)
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
	units := uint32(b[17]) | uint32(b[18])<<8 | uint32(b[19])<<16
	if units > MaxCollPiece/CollPieceUnit {
		return CollSpec{}, fmt.Errorf("%w: coll spec with pieces of %d KiB (max %d)", ErrMalformed, units*(CollPieceUnit/1024), MaxCollPiece>>10)
	}
	s := CollSpec{Comm: binary.LittleEndian.Uint64(b[0:]), Epoch: binary.LittleEndian.Uint64(b[8:]), Algorithm: b[16],
		Piece: units * CollPieceUnit, Chunk: binary.LittleEndian.Uint32(b[20:])}
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

// CollSeqBits is the width of a collective's sequence number in
// OpCollRun's Arg1: the host numbers the collectives of a communicator in
// the order they were issued (1 the first after the join), and the agent
// runs them in that order, however the descriptors arrive, so that
// collectives in flight at once match across ranks.
const CollSeqBits = 24

// CollSeqMask keeps a sequence number's CollSeqBits.
const CollSeqMask = 1<<CollSeqBits - 1

// CollJoinNodeOnly in OpCollJoin's Arg1 joins nothing: the agent answers
// its peer-layer node id in Arg0, which a host needs to build the spec
// every rank joins with (frameworks swap these ids through their own
// store: torch.distributed's).
const CollJoinNodeOnly = 1

// CollLeaveAbort in OpCollLeave's Arg1 has the agent tell the other ranks'
// agents that this rank gave the communicator up (a collective it could
// not submit, one abandoned): their collectives fail at once, naming it,
// instead of waiting for its.
const CollLeaveAbort = 1

// CollArgs packs OpCollRun's Arg1: the collective, element type and
// reduction (coll.Kind, coll.DType, coll.Op), the root rank and the
// collective's sequence number (CollSeqBits of it).
func CollArgs(kind, dtype, op uint8, root uint16, seq uint32) uint64 {
	return uint64(kind) | uint64(dtype)<<8 | uint64(op)<<16 | uint64(root)<<24 | uint64(seq&CollSeqMask)<<40
}

// CollArgsOf unpacks CollArgs.
func CollArgsOf(a uint64) (kind, dtype, op uint8, root uint16, seq uint32) {
	return uint8(a), uint8(a >> 8), uint8(a >> 16), uint16(a >> 24), uint32(a>>40) & CollSeqMask
}
