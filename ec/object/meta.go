package object

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/hecsys/hec/ec"
)

// Limits on what a store accepts.
const (
	// MaxName is the longest object name, in bytes.
	MaxName = 1024
	// DefaultChunk is the bytes of one shard of one stripe: a stripe holds
	// k×DefaultChunk bytes of the object, and every shard message fits a
	// peer frame.
	DefaultChunk = 1 << 20
	// MaxChunk bounds a stripe's shard (a peer frame carries one).
	MaxChunk = 2 << 20
	// MaxStripes bounds the stripes of one object.
	MaxStripes = 1 << 20
)

// Errors a caller can test for with errors.Is.
var (
	ErrName     = errors.New("object: bad name")
	ErrNotFound = errors.New("object: not found")
	ErrTooLarge = errors.New("object: too large")
	ErrQuorum   = errors.New("object: write quorum not reached")
	ErrBadMeta  = errors.New("object: bad metadata")
	ErrShard    = errors.New("object: bad shard")
	ErrCorrupt  = errors.New("object: shard corrupted")
	ErrUnread   = errors.New("object: too few valid shards")
	ErrMembers  = errors.New("object: too few agents")
)

// CheckName checks an object name: 1 to MaxName bytes of UTF-8, no
// control characters.
func CheckName(name string) error {
	if name == "" || len(name) > MaxName {
		return fmt.Errorf("%w: %d bytes (want 1 to %d)", ErrName, len(name), MaxName)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: %q is not UTF-8", ErrName, name)
	}
	for i, r := range name {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%w: control character %U at byte %d", ErrName, r, i)
		}
	}
	return nil
}

// Version orders the Puts of a name: 32 hex digits, wall-clock nanoseconds,
// the writer's node and a random word. Comparing two as strings compares
// them in time.
type Version string

// NewVersion returns a version for a Put by node now.
func NewVersion(node uint32) Version {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], uint64(time.Now().UnixNano()))
	binary.BigEndian.PutUint32(b[8:], node)
	rand.Read(b[12:])
	return Version(hex.EncodeToString(b[:]))
}

// Check checks v's form.
func (v Version) Check() error {
	if len(v) != 32 {
		return fmt.Errorf("%w: version %q: want 32 hex digits", ErrBadMeta, string(v))
	}
	for _, c := range []byte(v) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("%w: version %q: want 32 hex digits", ErrBadMeta, string(v))
		}
	}
	return nil
}

// Time is when the version's Put began.
func (v Version) Time() time.Time {
	b, err := hex.DecodeString(string(v))
	if err != nil || len(b) != 16 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b)))
}

// Header describes one version of an object: every shard of the version
// carries the same one.
type Header struct {
	Name    string   `json:"name"`
	Version Version  `json:"version"`
	Size    int64    `json:"size"` // bytes; -1 for a tombstone
	K       int      `json:"k"`
	M       int      `json:"m"`
	Chunk   int      `json:"chunk"`     // bytes of one shard of a full stripe
	Place   []uint32 `json:"placement"` // shard i of every stripe is on node Place[i]
}

// Tomb reports whether h is a tombstone.
func (h *Header) Tomb() bool { return h.Size < 0 }

// StripeBytes is the object bytes one full stripe holds.
func (h *Header) StripeBytes() int64 { return int64(h.K) * int64(h.Chunk) }

// Stripes is the number of stripes (one, of a 64-byte shard, for an empty
// object; none for a tombstone).
func (h *Header) Stripes() int {
	if h.Tomb() {
		return 0
	}
	return int(max(1, (h.Size+h.StripeBytes()-1)/h.StripeBytes()))
}

// StripeData is the object bytes stripe s holds.
func (h *Header) StripeData(s int) int64 {
	return min(h.StripeBytes(), h.Size-int64(s)*h.StripeBytes())
}

