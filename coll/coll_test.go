package coll

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// values returns rank's count random elements of dt, and the same values
// as float64 (exact: every element type converts exactly).
func values(rng *rand.Rand, dt DType, op Op, count int) ([]byte, []float64) {
	b := make([]byte, count*dt.Size())
	f := make([]float64, count)
	for i := range count {
		x := rng.Float64()*8 - 4
		if op == Prod {
			x = 0.5 + rng.Float64() // products stay in range
		}
		switch dt {
		case Float32:
			v := float32(x)
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
			f[i] = float64(v)
		case Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
			f[i] = x
		case Float16:
			h := F32ToF16(float32(x))
			binary.LittleEndian.PutUint16(b[2*i:], h)
			f[i] = float64(F16ToF32(h))
		case BFloat16:
			h := F32ToBF16(float32(x))
			binary.LittleEndian.PutUint16(b[2*i:], h)
			f[i] = float64(BF16ToF32(h))
		case Int32:
			v := int32(rng.IntN(2001) - 1000)
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
			f[i] = float64(v)
		case Int64:
			v := int64(rng.IntN(2001) - 1000)
			binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
			f[i] = float64(v)
		case Uint8:
			v := uint8(rng.IntN(256))
			if op == Prod {
				v = uint8(rng.IntN(4))
			}
			b[i] = v
			f[i] = float64(v)
		}
	}
	return b, f
}

func element(b []byte, dt DType, i int) float64 {
	switch dt {
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	case Float16:
		return float64(F16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
	case BFloat16:
		return float64(BF16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	case Uint8:
		return float64(b[i])
	}
	panic(dt)
}

// expected is op over the ranks' inputs at element i, computed in float64
// (integer types wrap as they do in the kernels), and the error allowed.
func expected(in [][]float64, dt DType, op Op, i int) (want, tol float64) {
	n := len(in)
	var acc, mag float64
	switch op {
	case Sum, Avg:
		for _, r := range in {
			acc += r[i]
			mag += math.Abs(r[i])
		}
	case Prod:
		acc = 1
		for _, r := range in {
			acc *= r[i]
		}
		mag = math.Abs(acc)
	case Min:
		acc = math.Inf(1)
		for _, r := range in {
			acc = min(acc, r[i])
		}
	case Max:
		acc = math.Inf(-1)
		for _, r := range in {
			acc = max(acc, r[i])
		}
	}
	switch dt {
	case Int32:
		acc = float64(wrapInt(in, op, i, func(v int64) int64 { return int64(int32(v)) }))
	case Int64:
		acc = float64(wrapInt(in, op, i, func(v int64) int64 { return v }))
	case Uint8:
		acc = float64(wrapInt(in, op, i, func(v int64) int64 { return int64(uint8(v)) }))
	}
	if op == Avg {
		if dt == Int32 || dt == Int64 || dt == Uint8 {
			s := wrapInt(in, Sum, i, map[DType]func(int64) int64{
				Int32: func(v int64) int64 { return int64(int32(v)) },
				Int64: func(v int64) int64 { return v },
				Uint8: func(v int64) int64 { return int64(uint8(v)) }}[dt])
			if dt == Uint8 {
				acc = float64(uint8(s) / uint8(n))
			} else {
				acc = float64(s / int64(n)) // Go's division truncates, as the kernel's
			}
		} else {
			acc /= float64(n)
			mag /= float64(n)
		}
	}
	// One rounding per reduction step (n−1) and one for Avg.
	eps := map[DType]float64{Float32: 0x1p-23, Float64: 0x1p-52, Float16: 0x1p-10, BFloat16: 0x1p-7}[dt]
	return acc, float64(n+1) * eps * max(mag, math.Abs(acc), 1e-30)
}

func wrapInt(in [][]float64, op Op, i int, wrap func(int64) int64) int64 {
	acc := int64(0)
	if op == Prod {
		acc = 1
	}
	for k, r := range in {
		v := int64(r[i])
		switch op {
		case Sum, Avg:
			acc = wrap(acc + v)
		case Prod:
			acc = wrap(acc * v)
		case Min:
			if k == 0 || v < acc {
				acc = v
			}
		case Max:
			if k == 0 || v > acc {
				acc = v
			}
		}
	}
	return acc
}

// transports returns the n ranks' transports that onRanks runs
// communicators over: a new Local group, unless a test (the one over
// peers) swaps in its own.
var transports = func(t *testing.T, n int) []Transport {
	var ts []Transport
	for _, lt := range Local(n) {
		ts = append(ts, lt)
	}
	return ts
}

// onRanks runs f on every rank of n (transports) at once, and fails the
// test if any has not returned within a minute.
func onRanks(t *testing.T, n int, cfg Config, f func(c *Comm) error) []error {
	t.Helper()
	ts := transports(t, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		c, err := New(ts[r], cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			errs[r] = f(c)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%d ranks: a collective hung", n)
	}
	return errs
}

func counts(n int) []int {
	cs := []int{1, 7, 1001}
	if n > 2 {
		cs = append(cs, n-1) // fewer elements than ranks
	}
	return cs
}

func TestAllReduce(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for _, alg := range []Algorithm{Ring, Tree, HalvingDoubling} {
			for _, dt := range DTypes {
				for _, op := range Ops {
					for _, count := range counts(n) {
						name := fmt.Sprintf("n%d/%v/%v/%v/%d", n, alg, dt, op, count)
						checkAllReduce(t, name, n, Config{Algorithm: alg, Chunk: 64}, dt, op, count)
					}
				}
			}
		}
	}
}

func checkAllReduce(t *testing.T, name string, n int, cfg Config, dt DType, op Op, count int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), uint64(count)))
	in := make([][]byte, n)
	ref := make([][]float64, n)
	for r := range n {
		in[r], ref[r] = values(rng, dt, op, count)
	}
	out := make([][]byte, n)
	sent := make([]string, n)
	for r := range n {
		sent[r] = string(in[r])
		// Out of place, recv is only written: what was there before
		// (all ones: NaN, -1, 255) must not leak into the result.
		out[r] = bytes.Repeat([]byte{0xff}, len(in[r]))
	}
	errs := onRanks(t, n, cfg, func(c *Comm) error {
		return c.AllReduce(context.Background(), in[c.Rank()], out[c.Rank()], dt, op)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", name, r, err)
		}
		if string(in[r]) != sent[r] {
			t.Fatalf("%s: rank %d's send buffer changed", name, r)
		}
	}
	for i := range count {
		want, tol := expected(ref, dt, op, i)
		if got := element(out[0], dt, i); math.Abs(got-want) > tol {
			t.Fatalf("%s: element %d = %v, want %v ± %v", name, i, got, want, tol)
		}
	}
	for r := 1; r < n; r++ {
		if string(out[r]) != string(out[0]) {
			t.Fatalf("%s: rank %d's result differs from rank 0's", name, r)
		}
	}
}

