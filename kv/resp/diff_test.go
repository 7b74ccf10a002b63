package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hecsys/hec/kv"
)

// Differential testing against Redis: the same random command streams —
// every command hecd serves, with boundary arguments (0, -1, ±2^63, huge
// lengths, empty and binary keys), pipelined and within MULTI — go to hecd
// and to a redis-server started here, and the replies must agree: in type
// and value, errors by their first word (ERR, WRONGTYPE, EXECABORT …).
// What may not agree by nature is left out of the streams: SCAN's cursor
// (hecd's own), RANDOMKEY, TIME, INFO, MEMORY USAGE, CLIENT ids, and
// expiries short enough to run out between the two; KEYS is compared as
// a set. README lists the deliberate differences.

// diffConn is a raw RESP client: requests as arrays of bulk strings,
// replies read whole and written down as text (normalised).
type diffConn struct {
	c  net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
	tx [][]string // the commands queued since MULTI (nil: none)
}

func dialDiff(t testing.TB, addr string) *diffConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &diffConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}
}

func (d *diffConn) send(args []string) {
	fmt.Fprintf(d.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(d.w, "$%d\r\n%s\r\n", len(a), a)
	}
}

// reply reads one reply: "+OK", "-ERR", ":5", "$abc", "$nil", "*[…]".
func (d *diffConn) reply() (string, error) {
	line, err := d.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line, nil
	case '-':
		return "-" + strings.Fields(line[1:] + " ")[0], nil // errors by their first word
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "$nil", nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(d.r, b); err != nil {
			return "", err
		}
		return "$" + strconv.Quote(string(b[:n])), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "*nil", nil
		}
		items := make([]string, n)
		for i := range items {
			if items[i], err = d.reply(); err != nil {
				return "", err
			}
		}
		return "*[" + strings.Join(items, " ") + "]", nil
	}
	return "", fmt.Errorf("unknown reply %q", line)
}

// run sends cmds pipelined and reads their replies; KEYS' replies are
// sorted.
func (d *diffConn) run(cmds [][]string) ([]string, error) {
	d.c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, c := range cmds {
		d.send(c)
	}
	if err := d.w.Flush(); err != nil {
		return nil, err
	}
	out := make([]string, len(cmds))
	for i, c := range cmds {
		r, err := d.reply()
		if err != nil {
			return out[:i], fmt.Errorf("reply to %q: %w", c, err)
		}
		switch name := strings.ToUpper(c[0]); {
		case name == "MULTI" && r == "+OK":
			d.tx = [][]string{}
		case name == "EXEC" || name == "DISCARD":
			if name == "EXEC" && d.tx != nil && strings.HasPrefix(r, "*[") {
				// One reply per queued command (MULTI … EXEC nests
				// none): each normalised as alone.
				items := splitReplies(strings.TrimSuffix(strings.TrimPrefix(r, "*["), "]"))
				if len(items) == len(d.tx) {
					for j := range items {
						items[j] = normalise(d.tx[j], items[j])
					}
					r = "*[" + strings.Join(items, " ") + "]"
				}
			}
			d.tx = nil
		case d.tx != nil && r == "+QUEUED":
			d.tx = append(d.tx, c)
		}
		out[i] = normalise(c, r)
	}
	return out, nil
}

