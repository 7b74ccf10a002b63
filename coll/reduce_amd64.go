package coll

import "golang.org/x/sys/cpu"

// The float sums in AVX2 where the CPU has it: the compiler does not
// vectorise reduceT's loop. IEEE addition is the same in a vector lane as
// in a scalar register, so the results are the generic kernel's, bit for
// bit.

//go:noescape
func addF32AVX2(dst, a, b *float32, n int)

//go:noescape
func addF64AVX2(dst, a, b *float64, n int)

var hasAVX2 = cpu.X86.HasAVX2

// SumKernel names the path the float32 and float64 sums take here:
// "avx2", or "generic" (the loops).
func SumKernel() string {
	if hasAVX2 {
		return "avx2"
	}
	return "generic"
}

// addF32 and addF64 write a[i]+b[i] into dst for a leading part of the
// slices (of one length), as many elements as the vector kernel takes, and
// return how many: the caller's loop does the rest.
func addF32(dst, a, b []float32) int {
	n := len(dst) &^ 31
	if !hasAVX2 || n == 0 {
		return 0
	}
	addF32AVX2(&dst[0], &a[0], &b[0], n)
	return n
}

func addF64(dst, a, b []float64) int {
	n := len(dst) &^ 15
	if !hasAVX2 || n == 0 {
		return 0
	}
	addF64AVX2(&dst[0], &a[0], &b[0], n)
	return n
}
