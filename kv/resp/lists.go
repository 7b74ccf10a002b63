package resp

import (
	"bytes"
	"context"

	"github.com/hecsys/hec/kv"
)

// Lists (see typed.go for how they are kept).

// listIndex is Redis's index i (negative: from the end) into n elements,
// and whether it is inside.
func listIndex(i int64, n int) (int, bool) {
	if i < 0 {
		i += int64(n)
	}
	return int(i), i >= 0 && i < int64(n)
}

// listRange clamps Redis's start and stop (inclusive, negative from the
// end) to n elements: the half-open range, empty when lo >= hi.
func listRange(start, stop int64, n int) (lo, hi int) {
	if start < 0 {
		start += int64(n)
	}
	if stop < 0 {
		stop += int64(n)
	}
	start = max(start, 0)
	if start > stop || start >= int64(n) {
		return 0, 0
	}
	stop = min(stop, int64(n)-1)
	return int(start), int(stop) + 1
}

// push serves LPUSH, RPUSH, LPUSHX and RPUSHX: the new length.
func (c *client) push(_ context.Context, args [][]byte) {
	left := args[0][0]|0x20 == 'l'
	onlyIfExists := len(args[0]) == 6
	n := 0
	c.modifyTyped(args[1], kv.KindList, func(v *typed) (bool, error) {
		if onlyIfExists && v.len() == 0 {
			return false, nil
		}
		for _, a := range args[2:] {
			if left {
				v.items = append([][]byte{bytes.Clone(a)}, v.items...)
			} else {
				v.items = append(v.items, bytes.Clone(a))
			}
		}
		n = v.len()
		return true, nil
	}, func() { c.w.Int(int64(n)) })
}

// popCount reads LPOP's, RPOP's and SPOP's optional count (1 when
// absent): ok false for one that is no integer or negative.
func popCount(args [][]byte) (count int64, given, ok bool) {
	if len(args) < 3 {
		return 1, false, true
	}
	count, ok = parseInt(args[2])
	return count, true, ok && count >= 0
}

// pop serves LPOP and RPOP key [count].
func (c *client) pop(_ context.Context, args [][]byte) {
	left := args[0][0]|0x20 == 'l'
	count, withCount, ok := popCount(args)
	if !ok {
		c.w.Error("ERR value is out of range, must be positive")
		return
	}
	var out [][]byte
	found := false
	c.modifyTyped(args[1], kv.KindList, func(v *typed) (bool, error) {
		out, found = out[:0], v.len() > 0
		n := int(min(count, int64(v.len())))
		if left {
			out = append(out, v.items[:n]...)
			v.items = v.items[n:]
		} else {
			for i := range n {
				out = append(out, v.items[v.len()-1-i])
			}
			v.items = v.items[:v.len()-n]
		}
		return n > 0, nil
	}, func() {
		switch {
		case !withCount && len(out) == 0:
			c.w.NullBulk()
		case !withCount:
			c.w.Bulk(out[0])
		case !found:
			c.w.NullArray()
		default:
			c.replyItems(out)
		}
	})
}

func (c *client) llen(_ context.Context, args [][]byte) {
	c.read(args[1], kv.KindList, func(v *typed) {
		if v == nil {
			c.w.Int(0)
			return
		}
		c.w.Int(int64(v.len()))
	})
}

// lrange serves LRANGE key start stop.
func (c *client) lrange(_ context.Context, args [][]byte) {
	start, ok1 := parseInt(args[2])
	stop, ok2 := parseInt(args[3])
	if !ok1 || !ok2 {
		c.w.Error("ERR value is not an integer or out of range")
		return
	}
	c.read(args[1], kv.KindList, func(v *typed) {
		if v == nil {
			c.w.Array(0)
			return
		}
		lo, hi := listRange(start, stop, v.len())
		c.replyItems(v.items[lo:hi])
	})
}

// lindex serves LINDEX key index: the key is looked at before the index,
// as in Redis.
func (c *client) lindex(_ context.Context, args [][]byte) {
	c.read(args[1], kv.KindList, func(v *typed) {
		if v == nil {
			c.w.NullBulk()
			return
		}
		i, ok := parseInt(args[2])
		if !ok {
			c.w.Error("ERR value is not an integer or out of range")
			return
		}
		j, in := listIndex(i, v.len())
		if !in {
			c.w.NullBulk()
			return
		}
		c.w.Bulk(v.items[j])
	})
}

// lset serves LSET key index element: the key, then the index, as in
// Redis.
func (c *client) lset(_ context.Context, args [][]byte) {
	c.update([][]byte{args[1]}, kv.MaxValueSize, func(cells []kv.Cell) error {
		if !cells[0].Exists {
			return errReply("ERR no such key")
		}
		v, err := cellTyped(&cells[0], kv.KindList)
		if err != nil {
			return err
		}
		i, ok := parseInt(args[2])
		if !ok {
			return errReply("ERR value is not an integer or out of range")
		}
		j, in := listIndex(i, v.len())
		if !in {
			return errReply("ERR index out of range")
		}
		v.items[j] = args[3]
		c.store(&cells[0], v)
		return nil
	}, c.w.OK)
}

