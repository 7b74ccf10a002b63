package wire

import (
	"errors"
	"slices"
	"testing"
)

func TestCollSpec(t *testing.T) {
	s := CollSpec{Comm: 7, Epoch: 2, Algorithm: 1, Chunk: 4096, Piece: MaxCollPiece, Nodes: []uint32{3, 1, 2}}
	got, err := ParseCollSpec(s.Marshal())
	if err != nil || got.Comm != 7 || got.Epoch != 2 || got.Algorithm != 1 || got.Chunk != 4096 || got.Piece != MaxCollPiece || !slices.Equal(got.Nodes, s.Nodes) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for name, b := range map[string][]byte{
		"short":     s.Marshal()[:20],
		"truncated": s.Marshal()[:31],
		"trailing":  append(s.Marshal(), 0),
		"no ranks":  (&CollSpec{}).Marshal(),
		"node 0":    (&CollSpec{Nodes: []uint32{1, 0}}).Marshal(),
		"huge piece": func() []byte {
			b := (&CollSpec{Nodes: []uint32{1}}).Marshal()
			b[19] = 0xff
			return b
		}(),
	} {
		if _, err := ParseCollSpec(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, seq := range []uint32{0, 1, CollSeqMask} {
		k, d, o, r, q := CollArgsOf(CollArgs(1, 2, 3, 513, seq))
		if k != 1 || d != 2 || o != 3 || r != 513 || q != seq {
			t.Fatalf("CollArgs round trip of sequence number %d: %d %d %d %d %d", seq, k, d, o, r, q)
		}
	}
	if _, _, _, _, q := CollArgsOf(CollArgs(1, 1, 1, 0, CollSeqMask+2)); q != 1 {
		t.Fatalf("a sequence number past CollSeqBits wraps to %d, want 1", q)
	}
}

func FuzzParseCollSpec(f *testing.F) {
	f.Add((&CollSpec{Comm: 1, Nodes: []uint32{1, 2}}).Marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseCollSpec(b)
		if err != nil {
			return
		}
		if back := s.Marshal(); string(back[:16]) != string(b[:16]) || len(back) != len(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}
