package ec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// ManifestName is the manifest's file name in an encoded directory.
const ManifestName = "manifest.json"

// maxObject bounds the size a manifest may claim (1 PiB): far beyond any
// file, far below where shard arithmetic could overflow.
const maxObject = 1 << 50

// Manifest describes an object encoded into a directory of shard files:
//
//	{"version": 1, "data_shards": 10, "parity_shards": 4, "size": 1073741824,
//	 "shard_size": 107374208, "matrix": "cauchy",
//	 "shards": [{"index": 0, "file": "shard-00", "crc32c": "1c291ca3"}, …]}
//
// Shard i's file holds shard_size bytes: for i < data_shards, bytes
// [i·shard_size, (i+1)·shard_size) of the object, zero past size; the
// others the Reed-Solomon parity over GF(2^8) with the Cauchy matrix
// (klauspost/reedsolomon's WithCauchyMatrix). crc32c is the Castagnoli
// CRC of the shard file, 8 hex digits.
type Manifest struct {
	Version      int         `json:"version"`
	DataShards   int         `json:"data_shards"`
	ParityShards int         `json:"parity_shards"`
	Size         int64       `json:"size"`
	ShardSize    int64       `json:"shard_size"`
	Matrix       string      `json:"matrix"`
	Shards       []ShardFile `json:"shards"`
}

// ShardFile is one shard's entry in a Manifest.
type ShardFile struct {
	Index  int    `json:"index"`
	File   string `json:"file"`
	CRC32C string `json:"crc32c"`
}

// Sum is the shard's CRC-32C as a number (Validate has checked it).
func (s ShardFile) Sum() uint32 {
	b, _ := hex.DecodeString(s.CRC32C)
	if len(b) != 4 {
		return 0
	}
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func sumHex(v uint32) string { return fmt.Sprintf("%08x", v) }

// ShardName is the file name of shard i.
func ShardName(i int) string { return fmt.Sprintf("shard-%02d", i) }

// ParseManifest decodes and validates a manifest.
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if d.More() {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrManifest)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks everything a decoder relies on: counts in range, a size
// and shard size that agree, the matrix, and exactly one entry per shard
// index with a plain file name and a CRC. The shards are sorted by index.
func (m *Manifest) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrManifest, fmt.Sprintf(format, a...))
	}
	if m.Version != 1 {
		return bad("version %d (this build reads 1)", m.Version)
	}
	if err := CheckCounts(m.DataShards, m.ParityShards); err != nil {
		return fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if m.Matrix != "cauchy" {
		return bad("matrix %q (want cauchy)", m.Matrix)
	}
	if m.Size < 0 || m.Size > maxObject {
		return bad("size %d out of range", m.Size)
	}
	if want := ShardSize(m.Size, m.DataShards); m.ShardSize != want {
		return bad("shard_size %d for %d bytes in %d data shards (want %d)", m.ShardSize, m.Size, m.DataShards, want)
	}
	n := m.DataShards + m.ParityShards
	if len(m.Shards) != n {
		return bad("%d shard entries for %d+%d shards", len(m.Shards), m.DataShards, m.ParityShards)
	}
	sorted := make([]ShardFile, n)
	seen := make([]bool, n)
	files := map[string]int{}
	for _, s := range m.Shards {
		if s.Index < 0 || s.Index >= n {
			return bad("shard index %d out of range 0..%d", s.Index, n-1)
		}
		if seen[s.Index] {
			return bad("shard index %d listed twice", s.Index)
		}
		seen[s.Index] = true
		if s.File == "" || s.File == "." || s.File == ".." || strings.ContainsAny(s.File, "/\\\x00") || s.File == ManifestName {
			return bad("shard %d: file name %q (want a plain name in the manifest's directory)", s.Index, s.File)
		}
		if j, ok := files[s.File]; ok {
			return bad("shards %d and %d name the same file %q", j, s.Index, s.File)
		}
		files[s.File] = s.Index
		if b, err := hex.DecodeString(s.CRC32C); err != nil || len(b) != 4 {
			return bad("shard %d: crc32c %q (want 8 hex digits)", s.Index, s.CRC32C)
		}
		sorted[s.Index] = s
	}
	m.Shards = sorted
	return nil
}

// Marshal encodes the manifest, indented, with a final newline.
func (m *Manifest) Marshal() []byte {
	b, _ := json.MarshalIndent(m, "", "  ")
	return append(b, '\n')
}
