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
	for _, split := range []int{0, 1, 7, 4096, 65535, 65536} {
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
