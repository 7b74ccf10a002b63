//go:build !amd64

package coll

// SumKernel names the path the float32 and float64 sums take here: the
// loops, on this architecture.
func SumKernel() string { return "generic" }

// addF32 and addF64: no vector kernel on this architecture; the loops
// do it all.
func addF32(dst, a, b []float32) int { return 0 }
func addF64(dst, a, b []float64) int { return 0 }