// lrem serves LREM key count element.
func (c *client) lrem(_ context.Context, args [][]byte) {
	count, ok := parseInt(args[2])
	if !ok {
		c.w.Error("ERR value is not an integer or out of range")
		return
	}
	removed := 0
	c.modifyTyped(args[1], kv.KindList, func(v *typed) (bool, error) {
		removed = 0
		keep := v.items[:0:0]
		if count >= 0 {
			for _, it := range v.items {
				if bytes.Equal(it, args[3]) && (count == 0 || int64(removed) < count) {
					removed++
					continue
				}
				keep = append(keep, it)
			}
		} else {
			drop := make([]bool, v.len())
			for i := v.len() - 1; i >= 0 && int64(removed) < -count; i-- {
				if bytes.Equal(v.items[i], args[3]) {
					drop[i] = true
					removed++
				}
			}
			for i, it := range v.items {
				if !drop[i] {
					keep = append(keep, it)
				}
			}
		}
		v.items = keep
		return removed > 0, nil
	}, func() { c.w.Int(int64(removed)) })
}

// ltrim serves LTRIM key start stop.
func (c *client) ltrim(_ context.Context, args [][]byte) {
	start, ok1 := parseInt(args[2])
	stop, ok2 := parseInt(args[3])
	if !ok1 || !ok2 {
		c.w.Error("ERR value is not an integer or out of range")
		return
	}
	c.modifyTyped(args[1], kv.KindList, func(v *typed) (bool, error) {
		if v.len() == 0 {
			return false, nil
		}
		lo, hi := listRange(start, stop, v.len())
		if lo == 0 && hi == v.len() {
			return false, nil
		}
		v.items = v.items[lo:hi]
		return true, nil
	}, c.w.OK)
}

// linsert serves LINSERT key BEFORE|AFTER pivot element.
func (c *client) linsert(_ context.Context, args [][]byte) {
	var after bool
	switch {
	case eq(args[2], "AFTER"):
		after = true
	case eq(args[2], "BEFORE"):
	default:
		c.w.Error("ERR syntax error")
		return
	}
	n := int64(0)
	c.modifyTyped(args[1], kv.KindList, func(v *typed) (bool, error) {
		if v.len() == 0 {
			n = 0
			return false, nil
		}
		for i, it := range v.items {
			if bytes.Equal(it, args[3]) {
				if after {
					i++
				}
				v.items = append(v.items[:i:i], append([][]byte{args[4]}, v.items[i:]...)...)
				n = int64(v.len())
				return true, nil
			}
		}
		n = -1
		return false, nil
	}, func() { c.w.Int(n) })
}

// lmove serves LMOVE source destination LEFT|RIGHT LEFT|RIGHT and
// RPOPLPUSH source destination.
func (c *client) lmove(_ context.Context, args [][]byte) {
	fromLeft, toLeft := false, true
	if eq(args[0], "LMOVE") {
		side := func(a []byte) (bool, bool) { return eq(a, "LEFT"), eq(a, "LEFT") || eq(a, "RIGHT") }
		var ok1, ok2 bool
		fromLeft, ok1 = side(args[3])
		toLeft, ok2 = side(args[4])
		if !ok1 || !ok2 {
			c.w.Error("ERR syntax error")
			return
		}
	}
	var moved []byte
	c.update([][]byte{args[1], args[2]}, kv.MaxValueSize, func(cells []kv.Cell) error {
		src, err := cellTyped(&cells[0], kv.KindList)
		if err != nil {
			return err
		}
		if src.len() == 0 {
			moved = nil
			return errUnchanged
		}
		same := bytes.Equal(args[1], args[2])
		dst := src
		if !same {
			if dst, err = cellTyped(&cells[1], kv.KindList); err != nil {
				return err
			}
		}
		if fromLeft {
			moved, src.items = src.items[0], src.items[1:]
		} else {
			moved, src.items = src.items[src.len()-1], src.items[:src.len()-1]
		}
		if toLeft {
			dst.items = append([][]byte{moved}, dst.items...)
		} else {
			dst.items = append(dst.items, moved)
		}
		c.store(&cells[0], src)
		if !same {
			c.store(&cells[1], dst)
		}
		return nil
	}, func() { c.w.BulkOrNull(moved, moved != nil) })
}

// lpos serves LPOS key element [RANK r] [COUNT n] [MAXLEN m].
func (c *client) lpos(_ context.Context, args [][]byte) {
	rank, count, maxlen, withCount := int64(1), int64(1), int64(0), false
	for i := 3; i < len(args); i += 2 {
		if i+1 >= len(args) {
			c.w.Error("ERR syntax error")
			return
		}
		n, ok := parseInt(args[i+1])
		if !ok {
			c.w.Error("ERR value is not an integer or out of range")
			return
		}
		switch {
		case eq(args[i], "RANK"):
			if n == 0 {
				c.w.Error("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list")
				return
			}
			rank = n
		case eq(args[i], "COUNT"):
			if n < 0 {
				c.w.Error("ERR COUNT can't be negative")
				return
			}
			count, withCount = n, true
		case eq(args[i], "MAXLEN"):
			if n < 0 {
				c.w.Error("ERR MAXLEN can't be negative")
				return
			}
			maxlen = n
		default:
			c.w.Error("ERR syntax error")
			return
		}
	}
	c.read(args[1], kv.KindList, func(v *typed) {
		var found []int64
		if v != nil {
			skip := max(rank, -rank) - 1
			for seen := 0; seen < v.len() && (maxlen == 0 || int64(seen) < maxlen); seen++ {
				i := seen
				if rank < 0 {
					i = v.len() - 1 - seen
				}
				if !bytes.Equal(v.items[i], args[2]) {
					continue
				}
				if skip > 0 {
					skip--
					continue
				}
				found = append(found, int64(i))
				if count != 0 && int64(len(found)) >= count {
					break
				}
			}
		}
		switch {
		case withCount:
			c.w.Array(len(found))
			for _, i := range found {
				c.w.Int(i)
			}
		case len(found) == 0:
			c.w.NullBulk()
		default:
			c.w.Int(found[0])
		}
	})
}
