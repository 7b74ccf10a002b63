package coll

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// TestVectorSumsAreTheLoops: the AVX2 sums give the generic loops' results
// bit for bit — NaN payloads, infinities, signed zeros, denormals included —
// at lengths around the kernels' round of 32 or 16 elements, in place and
// out of place.
func TestVectorSumsAreTheLoops(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this CPU has no AVX2: the generic loops are the only path")
	}
	rng := newRNG(11, 12)
	for _, dt := range []DType{Float32, Float64} {
		for _, n := range []int{1, 15, 16, 17, 31, 32, 33, 64, 1001, 4096} {
			for _, inPlace := range []bool{false, true} {
				name := fmt.Sprintf("%v/%d/inplace=%v", dt, n, inPlace)
				a, b := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
				for i := range a {
					a[i], b[i] = byte(rng.Uint32()), byte(rng.Uint32())
				}
				// Random bytes are NaNs and huge or tiny numbers; add
				// ordinary ones too, so sums round.
				for i := 0; i < n; i += 3 {
					x, y := rng.Float64()*1e3, rng.Float64()
					if dt == Float32 {
						binary.LittleEndian.PutUint32(a[4*i:], math.Float32bits(float32(x)))
						binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(y)))
					} else {
						binary.LittleEndian.PutUint64(a[8*i:], math.Float64bits(x))
						binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(y))
					}
				}
				hasAVX2 = false
				want := bytes.Clone(a)
				err := Reduce(want, b, dt, Sum)
				hasAVX2 = true
				if err != nil {
					t.Fatal(err)
				}
				dst := make([]byte, len(a))
				if inPlace {
					dst = bytes.Clone(a)
					err = Reduce(dst, b, dt, Sum)
				} else {
					err = ReduceTo(dst, a, b, dt, Sum)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dst, want) {
					t.Fatalf("%s: the AVX2 sum differs from the loop's", name)
				}
			}
		}
	}
}