func TestAllReduceInPlaceAndLarge(t *testing.T) {
	// Chunks of 4 KiB over segments of uneven length: the pipeline.
	for _, n := range []int{3, 4} {
		rng := rand.New(rand.NewPCG(1, 2))
		count := 100_003
		bufs := make([][]byte, n)
		ref := make([][]float64, n)
		for r := range n {
			bufs[r], ref[r] = values(rng, Float32, Sum, count)
		}
		errs := onRanks(t, n, Config{Algorithm: Ring, Chunk: 4096}, func(c *Comm) error {
			b := bufs[c.Rank()]
			return c.AllReduce(context.Background(), b, b, Float32, Sum)
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < count; i += 97 {
			want, tol := expected(ref, Float32, Sum, i)
			if got := element(bufs[n-1], Float32, i); math.Abs(got-want) > tol {
				t.Fatalf("n=%d element %d = %v, want %v", n, i, got, want)
			}
		}
	}
}

func TestReduceScatterAllGatherAllToAll(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for _, dt := range DTypes {
			for _, per := range []int{1, 3, 257} {
				name := fmt.Sprintf("n%d/%v/%d", n, dt, per)
				rng := rand.New(rand.NewPCG(uint64(n), uint64(per)))
				in := make([][]byte, n)
				ref := make([][]float64, n)
				for r := range n {
					in[r], ref[r] = values(rng, dt, Sum, n*per)
				}
				es := dt.Size()
				rs := make([][]byte, n)
				ag := make([][]byte, n)
				a2a := make([][]byte, n)
				errs := onRanks(t, n, Config{Chunk: 64}, func(c *Comm) error {
					r := c.Rank()
					ctx := context.Background()
					rs[r] = make([]byte, per*es)
					if err := c.ReduceScatter(ctx, in[r], rs[r], dt, Sum); err != nil {
						return err
					}
					ag[r] = make([]byte, n*per*es)
					if err := c.AllGather(ctx, in[r][:per*es], ag[r], dt); err != nil {
						return err
					}
					a2a[r] = make([]byte, n*per*es)
					return c.AllToAll(ctx, in[r], a2a[r], dt)
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("%s: rank %d: %v", name, r, err)
					}
				}
				for r := range n {
					for j := range per {
						want, tol := expected(ref, dt, Sum, r*per+j)
						if got := element(rs[r], dt, j); math.Abs(got-want) > tol {
							t.Fatalf("%s: reducescatter rank %d element %d = %v, want %v", name, r, j, got, want)
						}
					}
					for src := range n {
						if got, want := ag[r][src*per*es:(src+1)*per*es], in[src][:per*es]; string(got) != string(want) {
							t.Fatalf("%s: allgather rank %d block %d wrong", name, r, src)
						}
						if got, want := a2a[r][src*per*es:(src+1)*per*es], in[src][r*per*es:(r+1)*per*es]; string(got) != string(want) {
							t.Fatalf("%s: alltoall rank %d block %d wrong", name, r, src)
						}
					}
				}
			}
		}
	}
}

func TestBroadcastReduceBarrier(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for _, alg := range []Algorithm{Ring, Tree, HalvingDoubling} {
			for _, dt := range []DType{Float64, BFloat16, Int32, Uint8} {
				for _, count := range counts(n) {
					root := (n - 1) / 2
					name := fmt.Sprintf("n%d/%v/%v/%d/root%d", n, alg, dt, count, root)
					rng := rand.New(rand.NewPCG(uint64(n), uint64(count)))
					in := make([][]byte, n)
					ref := make([][]float64, n)
					for r := range n {
						in[r], ref[r] = values(rng, dt, Max, count)
					}
					bc := make([][]byte, n)
					var red []byte
					errs := onRanks(t, n, Config{Algorithm: alg, Chunk: 64}, func(c *Comm) error {
						r := c.Rank()
						ctx := context.Background()
						bc[r] = append([]byte(nil), in[r]...)
						if err := c.Broadcast(ctx, bc[r], dt, root); err != nil {
							return err
						}
						var out []byte
						if r == root {
							red = make([]byte, len(in[r]))
							out = red
						}
						if err := c.Reduce(ctx, in[r], out, dt, Max, root); err != nil {
							return err
						}
						return c.Barrier(ctx)
					})
					for r, err := range errs {
						if err != nil {
							t.Fatalf("%s: rank %d: %v", name, r, err)
						}
					}
					for r := range n {
						if string(bc[r]) != string(in[root]) {
							t.Fatalf("%s: broadcast: rank %d differs from the root", name, r)
						}
					}
					for i := range count {
						want, _ := expected(ref, dt, Max, i)
						if got := element(red, dt, i); got != want {
							t.Fatalf("%s: reduce element %d = %v, want %v", name, i, got, want)
						}
					}
				}
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	ts := Local(2)
	c, _ := New(ts[0], Config{})
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"odd bytes", c.AllReduce(ctx, make([]byte, 6), make([]byte, 6), Float32, Sum)},
		{"sizes differ", c.AllReduce(ctx, make([]byte, 8), make([]byte, 4), Float32, Sum)},
		{"bad dtype", c.AllReduce(ctx, make([]byte, 8), make([]byte, 8), DType(99), Sum)},
		{"bad op", c.AllReduce(ctx, make([]byte, 8), make([]byte, 8), Float32, Op(9))},
		{"root", c.Broadcast(ctx, make([]byte, 8), Float32, 2)},
		{"reducescatter", c.ReduceScatter(ctx, make([]byte, 12), make([]byte, 8), Float32, Sum)},
		{"alltoall", c.AllToAll(ctx, make([]byte, 12), make([]byte, 12), Float32)},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// TestDisagreeingRanks: a rank that calls another collective than its
// peers gets an error, not a wrong answer or a hang.
func TestDisagreeingRanks(t *testing.T) {
	errs := onRanks(t, 2, Config{}, func(c *Comm) error {
		ctx := context.Background()
		b := make([]byte, 64)
		if c.Rank() == 0 {
			return c.AllReduce(ctx, b, b, Float32, Sum)
		}
		return c.AllReduce(ctx, b[:32], b[:32], Float32, Sum)
	})
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: no error", r)
		}
	}
}

// TestRankDies: a rank that dies mid-collective makes every other rank's
// call fail with an error naming it, in a loop, never a hang.
func TestRankDies(t *testing.T) {
	for i := range 20 {
		n := 4
		dead := i % n
		ts := Local(n)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := range n {
			c, _ := New(ts[r], Config{Chunk: 1024})
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				b := make([]byte, 1<<20)
				ctx := context.Background()
				for k := 0; ; k++ {
					if r == dead && k == 3 {
						ts[r].Kill()
						return
					}
					if err := c.AllReduce(ctx, b, b, Float32, Sum); err != nil {
						errs[r] = err
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: hung after rank %d died", i, dead)
		}
		for r, err := range errs {
			if r == dead {
				continue
			}
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", dead)) {
				t.Fatalf("round %d: rank %d: %v, want an error naming rank %d", i, r, err, dead)
			}
			var re *RankError
			if !errors.As(err, &re) && !errors.Is(err, ErrAborted) {
				t.Fatalf("round %d: rank %d: %v is neither a RankError nor an abort", i, r, err)
			}
		}
	}
}

func TestHalfConversions(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("half %#04x -> %v -> %#04x", h, f, back)
		}
		bf := BF16ToF32(uint16(h))
		if math.IsNaN(float64(bf)) {
			continue
		}
		if back := F32ToBF16(bf); back != uint16(h) {
			t.Fatalf("bfloat16 %#04x -> %v -> %#04x", h, bf, back)
		}
	}
	// Rounding: the nearest, ties to even.
	for _, tc := range []struct {
		f    float32
		want uint16
	}{
		{1 + 0x1p-11, 0x3c00},           // a tie: to even (1.0)
		{1 + 3*0x1p-11, 0x3c02},         // a tie: to even (1+2^-9)
		{1 + 0x1p-11 + 0x1p-20, 0x3c01}, // above the tie
		{65520, 0x7c00},                 // rounds to Inf
		{0x1p-25, 0},                    // half the smallest subnormal: a tie to 0
		{0x1p-25 + 0x1p-35, 1},          // above it
		{-0x1p-14, 0x8400},              // the smallest normal
		{float32(math.Inf(-1)), 0xfc00}, //
	} {
		if got := F32ToF16(tc.f); got != tc.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", tc.f, got, tc.want)
		}
	}
	if got := F32ToBF16(1 + 0x1p-8); got != 0x3f80 {
		t.Errorf("F32ToBF16 tie: %#04x", got)
	}
	if got := F32ToBF16(1 + 3*0x1p-8); got != 0x3f82 {
		t.Errorf("F32ToBF16 tie to even: %#04x", got)
	}
}

