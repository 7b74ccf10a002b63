package coll

import (
	"fmt"
	"unsafe"
)

type number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8
}

// Reduce combines src into dst element by element: dst[i] = dst[i] op
// src[i]. Both hold whole elements of dt and have the same length. Avg
// reduces as Sum (Finish divides). The kernels are plain loops over typed
// slices, unrolled by four, that the compiler keeps free of bounds checks,
// and AVX2 for float sums (SumKernel); buffers not aligned to their
// element size are copied through an aligned scratch first.
func Reduce(dst, src []byte, dt DType, op Op) error {
	if len(dst) != len(src) {
		return fmt.Errorf("coll: reduce %d bytes into %d", len(src), len(dst))
	}
	es := dt.Size()
	if es == 0 || !op.Valid() {
		return fmt.Errorf("coll: reduce %v with %v", dt, op)
	}
	if len(dst)%es != 0 {
		return fmt.Errorf("coll: %d bytes is not a whole number of %v", len(dst), dt)
	}
	if len(dst) == 0 {
		return nil
	}
	if !aligned(dst, es) || !aligned(src, es) {
		return reduceUnaligned(dst, src, dt, op)
	}
	if op == Avg {
		op = Sum
	}
	switch dt {
	case Float32:
		reduceFloat(as[float32](dst), as[float32](dst), as[float32](src), op, addF32)
	case Float64:
		reduceFloat(as[float64](dst), as[float64](dst), as[float64](src), op, addF64)
	case Int32:
		reduceT(as[int32](dst), as[int32](src), op)
	case Int64:
		reduceT(as[int64](dst), as[int64](src), op)
	case Uint8:
		if op == Sum {
			sumBytes(dst, src)
		} else {
			reduceT(dst, src, op)
		}
	case Float16:
		reduceF16(as[uint16](dst), as[uint16](src), op)
	case BFloat16:
		reduceBF16(as[uint16](dst), as[uint16](src), op)
	}
	return nil
}

// ReduceTo writes a op b into dst element by element: dst[i] = a[i] op
// b[i], one pass instead of a copy of a and a Reduce (an out-of-place
// collective's first reduction, from the caller's send buffer). The three
// hold whole elements of dt and have the same length; dst may be a, and
// must not overlap b otherwise. The result is Reduce's, bit for bit.
func ReduceTo(dst, a, b []byte, dt DType, op Op) error {
	if len(a) != len(dst) || len(b) != len(dst) {
		return fmt.Errorf("coll: reduce %d and %d bytes into %d", len(a), len(b), len(dst))
	}
	es := dt.Size()
	if es == 0 || !op.Valid() {
		return fmt.Errorf("coll: reduce %v with %v", dt, op)
	}
	if len(dst)%es != 0 {
		return fmt.Errorf("coll: %d bytes is not a whole number of %v", len(dst), dt)
	}
	if op == Avg {
		op = Sum
	}
	kernel := dt
	if !aligned(dst, es) || !aligned(a, es) || !aligned(b, es) {
		kernel = Float16 // the copy-then-reduce path below
	}
	switch kernel {
	case Float32:
		reduceFloat(as[float32](dst), as[float32](a), as[float32](b), op, addF32)
	case Float64:
		reduceFloat(as[float64](dst), as[float64](a), as[float64](b), op, addF64)
	case Int32:
		reduceToT(as[int32](dst), as[int32](a), as[int32](b), op)
	case Int64:
		reduceToT(as[int64](dst), as[int64](a), as[int64](b), op)
	case Uint8:
		reduceToT(dst, a, b, op)
	default:
		// 16-bit floats (widened in blocks anyway) and unaligned buffers:
		// a copy and Reduce, over a chunk that is in cache.
		copyIfOther(dst, a)
		return Reduce(dst, b, dt, op)
	}
	return nil
}

func aligned(b []byte, n int) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(n) == 0
}

// as views b (aligned, a whole number of T) as a []T.
func as[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func reduceUnaligned(dst, src []byte, dt DType, op Op) error {
	// Rare (a caller's odd offset): reduce through aligned copies.
	d := make([]uint64, (len(dst)+7)/8)
	s := make([]uint64, (len(src)+7)/8)
	db := unsafe.Slice((*byte)(unsafe.Pointer(&d[0])), len(dst))
	sb := unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(src))
	copy(db, dst)
	copy(sb, src)
	if err := Reduce(db, sb, dt, op); err != nil {
		return err
	}
	copy(dst, db)
	return nil
}

func reduceT[T number](d, s []T, op Op) {
	s = s[:len(d)]
	switch op {
	case Sum:
		i := 0
		for ; i+4 <= len(d); i += 4 {
			d0, d1, d2, d3 := d[i]+s[i], d[i+1]+s[i+1], d[i+2]+s[i+2], d[i+3]+s[i+3]
			d[i], d[i+1], d[i+2], d[i+3] = d0, d1, d2, d3
		}
		for ; i < len(d); i++ {
			d[i] += s[i]
		}
	case Prod:
		for i := range d {
			d[i] *= s[i]
		}
	case Min:
		for i := range d {
			if s[i] < d[i] {
				d[i] = s[i]
			}
		}
	case Max:
		for i := range d {
			if s[i] > d[i] {
				d[i] = s[i]
			}
		}
	}
}

