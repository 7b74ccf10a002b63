package ec

import "github.com/klauspost/cpuid/v2"

// path is the kernel reedsolomon picks under the cap, by the same tests it
// makes (options.go there).
func (o options) path() SIMD {
	c, r := cpuid.CPU, rank[o.simd]
	switch {
	case r >= rank[GFNIAVX512] && c.Supports(cpuid.AVX512F, cpuid.GFNI, cpuid.AVX512DQ):
		return GFNIAVX512
	case r >= rank[GFNIAVX] && c.Supports(cpuid.AVX, cpuid.GFNI):
		return GFNIAVX
	case r >= rank[AVX512] && c.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL):
		return AVX512
	case r >= rank[AVX2] && c.Supports(cpuid.AVX2):
		return AVX2
	case r >= rank[SSSE3] && c.Supports(cpuid.SSSE3):
		return SSSE3
	}
	return Generic
}
