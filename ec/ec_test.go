package ec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/reedsolomon"
)

func random(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// subsets calls f with every set of at most max indices of n.
func subsets(n, max int, f func([]int)) {
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		f(cur)
		if len(cur) == max {
			return
		}
		for i := start; i < n; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
}

func joined(t *testing.T, c *Coder, shards [][]byte, size int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := c.Join(&b, shards, int64(size)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestEveryLossRoundTrips(t *testing.T) {
	for _, tc := range []struct{ k, m, size int }{{4, 2, 10007}, {6, 3, 65536 + 13}, {4, 2, 1}, {6, 3, 0}} {
		t.Run(fmt.Sprintf("%d+%d/%d", tc.k, tc.m, tc.size), func(t *testing.T) {
			c, err := New(tc.k, tc.m)
			if err != nil {
				t.Fatal(err)
			}
			data := random(tc.size, uint64(tc.size))
			orig := c.Split(data)
			if err := c.Encode(orig); err != nil {
				t.Fatal(err)
			}
			n := 0
			subsets(tc.k+tc.m, tc.m, func(lost []int) {
				for _, dataOnly := range []bool{false, true} {
					shards := make([][]byte, len(orig))
					for i := range orig {
						shards[i] = bytes.Clone(orig[i])
					}
					for _, i := range lost {
						shards[i] = nil
					}
					if err := c.Reconstruct(shards, dataOnly); err != nil {
						t.Fatalf("lost %v: %v", lost, err)
					}
					if got := joined(t, c, shards, tc.size); !bytes.Equal(got, data) {
						t.Fatalf("lost %v (data only %v): object differs", lost, dataOnly)
					}
					if !dataOnly {
						for i := range orig {
							if !bytes.Equal(shards[i], orig[i]) {
								t.Fatalf("lost %v: shard %d rebuilt wrong", lost, i)
							}
						}
					}
					n++
				}
			})
			t.Logf("%d loss patterns round-tripped", n/2)
		})
	}
}

func TestTooManyLost(t *testing.T) {
	c, _ := New(4, 2)
	shards := c.Split(random(1000, 1))
	if err := c.Encode(shards); err != nil {
		t.Fatal(err)
	}
	shards[0], shards[3], shards[5] = nil, nil, nil
	if err := c.Reconstruct(shards, false); !errors.Is(err, ErrTooFewShards) {
		t.Fatalf("3 of 6 lost with m=2: %v, want ErrTooFewShards", err)
	}
}

func TestEveryCorruptShardIsDetected(t *testing.T) {
	for _, tc := range []struct{ k, m int }{{4, 2}, {6, 3}} {
		c, _ := New(tc.k, tc.m)
		data := random(50_000, 3)
		orig := c.Split(data)
		if err := c.Encode(orig); err != nil {
			t.Fatal(err)
		}
		sums := Checksums(orig)
		for i := range orig {
			for _, at := range []int{0, len(orig[i]) / 2, len(orig[i]) - 1} {
				shards := make([][]byte, len(orig))
				for j := range orig {
					shards[j] = bytes.Clone(orig[j])
				}
				shards[i][at] ^= 0x40
				bad := DropCorrupt(shards, sums)
				if len(bad) != 1 || bad[0] != i {
					t.Fatalf("%d+%d: byte %d of shard %d flipped: dropped %v", tc.k, tc.m, at, i, bad)
				}
				if err := c.Reconstruct(shards, true); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(joined(t, c, shards, len(data)), data) {
					t.Fatalf("shard %d corrupt: rebuilt object differs", i)
				}
			}
		}
	}
}

// writerAt is an io.WriterAt over a growing buffer.
type writerAt struct{ b []byte }

func (w *writerAt) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(w.b) {
		w.b = append(w.b, make([]byte, end-len(w.b))...)
	}
	return copy(w.b[off:], p), nil
}

func TestStreamRandomLengths(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(11, 12))
	sizes := []int{0, 1, 63, 64, 65, 4095, 4<<20 + 17}
	for range 6 {
		sizes = append(sizes, r.IntN(3<<20))
	}
	for _, size := range sizes {
		for _, km := range [][2]int{{4, 2}, {6, 3}, {10, 4}} {
			k, m := km[0], km[1]
			c, _ := New(k, m)
			data := random(size, uint64(size))
			whole := c.Split(data)
			if err := c.Encode(whole); err != nil {
				t.Fatal(err)
			}
			bufs := make([]*bytes.Buffer, k+m)
			out := make([]io.Writer, k+m)
			for i := range bufs {
				bufs[i] = new(bytes.Buffer)
				out[i] = bufs[i]
			}
			// A chunk that does not divide the shard size.
			sums, err := EncodeStream(ctx, c, k, m, int64(size), bytes.NewReader(data), out, WithChunk(192*64))
			if err != nil {
				t.Fatal(err)
			}
			in := make([]io.ReaderAt, k+m)
			for i, b := range bufs {
				if !bytes.Equal(b.Bytes(), whole[i]) {
					t.Fatalf("%d bytes %d+%d: streamed shard %d differs from the whole stripe's", size, k, m, i)
				}
				in[i] = bytes.NewReader(b.Bytes())
			}
			// Lose m shards, the first data shards.
			for i := range m {
				in[i] = nil
			}
			var got writerAt
			if err := DecodeStream(ctx, c, k, m, int64(size), ShardSize(int64(size), k), in, sums, &got, WithChunk(128*64)); err != nil {
				t.Fatal(err)
			}
			if len(got.b) != size && size > 0 || !bytes.Equal(got.b, data) {
				t.Fatalf("%d bytes %d+%d: decoded %d bytes, differ", size, k, m, len(got.b))
			}
		}
	}
}

func TestStreamCatchesAShardThatChanged(t *testing.T) {
	ctx := context.Background()
	c, _ := New(4, 2)
	data := random(100_000, 5)
	shards := c.Split(data)
	if err := c.Encode(shards); err != nil {
		t.Fatal(err)
	}
	sums := Checksums(shards)
	shards[1][10] ^= 1 // after its sum was taken
	in := make([]io.ReaderAt, 6)
	for i, s := range shards {
		in[i] = bytes.NewReader(s)
	}
	var out writerAt
	err := DecodeStream(ctx, c, 4, 2, int64(len(data)), ShardSize(int64(len(data)), 4), in, sums, &out)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decode with a shard changed: %v, want ErrCorrupt", err)
	}
}