// reduceFloat is reduceToT for floats, a sum's leading part in the vector
// kernel add (addF32, addF64) where there is one.
func reduceFloat[T float32 | float64](d, a, b []T, op Op, add func(d, a, b []T) int) {
	if op == Sum {
		n := add(d, a, b)
		d, a, b = d[n:], a[n:], b[n:]
	}
	reduceToT(d, a, b, op)
}

func reduceToT[T number](d, a, b []T, op Op) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case Sum:
		i := 0
		for ; i+4 <= len(d); i += 4 {
			d0, d1, d2, d3 := a[i]+b[i], a[i+1]+b[i+1], a[i+2]+b[i+2], a[i+3]+b[i+3]
			d[i], d[i+1], d[i+2], d[i+3] = d0, d1, d2, d3
		}
		for ; i < len(d); i++ {
			d[i] = a[i] + b[i]
		}
	case Prod:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	case Min: // as reduceT: b replaces a only when below it (NaN, ±0)
		for i := range d {
			v := a[i]
			if b[i] < v {
				v = b[i]
			}
			d[i] = v
		}
	case Max:
		for i := range d {
			v := a[i]
			if b[i] > v {
				v = b[i]
			}
			d[i] = v
		}
	}
}

// reduceF16 and reduceBF16 widen a block of each buffer to float32, reduce
// it with the float32 kernel and round it back: direct calls the compiler
// can inline, no per-element switch.
func reduceF16(d, s []uint16, op Op) {
	var a, b [256]float32
	for off := 0; off < len(d); off += len(a) {
		dd := d[off:min(off+len(a), len(d))]
		ss := s[off : off+len(dd)]
		for i := range dd {
			a[i], b[i] = half16ToF32[dd[i]], half16ToF32[ss[i]]
		}
		reduceT(a[:len(dd)], b[:len(dd)], op)
		for i := range dd {
			dd[i] = F32ToF16(a[i])
		}
	}
}

func reduceBF16(d, s []uint16, op Op) {
	var a, b [256]float32
	for off := 0; off < len(d); off += len(a) {
		dd := d[off:min(off+len(a), len(d))]
		ss := s[off : off+len(dd)]
		for i := range dd {
			a[i], b[i] = BF16ToF32(dd[i]), BF16ToF32(ss[i])
		}
		reduceT(a[:len(dd)], b[:len(dd)], op)
		for i := range dd {
			dd[i] = F32ToBF16(a[i])
		}
	}
}

// sumBytes adds bytes modulo 256 eight at a time in 64-bit words (SWAR):
// the low seven bits of each byte added without carries across bytes, the
// top bit by xor.
func sumBytes(d, s []byte) {
	s = s[:len(d)]
	const hi = 0x8080808080808080
	n := len(d) &^ 7
	if n > 0 && aligned(d, 8) && aligned(s, 8) {
		dw, sw := as[uint64](d[:n]), as[uint64](s[:n])
		sw = sw[:len(dw)]
		for i := range dw {
			a, b := dw[i], sw[i]
			dw[i] = ((a &^ hi) + (b &^ hi)) ^ ((a ^ b) & hi)
		}
	} else {
		n = 0
	}
	for i := n; i < len(d); i++ {
		d[i] += s[i]
	}
}

// Finish completes a reduction of n ranks' contributions in buf: Avg
// divides by n; the other operators leave buf as it is.
func Finish(buf []byte, dt DType, op Op, n int) {
	if op != Avg || n <= 1 || len(buf) == 0 {
		return
	}
	es := dt.Size()
	if !aligned(buf, es) {
		d := make([]uint64, (len(buf)+7)/8)
		db := unsafe.Slice((*byte)(unsafe.Pointer(&d[0])), len(buf))
		copy(db, buf)
		Finish(db, dt, op, n)
		copy(buf, db)
		return
	}
	switch dt {
	case Float32:
		b := as[float32](buf)
		for i := range b {
			b[i] /= float32(n)
		}
	case Float64:
		b := as[float64](buf)
		for i := range b {
			b[i] /= float64(n)
		}
	case Int32:
		b := as[int32](buf)
		for i := range b {
			b[i] /= int32(n)
		}
	case Int64:
		b := as[int64](buf)
		for i := range b {
			b[i] /= int64(n)
		}
	case Uint8:
		for i := range buf {
			buf[i] /= uint8(n)
		}
	case Float16:
		b := as[uint16](buf)
		for i := range b {
			b[i] = F32ToF16(F16ToF32(b[i]) / float32(n))
		}
	case BFloat16:
		b := as[uint16](buf)
		for i := range b {
			b[i] = F32ToBF16(BF16ToF32(b[i]) / float32(n))
		}
	}
}
