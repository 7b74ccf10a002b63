package bufpool

import "testing"

func TestClasses(t *testing.T) {
	for _, tc := range []struct{ n, size int }{
		{0, 64}, {1, 64}, {64, 64}, {65, 96}, {96, 96}, {97, 128}, {128, 128}, {129, 192},
		{1 << 20, 1 << 20}, {1<<20 + 1, 3 << 19}, {1<<20 + 4096, 3 << 19}, {3 << 19, 3 << 19}, {3<<19 + 1, 2 << 20},
		{1<<20 - 100, 1 << 20}, {6 << 20, 6 << 20}, {6<<20 + 1, 8 << 20},
	} {
		p := Get(tc.n)
		if len(*p) != tc.n || cap(*p) != tc.size {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(*p), cap(*p), tc.n, tc.size)
		}
		Put(p)
	}
}

// TestNeverSmaller: whatever was put back, Get returns at least what was
// asked for; a buffer grown past its class by append is not filed under
// a class it is too small for.
func TestNeverSmaller(t *testing.T) {
	for range 3 {
		for _, n := range []int{100, 1000, 5000, 1 << 20, 3 << 20, 6 << 20} {
			p := Get(n)
			*p = append(*p, 1) // grown: an odd capacity
			Put(p)
			q := Get(n)
			if len(*q) != n || cap(*q) < n {
				t.Fatalf("Get(%d) after a grown buffer went back: len %d cap %d", n, len(*q), cap(*q))
			}
			Put(q)
		}
	}
	for n := 1; n < 1<<16; n += 37 {
		p := Get(n)
		if len(*p) != n || cap(*p) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(*p), cap(*p))
		}
		Put(p)
	}
}

func BenchmarkGetPut(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Put(Get(6 << 20))
	}
}
