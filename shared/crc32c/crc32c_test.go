package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCRC32CCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<16)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, split := range []int{0, 1, 7, 4096, 12345, 32768, 65535, 65536} {
		a, b := data[:split], data[split:]
		got := Combine(crc32.Checksum(a, Table), crc32.Checksum(b, Table), int64(len(b)))
		if want := crc32.Checksum(data, Table); got != want {
			t.Errorf("split %d: %#x want %#x", split, got, want)
		}
	}
}

func TestUpdateParallel(t *testing.T) {
	b := make([]byte, 1<<20+13)
	for i := range b {
		b[i] = byte(i * 31)
	}
	want := Update(7, b)
	for _, ways := range []int{1, 2, 3, 8, 64} {
		if got := UpdateParallel(7, b, ways); got != want {
			t.Errorf("%d ways: %08x, want %08x", ways, got, want)
		}
	}
}

// TestCombineLengths checks Combine against a direct CRC for lengths of B
// with every low bit pattern and some large ones (zeros: CRC(A‖0^n) is A's
// CRC advanced by the operators alone).
func TestCombineLengths(t *testing.T) {
	a := []byte("the CRC of A, advanced past zero bytes")
	ca := Checksum(a)
	zeros := make([]byte, 1<<21+3)
	for _, n := range []int{1, 2, 3, 5, 8, 255, 256, 1000, 1 << 20, 1<<20 + 4096, 1<<21 + 3} {
		if got, want := Combine(ca, Checksum(zeros[:n]), int64(n)), Checksum(append(a[:len(a):len(a)], zeros[:n]...)); got != want {
			t.Errorf("len2 %d: %#x want %#x", n, got, want)
		}
	}
}

func BenchmarkCombine(b *testing.B) {
	for b.Loop() {
		Combine(0x12345678, 0x9abcdef0, 1<<20)
	}
}
