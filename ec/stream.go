package ec

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hecsys/hec/shared/crc32c"
)

// streamOptions fills the options of a streaming call.
func streamOptions(opt []Option) options {
	o := defaultOptions
	for _, f := range opt {
		f(&o)
	}
	return o
}

// roundBuffer takes the round's buffer of n bytes.
func (o options) roundBuffer(n int) ([]byte, func()) {
	if o.buffers != nil {
		if b, free := o.buffers(n); b != nil {
			return b, free
		}
	}
	return make([]byte, n), func() {}
}

// rows cuts buf into count rows of width w at a stride of stride bytes.
func rows(buf []byte, count, stride, w int) [][]byte {
	r := make([][]byte, count)
	for i := range r {
		r[i] = buf[i*stride : i*stride+w : i*stride+w]
	}
	return r
}

// EncodeStream codes an object of size bytes read from in into k data and
// m parity shards written, each in order, to out[0..k+m-1], in column
// rounds (WithChunk) coded by cc, and returns each shard's CRC-32C. Only
// one round is in memory at a time.
func EncodeStream(ctx context.Context, cc ColumnCoder, k, m int, size int64, in io.ReaderAt, out []io.Writer, opt ...Option) ([]uint32, error) {
	if err := CheckCounts(k, m); err != nil {
		return nil, err
	}
	if len(out) != k+m {
		return nil, fmt.Errorf("ec: encode into %d writers for %d+%d shards: %w", len(out), k, m, ErrShardCount)
	}
	if size < 0 || size > maxObject {
		return nil, fmt.Errorf("ec: encode %d bytes: %w", size, ErrShardSize)
	}
	o := streamOptions(opt)
	S := ShardSize(size, k)
	cw := int(min(int64(o.chunk), S))
	buf, free := o.roundBuffer((k + m) * cw)
	defer free()
	sums := make([]uint32, k+m)
	for c := int64(0); c < S; c += int64(cw) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w := int(min(int64(cw), S-c))
		data, parity := rows(buf, k, cw, w), rows(buf[k*cw:], m, cw, w)
		for i, d := range data {
			if err := readColumns(in, d, int64(i)*S+c, size); err != nil {
				return nil, err
			}
		}
		if err := cc.EncodeColumns(ctx, data, parity); err != nil {
			return nil, fmt.Errorf("ec: encode columns %d..%d: %w", c, c+int64(w), err)
		}
		for i, r := range append(data, parity...) {
			sums[i] = crc32c.Update(sums[i], r)
			if _, err := out[i].Write(r); err != nil {
				return nil, fmt.Errorf("ec: write shard %d: %w", i, err)
			}
		}
		if o.progress != nil {
			o.progress(min((c+int64(w))*int64(k), size), size)
		}
	}
	return sums, nil
}

// readColumns fills d with the object's bytes at off, zero past size.
func readColumns(in io.ReaderAt, d []byte, off, size int64) error {
	n := 0
	if off < size {
		n = int(min(int64(len(d)), size-off))
		got, err := in.ReadAt(d[:n], off)
		if got < n {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("ec: read the object at %d: %d of %d bytes: %w", off, got, n, err)
		}
	}
	clear(d[n:])
	return nil
}

// DecodeStream writes the object of size bytes coded in k+m shards of
// shardSize bytes to out, from the shards in (nil: missing or not to be
// trusted; at least k given), in column rounds. It reads only k shards:
// the data shards given, then parity for the missing ones. With sums (the
// shards' CRC-32Cs) given, a shard read whose bytes do not match — one
// that changed since it was checked — fails the decode with ErrCorrupt
// once the rounds are done: what was written to out is then not the
// object.
func DecodeStream(ctx context.Context, cc ColumnCoder, k, m int, size, shardSize int64, in []io.ReaderAt, sums []uint32, out io.WriterAt, opt ...Option) error {
	if err := CheckCounts(k, m); err != nil {
		return err
	}
	if len(in) != k+m || sums != nil && len(sums) != k+m {
		return fmt.Errorf("ec: decode from %d readers (and as many sums) for %d+%d shards: %w", len(in), k, m, ErrShardCount)
	}
	if shardSize != ShardSize(size, k) {
		return fmt.Errorf("ec: shard size %d for %d bytes in %d data shards: %w", shardSize, size, k, ErrShardSize)
	}
	var use []int // the k shards read
	var missingData []int
	for i := 0; i < k; i++ {
		if in[i] != nil {
			use = append(use, i)
		} else {
			missingData = append(missingData, i)
		}
	}
	for i := k; i < k+m && len(use) < k; i++ {
		if in[i] != nil {
			use = append(use, i)
		}
	}
	if len(use) < k {
		return fmt.Errorf("ec: %d shards usable, %d needed: %w", len(use), k, ErrTooFewShards)
	}
	o := streamOptions(opt)
	S := shardSize
	cw := int(min(int64(o.chunk), S))
	buf, free := o.roundBuffer((k + m) * cw)
	defer free()
	got := make([]uint32, k+m)
	for c := int64(0); c < S; c += int64(cw) {
		if err := ctx.Err(); err != nil {
			return err
		}
		w := int(min(int64(cw), S-c))
		all := rows(buf, k+m, cw, w)
		shards := make([][]byte, k+m)
		for _, i := range use {
			if err := readShard(in[i], all[i], c); err != nil {
				return fmt.Errorf("ec: shard %d: %w", i, err)
			}
			got[i] = crc32c.Update(got[i], all[i])
			shards[i] = all[i]
		}
		if len(missingData) > 0 {
			for _, i := range missingData {
				shards[i] = all[i][:0]
			}
			if err := cc.ReconstructColumns(ctx, shards, true); err != nil {
				return fmt.Errorf("ec: rebuild columns %d..%d: %w", c, c+int64(w), err)
			}
		}
		for i := 0; i < k; i++ {
			off := int64(i)*S + c
			if off >= size {
				break
			}
			n := min(int64(w), size-off)
			if len(shards[i]) < int(n) {
				return fmt.Errorf("ec: data shard %d not rebuilt: %w", i, ErrTooFewShards)
			}
			if _, err := out.WriteAt(shards[i][:n], off); err != nil {
				return fmt.Errorf("ec: write the object at %d: %w", off, err)
			}
		}
		if o.progress != nil {
			o.progress(min((c+int64(w))*int64(k), size), size)
		}
	}
	for _, i := range use {
		if sums != nil && got[i] != sums[i] {
			return fmt.Errorf("ec: shard %d changed while it was read (crc32c %08x, expected %08x): %w", i, got[i], sums[i], ErrCorrupt)
		}
	}
	return nil
}

// readShard fills p from r at off: a shard shorter than that is an error.
func readShard(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n < len(p) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read %d bytes at %d: got %d: %w", len(p), off, n, err)
	}
	return nil
}
