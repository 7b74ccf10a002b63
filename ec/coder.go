package ec

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/reedsolomon"

	"github.com/hecsys/hec/shared/crc32c"
)

// MaxShards is the most shards (data and parity) one stripe may have: the
// field has 256 elements.
const MaxShards = 256

// Align is what every shard size is a multiple of.
const Align = 64

// Errors. They wrap into errors that say which shard and why.
var (
	ErrShardCount   = errors.New("ec: shard counts out of range")
	ErrShardSize    = errors.New("ec: bad shard size")
	ErrTooFewShards = errors.New("ec: too few valid shards")
	ErrCorrupt      = errors.New("ec: shard corrupted")
	ErrManifest     = errors.New("ec: bad manifest")
)

// CheckCounts checks k data and m parity shards: k ≥ 1, m ≥ 1, k+m ≤ 256.
func CheckCounts(k, m int) error {
	if k < 1 || m < 1 || k > MaxShards || m > MaxShards || k+m > MaxShards {
		return fmt.Errorf("%d data + %d parity shards (want at least 1 of each, at most %d in all): %w", k, m, MaxShards, ErrShardCount)
	}
	return nil
}

// ShardSize is the size of each shard of an object of size bytes cut into
// k data shards: size/k rounded up to a multiple of Align, at least Align.
func ShardSize(size int64, k int) int64 {
	if size <= 0 || k <= 0 {
		return Align
	}
	s := (size + int64(k) - 1) / int64(k)
	return max((s+Align-1)/Align*Align, Align)
}

// A ColumnCoder codes column ranges of a stripe: every slice it is given
// has the same length, the same columns of each shard. Coder does it in
// this process; the host library's EC client, through the agent and
// across rails.
type ColumnCoder interface {
	// EncodeColumns computes parity (m slices) from data (k slices).
	EncodeColumns(ctx context.Context, data, parity [][]byte) error
	// ReconstructColumns fills the missing shards (len 0, cap at least
	// the others' length: written in place) from at least k present ones;
	// dataOnly leaves missing parity missing.
	ReconstructColumns(ctx context.Context, shards [][]byte, dataOnly bool) error
}

// Coder is a Reed-Solomon code of k data and m parity shards with the
// Cauchy matrix. It is safe for concurrent use.
type Coder struct {
	k, m int
	o    options
	rs   reedsolomon.Encoder
}

// New returns a coder of k data and m parity shards (ErrShardCount unless
// 1 ≤ k, 1 ≤ m, k+m ≤ 256).
func New(k, m int, opt ...Option) (*Coder, error) {
	if err := CheckCounts(k, m); err != nil {
		return nil, err
	}
	o := defaultOptions
	for _, f := range opt {
		f(&o)
	}
	rs, err := reedsolomon.New(k, m, o.rsOptions()...)
	if err != nil {
		return nil, fmt.Errorf("ec: %d+%d: %w", k, m, err)
	}
	return &Coder{k: k, m: m, o: o, rs: rs}, nil
}

// DataShards is k.
func (c *Coder) DataShards() int { return c.k }

// ParityShards is m.
func (c *Coder) ParityShards() int { return c.m }

// SIMD is the vector path the coder's kernels take on this CPU.
func (c *Coder) SIMD() SIMD { return c.o.path() }

// Split copies data into k+m new shards of ShardSize(len(data), k) bytes,
// the tail of the last data shards zero, the parity shards zero (Encode
// fills them).
func (c *Coder) Split(data []byte) [][]byte {
	s := int(ShardSize(int64(len(data)), c.k))
	buf := make([]byte, s*(c.k+c.m))
	copy(buf, data)
	shards := make([][]byte, c.k+c.m)
	for i := range shards {
		shards[i] = buf[i*s : (i+1)*s : (i+1)*s]
	}
	return shards
}

// Join writes the first size bytes of the data shards to w.
func (c *Coder) Join(w io.Writer, shards [][]byte, size int64) error {
	if len(shards) < c.k {
		return fmt.Errorf("ec: join %d shards of %d: %w", len(shards), c.k, ErrTooFewShards)
	}
	for i := 0; i < c.k && size > 0; i++ {
		if len(shards[i]) == 0 {
			return fmt.Errorf("ec: join: data shard %d missing: %w", i, ErrTooFewShards)
		}
		n := min(int64(len(shards[i])), size)
		if _, err := w.Write(shards[i][:n]); err != nil {
			return fmt.Errorf("ec: join: %w", err)
		}
		size -= n
	}
	if size > 0 {
		return fmt.Errorf("ec: join: the shards hold %d bytes fewer than asked: %w", size, ErrShardSize)
	}
	return nil
}

