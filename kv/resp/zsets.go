package resp

import (
	"context"
	"math"

	"github.com/hecsys/hec/kv"
)

// Sorted sets (see typed.go for how they are kept): members by score,
// then by their bytes.

// zadd serves ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ….
func (c *client) zadd(_ context.Context, args [][]byte) {
	var nx, xx, gt, lt, ch, incr bool
	i := 2
flags:
	for ; i < len(args); i++ {
		switch {
		case eq(args[i], "NX"):
			nx = true
		case eq(args[i], "XX"):
			xx = true
		case eq(args[i], "GT"):
			gt = true
		case eq(args[i], "LT"):
			lt = true
		case eq(args[i], "CH"):
			ch = true
		case eq(args[i], "INCR"):
			incr = true
		default:
			break flags
		}
	}
	pairs := args[i:]
	switch {
	case len(pairs) == 0 || len(pairs)%2 != 0:
		c.w.Error("ERR syntax error")
		return
	case nx && xx:
		c.w.Error("ERR XX and NX options at the same time are not compatible")
		return
	case gt && lt || gt && nx || lt && nx:
		c.w.Error("ERR GT, LT, and/or NX options at the same time are not compatible")
		return
	case incr && len(pairs) > 2:
		c.w.Error("ERR INCR option supports a single increment-element pair")
		return
	}
	scores := make([]float64, len(pairs)/2)
	for j := range scores {
		var ok bool
		if scores[j], ok = parseScore(pairs[2*j]); !ok {
			c.w.Error("ERR value is not a valid float")
			return
		}
	}
	var added, changed int
	var result float64
	aborted := false
	c.modifyTyped(args[1], kv.KindZSet, func(v *typed) (bool, error) {
		added, changed, aborted = 0, 0, false
		for j, score := range scores {
			m := pairs[2*j+1]
			at := v.find(m)
			if at < 0 {
				if xx {
					aborted = true
					continue
				}
				v.zsetPut(m, score)
				added++
				result = score
				continue
			}
			if nx {
				aborted = true
				continue
			}
			cur := v.scores[at]
			if incr {
				score += cur
				if math.IsNaN(score) {
					return false, errReply("ERR resulting score is not a number (NaN)")
				}
			}
			if gt && score <= cur || lt && score >= cur {
				aborted = true
				continue
			}
			result = score
			if score != cur {
				v.zsetPut(m, score)
				changed++
			}
		}
		return added+changed > 0, nil
	}, func() {
		switch {
		case incr && aborted:
			c.w.NullBulk()
		case incr:
			c.w.Bulk(formatScore(result))
		case ch:
			c.w.Int(int64(added + changed))
		default:
			c.w.Int(int64(added))
		}
	})
}

// zincrby serves ZINCRBY key increment member.
func (c *client) zincrby(_ context.Context, args [][]byte) {
	delta, ok := parseScore(args[2])
	if !ok {
		c.w.Error("ERR value is not a valid float")
		return
	}
	var score float64
	c.modifyTyped(args[1], kv.KindZSet, func(v *typed) (bool, error) {
		score = delta
		if at := v.find(args[3]); at >= 0 {
			score += v.scores[at]
		}
		if math.IsNaN(score) {
			return false, errReply("ERR resulting score is not a number (NaN)")
		}
		v.zsetPut(args[3], score)
		return true, nil
	}, func() { c.w.Bulk(formatScore(score)) })
}

// zscore serves ZSCORE key member and ZMSCORE key member….
func (c *client) zscore(_ context.Context, args [][]byte) {
	multi := eq(args[0], "ZMSCORE")
	c.read(args[1], kv.KindZSet, func(v *typed) {
		if multi {
			c.w.Array(len(args) - 2)
		}
		for _, m := range args[2:] {
			if v == nil || v.find(m) < 0 {
				c.w.NullBulk()
				continue
			}
			c.w.Bulk(formatScore(v.scores[v.find(m)]))
		}
	})
}

// zrank serves ZRANK and ZREVRANK key member.
func (c *client) zrank(_ context.Context, args [][]byte) {
	rev := eq(args[0], "ZREVRANK")
	c.read(args[1], kv.KindZSet, func(v *typed) {
		i := -1
		if v != nil {
			i = v.find(args[2])
		}
		switch {
		case i < 0:
			c.w.NullBulk()
		case rev:
			c.w.Int(int64(v.len() - 1 - i))
		default:
			c.w.Int(int64(i))
		}
	})
}