// normalise writes down a reply to c as it compares: KEYS as a set (in
// order), TTLs by sign (the two servers' clocks read apart by a few ms).
func normalise(c []string, r string) string {
	if unordered[strings.ToUpper(c[0])] && strings.HasPrefix(r, "*[") {
		items := splitReplies(strings.TrimSuffix(strings.TrimPrefix(r, "*["), "]"))
		slices.Sort(items)
		return "*[" + strings.Join(items, " ") + "]"
	}
	name := strings.ToUpper(c[0])
	if scans[name] > 0 && strings.HasPrefix(r, `*[$"0" *[`) {
		inner := strings.TrimSuffix(strings.TrimPrefix(r, `*[$"0" *[`), "]]")
		return `*[$"0" *[` + sortedGroups(splitReplies(inner), scans[name]) + "]]"
	}
	if n := unorderedPairs[name]; n > 0 && strings.HasPrefix(r, "*[") {
		return "*[" + sortedGroups(splitReplies(strings.TrimSuffix(strings.TrimPrefix(r, "*["), "]")), n) + "]"
	}
	if strings.EqualFold(c[0], "OBJECT") && (r == `$"int"` || r == `$"embstr"` || r == `$"raw"`) {
		return "$string" // a string's encoding is told apart (case 27)
	}
	if ttlCommands[strings.ToUpper(c[0])] && strings.HasPrefix(r, ":") && !strings.HasPrefix(r, ":-") && r != ":0" {
		return ":positive"
	}
	return r
}

// splitReplies splits the items of an array reply as reply wrote them
// (space-separated; bulks quoted, arrays bracketed).
func splitReplies(s string) []string {
	var out []string
	for s != "" {
		n := 0
		switch s[0] {
		case '$':
			if strings.HasPrefix(s, "$nil") {
				n = 4
			} else if q, err := strconv.QuotedPrefix(s[1:]); err == nil {
				n = 1 + len(q)
			}
		case '*':
			depth := 0
			for i := 0; i < len(s) && n == 0; i++ {
				switch s[i] {
				case '[':
					depth++
				case ']':
					if depth--; depth == 0 {
						n = i + 1
					}
				case '"':
					if q, err := strconv.QuotedPrefix(s[i:]); err == nil {
						i += len(q) - 1
					}
				}
			}
		}
		if n == 0 {
			n = strings.IndexByte(s, ' ')
			if n < 0 {
				n = len(s)
			}
		}
		out = append(out, s[:n])
		s = strings.TrimPrefix(s[n:], " ")
	}
	return out
}

// unordered commands answer a set in an order of the server's own (its
// hash table's): compared as sets. (SSCAN's members come after a cursor:
// the whole reply is sorted, the cursor "0" with them.)
var unordered = map[string]bool{"KEYS": true, "SMEMBERS": true, "SINTER": true, "SUNION": true, "SDIFF": true}

// A big hash's and a big set's order is their hash table's: HGETALL's
// field-value pairs (HKEYS' and HVALS' items) and SSCAN's, HSCAN's and
// ZSCAN's are compared as sets, in groups of the count given.
var (
	unorderedPairs = map[string]int{"HGETALL": 2, "HKEYS": 1, "HVALS": 1}
	scans          = map[string]int{"SSCAN": 1, "HSCAN": 2, "ZSCAN": 2}
)

// sortedGroups sorts items in groups of n and joins them.
func sortedGroups(items []string, n int) string {
	var groups []string
	for i := 0; i+n <= len(items); i += n {
		groups = append(groups, strings.Join(items[i:i+n], " "))
	}
	slices.Sort(groups)
	return strings.Join(groups, " ")
}

// ttlCommands answer a time left or an expiry: compared by sign.
var ttlCommands = map[string]bool{"TTL": true, "PTTL": true, "EXPIRETIME": true, "PEXPIRETIME": true}

