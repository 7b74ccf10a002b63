package resp

import (
	"bytes"
	"context"
	"math/big"
	"strconv"

	"github.com/hecsys/hec/kv"
)

// Hashes (see typed.go for how they are kept): fields in the order added.

// hset serves HSET key field value … (how many fields were new) and HMSET
// (OK).
func (c *client) hset(_ context.Context, args [][]byte) {
	if len(args)%2 != 0 {
		c.wrongArgs(string(args[0]))
		return
	}
	added := 0
	c.modifyTyped(args[1], kv.KindHash, func(v *typed) (bool, error) {
		added = 0
		for i := 2; i < len(args); i += 2 {
			if j := v.find(args[i]); j >= 0 {
				v.vals[j] = args[i+1]
			} else {
				v.add(args[i], args[i+1])
				added++
			}
		}
		return true, nil
	}, func() {
		if eq(args[0], "HMSET") {
			c.w.OK()
		} else {
			c.w.Int(int64(added))
		}
	})
}

func (c *client) hsetnx(_ context.Context, args [][]byte) {
	set := false
	c.modifyTyped(args[1], kv.KindHash, func(v *typed) (bool, error) {
		if set = v.find(args[2]) < 0; set {
			v.add(args[2], args[3])
		}
		return set, nil
	}, func() { c.w.Int(b2i(set)) })
}

// field reads field of the hash v (nil: absent).
func (v *typed) field(f []byte) ([]byte, bool) {
	if v == nil {
		return nil, false
	}
	if i := v.find(f); i >= 0 {
		return v.vals[i], true
	}
	return nil, false
}

// hget serves HGET key field and HMGET key field….
func (c *client) hget(_ context.Context, args [][]byte) {
	multi := eq(args[0], "HMGET")
	c.read(args[1], kv.KindHash, func(v *typed) {
		if multi {
			c.w.Array(len(args) - 2)
		}
		for _, f := range args[2:] {
			c.w.BulkOrNull(v.field(f))
		}
	})
}

// hexists serves HEXISTS and HSTRLEN key field.
func (c *client) hexists(_ context.Context, args [][]byte) {
	strlen := eq(args[0], "HSTRLEN")
	c.read(args[1], kv.KindHash, func(v *typed) {
		val, ok := v.field(args[2])
		if strlen {
			c.w.Int(int64(len(val)))
		} else {
			c.w.Int(b2i(ok))
		}
	})
}

// hgetall serves HGETALL, HKEYS and HVALS.
func (c *client) hgetall(_ context.Context, args [][]byte) {
	keys, vals := !eq(args[0], "HVALS"), !eq(args[0], "HKEYS")
	c.read(args[1], kv.KindHash, func(v *typed) {
		if v == nil {
			c.w.Array(0)
			return
		}
		c.w.Array(v.len() * (int(b2i(keys)) + int(b2i(vals))))
		for i, f := range v.items {
			if keys {
				c.w.Bulk(f)
			}
			if vals {
				c.w.Bulk(v.vals[i])
			}
		}
	})
}

// hincrby serves HINCRBY key field increment.
func (c *client) hincrby(_ context.Context, args [][]byte) {
	delta, ok := parseInt(args[3])
	if !ok {
		c.w.Error("ERR value is not an integer or out of range")
		return
	}
	var n int64
	c.modifyTyped(args[1], kv.KindHash, func(v *typed) (bool, error) {
		var cur int64
		i := v.find(args[2])
		if i >= 0 {
			var ok bool
			if cur, ok = parseInt(v.vals[i]); !ok {
				return false, errReply("ERR hash value is not an integer")
			}
		}
		if delta > 0 && cur > (1<<63-1)-delta || delta < 0 && cur < -(1<<63)-delta {
			return false, errReply("ERR increment or decrement would overflow")
		}
		n = cur + delta
		out := strconv.AppendInt(nil, n, 10)
		if i >= 0 {
			v.vals[i] = out
		} else {
			v.add(args[2], out)
		}
		return true, nil
	}, func() { c.w.Int(n) })
}

// hincrbyfloat serves HINCRBYFLOAT key field increment, computed as
// INCRBYFLOAT does.
func (c *client) hincrbyfloat(_ context.Context, args [][]byte) {
	incr, ok := parseLongDouble(args[3])
	if !ok {
		c.w.Error("ERR value is not a valid float")
		return
	}
	if incr.IsInf() { // C's inf, or NaN
		c.w.Error("ERR value is NaN or Infinity")
		return
	}
	var out []byte
	c.modifyTyped(args[1], kv.KindHash, func(v *typed) (bool, error) {
		cur := new(big.Float).SetPrec(64)
		i := v.find(args[2])
		if i >= 0 {
			var ok bool
			if cur, ok = parseLongDouble(v.vals[i]); !ok {
				return false, errReply("ERR hash value is not a float")
			}
		}
		if !addLongDouble(cur, incr) {
			return false, errReply("ERR increment would produce NaN or Infinity")
		}
		out = formatLongDouble(cur)
		if i >= 0 {
			v.vals[i] = bytes.Clone(out)
		} else {
			v.add(args[2], out)
		}
		return true, nil
	}, func() { c.w.Bulk(out) })
}