func TestSIMDCapsGiveOneParity(t *testing.T) {
	data := random(1<<20+5, 9)
	var ref [][]byte
	for _, s := range []SIMD{Best, GFNIAVX512, GFNIAVX, AVX512, AVX2, SSSE3, Generic} {
		c, err := New(10, 4, WithSIMD(s))
		if err != nil {
			t.Fatal(err)
		}
		shards := c.Split(data)
		if err := c.Encode(shards); err != nil {
			t.Fatal(err)
		}
		t.Logf("cap %s: path %s", s, c.SIMD())
		if ref == nil {
			ref = shards
			continue
		}
		for i := range shards {
			if !bytes.Equal(shards[i], ref[i]) {
				t.Fatalf("cap %s (path %s): shard %d differs from the best path's", s, c.SIMD(), i)
			}
		}
	}
	if c, _ := New(4, 2, WithSIMD(Generic)); c.SIMD() != Generic {
		t.Fatalf("cap generic reports path %s", c.SIMD())
	}
}

// TestParityMatchesISAL pins the code to ISA-L's: data shard j all
// bytes j+1, 10+4, the first byte of each parity shard as ISA-L 2.30's
// gf_gen_cauchy1_matrix with ec_encode_data computes it (the bench
// compares whole stripes with ISA-L's in every run).
func TestParityMatchesISAL(t *testing.T) {
	c, _ := New(10, 4)
	shards := make([][]byte, 14)
	for j := range shards {
		shards[j] = make([]byte, 64)
		if j < 10 {
			for i := range shards[j] {
				shards[j][i] = byte(j + 1)
			}
		}
	}
	if err := c.Encode(shards); err != nil {
		t.Fatal(err)
	}
	want := []byte{53, 170, 97, 55}
	for i, w := range want {
		if shards[10+i][0] != w || shards[10+i][63] != w {
			t.Fatalf("parity shard %d starts %d, ISA-L's %d", i, shards[10+i][0], w)
		}
	}
}

func TestCounts(t *testing.T) {
	for _, tc := range []struct {
		k, m int
		ok   bool
	}{{1, 1, true}, {10, 4, true}, {128, 128, true}, {255, 1, true}, {0, 2, false}, {4, 0, false}, {200, 57, false}, {-1, 3, false}, {1 << 31, 1, false}} {
		_, err := New(tc.k, tc.m)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrShardCount) {
			t.Errorf("New(%d, %d): %v", tc.k, tc.m, err)
		}
	}
}