// checkStripe checks that shards has k+m entries of one length (missing
// ones, of length 0, allowed when missingOK) and returns it.
func (c *Coder) checkStripe(shards [][]byte, missingOK bool) (int, error) {
	if len(shards) != c.k+c.m {
		return 0, fmt.Errorf("ec: %d shards for a %d+%d code: %w", len(shards), c.k, c.m, ErrShardCount)
	}
	size := -1
	for i, s := range shards {
		if len(s) == 0 && missingOK {
			continue
		}
		if size < 0 {
			size = len(s)
		}
		if len(s) != size || size == 0 {
			return 0, fmt.Errorf("ec: shard %d has %d bytes, shard 0..%d had %d: %w", i, len(s), i, size, ErrShardSize)
		}
	}
	if size < 0 {
		return 0, fmt.Errorf("ec: every shard missing: %w", ErrTooFewShards)
	}
	return size, nil
}

// Encode computes the m parity shards from the k data shards; all k+m
// must have one length.
func (c *Coder) Encode(shards [][]byte) error {
	if _, err := c.checkStripe(shards, false); err != nil {
		return err
	}
	return c.rs.Encode(shards)
}

// EncodeColumns is Encode of data and parity given apart (ColumnCoder).
func (c *Coder) EncodeColumns(_ context.Context, data, parity [][]byte) error {
	if len(data) != c.k || len(parity) != c.m {
		return fmt.Errorf("ec: encode %d data and %d parity shards with a %d+%d code: %w", len(data), len(parity), c.k, c.m, ErrShardCount)
	}
	shards := make([][]byte, 0, c.k+c.m)
	return c.Encode(append(append(shards, data...), parity...))
}

// Verify reports whether the parity shards match the data shards.
func (c *Coder) Verify(shards [][]byte) (bool, error) {
	if _, err := c.checkStripe(shards, false); err != nil {
		return false, err
	}
	return c.rs.Verify(shards)
}

// Reconstruct fills the missing shards (nil or length 0; one with room
// enough, cap ≥ the shard size, is written in place) from any k present
// ones; with dataOnly, only the data shards. ErrTooFewShards when fewer
// than k are present.
func (c *Coder) Reconstruct(shards [][]byte, dataOnly bool) error {
	if _, err := c.checkStripe(shards, true); err != nil {
		return err
	}
	present := 0
	for _, s := range shards {
		if len(s) != 0 {
			present++
		}
	}
	if present < c.k {
		return fmt.Errorf("ec: %d of %d shards present, %d needed: %w", present, c.k+c.m, c.k, ErrTooFewShards)
	}
	if dataOnly {
		return c.rs.ReconstructData(shards)
	}
	return c.rs.Reconstruct(shards)
}

// ReconstructColumns is Reconstruct (ColumnCoder).
func (c *Coder) ReconstructColumns(_ context.Context, shards [][]byte, dataOnly bool) error {
	return c.Reconstruct(shards, dataOnly)
}

// ReconstructSome fills only the shards wanted (by index) from the k
// present ones, in place where they have room.
func (c *Coder) ReconstructSome(shards [][]byte, want []int) error {
	if _, err := c.checkStripe(shards, true); err != nil {
		return err
	}
	required := make([]bool, c.k+c.m)
	for _, i := range want {
		if i < 0 || i >= len(required) {
			return fmt.Errorf("ec: shard %d wanted of %d: %w", i, c.k+c.m, ErrShardCount)
		}
		required[i] = true
	}
	return c.rs.ReconstructSome(shards, required)
}

// Checksums returns the CRC-32C of each shard (0 for a missing one).
func Checksums(shards [][]byte) []uint32 {
	sums := make([]uint32, len(shards))
	for i, s := range shards {
		if len(s) != 0 {
			sums[i] = crc32c.Checksum(s)
		}
	}
	return sums
}

// DropCorrupt sets to nil every shard whose CRC-32C differs from sums[i]
// and returns their indices: a corrupted shard counts as missing.
func DropCorrupt(shards [][]byte, sums []uint32) []int {
	var bad []int
	for i, s := range shards {
		if len(s) == 0 || i >= len(sums) {
			continue
		}
		if crc32c.Checksum(s) != sums[i] {
			shards[i] = nil
			bad = append(bad, i)
		}
	}
	return bad
}
