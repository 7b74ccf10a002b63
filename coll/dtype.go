package coll

import (
	"fmt"
	"math"
	"strings"
)

// DType is the element type of a collective's buffers.
type DType uint8

// Element types. 16-bit floats are reduced in float32 and rounded once per
// reduction step (round to nearest, ties to even).
const (
	Float32 DType = iota + 1
	Float64
	Float16
	BFloat16
	Int32
	Int64
	Uint8
	maxDType = Uint8
)

var dtypeNames = [...]string{Float32: "float32", Float64: "float64", Float16: "float16", BFloat16: "bfloat16",
	Int32: "int32", Int64: "int64", Uint8: "uint8"}

// DTypes are every element type, in order.
var DTypes = []DType{Float32, Float64, Float16, BFloat16, Int32, Int64, Uint8}

func (d DType) String() string {
	if d >= 1 && d <= maxDType {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Valid reports whether d is a known type.
func (d DType) Valid() bool { return d >= 1 && d <= maxDType }

// Size is an element's size in bytes (0 for an unknown type).
func (d DType) Size() int {
	switch d {
	case Float64, Int64:
		return 8
	case Float32, Int32:
		return 4
	case Float16, BFloat16:
		return 2
	case Uint8:
		return 1
	}
	return 0
}

// ParseDType reads a type's name (float32, f32, half, bf16, ...).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "float32", "f32", "float":
		return Float32, nil
	case "float64", "f64", "double":
		return Float64, nil
	case "float16", "f16", "half":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "int32", "i32", "int":
		return Int32, nil
	case "int64", "i64":
		return Int64, nil
	case "uint8", "u8", "byte":
		return Uint8, nil
	}
	return 0, fmt.Errorf("coll: unknown dtype %q (float32, float64, float16, bfloat16, int32, int64, uint8)", s)
}

// Op is a reduction operator.
type Op uint8

// Reduction operators. Avg sums and divides by the number of ranks at the
// end (integer division for integer types).
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
	Avg
	maxOp = Avg
)

var opNames = [...]string{Sum: "sum", Prod: "prod", Min: "min", Max: "max", Avg: "avg"}

// Ops are every operator, in order.
var Ops = []Op{Sum, Prod, Min, Max, Avg}

func (o Op) String() string {
	if o >= 1 && o <= maxOp {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Valid reports whether o is a known operator.
func (o Op) Valid() bool { return o >= 1 && o <= maxOp }

// ParseOp reads an operator's name.
func ParseOp(s string) (Op, error) {
	for o := Sum; o <= maxOp; o++ {
		if strings.EqualFold(s, opNames[o]) {
			return o, nil
		}
	}
	return 0, fmt.Errorf("coll: unknown reduction %q (sum, prod, min, max, avg)", s)
}

// half16ToF32 holds every float16 value as a float32: 256 KiB once, and
// the conversion in the reduction loop is a load.
var half16ToF32 = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = halfToFloat(uint16(i))
	}
	return &t
}()

func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant × 2^-24
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// F16ToF32 converts an IEEE 754 half to float32 (exact).
func F16ToF32(h uint16) float32 { return half16ToF32[h] }

// F32ToF16 rounds a float32 to the nearest half, ties to even; overflow
// gives ±Inf, NaN stays NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff { // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 { // subnormal half (or zero)
		if e < -10 {
			return sign
		}
		m := mant | 0x800000 // implicit bit
		shift := uint32(14 - e)
		half := m >> shift
		rem := m & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, up to Inf: right
	}
	return sign | uint16(half)
}

// BF16ToF32 converts a bfloat16 to float32 (exact).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds a float32 to the nearest bfloat16, ties to even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it one
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
