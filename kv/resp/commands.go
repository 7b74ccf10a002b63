package resp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/kv"
)

// cmdFlags say how a command runs.
type cmdFlags uint8

const (
	// onLoop: the command never waits for the committer nor walks the
	// store; it runs on the event loop. Others run on a worker goroutine.
	onLoop cmdFlags = 1 << iota
	// noAuth: allowed before AUTH.
	noAuth
	// write: may change the store (COMMAND reports "write", else
	// "readonly" for commands with keys).
	write
	// txControl: runs at once inside MULTI, not queued.
	txControl
	// noMulti: refused inside MULTI (the transaction aborts), as Redis's
	// no-multi commands.
	noMulti
)

// command is one entry of the command table: what COMMAND reports, how
// the server runs it, and the function that does.
type command struct {
	name  string // upper case
	arity int    // Redis: n, exactly n words with the name; -n, at least n
	flags cmdFlags
	// keys: the first and last argument that is a key (-1: the last
	// word) and the step between keys; 0, 0, 0 for none.
	firstKey, lastKey, step int
	run                     func(c *client, ctx context.Context, args [][]byte)
	lower                   string // the name in lower case, as CLIENT LIST shows it
	idx                     int    // its row in each loop's cmdStats (0: not counted)
}

// cmdStats are a command's counts on one loop (INFO commandstats sums the
// loops'): runs, and refusals for their count of arguments. Per loop, so
// that GETs on every core do not share one cache line.
type cmdStats struct{ calls, rejected atomic.Uint64 }

// stat is the row cmd's runs by c are counted in; nil: not counted.
func (c *client) stat(cmd *command) *cmdStats {
	if c.lp == nil || cmd.idx == 0 || cmd.idx >= len(c.lp.stats) {
		return nil
	}
	return &c.lp.stats[cmd.idx]
}

func (cmd *command) runsOnLoop() bool { return cmd.flags&onLoop != 0 }

// commandTable lists every command served: strings, the keyspace, and
// the common commands of lists, sets, hashes and sorted sets (typed.go).
// Others (streams, blocking pops, scripting, pub/sub) are not: they get
// Redis's unknown-command error. (Filled in init: COMMAND reads it.)
var commandTable []*command

// commands is commandTable by upper-case name.
var commands map[string]*command

