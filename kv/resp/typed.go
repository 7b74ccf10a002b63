package resp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hecsys/hec/kv"
)

// Typed values: lists, sets, hashes and sorted sets. The store keeps each
// as one value of its kind (kv.Kind), in the encoding below, and a command
// reads it whole and, if it changes it, writes it whole, in one Update on
// the store's committer — atomic with every other write, logged and
// durable as a SET is. That costs a write the value's size: these are the
// small aggregates a KV front end holds (a job's queue, a rank's fields),
// not Redis's million-element structures; a value stays within the
// store's value limit like any other.
//
// A typed value's bytes: one byte of encoding state, a uvarint count, then
// the elements, each a uvarint length and its bytes — a hash's as field,
// value; a sorted set's as member and its score (8 bytes, IEEE 754, little
// endian), in score order.
//
// The encoding state is what OBJECT ENCODING reports: the encoding Redis
// 7.0 would hold the value in (an intset, a listpack, a hash table, a skip
// list), by Redis's thresholds (the *-max-* parameters, which CONFIG SET
// changes) and, as in Redis, kept once a value has outgrown the compact
// one. hecd's own bytes are the same either way.

// typed is a decoded typed value.
type typed struct {
	kind   kv.Kind
	big    bool      // outgrew the compact encoding (sticky)
	items  [][]byte  // list elements; set members; hash fields; sorted-set members (by score, then member)
	vals   [][]byte  // a hash's values, by field
	scores []float64 // a sorted set's scores, by member
	pos    map[string]int
}

var errCorrupt = errors.New("resp: a typed value does not decode")

func decodeTyped(kind kv.Kind, b []byte) (*typed, error) {
	v := &typed{kind: kind}
	if len(b) < 1 || b[0] > 1 {
		return nil, errCorrupt
	}
	v.big, b = b[0] == 1, b[1:]
	n, k := uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errCorrupt
	}
	b = b[k:]
	field := func() ([]byte, bool) {
		m, k := uvarint(b)
		if k <= 0 || m > uint64(len(b)-k) {
			return nil, false
		}
		f := b[k : k+int(m) : k+int(m)]
		b = b[k+int(m):]
		return f, true
	}
	v.items = make([][]byte, 0, n)
	for range n {
		it, ok := field()
		if !ok {
			return nil, errCorrupt
		}
		v.items = append(v.items, it)
		switch kind {
		case kv.KindHash:
			val, ok := field()
			if !ok {
				return nil, errCorrupt
			}
			v.vals = append(v.vals, val)
		case kv.KindZSet:
			if len(b) < 8 {
				return nil, errCorrupt
			}
			v.scores = append(v.scores, math.Float64frombits(binary.LittleEndian.Uint64(b)))
			b = b[8:]
		}
	}
	if len(b) != 0 {
		return nil, errCorrupt
	}
	return v, nil
}

// uvarint is binary.Uvarint of the one encoding AppendUvarint writes (no
// needless trailing zero byte): each value has one encoding.
func uvarint(b []byte) (uint64, int) {
	n, k := binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, 0
	}
	return n, k
}

func (v *typed) encode() []byte {
	size := 1 + binary.MaxVarintLen64
	for i, it := range v.items {
		size += len(it) + binary.MaxVarintLen64 + 8
		if v.vals != nil {
			size += len(v.vals[i]) + binary.MaxVarintLen64
		}
	}
	out := make([]byte, 0, size)
	out = append(out, byte(b2i(v.big)))
	out = binary.AppendUvarint(out, uint64(len(v.items)))
	for i, it := range v.items {
		out = binary.AppendUvarint(out, uint64(len(it)))
		out = append(out, it...)
		switch v.kind {
		case kv.KindHash:
			out = binary.AppendUvarint(out, uint64(len(v.vals[i])))
			out = append(out, v.vals[i]...)
		case kv.KindZSet:
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v.scores[i]))
		}
	}
	return out
}

func (v *typed) len() int { return len(v.items) }

// find is the position of member (set, hash, sorted set), or -1.
func (v *typed) find(member []byte) int {
	if v.pos == nil {
		v.pos = make(map[string]int, len(v.items))
		for i, it := range v.items {
			v.pos[string(it)] = i
		}
	}
	if i, ok := v.pos[string(member)]; ok {
		return i
	}
	return -1
}