func TestShardSize(t *testing.T) {
	for _, tc := range []struct {
		size int64
		k    int
		want int64
	}{{0, 4, 64}, {1, 4, 64}, {256, 4, 64}, {257, 4, 128}, {1 << 30, 10, 107374208}, {1 << 20, 16, 65536}} {
		if got := ShardSize(tc.size, tc.k); got != tc.want || got%Align != 0 {
			t.Errorf("ShardSize(%d, %d) = %d, want %d", tc.size, tc.k, got, tc.want)
		}
	}
}

// TestAPlainDecoderReadsTheFiles decodes EncodeFile's output with nothing
// but klauspost/reedsolomon and the manifest, as the README says anyone
// can.
func TestAPlainDecoderReadsTheFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := random(3<<20+333, 21)
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := New(6, 3)
	man, err := EncodeFile(ctx, c, 6, 3, in, filepath.Join(dir, "out"), WithChunk(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "out", ManifestName))
	m2, err := ParseManifest(b)
	if err != nil || m2.Size != int64(len(data)) || len(m2.Shards) != 9 || m2.ShardSize != man.ShardSize {
		t.Fatalf("manifest %s: %v", b, err)
	}
	// The plain decoder.
	rs, err := reedsolomon.New(m2.DataShards, m2.ParityShards, reedsolomon.WithCauchyMatrix())
	if err != nil {
		t.Fatal(err)
	}
	shards := make([][]byte, 9)
	for _, s := range m2.Shards {
		if s.Index == 1 || s.Index == 4 || s.Index == 7 {
			continue // lost
		}
		shards[s.Index], _ = os.ReadFile(filepath.Join(dir, "out", s.File))
	}
	if err := rs.ReconstructData(shards); err != nil {
		t.Fatal(err)
	}
	got := bytes.Join(shards[:6], nil)[:m2.Size]
	if !bytes.Equal(got, data) {
		t.Fatal("plain reedsolomon decode of our shard files differs from the original")
	}
}

func TestDecodeDir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := random(1<<20+77, 31)
	in := filepath.Join(dir, "in")
	os.WriteFile(in, data, 0o644)
	c, _ := New(4, 2)
	enc := filepath.Join(dir, "enc")
	if _, err := EncodeFile(ctx, c, 4, 2, in, enc); err != nil {
		t.Fatal(err)
	}
	if _, err := EncodeFile(ctx, c, 4, 2, in, enc); err == nil {
		t.Fatal("encoding into a directory that holds a manifest succeeded")
	}
	rep, err := VerifyDir(ctx, nil, enc)
	if err != nil || !rep.ParityOK || len(rep.Bad()) != 0 {
		t.Fatalf("verify a fresh encoding: %v %+v", err, rep)
	}
	shard := func(i int) string { return filepath.Join(enc, ShardName(i)) }
	out := filepath.Join(dir, "out")
	// One deleted, one corrupted: rebuilt, and both reported.
	os.Remove(shard(0))
	b, _ := os.ReadFile(shard(2))
	b[100] ^= 1
	os.WriteFile(shard(2), b, 0o644)
	rep, err = DecodeDir(ctx, c, enc, out)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("decoded file differs")
	}
	if bad := rep.Bad(); len(bad) != 2 || bad[0].State != "missing" || bad[1].State != "corrupt" || fmt.Sprint(rep.Rebuilt) != "[0 2]" {
		t.Fatalf("report: bad %+v rebuilt %v", bad, rep.Rebuilt)
	}
	if rep, _ := VerifyDir(ctx, nil, enc); len(rep.Bad()) != 2 || rep.ParityOK {
		t.Fatalf("verify with two bad shards: %+v", rep)
	}
	// Truncated and too long: a third bad shard is one too many.
	for _, tc := range []struct {
		name  string
		mess  func(string)
		state string
	}{
		{"truncated", func(p string) { os.Truncate(p, 1000) }, "truncated"},
		{"too long", func(p string) { f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0); f.Write([]byte("x")); f.Close() }, "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig, _ := os.ReadFile(shard(5))
			defer os.WriteFile(shard(5), orig, 0o644)
			tc.mess(shard(5))
			os.Remove(out)
			rep, err := DecodeDir(ctx, c, enc, out)
			if !errors.Is(err, ErrTooFewShards) {
				t.Fatalf("3 bad of 4+2: %v", err)
			}
			if rep.Shards[5].State != tc.state {
				t.Fatalf("shard 5: %+v", rep.Shards[5])
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("a failed decode left the output file")
			}
			if m, _ := filepath.Glob(filepath.Join(dir, ".out.ec-*")); len(m) != 0 {
				t.Fatalf("a failed decode left %v", m)
			}
		})
	}
}