func init() {
	commandTable = []*command{
		{name: "PING", arity: -1, flags: onLoop, run: (*client).ping},
		{name: "ECHO", arity: 2, flags: onLoop, run: func(c *client, _ context.Context, a [][]byte) { c.w.Bulk(a[1]) }},
		{name: "GET", arity: 2, flags: onLoop, firstKey: 1, lastKey: 1, step: 1, run: (*client).get},
		cmdSet,
		{name: "DEL", arity: -2, flags: write, firstKey: 1, lastKey: -1, step: 1, run: (*client).del},
		{name: "UNLINK", arity: -2, flags: write, firstKey: 1, lastKey: -1, step: 1, run: (*client).del},
		{name: "EXISTS", arity: -2, flags: onLoop, firstKey: 1, lastKey: -1, step: 1, run: (*client).exists},
		{name: "MGET", arity: -2, flags: onLoop, firstKey: 1, lastKey: -1, step: 1, run: (*client).mget},
		{name: "MSET", arity: -3, flags: write, firstKey: 1, lastKey: -1, step: 2, run: (*client).mset},
		{name: "INCR", arity: 2, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).incr},
		{name: "DECR", arity: 2, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).incr},
		{name: "INCRBY", arity: 3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).incr},
		{name: "DECRBY", arity: 3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).incr},
		{name: "EXPIRE", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).expire},
		{name: "PEXPIRE", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).expire},
		{name: "PERSIST", arity: 2, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).persist},
		{name: "TTL", arity: 2, flags: onLoop, firstKey: 1, lastKey: 1, step: 1, run: (*client).ttl},
		{name: "PTTL", arity: 2, flags: onLoop, firstKey: 1, lastKey: 1, step: 1, run: (*client).ttl},
		{name: "SCAN", arity: -2, run: (*client).scan},
		{name: "DBSIZE", arity: 1, run: (*client).dbsize},
		{name: "FLUSHDB", arity: -1, flags: write, run: (*client).flush},
		{name: "FLUSHALL", arity: -1, flags: write, run: (*client).flush},
		{name: "INFO", arity: -1, run: func(c *client, _ context.Context, a [][]byte) { c.w.BulkString(c.s.info(a[1:]...)) }},
		{name: "RANDOMKEY", arity: 1, run: (*client).randomkey},
		{name: "OBJECT", arity: -2, flags: onLoop, firstKey: 2, lastKey: 2, step: 1, run: (*client).object},
		{name: "MEMORY", arity: -2, flags: onLoop, firstKey: 2, lastKey: 2, step: 1, run: (*client).memory},
		{name: "AUTH", arity: -2, flags: onLoop | noAuth, run: (*client).auth},
		{name: "SELECT", arity: 2, flags: onLoop, run: (*client).selectDB},
		{name: "HELLO", arity: -1, flags: onLoop | noAuth, run: (*client).hello},
		{name: "COMMAND", arity: -1, flags: onLoop, run: (*client).commandCmd},
		{name: "CONFIG", arity: -2, flags: onLoop, run: (*client).config},
		{name: "CLIENT", arity: -2, flags: onLoop, run: (*client).clientCmd},
		{name: "FUNCTION", arity: -2, flags: onLoop, run: (*client).function},
		{name: "SAVE", arity: 1, flags: noMulti, run: (*client).save},
		{name: "SHUTDOWN", arity: -1, flags: onLoop | noMulti, run: func(c *client, _ context.Context, _ [][]byte) {
			c.w.Error("ERR hecd stops on SIGTERM or under its supervisor, not on a client's SHUTDOWN")
		}},
		{name: "TYPE", arity: 2, flags: onLoop, firstKey: 1, lastKey: 1, step: 1, run: (*client).typeCmd},
		{name: "STRLEN", arity: 2, flags: onLoop, firstKey: 1, lastKey: 1, step: 1, run: (*client).strlen},
		{name: "GETRANGE", arity: 4, flags: onLoop, firstKey: 1, lastKey: 1, step: 1, run: (*client).getrange},
		{name: "TOUCH", arity: -2, flags: onLoop, firstKey: 1, lastKey: -1, step: 1, run: (*client).exists},
		{name: "TIME", arity: 1, flags: onLoop, run: (*client).timeCmd},
		{name: "SETEX", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).setex},
		{name: "PSETEX", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).setex},
		{name: "SETNX", arity: 3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).setnx},
		{name: "GETSET", arity: 3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).getset},
		{name: "EXPIREAT", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).expire},
		{name: "PEXPIREAT", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).expire},
		{name: "EXPIRETIME", arity: 2, flags: onLoop, firstKey: 1, lastKey: 1, step: 1, run: (*client).expiretime},
		{name: "PEXPIRETIME", arity: 2, flags: onLoop, firstKey: 1, lastKey: 1, step: 1, run: (*client).expiretime},
		{name: "KEYS", arity: 2, run: (*client).keys},
		{name: "APPEND", arity: 3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).appendCmd},
		{name: "SETBIT", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).setbit},
		{name: "GETBIT", arity: 3, flags: onLoop, firstKey: 1, lastKey: 1, step: 1, run: (*client).getbit},
		{name: "LCS", arity: -3, firstKey: 1, lastKey: 2, step: 1, run: (*client).lcs},
		{name: "SETRANGE", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).setrange},
		{name: "GETDEL", arity: 2, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).getdel},
		{name: "GETEX", arity: -2, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).getex},
		{name: "RENAME", arity: 3, flags: write, firstKey: 1, lastKey: 2, step: 1, run: (*client).rename},
		{name: "RENAMENX", arity: 3, flags: write, firstKey: 1, lastKey: 2, step: 1, run: (*client).rename},
		{name: "COPY", arity: -3, flags: write, firstKey: 1, lastKey: 2, step: 1, run: (*client).copyCmd},
		{name: "MSETNX", arity: -3, flags: write, firstKey: 1, lastKey: -1, step: 2, run: (*client).msetnx},
		{name: "INCRBYFLOAT", arity: 3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).incrbyfloat},
		{name: "MULTI", arity: 1, flags: onLoop | txControl, run: (*client).multiCmd},
		{name: "EXEC", arity: 1, flags: txControl, run: (*client).execCmd},
		{name: "DISCARD", arity: 1, flags: onLoop | txControl, run: (*client).discard},
		{name: "WATCH", arity: -2, flags: txControl, firstKey: 1, lastKey: -1, step: 1, run: (*client).watchCmd},
		{name: "UNWATCH", arity: 1, flags: onLoop | txControl, run: (*client).unwatch},
		{name: "RESET", arity: 1, flags: onLoop | noAuth | txControl, run: (*client).resetCmd},
		{name: "QUIT", arity: -1, flags: onLoop | noAuth | txControl, run: func(c *client, _ context.Context, _ [][]byte) { c.w.OK(); c.quit = true }},

		{name: "LPUSH", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).push},
		{name: "RPUSH", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).push},
		{name: "LPUSHX", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).push},
		{name: "RPUSHX", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).push},
		{name: "LPOP", arity: -2, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).pop},
		{name: "RPOP", arity: -2, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).pop},
		{name: "LLEN", arity: 2, firstKey: 1, lastKey: 1, step: 1, run: (*client).llen},
		{name: "LRANGE", arity: 4, firstKey: 1, lastKey: 1, step: 1, run: (*client).lrange},
		{name: "LINDEX", arity: 3, firstKey: 1, lastKey: 1, step: 1, run: (*client).lindex},
		{name: "LSET", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).lset},
		{name: "LREM", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).lrem},
		{name: "LTRIM", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).ltrim},
		{name: "LINSERT", arity: 5, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).linsert},
		{name: "LPOS", arity: -3, firstKey: 1, lastKey: 1, step: 1, run: (*client).lpos},
		{name: "LMOVE", arity: 5, flags: write, firstKey: 1, lastKey: 2, step: 1, run: (*client).lmove},
		{name: "RPOPLPUSH", arity: 3, flags: write, firstKey: 1, lastKey: 2, step: 1, run: (*client).lmove},

		{name: "SADD", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).sadd},
		{name: "SREM", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: removeOf(kv.KindSet)},
		{name: "SCARD", arity: 2, firstKey: 1, lastKey: 1, step: 1, run: countOf(kv.KindSet)},
		{name: "SMEMBERS", arity: 2, firstKey: 1, lastKey: 1, step: 1, run: (*client).smembers},
		{name: "SISMEMBER", arity: 3, firstKey: 1, lastKey: 1, step: 1, run: (*client).sismember},
		{name: "SMISMEMBER", arity: -3, firstKey: 1, lastKey: 1, step: 1, run: (*client).sismember},
		{name: "SPOP", arity: -2, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).spop},
		{name: "SRANDMEMBER", arity: -2, firstKey: 1, lastKey: 1, step: 1, run: (*client).srandmember},
		{name: "SMOVE", arity: 4, flags: write, firstKey: 1, lastKey: 2, step: 1, run: (*client).smove},
		{name: "SINTER", arity: -2, firstKey: 1, lastKey: -1, step: 1, run: (*client).setAlgebra},
		{name: "SUNION", arity: -2, firstKey: 1, lastKey: -1, step: 1, run: (*client).setAlgebra},
		{name: "SDIFF", arity: -2, firstKey: 1, lastKey: -1, step: 1, run: (*client).setAlgebra},
		{name: "SINTERSTORE", arity: -3, flags: write, firstKey: 1, lastKey: -1, step: 1, run: (*client).setAlgebra},
		{name: "SUNIONSTORE", arity: -3, flags: write, firstKey: 1, lastKey: -1, step: 1, run: (*client).setAlgebra},
		{name: "SDIFFSTORE", arity: -3, flags: write, firstKey: 1, lastKey: -1, step: 1, run: (*client).setAlgebra},
		{name: "SSCAN", arity: -3, firstKey: 1, lastKey: 1, step: 1, run: func(c *client, _ context.Context, a [][]byte) { c.scanTyped(kv.KindSet, a) }},

		{name: "HSET", arity: -4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).hset},
		{name: "HMSET", arity: -4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).hset},
		{name: "HSETNX", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).hsetnx},
		{name: "HGET", arity: 3, firstKey: 1, lastKey: 1, step: 1, run: (*client).hget},
		{name: "HMGET", arity: -3, firstKey: 1, lastKey: 1, step: 1, run: (*client).hget},
		{name: "HDEL", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: removeOf(kv.KindHash)},
		{name: "HLEN", arity: 2, firstKey: 1, lastKey: 1, step: 1, run: countOf(kv.KindHash)},
		{name: "HEXISTS", arity: 3, firstKey: 1, lastKey: 1, step: 1, run: (*client).hexists},
		{name: "HSTRLEN", arity: 3, firstKey: 1, lastKey: 1, step: 1, run: (*client).hexists},
		{name: "HGETALL", arity: 2, firstKey: 1, lastKey: 1, step: 1, run: (*client).hgetall},
		{name: "HKEYS", arity: 2, firstKey: 1, lastKey: 1, step: 1, run: (*client).hgetall},
		{name: "HVALS", arity: 2, firstKey: 1, lastKey: 1, step: 1, run: (*client).hgetall},
		{name: "HINCRBY", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).hincrby},
		{name: "HINCRBYFLOAT", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).hincrbyfloat},
		{name: "HSCAN", arity: -3, firstKey: 1, lastKey: 1, step: 1, run: func(c *client, _ context.Context, a [][]byte) { c.scanTyped(kv.KindHash, a) }},

		{name: "ZADD", arity: -4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).zadd},
		{name: "ZINCRBY", arity: 4, flags: write, firstKey: 1, lastKey: 1, step: 1, run: (*client).zincrby},
		{name: "ZREM", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1, run: removeOf(kv.KindZSet)},
		{name: "ZCARD", arity: 2, firstKey: 1, lastKey: 1, step: 1, run: countOf(kv.KindZSet)},
		{name: "ZSCORE", arity: 3, firstKey: 1, lastKey: 1, step: 1, run: (*client).zscore},
		{name: "ZMSCORE", arity: -3, firstKey: 1, lastKey: 1, step: 1, run: (*client).zscore},
		{name: "ZRANK", arity: 3, firstKey: 1, lastKey: 1, step: 1, run: (*client).zrank},
		{name: "ZREVRANK", arity: 3, firstKey: 1, lastKey: 1, step: 1, run: (*client).zrank},
		{name: "ZRANGE", arity: -4, firstKey: 1, lastKey: 1, step: 1, run: (*client).zrange},
		{name: "ZREVRANGE", arity: -4, firstKey: 1, lastKey: 1, step: 1, run: (*client).zrange},
		{name: "ZRANGEBYSCORE", arity: -4, firstKey: 1, lastKey: 1, step: 1, run: (*client).zrange},
		{name: "ZREVRANGEBYSCORE", arity: -4, firstKey: 1, lastKey: 1, step: 1, run: (*client).zrange},
		{name: "ZCOUNT", arity: 4, firstKey: 1, lastKey: 1, step: 1, run: (*client).zcount},
		{name: "ZSCAN", arity: -3, firstKey: 1, lastKey: 1, step: 1, run: func(c *client, _ context.Context, a [][]byte) { c.scanTyped(kv.KindZSet, a) }},
	}
	commands = make(map[string]*command, len(commandTable))
	for i, cmd := range commandTable {
		cmd.idx = i + 1
		cmd.lower = strings.ToLower(cmd.name)
		commands[cmd.name] = cmd
	}
	cmdGet = commands["GET"]
}