// Boundary arguments.
var (
	diffKeys  = []string{"k", "k1", "k2", "n", "f", "\x00\xff bin"} // not "": hecd refuses the empty key (README)
	diffInts  = []string{"0", "1", "-1", "2", "10", "100", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809", "4294967296", "536870911", "536870912", "abc", "", " 1", "1.5", "+5", "05"}
	diffFloat = []string{"0", "1.5", "-2.25", "1e308", "-1e308", "1e400", "inf", "-inf", "nan", "abc", "5.0e3", "0x10", "", "3"}
	diffVals  = []string{"", "v", "hello", "0", "-1", "10", "9223372036854775807", "-9223372036854775808", "1.5", "1e308", "\x00\x01", strings.Repeat("x", 100)}
	// Expiries far enough (or past) that none runs out between the two
	// servers' replies, and none past 2262, which hecd holds as 2262
	// (README).
	diffSecs = []string{"100000", "0", "-1", "9223372036854775807", "-9223372036854775808", "abc", "4102444800", "9223372036854775808"}
)

// diffCommand draws one command.
func diffCommand(r *rand.Rand) []string {
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	k, v := pick(diffKeys), pick(diffVals)
	switch r.IntN(37 + len(diffTypedCommands)) {
	case 0:
		return []string{"SET", k, v}
	case 1:
		// Absolute times in the future (or refused): a SET with one
		// already past, on a missing key, aborts a WATCH of it in Redis
		// 7.0 (it stores the key expired), not in hecd (README).
		future := []string{"4102444800", "0", "-1", "abc", "9223372036854775807"}
		opts := [][]string{{"NX"}, {"XX"}, {"GET"}, {"EX", pick(diffSecs)}, {"PX", pick(diffSecs)}, {"EXAT", pick(future)},
			{"PXAT", pick(future) + "000"}, {"KEEPTTL"}, {"NX", "GET"}, {"EX", "1000", "PX", "1000"}, {"BOGUS"}}
		return append([]string{"SET", k, v}, pickArgs(r, opts)...)
	case 2:
		return []string{"GET", k}
	case 3:
		return []string{"DEL", k, pick(diffKeys)}
	case 4:
		return []string{"EXISTS", k, pick(diffKeys), k}
	case 5:
		return []string{"MGET", k, pick(diffKeys)}
	case 6:
		return []string{"MSET", k, v, pick(diffKeys), pick(diffVals)}
	case 7:
		return []string{pick([]string{"INCR", "DECR"}), k}
	case 8:
		return []string{pick([]string{"INCRBY", "DECRBY"}), k, pick(diffInts)}
	case 9:
		return []string{"INCRBYFLOAT", k, pick(diffFloat)}
	case 10:
		return []string{pick([]string{"EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"}), k, pick(diffSecs)}
	case 11:
		return []string{pick([]string{"EXPIRE", "PEXPIRE"}), k, pick(diffSecs), pick([]string{"NX", "XX", "GT", "LT", "BAD"})}
	case 12:
		return []string{pick([]string{"TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME", "PERSIST", "TYPE", "STRLEN"}), k}
	case 13:
		return []string{"APPEND", k, v}
	case 14:
		return []string{"GETRANGE", k, pick(diffInts), pick(diffInts)}
	case 15:
		// Offsets past hecd's 32 MiB values but within Redis's 512 MiB
		// differ by design (README); 536870911 would make Redis allocate
		// 512 MiB.
		return []string{"SETRANGE", k, pick(slices.DeleteFunc(slices.Clone(diffInts), func(s string) bool { return s == "536870911" })), v}
	case 16:
		return []string{pick([]string{"SETEX", "PSETEX"}), k, pick(diffSecs), v}
	case 17:
		return []string{"SETNX", k, v}
	case 18:
		return []string{"GETSET", k, v}
	case 19:
		return []string{"GETDEL", k}
	case 20:
		opts := [][]string{{}, {"PERSIST"}, {"EX", pick(diffSecs)}, {"PX", pick(diffSecs)}, {"EXAT", pick(diffSecs)}, {"PXAT", pick(diffSecs)}, {"EX", "1", "PX", "1"}, {"BAD"}}
		return append([]string{"GETEX", k}, opts[r.IntN(len(opts))]...)
	case 21:
		return []string{pick([]string{"RENAME", "RENAMENX"}), k, pick(diffKeys)}
	case 22:
		return append([]string{"COPY", k, pick(diffKeys)}, pickArgs(r, [][]string{{}, {"REPLACE"}, {"DB", "0"}, {"DB", "abc"}, {"BAD"}})...)
	case 23:
		return []string{"MSETNX", k, v, pick(diffKeys), pick(diffVals)}
	case 24:
		return []string{"KEYS", pick([]string{"*", "k*", "?", "k[12]", "[^k]*", "*\\*", "", "\x00*"})}
	case 25:
		// Not DBSIZE: Redis 7.0 counts a key SET with a past EXAT until
		// its expiry cycle finds it.
		return []string{"STRLEN", k}
	case 26:
		return []string{"TOUCH", k, pick(diffKeys)}
	case 27:
		// Not OBJECT ENCODING: hecd tells it from the value, Redis from
		// how the value was written (APPEND's "10" is raw there).
		return []string{"GET", k}
	case 28:
		return []string{"SCAN", pick([]string{"abc", "18446744073709551616"}), "COUNT", pick(diffInts)} // not -1: README
	case 29:
		return []string{"SCAN", "0", "COUNT", pick([]string{"0", "-1", "abc", "9223372036854775808"})}
	case 30:
		return []string{pick([]string{"ECHO", "PING"}), v}
	case 31:
		return []string{"NOSUCHCMD", k}
	case 32:
		// Wrong arity.
		return []string{pick([]string{"GET", "SET", "INCRBY", "GETRANGE", "SETRANGE", "EXPIRE", "MSET"})}
	case 34:
		// Offsets within hecd's 32 MiB values, or refused by both.
		return []string{"SETBIT", k, pick([]string{"0", "7", "8", "100", "1023", "-1", "abc", "4294967296", "9223372036854775807"}),
			pick([]string{"0", "1", "2", "-1", "abc"})}
	case 35:
		return []string{"GETBIT", k, pick([]string{"0", "1", "7", "8", "15", "100", "-1", "abc", "4294967296"})}
	case 36:
		return append([]string{"LCS", k, pick(diffKeys)}, pickArgs(r, [][]string{{}, {"LEN"}, {"IDX"}, {"IDX", "WITHMATCHLEN"},
			{"IDX", "MINMATCHLEN", pick(diffInts)}, {"LEN", "IDX"}, {"BAD"}, {"MINMATCHLEN"}})...)
	case 33:
		return []string{"FLUSHDB"}
	default:
		return diffTypedCommands[r.IntN(len(diffTypedCommands))](r, k)
	}
}

// Typed values' arguments: members, scores, score bounds and indexes.
var (
	diffMembers = []string{"a", "b", "c", "1", "2", "10", "-1", "", "\x00m"}
	diffScores  = []string{"0", "1", "-1", "1.5", "2", "inf", "-inf", "+inf", "nan", "abc", "1e308", "", "5.0e3", "0.1"}
	diffBounds  = []string{"0", "1", "-1", "(1", "(0", "-inf", "+inf", "(inf", "abc", "2", "1.5"}
	diffIndexes = []string{"0", "1", "-1", "2", "-2", "10", "-10", "abc", "9223372036854775807", "-9223372036854775808"}
)

// diffTypedCommands draw commands of lists, sets, hashes and sorted sets
// on key k (the same keys as the strings': a key of the wrong kind is
// drawn as often as one of the right kind).
var diffTypedCommands = []func(r *rand.Rand, k string) []string{
	func(r *rand.Rand, k string) []string {
		return append([]string{pickS(r, "LPUSH", "RPUSH", "LPUSHX", "RPUSHX"), k}, diffSome(r, diffMembers)...)
	},
	func(r *rand.Rand, k string) []string {
		return append([]string{pickS(r, "LPOP", "RPOP"), k}, pickArgs(r, [][]string{{}, {"0"}, {"1"}, {"2"}, {"10"}, {"-1"}, {"abc"}})...)
	},
	func(r *rand.Rand, k string) []string {
		return []string{"LRANGE", k, pickS(r, diffIndexes...), pickS(r, diffIndexes...)}
	},
	func(r *rand.Rand, k string) []string { return []string{pickS(r, "LLEN", "SCARD", "HLEN", "ZCARD"), k} },
	func(r *rand.Rand, k string) []string { return []string{"LINDEX", k, pickS(r, diffIndexes...)} },
	func(r *rand.Rand, k string) []string {
		return []string{"LSET", k, pickS(r, diffIndexes...), pickS(r, diffMembers...)}
	},
	func(r *rand.Rand, k string) []string {
		return []string{"LREM", k, pickS(r, "0", "1", "-1", "2", "-2", "abc"), pickS(r, diffMembers...)}
	},
	func(r *rand.Rand, k string) []string {
		return []string{"LTRIM", k, pickS(r, diffIndexes...), pickS(r, diffIndexes...)}
	},
	func(r *rand.Rand, k string) []string {
		return []string{"LINSERT", k, pickS(r, "BEFORE", "AFTER", "BAD"), pickS(r, diffMembers...), pickS(r, diffMembers...)}
	},
	func(r *rand.Rand, k string) []string {
		return append([]string{"LPOS", k, pickS(r, diffMembers...)}, pickArgs(r, [][]string{{}, {"RANK", pickS(r, diffIndexes...)},
			{"COUNT", pickS(r, "0", "1", "2", "-1")}, {"MAXLEN", pickS(r, "0", "1", "-1")}, {"RANK", "-1", "COUNT", "0"}, {"BAD", "1"}})...)
	},
	func(r *rand.Rand, k string) []string {
		return append([]string{"LMOVE", k, pickS(r, diffKeys...)}, pickArgs(r, [][]string{{"LEFT", "RIGHT"}, {"RIGHT", "LEFT"}, {"LEFT", "LEFT"}, {"UP", "LEFT"}})...)
	},
	func(r *rand.Rand, k string) []string { return []string{"RPOPLPUSH", k, pickS(r, diffKeys...)} },
	func(r *rand.Rand, k string) []string {
		return append([]string{pickS(r, "SADD", "SREM", "SMISMEMBER"), k}, diffSome(r, diffMembers)...)
	},
	func(r *rand.Rand, k string) []string { return []string{"SISMEMBER", k, pickS(r, diffMembers...)} },
	func(r *rand.Rand, k string) []string {
		return []string{pickS(r, "SMEMBERS", "SINTER", "SUNION", "SDIFF"), k, pickS(r, diffKeys...)}[:2+r.IntN(2)]
	},
	func(r *rand.Rand, k string) []string {
		return []string{pickS(r, "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"), k, pickS(r, diffKeys...), pickS(r, diffKeys...)}
	},
	func(r *rand.Rand, k string) []string {
		return []string{"SMOVE", k, pickS(r, diffKeys...), pickS(r, diffMembers...)}
	},
	func(r *rand.Rand, k string) []string {
		args := []string{pickS(r, "HSET", "HMSET"), k}
		for range 1 + r.IntN(3) {
			args = append(args, pickS(r, diffMembers...), pickS(r, diffVals...))
		}
		return args[:len(args)-r.IntN(2)] // an odd count now and then
	},
	func(r *rand.Rand, k string) []string {
		return []string{pickS(r, "HGET", "HEXISTS", "HSTRLEN", "HSETNX"), k, pickS(r, diffMembers...), pickS(r, diffVals...)}[:3+r.IntN(2)]
	},
	func(r *rand.Rand, k string) []string {
		return append([]string{pickS(r, "HMGET", "HDEL"), k}, diffSome(r, diffMembers)...)
	},
	func(r *rand.Rand, k string) []string { return []string{pickS(r, "HGETALL", "HKEYS", "HVALS"), k} },
	func(r *rand.Rand, k string) []string {
		return []string{"HINCRBY", k, pickS(r, diffMembers...), pickS(r, diffInts...)}
	},
	func(r *rand.Rand, k string) []string {
		return []string{"HINCRBYFLOAT", k, pickS(r, diffMembers...), pickS(r, diffFloat...)}
	},
	func(r *rand.Rand, k string) []string {
		args := append([]string{"ZADD", k}, pickArgs(r, [][]string{{}, {"NX"}, {"XX"}, {"GT"}, {"LT"}, {"CH"}, {"INCR"}, {"XX", "CH"},
			{"GT", "CH"}, {"NX", "XX"}, {"GT", "LT"}, {"NX", "GT"}, {"INCR", "XX"}, {"LT", "INCR"}})...)
		for range 1 + r.IntN(3) {
			args = append(args, pickS(r, diffScores...), pickS(r, diffMembers...))
		}
		return args[:len(args)-r.IntN(2)]
	},
	func(r *rand.Rand, k string) []string {
		return []string{"ZINCRBY", k, pickS(r, diffScores...), pickS(r, diffMembers...)}
	},
	func(r *rand.Rand, k string) []string {
		return append([]string{pickS(r, "ZREM", "ZMSCORE"), k}, diffSome(r, diffMembers)...)
	},
	func(r *rand.Rand, k string) []string {
		return []string{pickS(r, "ZSCORE", "ZRANK", "ZREVRANK"), k, pickS(r, diffMembers...)}
	},
	func(r *rand.Rand, k string) []string {
		return append([]string{pickS(r, "ZRANGE", "ZREVRANGE"), k, pickS(r, diffIndexes...), pickS(r, diffIndexes...)},
			pickArgs(r, [][]string{{}, {"WITHSCORES"}, {"REV"}, {"REV", "WITHSCORES"}, {"BAD"}})...)
	},
	func(r *rand.Rand, k string) []string {
		return append([]string{pickS(r, "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZCOUNT"), k, pickS(r, diffBounds...), pickS(r, diffBounds...)},
			pickArgs(r, [][]string{{}, {"WITHSCORES"}, {"LIMIT", "0", "1"}, {"LIMIT", "1", "-1"}, {"LIMIT", "-1", "2"}, {"WITHSCORES", "LIMIT", "1", "2"}, {"BAD"}})...)
	},
	func(r *rand.Rand, k string) []string {
		return append([]string{"ZRANGE", k, pickS(r, diffBounds...), pickS(r, diffBounds...), "BYSCORE"},
			pickArgs(r, [][]string{{}, {"REV"}, {"WITHSCORES"}, {"LIMIT", "0", "2"}, {"REV", "LIMIT", "1", "1", "WITHSCORES"}})...)
	},
	func(r *rand.Rand, k string) []string {
		return []string{pickS(r, "SSCAN", "HSCAN", "ZSCAN"), k, "0", "MATCH", pickS(r, "*", "a*", "1*", "?")}
	},
	func(r *rand.Rand, k string) []string {
		// OBJECT ENCODING of a typed value only: a string's is told
		// apart (case 27).
		return [][]string{{"TYPE", k}, {"OBJECT", "ENCODING", k}}[r.IntN(2)]
	},
}

func pickS(r *rand.Rand, s ...string) string { return s[r.IntN(len(s))] }

// diffSome is one to three of s.
func diffSome(r *rand.Rand, s []string) []string {
	out := make([]string, 1+r.IntN(3))
	for i := range out {
		out[i] = pickS(r, s...)
	}
	return out
}

// diffTxCommand draws a command for inside MULTI: not KEYS, whose order
// (Redis's hash table's) is sorted only where it is a reply of its own.
func diffTxCommand(r *rand.Rand) []string {
	for {
		if c := diffCommand(r); c[0] != "KEYS" {
			return c
		}
	}
}

// pickArgs draws one of opts: a command's trailing arguments.
func pickArgs(r *rand.Rand, opts [][]string) []string { return opts[r.IntN(len(opts))] }

// diffStream draws a stream: runs of commands, some inside MULTI … EXEC
// (or DISCARD, or with WATCH).
func diffStream(r *rand.Rand, n int) [][]string {
	var out [][]string
	for len(out) < n {
		switch r.IntN(8) {
		case 0:
			out = append(out, []string{"MULTI"})
			for i := r.IntN(5); i > 0; i-- {
				out = append(out, diffTxCommand(r))
			}
			out = append(out, []string{[]string{"EXEC", "DISCARD"}[r.IntN(2)]})
		case 1:
			out = append(out, []string{"WATCH", diffKeys[r.IntN(len(diffKeys))]}, diffCommand(r), []string{"MULTI"}, diffTxCommand(r), []string{"EXEC"})
		default:
			out = append(out, diffCommand(r))
		}
	}
	return out
}

// diffServers are hecd (in process) and redis-server, started once per
// test binary (the fuzz target runs many inputs on them).
var diffServers struct {
	once       sync.Once
	hec, redis string
}

// compareStream runs one stream on both, from empty stores, on one
// connection each, pipelined in chunks, and reports the first difference.
func compareStream(t testing.TB, hec, red *diffConn, stream [][]string) {
	t.Helper()
	for _, d := range []*diffConn{hec, red} {
		if out, err := d.run([][]string{{"FLUSHALL"}}); err != nil || out[0] != "+OK" {
			t.Fatalf("FLUSHALL: %v %v", out, err)
		}
	}
	for at := 0; at < len(stream); {
		n := min(len(stream)-at, 1+at%7) // pipelines of 1 to 7
		chunk := stream[at : at+n]
		h, herr := hec.run(chunk)
		r, rerr := red.run(chunk)
		if rerr != nil {
			t.Fatalf("redis-server: %v", rerr)
		}
		if herr != nil {
			t.Fatalf("hecd: %v (stream so far: %q)", herr, stream[:at+n])
		}
		for i := range chunk {
			if h[i] != r[i] {
				t.Fatalf("%q (command %d of the stream):\n  hecd:  %s\n  redis: %s\nthe stream up to it: %q",
					chunk[i], at+i, h[i], r[i], stream[max(0, at+i-40):at+i+1])
			}
		}
		at += n
	}
}

func startDiffServers(t testing.TB) (string, string) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (make test installs redis-server as root)")
	}
	diffServers.once.Do(func() {
		// Both live as long as the test binary (redis-server dies with
		// it); neither writes a file (no persistence, an in-memory store).
		var err error
		if diffServers.redis, _, err = launchRedis(os.TempDir()); err != nil {
			return
		}
		st, err := kv.Open("", kv.WithInMemory())
		if err != nil {
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return
		}
		s := &Server{Store: st, Limits: Limits{MaxBulk: 1 << 20, MaxRequest: 4 << 20}}
		go s.Serve(context.Background(), ln)
		diffServers.hec = ln.Addr().String()
	})
	if diffServers.redis == "" || diffServers.hec == "" {
		t.Fatal("could not start the two servers")
	}
	return diffServers.hec, diffServers.redis
}