// scoreBound is one end of a score range: "(1.5" excludes 1.5.
type scoreBound struct {
	v    float64
	open bool
}

func parseScoreBound(b []byte) (scoreBound, bool) {
	var s scoreBound
	if len(b) > 0 && b[0] == '(' {
		s.open, b = true, b[1:]
	}
	var ok bool
	s.v, ok = parseScore(b)
	return s, ok
}

func (s scoreBound) above(f float64) bool { return f > s.v || !s.open && f == s.v }
func (s scoreBound) below(f float64) bool { return f < s.v || !s.open && f == s.v }

// zrange serves ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset
// count] [WITHSCORES], ZREVRANGE, ZRANGEBYSCORE and ZREVRANGEBYSCORE.
func (c *client) zrange(_ context.Context, args [][]byte) {
	name := string(args[0])
	rev := eq(args[0], "ZREVRANGE") || eq(args[0], "ZREVRANGEBYSCORE")
	byScore := len(name) > 9 // ZRANGEBYSCORE, ZREVRANGEBYSCORE
	withScores, limited := false, false
	offset, limit := int64(0), int64(-1)
	for i := 4; i < len(args); i++ {
		switch {
		case eq(args[i], "WITHSCORES"):
			withScores = true
		case eq(args[i], "BYSCORE") && eq(args[0], "ZRANGE"):
			byScore = true
		case eq(args[i], "REV") && eq(args[0], "ZRANGE"):
			rev = true
		case eq(args[i], "LIMIT") && i+2 < len(args):
			var ok1, ok2 bool
			offset, ok1 = parseInt(args[i+1])
			limit, ok2 = parseInt(args[i+2])
			if !ok1 || !ok2 {
				c.w.Error("ERR value is not an integer or out of range")
				return
			}
			limited = true
			i += 2
		default:
			c.w.Error("ERR syntax error")
			return
		}
	}
	if limited && !byScore {
		c.w.Error("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
		return
	}
	var pick func(v *typed) []int
	if byScore {
		lo, hi := args[2], args[3]
		if rev && eq(args[0], "ZRANGE") || eq(args[0], "ZREVRANGEBYSCORE") {
			lo, hi = hi, lo // REV takes max then min
		}
		min, ok1 := parseScoreBound(lo)
		max, ok2 := parseScoreBound(hi)
		if !ok1 || !ok2 {
			c.w.Error("ERR min or max is not a float")
			return
		}
		pick = func(v *typed) []int {
			var out []int
			for j := range v.len() {
				i := j
				if rev {
					i = v.len() - 1 - j
				}
				if min.above(v.scores[i]) && max.below(v.scores[i]) {
					out = append(out, i)
				}
			}
			if offset < 0 || offset >= int64(len(out)) {
				return nil
			}
			out = out[offset:]
			if limit >= 0 && limit < int64(len(out)) {
				out = out[:limit]
			}
			return out
		}
	} else {
		start, ok1 := parseInt(args[2])
		stop, ok2 := parseInt(args[3])
		if !ok1 || !ok2 {
			c.w.Error("ERR value is not an integer or out of range")
			return
		}
		pick = func(v *typed) []int {
			lo, hi := listRange(start, stop, v.len())
			var out []int
			for j := lo; j < hi; j++ {
				if rev {
					out = append(out, v.len()-1-j)
				} else {
					out = append(out, j)
				}
			}
			return out
		}
	}
	c.read(args[1], kv.KindZSet, func(v *typed) {
		var idx []int
		if v != nil {
			idx = pick(v)
		}
		c.w.Array(len(idx) * int(1+b2i(withScores)))
		for _, i := range idx {
			c.w.Bulk(v.items[i])
			if withScores {
				c.w.Bulk(formatScore(v.scores[i]))
			}
		}
	})
}

// zcount serves ZCOUNT key min max.
func (c *client) zcount(_ context.Context, args [][]byte) {
	min, ok1 := parseScoreBound(args[2])
	max, ok2 := parseScoreBound(args[3])
	if !ok1 || !ok2 {
		c.w.Error("ERR min or max is not a float")
		return
	}
	c.read(args[1], kv.KindZSet, func(v *typed) {
		n := 0
		if v != nil {
			for _, s := range v.scores {
				if min.above(s) && max.below(s) {
					n++
				}
			}
		}
		c.w.Int(int64(n))
	})
}