// cmdSet is SET's entry: the event loop treats it apart (it may answer it
// at once, or queue it to share a commit).
var cmdSet = &command{name: "SET", arity: -3, flags: write, firstKey: 1, lastKey: 1, step: 1,
	run: func(c *client, _ context.Context, a [][]byte) { c.set(a) }}

// cmdGet is GET's entry: a client with SETs queued answers it behind
// them (client.getBehind).
var cmdGet *command

// lookup finds a command by name, in any case, without allocating; nil
// when it is not served.
func lookup(name []byte) *command {
	var b [16]byte
	if len(name) > len(b) {
		return nil
	}
	up := b[:len(name)]
	for i, c := range name {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up[i] = c
	}
	return commands[string(up)]
}

// exec runs one command (nil: not served).
func (c *client) exec(ctx context.Context, cmd *command, args [][]byte) {
	if !c.authed && (cmd == nil || cmd.flags&noAuth == 0) {
		c.w.Error("NOAUTH Authentication required.")
		return
	}
	if cmd == cmdGet && len(c.pending) > 0 && len(args) == 2 && !c.tx.multi && c.getBehind(args[1]) {
		return
	}
	if cmd != cmdSet || !c.replying() || !cmd.arityOK(len(args)) {
		// Replies of SETs queued before come first (a SET may queue
		// behind them; one refused for its arguments may not overtake
		// them).
		c.drain()
	}
	if !c.replying() {
		// CLIENT REPLY OFF or SKIP: this command's reply is dropped
		// (SET's too: not deferred while replies are dropped).
		mark := c.w.Len()
		defer func() {
			if c.replyOff || c.skipReply == 1 {
				c.w.buf = c.w.buf[:mark]
			}
			if c.skipReply == 1 {
				c.skipReply = 0
			}
		}()
	}
	switch {
	case c.tx.multi && (cmd == nil || cmd.flags&txControl == 0):
		c.queue(cmd, args)
	case cmd == nil:
		c.unknown(args)
	case !cmd.arityOK(len(args)):
		if st := c.stat(cmd); st != nil {
			st.calls.Add(1)
			st.rejected.Add(1)
		}
		c.wrongArgs(cmd.name)
	case cmd.run == nil:
	default:
		if st := c.stat(cmd); st != nil {
			st.calls.Add(1)
		}
		if cmd.name != "EXEC" { // EXEC holds the gate alone
			c.s.Store.Gate().RLock()
			defer c.s.Store.Gate().RUnlock()
		}
		cmd.run(c, ctx, args)
	}
}

func (cmd *command) arityOK(n int) bool {
	return cmd.arity > 0 && n == cmd.arity || cmd.arity < 0 && n >= -cmd.arity
}

