package collbench

import (
	"testing"

	"github.com/hecsys/hec/coll"
)

// TestCountWrong: the bench's check counts the elements that differ,
// whatever their size, and none when all agree.
func TestCountWrong(t *testing.T) {
	want := make([]byte, 64)
	for i := range want {
		want[i] = byte(i)
	}
	for _, tc := range []struct {
		name  string
		dt    coll.DType
		flip  []int // bytes of got changed
		wrong int64
	}{
		{"all agree", coll.Float32, nil, 0},
		{"one byte of one element", coll.Float32, []int{5}, 1},
		{"two bytes of one element", coll.Float32, []int{4, 7}, 1},
		{"the first and last elements", coll.Float64, []int{0, 63}, 2},
		{"every element of 2 bytes", coll.BFloat16, []int{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62}, 32},
		{"bytes", coll.Uint8, []int{1, 2, 3}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := append([]byte(nil), want...)
			for _, i := range tc.flip {
				got[i] ^= 0xff
			}
			if n := countWrong(tc.dt, got, want); n != tc.wrong {
				t.Fatalf("%d wrong, want %d", n, tc.wrong)
			}
		})
	}
	if n := countWrong(coll.Float32, want, nil); n != 0 {
		t.Fatalf("%d wrong with nothing expected", n)
	}
}