// removeAt removes element i, keeping the order of the others.
func (v *typed) removeAt(i int) {
	v.items = slices.Delete(v.items, i, i+1)
	if v.vals != nil {
		v.vals = slices.Delete(v.vals, i, i+1)
	}
	if v.scores != nil {
		v.scores = slices.Delete(v.scores, i, i+1)
	}
	v.pos = nil
}

// add appends member (with val for a hash) to a set or hash; the caller
// knows it is absent.
func (v *typed) add(member, val []byte) {
	v.items = append(v.items, bytes.Clone(member))
	if v.kind == kv.KindHash {
		v.vals = append(v.vals, bytes.Clone(val))
	}
	if v.pos != nil {
		v.pos[string(member)] = len(v.items) - 1
	}
}

// zsetPut sets member's score in a sorted set, keeping the order.
func (v *typed) zsetPut(member []byte, score float64) {
	if i := v.find(member); i >= 0 {
		v.removeAt(i)
	}
	i := v.zsetRank(score, member)
	v.items = slices.Insert(v.items, i, bytes.Clone(member))
	v.scores = slices.Insert(v.scores, i, score)
	v.pos = nil
}

// zsetRank is where (score, member) sorts in a sorted set.
func (v *typed) zsetRank(score float64, member []byte) int {
	lo, hi := 0, len(v.items)
	for lo < hi {
		m := (lo + hi) / 2
		if v.scores[m] < score || v.scores[m] == score && bytes.Compare(v.items[m], member) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Redis's thresholds for its compact encodings (CONFIG SET changes them).
type encodingLimits struct {
	setIntsetEntries, hashEntries, hashValue, zsetEntries, zsetValue atomic.Int64
}

func (l *encodingLimits) init() {
	l.setIntsetEntries.Store(512)
	l.hashEntries.Store(128)
	l.hashValue.Store(64)
	l.zsetEntries.Store(128)
	l.zsetValue.Store(64)
}

// params are the limits by CONFIG name (Redis's old ziplist names too).
func (l *encodingLimits) params() map[string]*atomic.Int64 {
	return map[string]*atomic.Int64{
		"set-max-intset-entries":    &l.setIntsetEntries,
		"hash-max-listpack-entries": &l.hashEntries, "hash-max-ziplist-entries": &l.hashEntries,
		"hash-max-listpack-value": &l.hashValue, "hash-max-ziplist-value": &l.hashValue,
		"zset-max-listpack-entries": &l.zsetEntries, "zset-max-ziplist-entries": &l.zsetEntries,
		"zset-max-listpack-value": &l.zsetValue, "zset-max-ziplist-value": &l.zsetValue,
	}
}

// settle marks v big if Redis would have converted it by now.
func (v *typed) settle(l *encodingLimits) {
	if v.big {
		return
	}
	n := int64(len(v.items))
	switch v.kind {
	case kv.KindSet:
		if n > l.setIntsetEntries.Load() {
			v.big = true
			return
		}
		for _, it := range v.items {
			if _, ok := parseInt(it); !ok {
				v.big = true
				return
			}
		}
	case kv.KindHash:
		v.big = n > l.hashEntries.Load() || longest(v.items) > l.hashValue.Load() || longest(v.vals) > l.hashValue.Load()
	case kv.KindZSet:
		v.big = n > l.zsetEntries.Load() || longest(v.items) > l.zsetValue.Load()
	}
}

func longest(bs [][]byte) int64 {
	n := 0
	for _, b := range bs {
		n = max(n, len(b))
	}
	return int64(n)
}

// encodingName is what OBJECT ENCODING says of v.
func (v *typed) encodingName() string {
	switch v.kind {
	case kv.KindList:
		return "quicklist"
	case kv.KindSet:
		if v.big {
			return "hashtable"
		}
		return "intset"
	case kv.KindHash:
		if v.big {
			return "hashtable"
		}
		return "listpack"
	case kv.KindZSet:
		if v.big {
			return "skiplist"
		}
		return "listpack"
	}
	return "unknown"
}

const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// loadTyped reads key as a value of kind: nil when absent.
func (c *client) loadTyped(key []byte, kind kv.Kind) (*typed, error) {
	e, err := c.s.Store.Lookup(key, nil)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case e.Kind != kind:
		return nil, kv.ErrWrongType
	}
	return decodeTyped(kind, e.Value)
}

// read serves a read of key as kind: f gets the value (nil: absent) and
// writes the reply.
func (c *client) read(key []byte, kind kv.Kind, f func(v *typed)) {
	v, err := c.loadTyped(key, kind)
	if err != nil {
		c.storeErr(err)
		return
	}
	f(v)
}

// cellTyped decodes an Update's cell as kind: an empty value when absent.
func cellTyped(cell *kv.Cell, kind kv.Kind) (*typed, error) {
	if !cell.Exists {
		return &typed{kind: kind}, nil
	}
	if cell.Kind != kind {
		return nil, kv.ErrWrongType
	}
	return decodeTyped(kind, cell.Value)
}

// store marks cell to hold v: written, or deleted when v is empty (Redis
// keeps no empty aggregate).
func (c *client) store(cell *kv.Cell, v *typed) {
	if v.len() == 0 {
		cell.Delete, cell.Write = cell.Exists, false
		return
	}
	v.settle(&c.s.limits)
	cell.Value, cell.Kind, cell.Write, cell.Delete = v.encode(), v.kind, true, false
}

// modifyTyped changes key's value of kind atomically: f changes v (an
// empty one when the key is absent) and reports whether it did; reply
// runs once it is stored.
func (c *client) modifyTyped(key []byte, kind kv.Kind, f func(v *typed) (bool, error), reply func()) {
	c.update([][]byte{key}, kv.MaxValueSize, func(cells []kv.Cell) error {
		v, err := cellTyped(&cells[0], kind)
		if err != nil {
			return err
		}
		changed, err := f(v)
		if err != nil || !changed {
			if err == nil {
				err = errUnchanged
			}
			return err
		}
		c.store(&cells[0], v)
		return nil
	}, reply)
}

// replyItems writes items as an array of bulks.
func (c *client) replyItems(items [][]byte) {
	c.w.Array(len(items))
	for _, it := range items {
		c.w.Bulk(it)
	}
}

// formatScore prints a score as Redis 7.0 does ("%.17g"; inf, -inf).
func formatScore(f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return []byte("inf")
	case math.IsInf(f, -1):
		return []byte("-inf")
	}
	return strconv.AppendFloat(nil, f, 'g', 17, 64)
}