// unknown answers a command not served.
func (c *client) unknown(args [][]byte) {
	var b strings.Builder
	for _, a := range args[1:min(len(args), 4)] {
		fmt.Fprintf(&b, "'%s' ", cut(a))
	}
	c.w.Error(fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", cut(args[0]), b.String()))
}

// cut shortens an argument echoed in an error to 128 bytes (as Redis).
func cut(b []byte) []byte { return b[:min(len(b), 128)] }

func (c *client) ping(_ context.Context, args [][]byte) {
	switch len(args) {
	case 1:
		c.w.Simple("PONG")
	case 2:
		c.w.Bulk(args[1])
	default:
		c.wrongArgs("PING")
	}
}

func (c *client) get(_ context.Context, args [][]byte) {
	e, err := c.s.Store.Get(args[1], c.scratch)
	if cap(e.Value) <= 64<<10 { // keep small buffers only: idle clients hold little
		c.scratch = e.Value
	}
	switch {
	case errors.Is(err, kv.ErrNotFound):
		c.w.NullBulk()
	case err != nil:
		c.storeErr(err)
	default:
		c.w.Bulk(e.Value)
	}
}

func (c *client) del(_ context.Context, args [][]byte) {
	n, err := c.s.Store.Delete(args[1:]...)
	if err != nil {
		c.storeErr(err)
		return
	}
	c.w.Int(int64(n))
}

func (c *client) exists(_ context.Context, args [][]byte) {
	n := 0
	for _, k := range args[1:] {
		if _, err := c.s.Store.Lookup(k, nil); err == nil {
			n++
		} else if !errors.Is(err, kv.ErrNotFound) {
			c.storeErr(err)
			return
		}
	}
	c.w.Int(int64(n))
}

func (c *client) mget(_ context.Context, args [][]byte) {
	c.w.Array(len(args) - 1)
	for _, k := range args[1:] {
		e, err := c.s.Store.Get(k, nil)
		c.w.BulkOrNull(e.Value, err == nil)
	}
}

func (c *client) mset(_ context.Context, args [][]byte) {
	if len(args)%2 != 1 {
		c.wrongArgs("MSET")
		return
	}
	ops := make([]kv.Op, 0, len(args)/2)
	for i := 1; i < len(args); i += 2 {
		ops = append(ops, kv.Op{Key: args[i], Value: args[i+1]})
	}
	if err := c.s.Store.Batch(ops); err != nil {
		c.storeErr(err)
		return
	}
	c.w.OK()
}

// incr serves INCR, DECR, INCRBY and DECRBY.
func (c *client) incr(_ context.Context, args [][]byte) {
	name := strings.ToUpper(string(args[0]))
	delta := int64(1)
	if len(args) == 3 {
		var ok bool
		if delta, ok = parseInt(args[2]); !ok {
			c.w.Error("ERR value is not an integer or out of range")
			return
		}
	}
	if name[0] == 'D' {
		if delta == -1<<63 {
			c.w.Error("ERR decrement would overflow")
			return
		}
		delta = -delta
	}
	n, err := c.s.Store.IncrBy(args[1], delta)
	if err != nil {
		c.storeErr(err)
		return
	}
	c.w.Int(n)
}

// expireAfter turns an expire argument n in unit (time.Second or
// time.Millisecond) into a duration from now, saturating at what a
// time.Duration holds (292 years: a key set to expire later expires then);
// false where Redis answers "invalid expire time": n in milliseconds, or
// now plus that, overflows 64 bits.
func expireAfter(n int64, unit time.Duration) (time.Duration, bool) {
	ms := n
	if unit == time.Second {
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			return 0, false
		}
		ms = n * 1000
	}
	if now := time.Now().UnixMilli(); ms > math.MaxInt64-now {
		return 0, false
	}
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// expireAt is expireAfter for an absolute Unix time (EXAT, PXAT).
func expireAt(n int64, unit time.Duration) (time.Duration, bool) {
	ms := n
	if unit == time.Second {
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			return 0, false
		}
		ms = n * 1000
	}
	return time.Until(time.UnixMilli(ms)), true // Until saturates
}

// expireAtTime is expireAt's millisecond itself, exactly (n already
// checked by expireAt): not now plus a duration taken at another moment,
// which drifts across a millisecond boundary on a busy machine.
func expireAtTime(n int64, unit time.Duration) time.Time {
	if unit == time.Second {
		return time.UnixMilli(n * 1000)
	}
	return time.UnixMilli(n)
}

// expiryOf is the store's expiry for d from now: for an absolute time at
// (EXAT, PXAT, EXPIREAT, PEXPIREAT) the millisecond asked for, else, as
// Redis, the current millisecond plus d.
func expiryOf(d time.Duration, at time.Time) uint64 {
	if !at.IsZero() {
		return kv.ExpiryMillis(at)
	}
	return kv.ExpiryAfter(d)
}

// expire serves EXPIRE and PEXPIRE (a time from now) and EXPIREAT and
// PEXPIREAT (a Unix time); a time not in the future deletes the key.
func (c *client) expire(_ context.Context, args [][]byte) {
	name := strings.ToUpper(string(args[0]))
	n, ok := parseInt(args[2])
	if !ok {
		c.w.Error("ERR value is not an integer or out of range")
		return
	}
	unit := time.Second
	if name[0] == 'P' {
		unit = time.Millisecond
	}
	absolute := strings.HasSuffix(name, "AT")
	var d time.Duration
	var at time.Time // absolute: the millisecond asked for
	if absolute {
		if d, ok = expireAt(n, unit); ok {
			at = expireAtTime(n, unit)
		}
	} else {
		d, ok = expireAfter(n, unit)
	}
	if !ok {
		c.w.Error("ERR invalid expire time in '" + strings.ToLower(name) + "' command")
		return
	}
	if len(args) > 3 {
		c.expireIf(args, expiryOf(d, at), absolute && d <= 0 || !absolute && n <= 0)
		return
	}
	var found bool
	var err error
	switch {
	case d <= 0 || (!absolute && n <= 0):
		var cnt int
		cnt, err = c.s.Store.Delete(args[1])
		found = cnt > 0
	case absolute: // to the millisecond asked for
		found, err = c.s.Store.ExpireAt(args[1], at)
	default: // at least the time asked for
		found, err = c.s.Store.Expire(args[1], d)
	}
	if err != nil {
		c.storeErr(err)
		return
	}
	c.w.Int(b2i(found))
}