func TestManifestLies(t *testing.T) {
	good := func() *Manifest {
		m := &Manifest{Version: 1, DataShards: 4, ParityShards: 2, Size: 1000, ShardSize: 256, Matrix: "cauchy"}
		for i := range 6 {
			m.Shards = append(m.Shards, ShardFile{Index: i, File: ShardName(i), CRC32C: "0a0b0c0d"})
		}
		return m
	}
	if _, err := ParseManifest(good().Marshal()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		lie  func(*Manifest)
	}{
		{"version", func(m *Manifest) { m.Version = 2 }},
		{"no data", func(m *Manifest) { m.DataShards = 0 }},
		{"over 256", func(m *Manifest) { m.DataShards, m.ParityShards = 250, 10 }},
		{"negative size", func(m *Manifest) { m.Size = -1 }},
		{"huge size", func(m *Manifest) { m.Size = 1 << 62 }},
		{"size beyond shards", func(m *Manifest) { m.Size = 5000 }},
		{"shard size not aligned", func(m *Manifest) { m.ShardSize = 250 }},
		{"shard size too large", func(m *Manifest) { m.ShardSize = 512 }},
		{"matrix", func(m *Manifest) { m.Matrix = "vandermonde" }},
		{"too few entries", func(m *Manifest) { m.Shards = m.Shards[:5] }},
		{"too many entries", func(m *Manifest) { m.Shards = append(m.Shards, ShardFile{Index: 6, File: "x", CRC32C: "00000000"}) }},
		{"index out of range", func(m *Manifest) { m.Shards[3].Index = 6 }},
		{"negative index", func(m *Manifest) { m.Shards[3].Index = -1 }},
		{"duplicate index", func(m *Manifest) { m.Shards[3].Index = 2 }},
		{"path escape", func(m *Manifest) { m.Shards[0].File = "../../etc/passwd" }},
		{"absolute path", func(m *Manifest) { m.Shards[0].File = "/etc/passwd" }},
		{"empty name", func(m *Manifest) { m.Shards[0].File = "" }},
		{"same file twice", func(m *Manifest) { m.Shards[1].File = m.Shards[0].File }},
		{"manifest as shard", func(m *Manifest) { m.Shards[1].File = ManifestName }},
		{"bad crc", func(m *Manifest) { m.Shards[2].CRC32C = "xyz" }},
		{"short crc", func(m *Manifest) { m.Shards[2].CRC32C = "0a0b" }},
	} {
		m := good()
		tc.lie(m)
		if _, err := ParseManifest(m.Marshal()); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: %v, want ErrManifest", tc.name, err)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	for _, raw := range []string{"", "{", "[]", `{"version":1}{}`, `{"data_shards":"x"}`} {
		if _, err := ParseManifest([]byte(raw)); !errors.Is(err, ErrManifest) {
			t.Errorf("%q: %v", raw, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	m := &Manifest{Version: 1, DataShards: 2, ParityShards: 1, Size: 100, ShardSize: 64, Matrix: "cauchy",
		Shards: []ShardFile{{0, "a", "00000001"}, {1, "b", "00000002"}, {2, "c", "00000003"}}}
	f.Add(m.Marshal())
	f.Add([]byte(`{"version":1,"data_shards":300}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrManifest) {
				t.Fatalf("error not ErrManifest: %v", err)
			}
			return
		}
		// What passes is safe to use: counts, sizes and names in range.
		if CheckCounts(m.DataShards, m.ParityShards) != nil || len(m.Shards) != m.DataShards+m.ParityShards ||
			m.ShardSize != ShardSize(m.Size, m.DataShards) || m.Size < 0 {
			t.Fatalf("accepted %+v", m)
		}
		for i, s := range m.Shards {
			if s.Index != i || filepath.Base(s.File) != s.File || s.File == ".." {
				t.Fatalf("accepted shard %+v at %d", s, i)
			}
		}
		if _, err := ParseManifest(m.Marshal()); err != nil {
			t.Fatalf("re-encoded manifest refused: %v", err)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	for _, tc := range []struct{ k, m, shard int }{{10, 4, 1 << 20}, {8, 3, 1 << 20}} {
		b.Run(fmt.Sprintf("%d+%d/%dKiB", tc.k, tc.m, tc.shard>>10), func(b *testing.B) {
			c, _ := New(tc.k, tc.m)
			shards := c.Split(random(tc.k*tc.shard, 1))
			b.SetBytes(int64(tc.k * tc.shard))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Encode(shards); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