// TestSameRepliesAsRedis sends random streams (seeded, reproducible) for
// about 20 s, or HEC_DIFF_SECONDS.
func TestSameRepliesAsRedis(t *testing.T) {
	hecAddr, redisAddr := startDiffServers(t)
	hec, red := dialDiff(t, hecAddr), dialDiff(t, redisAddr)
	budget := 20 * time.Second
	if s, err := strconv.Atoi(os.Getenv("HEC_DIFF_SECONDS")); err == nil {
		budget = time.Duration(s) * time.Second
	}
	if testing.Short() {
		budget = 2 * time.Second
	}
	start, streams, cmds := time.Now(), 0, 0
	for seed := uint64(1); time.Since(start) < budget; seed++ {
		stream := diffStream(rand.New(rand.NewPCG(seed, 58)), 60)
		compareStream(t, hec, red, stream)
		streams++
		cmds += len(stream)
	}
	t.Logf("%d streams, %d commands: the same replies", streams, cmds)
}

// FuzzSameRepliesAsRedis: the fuzzer's bytes seed the stream.
func FuzzSameRepliesAsRedis(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(58), uint64(7))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		hecAddr, redisAddr := startDiffServers(t)
		compareStream(t, dialDiff(t, hecAddr), dialDiff(t, redisAddr), diffStream(rand.New(rand.NewPCG(a, b)), 40))
	})
}