func (c *client) persist(_ context.Context, args [][]byte) {
	e, err := c.s.Store.Lookup(args[1], nil)
	if err != nil || e.ExpiresAt.IsZero() {
		c.w.Int(0)
		return
	}
	found, err := c.s.Store.Expire(args[1], 0)
	if err != nil {
		c.storeErr(err)
		return
	}
	c.w.Int(b2i(found))
}

// ttl serves TTL and PTTL.
func (c *client) ttl(_ context.Context, args [][]byte) {
	e, err := c.s.Store.Lookup(args[1], nil)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		c.w.Int(-2)
	case err != nil:
		c.storeErr(err)
	case e.ExpiresAt.IsZero():
		c.w.Int(-1)
	default: // as Redis: milliseconds left, TTL rounds them to seconds
		ms := max(0, e.ExpiresAt.UnixMilli()-time.Now().UnixMilli())
		if args[0][0] == 't' || args[0][0] == 'T' {
			ms = (ms + 500) / 1000
		}
		c.w.Int(ms)
	}
}

func (c *client) dbsize(_ context.Context, _ [][]byte) {
	n, err := c.s.Store.Count()
	if err != nil {
		c.storeErr(err)
		return
	}
	c.w.Int(int64(n))
}

// flush serves FLUSHDB and FLUSHALL [ASYNC|SYNC] (one database: the
// same). Either way the keys are gone when it answers.
func (c *client) flush(_ context.Context, args [][]byte) {
	if len(args) > 2 || (len(args) == 2 && !eq(args[1], "ASYNC") && !eq(args[1], "SYNC")) {
		c.w.Error("ERR syntax error")
		return
	}
	if _, err := c.s.Store.DeleteAll(); err != nil {
		c.storeErr(err)
		return
	}
	c.w.OK()
}

func (c *client) auth(_ context.Context, args [][]byte) {
	pass := args[len(args)-1]
	switch {
	case len(args) > 3:
		c.wrongArgs("AUTH")
	case c.s.Password == "":
		c.w.Error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	case string(pass) == c.s.Password && (len(args) == 2 || string(args[1]) == "default"):
		c.authed = true
		c.w.OK()
	default:
		c.w.Error("WRONGPASS invalid username-password pair or user is disabled.")
	}
}

func (c *client) selectDB(_ context.Context, args [][]byte) {
	if string(args[1]) != "0" {
		c.w.Error("ERR DB index is out of range")
		return
	}
	c.w.OK()
}

// commandCmd serves COMMAND, COMMAND COUNT, COMMAND INFO name... and
// COMMAND LIST from the table; COMMAND DOCS answers an empty map.
func (c *client) commandCmd(_ context.Context, args [][]byte) {
	if len(args) == 1 {
		c.w.Array(len(commandTable))
		for _, cmd := range commandTable {
			c.commandEntry(cmd)
		}
		return
	}
	switch strings.ToUpper(string(args[1])) {
	case "COUNT":
		c.w.Int(int64(len(commandTable)))
	case "LIST":
		c.w.Array(len(commandTable))
		for _, cmd := range commandTable {
			c.w.BulkString(strings.ToLower(cmd.name))
		}
	case "INFO":
		c.w.Array(len(args) - 2)
		for _, name := range args[2:] {
			if cmd := lookup(name); cmd != nil {
				c.commandEntry(cmd)
			} else {
				c.w.NullArray()
			}
		}
	case "DOCS":
		c.w.Array(0)
	default:
		c.w.Error("ERR unknown subcommand '" + string(args[1]) + "'. Try COMMAND HELP.")
	}
}

// commandEntry writes a command as Redis 7 describes it: name, arity,
// flags, first key, last key, step, ACL categories, tips, key specs,
// subcommands.
func (c *client) commandEntry(cmd *command) {
	var flags []string
	switch {
	case cmd.flags&write != 0:
		flags = append(flags, "write")
	case cmd.step != 0:
		flags = append(flags, "readonly")
	}
	if cmd.flags&onLoop != 0 {
		flags = append(flags, "fast")
	}
	if cmd.flags&noAuth != 0 {
		flags = append(flags, "no_auth")
	}
	c.w.Array(10)
	c.w.BulkString(strings.ToLower(cmd.name))
	c.w.Int(int64(cmd.arity))
	c.w.Array(len(flags))
	for _, f := range flags {
		c.w.Simple(f)
	}
	c.w.Int(int64(cmd.firstKey))
	c.w.Int(int64(cmd.lastKey))
	c.w.Int(int64(cmd.step))
	c.w.Array(0)
	c.w.Array(0)
	c.w.Array(0)
	c.w.Array(0)
}

func (c *client) typeCmd(_ context.Context, args [][]byte) {
	switch e, err := c.s.Store.Lookup(args[1], nil); {
	case err == nil:
		c.w.Simple(e.Kind.String())
	case errors.Is(err, kv.ErrNotFound):
		c.w.Simple("none")
	default:
		c.storeErr(err)
	}
}

func (c *client) strlen(_ context.Context, args [][]byte) {
	e, err := c.s.Store.Get(args[1], nil)
	switch {
	case err == nil:
		c.w.Int(int64(len(e.Value)))
	case errors.Is(err, kv.ErrNotFound):
		c.w.Int(0)
	default:
		c.storeErr(err)
	}
}

// getrange serves GETRANGE key start end, with Redis's negative indexes.
func (c *client) getrange(_ context.Context, args [][]byte) {
	start, ok1 := parseInt(args[2])
	end, ok2 := parseInt(args[3])
	if !ok1 || !ok2 {
		c.w.Error("ERR value is not an integer or out of range")
		return
	}
	e, err := c.s.Store.Get(args[1], nil)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		c.storeErr(err)
		return
	}
	n := int64(len(e.Value))
	if start < 0 && end < 0 && start > end {
		c.w.Bulk(nil)
		return
	}
	if start < 0 {
		start = max(n+start, 0)
	}
	if end < 0 {
		end = max(n+end, 0)
	}
	end = min(end, n-1)
	if n == 0 || start > end {
		c.w.Bulk(nil)
		return
	}
	c.w.Bulk(e.Value[start : end+1])
}

func (c *client) timeCmd(_ context.Context, _ [][]byte) {
	now := time.Now()
	c.w.Array(2)
	c.w.BulkString(strconv.FormatInt(now.Unix(), 10))
	c.w.BulkString(strconv.Itoa(now.Nanosecond() / 1000))
}

