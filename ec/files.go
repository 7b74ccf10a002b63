package ec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/durable"
)

// maxManifest bounds the manifest file read (256 entries are some 20 KiB).
const maxManifest = 1 << 20

// EncodeFile codes the file at in into k data and m parity shard files in
// dir (created when missing; it must not already hold a manifest), then
// writes dir/manifest.json, every file synced before the manifest is: a
// manifest on disk always describes shards on disk.
func EncodeFile(ctx context.Context, cc ColumnCoder, k, m int, in, dir string, opt ...Option) (*Manifest, error) {
	if err := CheckCounts(k, m); err != nil {
		return nil, err
	}
	src, err := os.Open(in)
	if err != nil {
		return nil, fmt.Errorf("ec: %w", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return nil, fmt.Errorf("ec: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("ec: %s is not a regular file", in)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ec: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return nil, fmt.Errorf("ec: %s already holds an encoded object (%s): remove it or choose another directory", dir, ManifestName)
	}
	man := &Manifest{Version: 1, DataShards: k, ParityShards: m, Size: st.Size(), ShardSize: ShardSize(st.Size(), k), Matrix: "cauchy"}
	files := make([]*os.File, k+m)
	writers := make([]io.Writer, k+m)
	defer closeAll(files)
	for i := range files {
		if files[i], err = os.Create(filepath.Join(dir, ShardName(i))); err != nil {
			return nil, fmt.Errorf("ec: %w", err)
		}
		writers[i] = files[i]
	}
	sums, err := EncodeStream(ctx, cc, k, m, man.Size, src, writers, opt...)
	if err != nil {
		return nil, err
	}
	for i, f := range files {
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("ec: sync %s: %w", f.Name(), err)
		}
		man.Shards = append(man.Shards, ShardFile{Index: i, File: ShardName(i), CRC32C: sumHex(sums[i])})
	}
	if err := durable.WriteFile(filepath.Join(dir, ManifestName), man.Marshal(), 0o644); err != nil {
		return nil, fmt.Errorf("ec: %w", err)
	}
	return man, nil
}

// ReadManifest reads and validates dir/manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	f, err := os.Open(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, fmt.Errorf("ec: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("ec: %w", err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrManifest, f.Name(), maxManifest)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return m, nil
}

// ShardState is what a check found of one shard file.
type ShardState struct {
	Index int    `json:"index"`
	File  string `json:"file"`
	State string `json:"state"` // ok, missing, corrupt, truncated, too long, unreadable
	Note  string `json:"note,omitempty"`
}

// OK reports whether the shard is usable.
func (s ShardState) OK() bool { return s.State == "ok" }

// Report is what DecodeDir and VerifyDir found.
type Report struct {
	Manifest *Manifest    `json:"manifest"`
	Shards   []ShardState `json:"shards"`
	// Rebuilt are the data shards decoding computed from parity.
	Rebuilt []int `json:"rebuilt,omitempty"`
	// ParityOK is VerifyDir's check that the parity matches the data
	// (false when it could not be made: too few valid shards).
	ParityOK bool `json:"parity_ok"`
}

// Bad returns the shards that are not usable.
func (r *Report) Bad() []ShardState {
	var bad []ShardState
	for _, s := range r.Shards {
		if !s.OK() {
			bad = append(bad, s)
		}
	}
	return bad
}

// checkShards checks every shard file of m in dir — present, of the
// manifest's size, of its CRC — reading them side by side, and returns
// the report and the open usable ones (nil for the others).
func checkShards(ctx context.Context, dir string, m *Manifest) ([]ShardState, []*os.File) {
	n := len(m.Shards)
	states := make([]ShardState, n)
	files := make([]*os.File, n)
	sem := make(chan struct{}, max(runtime.GOMAXPROCS(0), 2))
	var wg sync.WaitGroup
	for i, sf := range m.Shards {
		states[i] = ShardState{Index: sf.Index, File: sf.File}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			st := &states[i]
			f, err := os.Open(filepath.Join(dir, sf.File))
			if err != nil {
				st.State = "missing"
				if !errors.Is(err, fs.ErrNotExist) {
					st.State, st.Note = "unreadable", err.Error()
				}
				return
			}
			info, err := f.Stat()
			switch {
			case err != nil:
				st.State, st.Note = "unreadable", err.Error()
			case !info.Mode().IsRegular():
				st.State, st.Note = "unreadable", "not a regular file"
			case info.Size() < m.ShardSize:
				st.State, st.Note = "truncated", fmt.Sprintf("%d bytes of %d", info.Size(), m.ShardSize)
			case info.Size() > m.ShardSize:
				st.State, st.Note = "too long", fmt.Sprintf("%d bytes, the manifest says %d", info.Size(), m.ShardSize)
			}
			if st.State != "" {
				f.Close()
				return
			}
			sum, err := fileCRC(ctx, f, m.ShardSize)
			switch {
			case err != nil:
				st.State, st.Note = "unreadable", err.Error()
			case sum != sf.Sum():
				st.State, st.Note = "corrupt", fmt.Sprintf("crc32c %08x, the manifest says %s", sum, sf.CRC32C)
			default:
				st.State, files[i] = "ok", f
				return
			}
			f.Close()
		}()
	}
	wg.Wait()
	return states, files
}

