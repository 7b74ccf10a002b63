package resp

import (
	"context"
	"math/rand/v2"
	"slices"

	"github.com/hecsys/hec/kv"
)

// Sets (see typed.go for how they are kept): members in the order added.

// sadd serves SADD key member…: how many were new.
func (c *client) sadd(_ context.Context, args [][]byte) {
	added := 0
	c.modifyTyped(args[1], kv.KindSet, func(v *typed) (bool, error) {
		added = 0
		for _, m := range args[2:] {
			if v.find(m) < 0 {
				v.add(m, nil)
				added++
			}
		}
		return added > 0, nil
	}, func() { c.w.Int(int64(added)) })
}

// removeOf serves SREM, HDEL and ZREM key member…: how many were there.
func removeOf(kind kv.Kind) func(*client, context.Context, [][]byte) {
	return func(c *client, _ context.Context, args [][]byte) {
		removed := 0
		c.modifyTyped(args[1], kind, func(v *typed) (bool, error) {
			removed = 0
			for _, m := range args[2:] {
				if i := v.find(m); i >= 0 {
					v.removeAt(i)
					removed++
				}
			}
			return removed > 0, nil
		}, func() { c.w.Int(int64(removed)) })
	}
}

// countOf serves SCARD, HLEN and ZCARD.
func countOf(kind kv.Kind) func(*client, context.Context, [][]byte) {
	return func(c *client, _ context.Context, args [][]byte) {
		c.read(args[1], kind, func(v *typed) {
			if v == nil {
				c.w.Int(0)
				return
			}
			c.w.Int(int64(v.len()))
		})
	}
}

func (c *client) smembers(_ context.Context, args [][]byte) {
	c.read(args[1], kv.KindSet, func(v *typed) {
		if v == nil {
			c.w.Array(0)
			return
		}
		c.replyItems(v.items)
	})
}

// sismember serves SISMEMBER key member and SMISMEMBER key member….
func (c *client) sismember(_ context.Context, args [][]byte) {
	multi := len(args[0]) == 10
	c.read(args[1], kv.KindSet, func(v *typed) {
		if multi {
			c.w.Array(len(args) - 2)
		}
		for _, m := range args[2:] {
			c.w.Int(b2i(v != nil && v.find(m) >= 0))
		}
	})
}

// spop serves SPOP key [count]: members removed at random.
func (c *client) spop(_ context.Context, args [][]byte) {
	count, withCount, ok := popCount(args)
	if !ok {
		c.w.Error("ERR value is out of range, must be positive")
		return
	}
	var out [][]byte
	c.modifyTyped(args[1], kv.KindSet, func(v *typed) (bool, error) {
		out = out[:0]
		for range min(count, int64(v.len())) {
			i := rand.IntN(v.len())
			out = append(out, v.items[i])
			v.removeAt(i)
		}
		return len(out) > 0, nil
	}, func() {
		switch {
		case withCount:
			c.replyItems(out)
		case len(out) == 0:
			c.w.NullBulk()
		default:
			c.w.Bulk(out[0])
		}
	})
}

// srandmember serves SRANDMEMBER key [count]: count > 0 distinct
// members, count < 0 that many drawn with repeats.
func (c *client) srandmember(_ context.Context, args [][]byte) {
	count, withCount := int64(1), len(args) == 3
	if withCount {
		var ok bool
		if count, ok = parseInt(args[2]); !ok || count < -1<<62 {
			c.w.Error("ERR value is out of range")
			return
		}
	}
	c.read(args[1], kv.KindSet, func(v *typed) {
		switch {
		case v == nil && withCount:
			c.w.Array(0)
		case v == nil:
			c.w.NullBulk()
		case !withCount:
			c.w.Bulk(v.items[rand.IntN(v.len())])
		case count < 0:
			c.w.Array(int(-count))
			for range -count {
				c.w.Bulk(v.items[rand.IntN(v.len())])
			}
		default:
			pick := slices.Clone(v.items)
			rand.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
			c.replyItems(pick[:min(int(min(count, 1<<31)), len(pick))])
		}
	})
}

// smove serves SMOVE source destination member.
func (c *client) smove(_ context.Context, args [][]byte) {
	moved := false
	c.update([][]byte{args[1], args[2]}, kv.MaxValueSize, func(cells []kv.Cell) error {
		// Redis's order: no source is 0 before any type is checked.
		if moved = false; !cells[0].Exists {
			return errUnchanged
		}
		src, err := cellTyped(&cells[0], kv.KindSet)
		if err != nil {
			return err
		}
		dst, err := cellTyped(&cells[1], kv.KindSet)
		if err != nil {
			return err
		}
		i := src.find(args[3])
		if moved = i >= 0; !moved {
			return errUnchanged
		}
		if string(args[1]) == string(args[2]) {
			return errUnchanged // a member moved onto its own set stays
		}
		src.removeAt(i)
		if dst.find(args[3]) < 0 {
			dst.add(args[3], nil)
		}
		c.store(&cells[0], src)
		c.store(&cells[1], dst)
		return nil
	}, func() { c.w.Int(b2i(moved)) })
}

// setAlgebra serves SINTER, SUNION, SDIFF and their STORE forms.
func (c *client) setAlgebra(_ context.Context, args [][]byte) {
	store := len(args[0]) > len("SINTER") // SINTERSTORE, SUNIONSTORE, SDIFFSTORE
	op := args[0][1] | 0x20               // i, u, d
	keys := args[1:]
	var dstKey []byte
	if store {
		dstKey, keys = args[1], args[2:]
	}
	combine := func(sets []*typed) [][]byte {
		var out [][]byte
		seen := map[string]bool{}
		for i, s := range sets {
			if s == nil {
				if op == 'i' || op == 'd' && i == 0 {
					return nil
				}
				continue
			}
			if op == 'u' || i == 0 {
				for _, m := range s.items {
					if !seen[string(m)] {
						seen[string(m)] = true
						out = append(out, m)
					}
				}
				continue
			}
			keep := out[:0]
			for _, m := range out {
				if (s.find(m) >= 0) == (op == 'i') {
					keep = append(keep, m)
				}
			}
			out = keep
		}
		return out
	}
	if !store {
		sets := make([]*typed, len(keys))
		for i, k := range keys {
			v, err := c.loadTyped(k, kv.KindSet)
			if err != nil {
				c.storeErr(err)
				return
			}
			sets[i] = v
		}
		c.replyItems(combine(sets))
		return
	}
	n := 0
	c.update(append([][]byte{dstKey}, keys...), kv.MaxValueSize, func(cells []kv.Cell) error {
		sets := make([]*typed, len(keys))
		for i := range keys {
			cell := &cells[1+i]
			if !cell.Exists {
				continue
			}
			v, err := cellTyped(cell, kv.KindSet)
			if err != nil {
				return err
			}
			sets[i] = v
		}
		out := &typed{kind: kv.KindSet, items: combine(sets)}
		n = out.len()
		cells[0].Kind = kv.KindSet // whatever the destination held, it is replaced
		c.store(&cells[0], out)
		return nil
	}, func() { c.w.Int(int64(n)) })
}