// setex serves SETEX and PSETEX as SET key value EX|PX n.
func (c *client) setex(_ context.Context, args [][]byte) {
	unit := "EX"
	if args[0][0] == 'p' || args[0][0] == 'P' {
		unit = "PX"
	}
	c.set([][]byte{args[0], args[1], args[3], []byte(unit), args[2]}) // errors name SETEX or PSETEX
}

func (c *client) setnx(_ context.Context, args [][]byte) {
	_, err := c.s.Store.Put(args[1], args[2], kv.PutOptions{IfAbsent: true})
	switch {
	case err == nil:
		c.w.Int(1)
	case errors.Is(err, kv.ErrExists):
		c.w.Int(0)
	default:
		c.storeErr(err)
	}
}

// getset serves GETSET as SET key value GET.
func (c *client) getset(_ context.Context, args [][]byte) {
	c.set([][]byte{[]byte("SET"), args[1], args[2], []byte("GET")})
}

// expiretime serves EXPIRETIME and PEXPIRETIME: -1 without an expiry, -2
// for a missing key.
func (c *client) expiretime(_ context.Context, args [][]byte) {
	e, err := c.s.Store.Lookup(args[1], nil)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		c.w.Int(-2)
	case err != nil:
		c.storeErr(err)
	case e.ExpiresAt.IsZero():
		c.w.Int(-1)
	case args[0][0] == 'p' || args[0][0] == 'P':
		c.w.Int(e.ExpiresAt.UnixMilli())
	default:
		c.w.Int(e.ExpiresAt.Unix())
	}
}

// keys serves KEYS pattern: every matching key, walked a page at a time.
func (c *client) keys(_ context.Context, args [][]byte) {
	pattern := args[1]
	prefix := literalPrefix(pattern)
	var out [][]byte
	var cursor []byte
	for {
		page, next, err := c.s.Store.Scan(prefix, cursor, 1000, true)
		if err != nil {
			c.storeErr(err)
			return
		}
		for _, p := range page {
			if globMatch(pattern, p.Key) {
				out = append(out, p.Key)
			}
		}
		if next == nil {
			break
		}
		cursor = next
	}
	c.w.Array(len(out))
	for _, k := range out {
		c.w.Bulk(k)
	}
}

// errReply is a Modify function's refusal that is already Redis's reply.
type errReply string

func (e errReply) Error() string { return string(e) }

// modify runs a read-modify-write on the store and writes its reply: the
// function's own refusal (errReply) as is, other errors as store errors.
func (c *client) modify(key []byte, maxSize int, f func(cur []byte, exists bool) ([]byte, bool, error), reply func()) {
	c.replyTo(c.s.Store.Modify(key, maxSize, f), reply)
}

// replyTo writes reply, or err: an errReply as is, others as store errors.
// errUnchanged, from a modify or update function, leaves the key as it
// is — no write, so a WATCH of it holds — and the command replies as
// usual.
var errUnchanged = errors.New("resp: unchanged")

func (c *client) replyTo(err error, reply func()) {
	var r errReply
	switch {
	case errors.Is(err, errUnchanged):
		reply()
	case errors.As(err, &r):
		c.w.Error(string(r))
	case err != nil:
		c.storeErr(err)
	default:
		reply()
	}
}

// appendCmd serves APPEND key value: the new length.
func (c *client) appendCmd(_ context.Context, args [][]byte) {
	var n int
	c.modify(args[1], kv.MaxValueSize, func(cur []byte, _ bool) ([]byte, bool, error) {
		next := append(cur, args[2]...)
		n = len(next)
		return next, false, nil
	}, func() { c.w.Int(int64(n)) })
}