// ShardBytes is the size of each shard of stripe s.
func (h *Header) ShardBytes(s int) int {
	if s < h.Stripes()-1 {
		return h.Chunk
	}
	return int(ec.ShardSize(h.StripeData(s), h.K))
}

// Check checks h's fields against each other and the limits; max, when
// positive, bounds the size.
func (h *Header) Check(maxSize int64) error {
	if err := CheckName(h.Name); err != nil {
		return err
	}
	if err := h.Version.Check(); err != nil {
		return err
	}
	if err := ec.CheckCounts(h.K, h.M); err != nil {
		return fmt.Errorf("%w: %v", ErrBadMeta, err)
	}
	if len(h.Place) != h.K+h.M {
		return fmt.Errorf("%w: placement of %d nodes for %d+%d shards", ErrBadMeta, len(h.Place), h.K, h.M)
	}
	seen := map[uint32]bool{}
	for _, n := range h.Place {
		if n == 0 || seen[n] {
			return fmt.Errorf("%w: placement %v: node ids must be distinct and not 0", ErrBadMeta, h.Place)
		}
		seen[n] = true
	}
	if h.Tomb() {
		if h.Size != -1 {
			return fmt.Errorf("%w: size %d", ErrBadMeta, h.Size)
		}
		return nil
	}
	if h.Chunk < ec.Align || h.Chunk > MaxChunk || h.Chunk%ec.Align != 0 {
		return fmt.Errorf("%w: chunk of %d bytes (want a multiple of %d up to %d)", ErrBadMeta, h.Chunk, ec.Align, MaxChunk)
	}
	if maxSize > 0 && h.Size > maxSize {
		return fmt.Errorf("%w: %d bytes, the agent takes at most %d", ErrTooLarge, h.Size, maxSize)
	}
	if h.Size/h.StripeBytes() >= MaxStripes {
		return fmt.Errorf("%w: %d bytes in stripes of %d: more than %d stripes", ErrTooLarge, h.Size, h.StripeBytes(), MaxStripes)
	}
	return nil
}

// Same reports whether two headers describe the same version identically.
func (h *Header) Same(o *Header) bool {
	return h.Name == o.Name && h.Version == o.Version && h.Size == o.Size && h.K == o.K && h.M == o.M &&
		h.Chunk == o.Chunk && slices.Equal(h.Place, o.Place)
}

// Shard is what a store keeps of one shard: the version's header, which
// shard it is, its state and the CRCs of each stripe's piece.
type Shard struct {
	Header    `json:"header"`
	Index     int      `json:"index"`
	Committed bool     `json:"committed"`
	CRC       []uint32 `json:"crc"`               // of this shard's piece of each stripe
	DataCRC   []uint32 `json:"data_crc"`          // of each stripe's object bytes
	Corrupt   []int    `json:"corrupt,omitempty"` // stripes found corrupted
	Holder    uint32   `json:"holder"`            // the node holding it (filled by the reader)

	committedAt time.Time // when this store committed it (not kept across restarts)
}

// Place picks the n members that hold an object's shards: rendezvous
// (highest-random-weight) hashing of name over members, highest weight
// first. Fewer than n members is ErrMembers.
func Place(name string, members []uint32, n int) ([]uint32, error) {
	ids := slices.Clone(members)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) < n {
		return nil, fmt.Errorf("%w: %d shards need %d agents, the cluster has %d", ErrMembers, n, n, len(ids))
	}
	weight := func(id uint32) uint64 {
		h := fnv.New64a()
		h.Write([]byte(name))
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], id)
		h.Write(b[:])
		return mix(h.Sum64())
	}
	slices.SortFunc(ids, func(a, b uint32) int {
		wa, wb := weight(a), weight(b)
		switch {
		case wa > wb:
			return -1
		case wa < wb:
			return 1
		}
		return int(a) - int(b)
	})
	return ids[:n], nil
}

// mix is splitmix64's finalizer: FNV's low bits alone weigh ids that
// differ in one byte too alike.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