func fileCRC(ctx context.Context, f *os.File, n int64) (uint32, error) {
	buf := make([]byte, 1<<20)
	var sum uint32
	for off := int64(0); off < n; {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		p := buf[:min(int64(len(buf)), n-off)]
		if err := readShard(f, p, off); err != nil {
			return 0, err
		}
		sum = crc32c.Update(sum, p)
		off += int64(len(p))
	}
	return sum, nil
}

// openDir reads dir's manifest and checks every shard file it names
// (checkShards): the report, and the usable shards open (close them with
// closeAll).
func openDir(ctx context.Context, dir string) (*Report, []*os.File, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	states, files := checkShards(ctx, dir, m)
	return &Report{Manifest: m, Shards: states}, files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// DecodeDir rebuilds the object encoded in dir into the file out, from
// whatever valid shards remain: every shard is checked first (size and
// CRC-32C; a bad one counts as missing), then k valid ones are decoded.
// The file appears only when all went well (written beside out and
// renamed over it); with fewer than k valid shards the error wraps
// ErrTooFewShards and the report says what each shard was.
func DecodeDir(ctx context.Context, cc ColumnCoder, dir, out string, opt ...Option) (*Report, error) {
	rep, files, err := openDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer closeAll(files)
	m := rep.Manifest
	in := make([]io.ReaderAt, len(files))
	valid := 0
	for i, f := range files {
		if f != nil {
			in[i] = f
			valid++
		} else if i < m.DataShards {
			rep.Rebuilt = append(rep.Rebuilt, i)
		}
	}
	if valid < m.DataShards {
		return rep, fmt.Errorf("ec: %s: %d valid shards of %d, %d needed: %w", dir, valid, len(files), m.DataShards, ErrTooFewShards)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".ec-*")
	if err != nil {
		return rep, fmt.Errorf("ec: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Truncate(m.Size); err != nil {
		return rep, fmt.Errorf("ec: %w", err)
	}
	sums := make([]uint32, len(m.Shards))
	for i, s := range m.Shards {
		sums[i] = s.Sum()
	}
	if err := DecodeStream(ctx, cc, m.DataShards, m.ParityShards, m.Size, m.ShardSize, in, sums, tmp, opt...); err != nil {
		return rep, err
	}
	if err := tmp.Sync(); err != nil {
		return rep, fmt.Errorf("ec: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return rep, fmt.Errorf("ec: %w", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return rep, fmt.Errorf("ec: %w", err)
	}
	keep = true
	if err := durable.SyncDir(filepath.Dir(out)); err != nil {
		return rep, fmt.Errorf("ec: %w", err)
	}
	return rep, nil
}

// VerifyDir checks every shard file in dir (size, CRC-32C) and, when all
// are valid, that the parity matches the data, coding in this process
// with c (nil: a new Coder). It returns an error only when it could not
// check; what it found is in the report.
func VerifyDir(ctx context.Context, c *Coder, dir string, opt ...Option) (*Report, error) {
	rep, files, err := openDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer closeAll(files)
	m := rep.Manifest
	if len(rep.Bad()) > 0 {
		return rep, nil
	}
	if c == nil {
		if c, err = New(m.DataShards, m.ParityShards, opt...); err != nil {
			return rep, err
		}
	}
	o := streamOptions(opt)
	cw := int(min(int64(o.chunk), m.ShardSize))
	buf := make([]byte, len(files)*cw)
	for off := int64(0); off < m.ShardSize; off += int64(cw) {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		w := int(min(int64(cw), m.ShardSize-off))
		shards := rows(buf, len(files), cw, w)
		for i, f := range files {
			if err := readShard(f, shards[i], off); err != nil {
				return rep, fmt.Errorf("ec: shard %d: %w", i, err)
			}
		}
		ok, err := c.Verify(shards)
		if err != nil {
			return rep, err
		}
		if !ok {
			return rep, nil
		}
		if o.progress != nil {
			o.progress(min((off+int64(w))*int64(m.DataShards), m.Size), m.Size)
		}
	}
	rep.ParityOK = true
	return rep, nil
}