// setrange serves SETRANGE key offset value: zeros pad a value shorter
// than offset; the new length.
func (c *client) setrange(_ context.Context, args [][]byte) {
	off, ok := parseInt(args[2])
	if !ok {
		c.w.Error("ERR value is not an integer or out of range")
		return
	}
	if off < 0 {
		c.w.Error("ERR offset is out of range")
		return
	}
	// As Redis: an empty value sets nothing and is not held to the size;
	// a key of another kind is refused before the size is looked at.
	tooBig := len(args[3]) > 0 && off > kv.MaxValueSize-int64(len(args[3])) // not off+len: it overflows for an offset near 2^63
	if len(args[3]) == 0 {
		// Nothing to write: the length, and no write (a WATCH of the key
		// holds).
		c.strlen(context.Background(), args[:2])
		return
	}
	var n int
	c.modify(args[1], kv.MaxValueSize, func(cur []byte, exists bool) ([]byte, bool, error) {
		if tooBig {
			return nil, false, errReply("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
		}
		next := cur
		if end := int(off) + len(args[3]); end > len(next) {
			next = append(next, make([]byte, end-len(next))...)
		}
		copy(next[off:], args[3])
		n = len(next)
		return next, false, nil
	}, func() { c.w.Int(int64(n)) })
}

// getdel serves GETDEL key: its value (nil if none), deleting it.
func (c *client) getdel(_ context.Context, args [][]byte) {
	var v []byte
	var found bool
	c.modify(args[1], 0, func(cur []byte, exists bool) ([]byte, bool, error) {
		v, found = append([]byte(nil), cur...), exists
		return nil, true, nil
	}, func() { c.w.BulkOrNull(v, found) })
}

// incrbyfloat serves INCRBYFLOAT key increment, as Redis formats floats.
func (c *client) incrbyfloat(_ context.Context, args [][]byte) {
	var out []byte
	c.modify(args[1], 5<<10, func(cur []byte, exists bool) ([]byte, bool, error) {
		// Redis's order: the key's kind, its value, then the increment.
		v := new(big.Float).SetPrec(64)
		if exists {
			var ok bool
			if v, ok = parseLongDouble(cur); !ok {
				return nil, false, errReply("ERR value is not a valid float")
			}
		}
		incr, ok := parseLongDouble(args[2])
		if !ok {
			return nil, false, errReply("ERR value is not a valid float")
		}
		if !addLongDouble(v, incr) {
			return nil, false, errReply("ERR increment would produce NaN or Infinity")
		}
		out = formatLongDouble(v)
		return out, false, nil
	}, func() { c.w.Bulk(out) })
}

// INCRBYFLOAT computes as Redis does on x86, in the C long double of 64
// bits of mantissa, and prints the result as Redis does ("%.17Lf", the
// trailing zeros cut): INCRBYFLOAT of 10.6 by 5e3 is 5010.60000000000000009
// there, and here.

// parseLongDouble reads a number as strtold does (decimal, or hexadecimal
// with 0x) into 64 bits of mantissa; Redis refuses spaces and what
// overflows a long double.
func parseLongDouble(b []byte) (*big.Float, bool) {
	if len(b) == 0 || bytes.ContainsAny(b, " \t\r\n\v\f_") {
		return nil, false
	}
	digits := bytes.TrimLeft(b, "+-")
	if len(digits) > 1 && digits[0] == '0' && bytes.ContainsRune([]byte("bBoO"), rune(digits[1])) {
		return nil, false // Go's prefixes, not C's
	}
	if isInf(digits) { // strtold's inf and infinity, which Redis takes
		return new(big.Float).SetInf(b[0] == '-'), true
	}
	f, _, err := big.ParseFloat(string(b), 0, 64, big.ToNearestEven)
	if err != nil || f.IsInf() {
		return nil, false
	}
	if e := f.MantExp(nil); e > 16384 { // past a long double's range
		return nil, false
	}
	return f, true
}

// isInf reports whether b (its sign taken off) is strtold's "inf" or
// "infinity", in any case.
func isInf(b []byte) bool {
	s := strings.ToLower(string(b))
	return s == "inf" || s == "infinity"
}

// addLongDouble adds incr to v as a C long double would, and reports
// whether the sum is finite (Redis refuses NaN and infinities).
func addLongDouble(v, incr *big.Float) bool {
	if v.IsInf() || incr.IsInf() { // C's inf (or NaN, where they differ in sign; big.Float would panic)
		return false
	}
	v.Add(v, incr)
	return v.MantExp(nil) <= 16384 // past a long double's range: C's inf
}

// formatLongDouble prints f as Redis's ld2string(LD_STR_HUMAN).
func formatLongDouble(f *big.Float) []byte {
	s := f.Text('f', 17)
	if strings.IndexByte(s, '.') >= 0 {
		s = strings.TrimRight(s, "0")
		s = strings.TrimSuffix(s, ".")
	}
	if s == "-0" {
		s = "0"
	}
	return []byte(s)
}

// update runs Store.Update and writes the reply as modify does.
func (c *client) update(keys [][]byte, maxSize int, f func(cells []kv.Cell) error, reply func()) {
	c.replyTo(c.s.Store.Update(keys, maxSize, f), reply)
}

// rename serves RENAME and RENAMENX: the value and its expiry move.
func (c *client) rename(_ context.Context, args [][]byte) {
	nx := eq(args[0], "RENAMENX")
	moved := false
	c.update([][]byte{args[1], args[2]}, kv.MaxValueSize, func(cells []kv.Cell) error {
		src, dst := &cells[0], &cells[1]
		if !src.Exists {
			return errReply("ERR no such key")
		}
		if bytes.Equal(src.Key, dst.Key) || nx && dst.Exists {
			return nil // nothing moves
		}
		dst.Value, dst.Kind, dst.Expires, dst.Write = src.Value, src.Kind, src.Expires, true
		src.Delete, moved = true, true
		return nil
	}, func() {
		if nx {
			c.w.Int(b2i(moved))
		} else {
			c.w.OK()
		}
	})
}

// copyCmd serves COPY source destination [DB 0] [REPLACE].
func (c *client) copyCmd(_ context.Context, args [][]byte) {
	replace := false
	for i := 3; i < len(args); i++ {
		switch {
		case eq(args[i], "REPLACE"):
			replace = true
		case eq(args[i], "DB") && i+1 < len(args):
			if db, ok := parseInt(args[i+1]); !ok || db != int64(int32(db)) {
				c.w.Error("ERR value is not an integer or out of range")
				return
			} else if db != 0 {
				c.w.Error("ERR DB index is out of range")
				return
			}
			i++
		default:
			c.w.Error("ERR syntax error")
			return
		}
	}
	if bytes.Equal(args[1], args[2]) {
		c.w.Error("ERR source and destination objects are the same")
		return
	}
	copied := false
	c.update([][]byte{args[1], args[2]}, kv.MaxValueSize, func(cells []kv.Cell) error {
		src, dst := &cells[0], &cells[1]
		if !src.Exists || bytes.Equal(src.Key, dst.Key) || dst.Exists && !replace {
			return nil
		}
		dst.Value, dst.Kind, dst.Expires, dst.Write = src.Value, src.Kind, src.Expires, true
		copied = true
		return nil
	}, func() { c.w.Int(b2i(copied)) })
}

// msetnx serves MSETNX: all the keys are set, or none if any exists.
func (c *client) msetnx(_ context.Context, args [][]byte) {
	if len(args)%2 != 1 {
		c.wrongArgs("MSETNX")
		return
	}
	var keys [][]byte
	size := 0
	for i := 1; i < len(args); i += 2 {
		keys = append(keys, args[i])
		size += len(args[i+1])
	}
	set := false
	c.update(keys, size, func(cells []kv.Cell) error {
		for _, cell := range cells {
			if cell.Exists {
				return nil
			}
		}
		for i := range cells {
			cells[i].Value, cells[i].Kind, cells[i].Expires, cells[i].Write = args[2+2*i], kv.KindString, 0, true
		}
		set = true
		return nil
	}, func() { c.w.Int(b2i(set)) })
}

// expireIf serves the EXPIRE family with NX, XX, GT or LT: the expiry is
// set (or the key deleted, when past) only if the condition holds; a key
// without an expiry counts as expiring never.
func (c *client) expireIf(args [][]byte, when uint64, past bool) {
	var nx, xx, gt, lt bool
	for _, a := range args[3:] {
		switch {
		case eq(a, "NX"):
			nx = true
		case eq(a, "XX"):
			xx = true
		case eq(a, "GT"):
			gt = true
		case eq(a, "LT"):
			lt = true
		default:
			c.w.Error("ERR Unsupported option " + string(cut(a)))
			return
		}
	}
	switch {
	case nx && (xx || gt || lt):
		c.w.Error("ERR NX and XX, GT or LT options at the same time are not compatible")
		return
	case gt && lt:
		c.w.Error("ERR GT and LT options at the same time are not compatible")
		return
	}
	done := false
	c.update([][]byte{args[1]}, kv.MaxValueSize, func(cells []kv.Cell) error {
		cell := &cells[0]
		if !cell.Exists {
			return nil
		}
		cur, has := cell.Expires, cell.Expires != 0
		switch {
		case nx && has, xx && !has, gt && (!has || when <= cur), lt && has && when >= cur:
			return nil
		case past:
			cell.Delete = true
		default:
			cell.Expires, cell.Write = when, true
		}
		done = true
		return nil
	}, func() { c.w.Int(b2i(done)) })
}

// getex serves GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST]: the
// value, and its expiry changed as asked.
func (c *client) getex(_ context.Context, args [][]byte) {
	change, persist := false, false
	bad := ""        // the time's error, answered where the key exists
	var at time.Time // EXAT, PXAT: the millisecond asked for
	var d time.Duration
	switch {
	case len(args) == 2:
	case len(args) == 3 && eq(args[2], "PERSIST"):
		change, persist = true, true
	case len(args) == 4 && (eq(args[2], "EX") || eq(args[2], "PX") || eq(args[2], "EXAT") || eq(args[2], "PXAT")):
		// As Redis, the time is checked only where the key exists: a
		// missing key answers nil whatever it is.
		n, ok := parseInt(args[3])
		switch {
		case !ok:
			bad = "ERR value is not an integer or out of range"
		case eq(args[2], "EX"):
			d, ok = expireAfter(n, time.Second)
		case eq(args[2], "PX"):
			d, ok = expireAfter(n, time.Millisecond)
		case eq(args[2], "EXAT"):
			d, ok = expireAt(n, time.Second)
			at = expireAtTime(n, time.Second)
		default: // PXAT
			d, ok = expireAt(n, time.Millisecond)
			at = expireAtTime(n, time.Millisecond)
		}
		if bad == "" && (!ok || n <= 0) {
			bad = "ERR invalid expire time in 'getex' command"
		}
		change = true
	default:
		c.w.Error("ERR syntax error")
		return
	}
	when := expiryOf(d, at)
	var v []byte
	var found bool
	c.update([][]byte{args[1]}, kv.MaxValueSize, func(cells []kv.Cell) error {
		cell := &cells[0]
		if cell.Exists && cell.Kind != kv.KindString {
			return kv.ErrWrongType // before the time is looked at, as in Redis
		}
		v, found = cell.Value, cell.Exists
		if !found || !change || bad != "" {
			return nil
		}
		switch {
		case persist && cell.Expires == 0:
			// No expiry to remove: no write (a WATCH of the key holds).
		case persist:
			cell.Expires, cell.Write = 0, true
		case d <= 0:
			cell.Delete = true
		default:
			cell.Expires, cell.Write = when, true
		}
		return nil
	}, func() {
		if found && bad != "" {
			c.w.Error(bad)
			return
		}
		c.w.BulkOrNull(v, found)
	})
}

// randomkey serves RANDOMKEY: the first key at or after a random point of
// the key space (keys are spread by their bytes, not evenly: a sampling of
// the keyspace, not a uniform draw), nil when empty.
// randomKeySample is how many keys RANDOMKEY draws among: from a random
// place in the key order onwards (wrapping to the first keys). A store of
// up to this many keys is drawn from uniformly; a larger one nearly so,
// where its keys spread over the byte range.
const randomKeySample = 64

func (c *client) randomkey(_ context.Context, _ [][]byte) {
	var from [8]byte
	binary.BigEndian.PutUint64(from[:], rand.Uint64())
	page, _, err := c.s.Store.Scan(nil, from[:], randomKeySample, true)
	if err == nil && len(page) < randomKeySample {
		var more []kv.KV
		more, _, err = c.s.Store.Scan(nil, nil, randomKeySample-len(page), true)
		for _, p := range more {
			if len(page) > 0 && bytes.Compare(p.Key, page[0].Key) >= 0 {
				break // wrapped around to where the first scan began
			}
			page = append(page, p)
		}
	}
	if err != nil {
		c.storeErr(err)
		return
	}
	if len(page) == 0 {
		c.w.NullBulk()
		return
	}
	c.w.Bulk(page[rand.IntN(len(page))].Key)
}

// object serves OBJECT REFCOUNT key (1: no value is shared) and OBJECT
// ENCODING key: for a string "int", "embstr" or
// "raw", as Redis would say; for a typed value the encoding Redis would
// hold it in (typed.go).
func (c *client) object(_ context.Context, args [][]byte) {
	refcount := eq(args[1], "REFCOUNT")
	if !eq(args[1], "ENCODING") && !refcount || len(args) != 3 {
		c.w.Error("ERR unknown subcommand '" + string(cut(args[1])) + "'. Try OBJECT HELP.")
		return
	}
	e, err := c.s.Store.Lookup(args[2], nil)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		c.w.NullBulk()
	case err != nil:
		c.storeErr(err)
	case refcount:
		c.w.Int(1) // hecd shares no value between keys
	case e.Kind != kv.KindString:
		v, err := decodeTyped(e.Kind, e.Value)
		if err != nil {
			c.storeErr(err)
			return
		}
		c.w.BulkString(v.encodingName())
	case len(e.Value) <= 20 && func() bool { _, ok := kv.ParseInt(e.Value); return ok }():
		c.w.BulkString("int")
	case len(e.Value) <= 44:
		c.w.BulkString("embstr")
	default:
		c.w.BulkString("raw")
	}
}

// memory serves MEMORY USAGE key: the bytes the key and value take, and
// the entry's overhead (as the store holds them, an estimate).
func (c *client) memory(_ context.Context, args [][]byte) {
	if !eq(args[1], "USAGE") || len(args) < 3 {
		c.w.Error("ERR unknown subcommand '" + string(cut(args[1])) + "'. Try MEMORY HELP.")
		return
	}
	e, err := c.s.Store.Lookup(args[2], nil)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		c.w.NullBulk()
	case err != nil:
		c.storeErr(err)
	default:
		c.w.Int(int64(len(args[2]) + len(e.Value) + 48))
	}
}