func newRNG(a, b int) *rand.Rand { return rand.New(rand.NewPCG(uint64(a), uint64(b))) }

// TestReduceTo: the out-of-place kernel gives Reduce's result bit for bit
// (NaN, signed zeros, wrapping integers, 16-bit rounding), aligned or not,
// in place on its first operand or not.
func TestReduceTo(t *testing.T) {
	rng := newRNG(7, 8)
	for _, dt := range DTypes {
		for _, op := range Ops {
			for _, n := range []int{0, 1, 3, 64, 1001} {
				for _, shift := range []int{0, 1} {
					for _, inPlace := range []bool{false, true} {
						name := fmt.Sprintf("%v/%v/%d/shift%d/inplace=%v", dt, op, n, shift, inPlace)
						size := n * dt.Size()
						a := make([]byte, size+shift)[shift:]
						b := make([]byte, size+shift)[shift:]
						for i := range a {
							a[i], b[i] = byte(rng.Uint32()), byte(rng.Uint32())
						}
						if dt == Float32 && n >= 3 { // NaN, and +0 against -0, on either side
							copy(a[0:], []byte{0, 0, 0xc0, 0x7f})
							copy(b[4:], []byte{0, 0, 0xc0, 0x7f})
							copy(a[8:], []byte{0, 0, 0, 0})
							copy(b[8:], []byte{0, 0, 0, 0x80})
						}
						want := bytes.Clone(a)
						if err := Reduce(want, b, dt, op); err != nil {
							t.Fatalf("%s: Reduce: %v", name, err)
						}
						dst := make([]byte, size+shift)[shift:]
						if inPlace {
							dst = a
						}
						if err := ReduceTo(dst, a, b, dt, op); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						if !bytes.Equal(dst, want) {
							t.Fatalf("%s: ReduceTo differs from Reduce", name)
						}
					}
				}
			}
		}
	}
	if err := ReduceTo(make([]byte, 8), make([]byte, 8), make([]byte, 4), Float32, Sum); err == nil {
		t.Fatal("operands of different lengths: no error")
	}
	if err := ReduceTo(make([]byte, 6), make([]byte, 6), make([]byte, 6), Float32, Sum); err == nil {
		t.Fatal("6 bytes of float32: no error")
	}
}
