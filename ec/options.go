package ec

import (
	"fmt"

	"github.com/klauspost/reedsolomon"
)

// Option configures a Coder (New).
type Option func(*options)

type options struct {
	concurrency int
	simd        SIMD

	// streaming (EncodeStream, DecodeStream and the file functions)
	chunk    int
	progress func(done, total int64)
	buffers  func(n int) ([]byte, func())
}

// defaultOptions are the defaults of every option.
var defaultOptions = options{
	concurrency: 1,    // one goroutine per call: callers (rails, the agent's workers) run calls side by side
	simd:        Best, // what the CPU has
	chunk:       1 << 20,
}

// WithConcurrency sets the goroutines one call may use (default 1). More
// pays for shards of a megabyte or more.
func WithConcurrency(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.concurrency = n
		}
	}
}

// WithSIMD caps the instruction sets used (default Best: what the CPU
// has). SSSE3 stands for 128-bit vectors like an Arm core's NEON: the DPU
// profiles of an emulated agent use it.
func WithSIMD(s SIMD) Option { return func(o *options) { o.simd = s } }

// WithChunk sets the columns coded per round when streaming (default 1
// MiB of each shard; rounded down to a multiple of Align): a round holds
// k+m times this in memory.
func WithChunk(n int) Option {
	return func(o *options) {
		if n >= Align {
			o.chunk = n / Align * Align
		}
	}
}

// WithProgress has streaming call f after each round with the object's
// bytes done so far and in all.
func WithProgress(f func(done, total int64)) Option { return func(o *options) { o.progress = f } }

// WithBuffers has streaming take its round buffer of n bytes from alloc,
// which returns it with the function that gives it back (the host
// library's EC client hands out buffers in the shared window, so the
// agent codes them in place). Default: ordinary memory.
func WithBuffers(alloc func(n int) ([]byte, func())) Option {
	return func(o *options) { o.buffers = alloc }
}

// SIMD is a cap on the vector instructions used, or (Coder.SIMD) the path
// taken.
type SIMD string

// The caps WithSIMD takes, and the paths Coder.SIMD reports.
const (
	Best       SIMD = "best"        // a cap: whatever the CPU has
	GFNIAVX512 SIMD = "gfni-avx512" // x86 Galois-field instructions on 512-bit vectors
	GFNIAVX    SIMD = "gfni-avx"    // Galois-field instructions on 256-bit vectors
	AVX512     SIMD = "avx512"
	AVX2       SIMD = "avx2"
	SSSE3      SIMD = "ssse3" // 128-bit table lookups
	NEON       SIMD = "neon"  // arm64's 128-bit vectors
	SVE        SIMD = "sve"   // arm64's scalable vectors
	Generic    SIMD = "generic"
)

// rank orders the x86 caps; arm64 paths rank like their x86 width.
// reedsolomon prefers the Galois-field instructions to plain AVX-512.
var rank = map[SIMD]int{Generic: 0, SSSE3: 1, NEON: 1, SVE: 2, AVX2: 2, AVX512: 3, GFNIAVX: 4, GFNIAVX512: 5, Best: 6}

// ParseSIMD accepts a cap's name ("" is Best).
func ParseSIMD(s string) (SIMD, error) {
	if s == "" {
		return Best, nil
	}
	if _, ok := rank[SIMD(s)]; !ok {
		return "", fmt.Errorf("ec: simd %q: want best, gfni-avx512, gfni-avx, avx512, avx2, ssse3, neon, sve or generic", s)
	}
	return SIMD(s), nil
}

// rsOptions turns the options into reedsolomon's.
func (o options) rsOptions() []reedsolomon.Option {
	opts := []reedsolomon.Option{reedsolomon.WithCauchyMatrix(), reedsolomon.WithMaxGoroutines(o.concurrency)}
	r := rank[o.simd]
	if r < rank[GFNIAVX512] {
		opts = append(opts, reedsolomon.WithGFNI(false))
	}
	if r < rank[AVX512] {
		opts = append(opts, reedsolomon.WithAVX512(false))
	}
	if r < rank[GFNIAVX] {
		opts = append(opts, reedsolomon.WithAVXGFNI(false))
	}
	if r < rank[AVX2] {
		opts = append(opts, reedsolomon.WithAVX2(false), reedsolomon.WithSVE(false))
	}
	if r < rank[SSSE3] {
		opts = append(opts, reedsolomon.WithSSSE3(false), reedsolomon.WithSSE2(false), reedsolomon.WithNEON(false))
	}
	return opts
}
