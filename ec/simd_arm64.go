package ec

import "github.com/klauspost/cpuid/v2"

// path is the kernel reedsolomon picks under the cap, by the same tests it
// makes (options.go there).
func (o options) path() SIMD {
	c, r := cpuid.CPU, rank[o.simd]
	switch {
	case r >= rank[SVE] && c.Supports(cpuid.SVE):
		return SVE
	case r >= rank[NEON] && c.Supports(cpuid.ASIMD):
		return NEON
	}
	return Generic
}