// parseScore reads a score as Redis does (strtod, no NaN, no spaces).
func parseScore(b []byte) (float64, bool) {
	if len(b) == 0 || b[0] == ' ' || b[len(b)-1] == ' ' {
		return 0, false
	}
	switch strings.ToLower(string(b)) {
	case "inf", "+inf", "infinity", "+infinity":
		return math.Inf(1), true
	case "-inf", "-infinity":
		return math.Inf(-1), true
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// scanTyped serves SSCAN, HSCAN and ZSCAN key cursor [MATCH p] [COUNT n]:
// the whole value in one reply, cursor 0 (as Redis answers for its
// compact encodings), so an element present throughout is reported
// whatever changes between calls.
func (c *client) scanTyped(kind kv.Kind, args [][]byte) {
	if _, err := strconv.ParseUint(string(args[2]), 10, 64); err != nil {
		c.w.Error("ERR invalid cursor")
		return
	}
	// Redis's order: the cursor, the key (none: an empty reply whatever
	// follows), then the options.
	c.read(args[1], kind, func(v *typed) {
		var pattern []byte
		if v != nil {
			o, bad := parseScanOptions(args[3:], false)
			if bad != "" {
				c.w.Error(bad)
				return
			}
			pattern = o.pattern
		}
		var out [][]byte
		if v != nil {
			for i, it := range v.items {
				if pattern != nil && !globMatch(pattern, it) {
					continue
				}
				out = append(out, it)
				switch kind {
				case kv.KindHash:
					out = append(out, v.vals[i])
				case kv.KindZSet:
					out = append(out, formatScore(v.scores[i]))
				}
			}
		}
		c.w.Array(2)
		c.w.BulkString("0")
		c.replyItems(out)
	})
}
