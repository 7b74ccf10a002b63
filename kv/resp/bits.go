package resp

import (
	"context"
	"errors"

	"github.com/hecsys/hec/kv"
)

// bitOffset reads a SETBIT or GETBIT offset as Redis does: an integer
// whose byte is within 512 MiB (Redis's proto-max-bulk-len), else Redis's
// error.
func (c *client) bitOffset(b []byte) (int64, bool) {
	off, ok := parseInt(b)
	if !ok || off < 0 || off>>3 >= 512<<20 {
		c.w.Error("ERR bit offset is not an integer or out of range")
		return 0, false
	}
	return off, true
}

// setbit serves SETBIT key offset 0|1: the bit's old value. A string
// grows with zero bytes to reach the offset (up to hecd's largest value);
// a bit set to what it was is no write.
func (c *client) setbit(_ context.Context, args [][]byte) {
	off, ok := c.bitOffset(args[2])
	if !ok {
		return
	}
	on, ok := parseInt(args[3])
	if !ok || on&^1 != 0 {
		c.w.Error("ERR bit is not an integer or out of range")
		return
	}
	byteAt := off >> 3
	if byteAt >= kv.MaxValueSize {
		c.w.Error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
		return
	}
	mask := byte(1) << (7 - off&7)
	old := false
	c.modify(args[1], kv.MaxValueSize, func(cur []byte, exists bool) ([]byte, bool, error) {
		old = int64(len(cur)) > byteAt && cur[byteAt]&mask != 0
		if exists && int64(len(cur)) > byteAt && old == (on == 1) {
			return nil, false, errUnchanged
		}
		next := cur
		if int64(len(next)) <= byteAt {
			next = append(next, make([]byte, byteAt+1-int64(len(next)))...)
		}
		if on == 1 {
			next[byteAt] |= mask
		} else {
			next[byteAt] &^= mask
		}
		return next, false, nil
	}, func() { c.w.Int(b2i(old)) })
}

// getbit serves GETBIT key offset.
func (c *client) getbit(_ context.Context, args [][]byte) {
	off, ok := c.bitOffset(args[2])
	if !ok {
		return
	}
	e, err := c.s.Store.Get(args[1], nil)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		c.w.Int(0)
	case err != nil:
		c.storeErr(err)
	default:
		byteAt := off >> 3
		c.w.Int(b2i(int64(len(e.Value)) > byteAt && e.Value[byteAt]&(1<<(7-off&7)) != 0))
	}
}

// lcsMaxCells bounds LCS's table (4 bytes a cell): 128 MiB of transient
// memory, where Redis allows proto-max-bulk-len (512 MiB).
const lcsMaxCells = 32 << 20

// lcs serves LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]:
// the longest common subsequence of two strings, its length, or the
// ranges that make it up — Redis's algorithm, reply for reply.
func (c *client) lcs(_ context.Context, args [][]byte) {
	getLen, getIdx, withLen := false, false, false
	var minLen int64
	for j := 3; j < len(args); j++ {
		switch {
		case eq(args[j], "IDX"):
			getIdx = true
		case eq(args[j], "LEN"):
			getLen = true
		case eq(args[j], "WITHMATCHLEN"):
			withLen = true
		case eq(args[j], "MINMATCHLEN") && j+1 < len(args):
			n, ok := parseInt(args[j+1])
			if !ok {
				c.w.Error("ERR value is not an integer or out of range")
				return
			}
			minLen = max(n, 0)
			j++
		default:
			c.w.Error("ERR syntax error")
			return
		}
	}
	if getLen && getIdx {
		c.w.Error("ERR If you want both the length and indexes, please just use IDX.")
		return
	}
	var ab [2][]byte
	for i := range ab {
		e, err := c.s.Store.Get(args[1+i], nil)
		if errors.Is(err, kv.ErrWrongType) {
			c.w.Error("ERR The specified keys must contain string values")
			return
		}
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			c.storeErr(err)
			return
		}
		ab[i] = e.Value
	}
	a, b := ab[0], ab[1]
	if (len(a)+1)*(len(b)+1) > lcsMaxCells {
		c.w.Error("ERR Insufficient memory, transient memory for LCS exceeds the agent's limit (128 MiB)")
		return
	}
	w := len(b) + 1
	t := make([]uint32, (len(a)+1)*w)
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			if a[i-1] == b[j-1] {
				t[i*w+j] = t[(i-1)*w+j-1] + 1
			} else {
				t[i*w+j] = max(t[(i-1)*w+j], t[i*w+j-1])
			}
		}
	}
	total := t[len(a)*w+len(b)]
	if getLen {
		c.w.Int(int64(total))
		return
	}
	// Walk back from the end, as Redis: the string, and the ranges of
	// consecutive matches (last first).
	result := make([]byte, total)
	type match struct{ a0, a1, b0, b1 int }
	var ranges []match
	idx := total
	cur, open := match{}, false
	for i, j := len(a), len(b); i > 0 && j > 0; {
		emit := false
		if a[i-1] == b[j-1] {
			result[idx-1] = a[i-1]
			switch {
			case !open:
				cur, open = match{i - 1, i - 1, j - 1, j - 1}, true
			case cur.a0 == i && cur.b0 == j:
				cur.a0--
				cur.b0--
			default:
				emit = true
			}
			if cur.a0 == 0 || cur.b0 == 0 {
				emit = true
			}
			idx--
			i--
			j--
		} else {
			if t[(i-1)*w+j] > t[i*w+j-1] {
				i--
			} else {
				j--
			}
			emit = open
		}
		if emit {
			if n := int64(cur.a1 - cur.a0 + 1); minLen == 0 || n >= minLen {
				ranges = append(ranges, cur)
			}
			open = false
		}
	}
	if !getIdx {
		c.w.Bulk(result)
		return
	}
	c.w.Array(4)
	c.w.BulkString("matches")
	c.w.Array(len(ranges))
	for _, r := range ranges {
		c.w.Array(2 + int(b2i(withLen)))
		c.w.Array(2)
		c.w.Int(int64(r.a0))
		c.w.Int(int64(r.a1))
		c.w.Array(2)
		c.w.Int(int64(r.b0))
		c.w.Int(int64(r.b1))
		if withLen {
			c.w.Int(int64(r.a1 - r.a0 + 1))
		}
	}
	c.w.BulkString("len")
	c.w.Int(int64(total))
}
