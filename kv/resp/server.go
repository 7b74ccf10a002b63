package resp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hecsys/hec/kv"
	"github.com/hecsys/hec/shared/panics"
)

// scanCursors are the SCAN cursors in use, the server's (not a
// connection's): a pooled client continues a scan on any connection.
// Each cursor names the next key; the oldest are forgotten past
// maxCursors or maxCursorBytes of keys.
type scanCursors struct {
	mu    sync.Mutex
	next  uint64
	m     map[uint64][]byte
	order []uint64
	bytes int
}

const (
	maxCursors     = 4096
	maxCursorBytes = 4 << 20
)

func (sc *scanCursors) put(key []byte) uint64 {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.m == nil {
		sc.m = map[uint64][]byte{}
		sc.next = uint64(time.Now().UnixNano()) & (1<<40 - 1) // restarts do not reuse recent ids
	}
	for len(sc.order) > 0 && (len(sc.order) >= maxCursors || sc.bytes+len(key) > maxCursorBytes) {
		old := sc.order[0]
		sc.order = sc.order[1:]
		sc.bytes -= len(sc.m[old])
		delete(sc.m, old)
	}
	sc.next++
	sc.m[sc.next] = key
	sc.order = append(sc.order, sc.next)
	sc.bytes += len(key)
	return sc.next
}

func (sc *scanCursors) get(id uint64) ([]byte, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	k, ok := sc.m[id]
	return k, ok
}

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("resp: server closed")

// Server serves a store over RESP.
type Server struct {
	Store    *kv.Store
	Password string // AUTH required when set
	Limits   Limits
	Log      *slog.Logger
	// WriteTimeout drops a client that does not read its replies (default 30s).
	WriteTimeout time.Duration
	// Version is reported by INFO.
	Version string

	mu      sync.Mutex
	loops   []*loop
	closed  bool
	started time.Time
	ids     atomic.Int64
	next    atomic.Uint64  // round-robin over loops
	running sync.WaitGroup // loops and the workers they start

	connected, total, commands, rejected atomic.Int64
	registry                             registry // connected clients (clients.go)

	cursors scanCursors
	limits  encodingLimits // Redis's thresholds of OBJECT ENCODING (typed.go)
}

// Clients returns the number of connected clients.
func (s *Server) Clients() int64 { return s.connected.Load() }

type client struct {
	s       *Server
	lp      *loop
	fd      int
	remote  string
	local   string    // the listener's address it connected to
	created time.Time // when it connected
	seen    seen      // what CLIENT LIST shows of it (clients.go)
	w       Writer
	id      int64
	authed  bool
	quit    bool
	// CLIENT REPLY: replyOff drops every reply until ON; skipReply 1
	// drops the next command's (SKIP).
	replyOff  bool
	skipReply int8

	// Owned by the loop, or by a worker while busy.
	in           []byte    // bytes read and not yet parsed
	args         [][]byte  // Parse's table, reused
	parser       Parser    // resumes a request that arrives in many reads
	wrote        int       // bytes of w already written
	busy         bool      // a worker runs its requests
	parked       bool      // waits for its queued SETs (the loop's)
	inOff        bool      // parked, holding enough: its socket is not watched
	closing      bool      // close once the replies are written
	stalledSince time.Time // replies could not be written since

	scratch []byte // GET's value buffer, reused

	// Pipelined SETs queued in the store, their replies not yet written:
	// a run of them shares one commit. Written, in order, before any other
	// reply (drain).
	pending []kv.Pending
	sets    []queuedSet // what they write, in the same order
	arena   []byte      // their keys and values, copied out of the read buffer
	// GETs answered behind the queued SETs: their replies, written by
	// drain after the reply of the SET they followed.
	later    Writer
	behind   []laterReply
	canDefer bool // more requests are buffered: a SET may be queued
	tx       txState
	// handed is the first request's SET options, parsed by the loop that
	// handed the client to a worker (nil: none).
	handed *setArgs
}

// Bounds on what one client may have queued.
const (
	maxPending      = 1024
	maxPendingBytes = 64 << 10 // a thousand idle clients hold little
)

// queuedSet is a queued SET's key and value (in the arena), and whether
// it writes whatever the key holds (no NX or XX).
type queuedSet struct {
	key, value []byte
	plain      bool
}

// laterReply is a reply in c.later (from start to end), written after
// the reply of the queued SET numbered after-1.
type laterReply struct{ after, start, end int }

// drain waits for the queued SETs and writes their replies, and the
// replies of the GETs answered behind them, in order.
func (c *client) drain() {
	j := 0
	for i, p := range c.pending {
		c.setReply(p.Wait(), false, nil, nil)
		for ; j < len(c.behind) && c.behind[j].after == i+1; j++ {
			r := c.behind[j]
			c.w.buf = append(c.w.buf, c.later.buf[r.start:r.end]...)
		}
	}
	c.behind = c.behind[:0]
	c.later.buf = c.later.buf[:0]
	if cap(c.later.buf) > maxPendingBytes {
		c.later.buf = nil
	}
	clear(c.pending)
	c.pending = c.pending[:0]
	clear(c.sets)
	c.sets = c.sets[:0]
	if cap(c.arena) > maxPendingBytes {
		c.arena = nil
	}
	c.arena = c.arena[:0]
}

// protocolError answers a malformed request; the client is closed once the
// reply is written.
func (c *client) protocolError(err error) {
	c.s.rejected.Add(1)
	msg := err.Error() // Redis writes "ERR Protocol error: ..."
	c.w.Error("ERR P" + msg[1:])
	c.closing = true
	c.s.Log.Warn("resp: closing client", "remote", c.remote, "err", err)
}

// contain, deferred where a client's requests are served — per pass of
// the loop and per worker run, not per command (a deferred recover in
// exec cost about a fifth of pipelined GETs' rate, redis-benchmark -P 16)
// — fails the client alone when serving panicked: the panic is counted
// and logged (shared/panics), the client gets an error and is closed once
// it is written, and the agent serves everyone else. A write whose commit
// panicked was not acknowledged (the committer contains it: kv).
func (c *client) contain(where string) {
	if v := recover(); v != nil {
		panics.Recovered(c.s.Log, where, v) //nolint:errcheck // the reply says it
		c.w.Error("ERR internal error: the agent failed serving this command (it logged why); closing the connection")
		c.closing = true
	}
}

// runBlocking runs the client's buffered requests on a worker goroutine,
// where a command may wait. A run of pipelined SETs is queued in the store
// and shares its commit.
func (c *client) runBlocking(ctx context.Context) {
	defer c.contain("resp/worker")
	lim := c.s.Limits
	data := c.in
	for !c.quit && !c.closing && c.w.Len() < lim.ReplyBuffer {
		args, used, err := c.parser.Parse(data, lim, c.args)
		if err != nil {
			c.drain()
			c.protocolError(err)
			data = nil
			break
		}
		if used == 0 {
			break
		}
		data = data[used:]
		c.args = args[:0]
		if len(args) == 0 {
			continue
		}
		c.s.commands.Add(1)
		c.canDefer = len(data) > 0 && len(c.pending) < maxPending && len(c.arena) < maxPendingBytes && c.replying()
		cmd := lookup(args[0])
		if cmd != nil {
			c.seen.lastCmd.Store(&cmd.lower)
		}
		c.exec(ctx, cmd, args)
	}
	c.drain()
	c.handed = nil
	c.in = append(c.in[:0], data...)
}

func eq(b []byte, s string) bool { return strings.EqualFold(string(b), s) }

func (c *client) wrongArgs(cmd string) {
	c.w.Error("ERR wrong number of arguments for '" + strings.ToLower(cmd) + "' command")
}

func (c *client) storeErr(err error) {
	switch {
	case errors.Is(err, kv.ErrNotNumber):
		c.w.Error("ERR value is not an integer or out of range")
	case errors.Is(err, kv.ErrWrongType):
		c.w.Error(wrongType)
	case errors.Is(err, kv.ErrOverflow):
		c.w.Error("ERR increment or decrement would overflow")
	case errors.Is(err, kv.ErrKeySize), errors.Is(err, kv.ErrValueSize):
		c.w.Error("ERR " + err.Error())
	case errors.Is(err, panics.ErrPanic):
		// The committer contained a panic of this write (not applied).
		c.w.Error("ERR internal error: the agent failed serving this command (it logged why); closing the connection")
		c.closing = true
	case errors.Is(err, kv.ErrDiskFull), errors.Is(err, kv.ErrWritesRefused):
		// As Redis answers writes after a failed AOF write; reads go on.
		c.w.Error("MISCONF " + err.Error())
	default:
		c.s.Log.Error("resp: store", "err", err)
		c.w.Error("ERR internal error: " + err.Error())
	}
}

// parseInt reads an integer argument as Redis does.
func parseInt(b []byte) (int64, bool) { return kv.ParseInt(b) }

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// queueSet queues SET in the store (the loop parks the client once its
// run of requests ends) and reports whether it could: not a SET ... GET,
// which needs the prior value, nor a bad one, whose error must not
// overtake replies still queued, nor past the bounds.
func (c *client) queueSet(args [][]byte, so *setArgs) bool {
	c.s.Store.Gate().RLock() // as every command (multi.go)
	defer c.s.Store.Gate().RUnlock()
	if len(c.pending) >= maxPending || len(c.arena) >= maxPendingBytes || so.wantGet || so.errReply != "" {
		return false
	}
	c.enqueue(args[1], args[2], so.o)
	return true
}

// enqueue queues a Put of copies of key and value (the read buffer moves
// on) among the client's pending writes.
func (c *client) enqueue(key, value []byte, o kv.PutOptions) {
	start := len(c.arena)
	c.arena = append(append(c.arena, key...), value...)
	k := c.arena[start : start+len(key) : start+len(key)]
	v := c.arena[start+len(key):]
	c.pending = append(c.pending, c.s.Store.PutAsync(k, v, o))
	c.sets = append(c.sets, queuedSet{key: k, value: v, plain: !o.IfAbsent && !o.IfPresent})
}

// getBehind answers GET key while the client has SETs queued, without
// waiting for their commit — so a pipeline of SETs and GETs shares one
// sync, as a pipeline of SETs alone does — and reports whether it could.
// The value is the last queued SET's of the key, else the store's now;
// the reply is written after the queued SETs' replies (drain). It cannot
// when the key's last queued SET is conditional (NX, XX: its outcome is
// not known yet), when the store refuses writes (the SETs will fail), or
// when too much is held.
func (c *client) getBehind(key []byte) bool {
	c.s.Store.Gate().RLock() // as every command (multi.go)
	defer c.s.Store.Gate().RUnlock()
	if len(c.later.buf) >= maxPendingBytes || c.s.Store.WriteErr() != nil {
		return false
	}
	start := len(c.later.buf)
	found := false
	for i := len(c.sets) - 1; i >= 0; i-- {
		if q := c.sets[i]; string(q.key) == string(key) {
			if !q.plain {
				return false
			}
			c.later.Bulk(q.value)
			found = true
			break
		}
	}
	if !found {
		c.w, c.later = c.later, c.w
		c.get(context.Background(), [][]byte{nil, key})
		c.w, c.later = c.later, c.w
	}
	c.behind = append(c.behind, laterReply{after: len(c.pending), start: start, end: len(c.later.buf)})
	return true
}

// setNoWait runs SET on the event loop if the store can take it without
// waiting (see kv.Store.PutNoWait), and reports whether it did.
func (c *client) setNoWait(args [][]byte, so *setArgs) bool {
	c.s.Store.Gate().RLock() // as every command (multi.go)
	defer c.s.Store.Gate().RUnlock()
	switch {
	case so.errReply != "":
		c.w.Error(so.errReply)
		return true
	case so.wantGet:
		return false
	}
	done, err := c.s.Store.PutNoWait(args[1], args[2], so.o)
	switch {
	case !done:
		return false
	case err != nil:
		c.storeErr(err)
	default:
		c.w.OK()
	}
	return true
}

// set runs SET on a worker, with its options as parsed by the loop that
// handed the client over, or parsed here.
func (c *client) set(args [][]byte) {
	var so setArgs
	if c.handed != nil {
		so, c.handed = *c.handed, nil
	} else {
		so = parseSet(args)
	}
	if so.errReply == "" && !so.wantGet && c.canDefer {
		c.enqueue(args[1], args[2], so.o)
		return
	}
	c.drain()
	if so.errReply != "" {
		c.w.Error(so.errReply)
		return
	}
	prior, err := c.s.Store.Put(args[1], args[2], so.o)
	c.setReply(err, so.wantGet, prior, args[1])
}

// setReply writes SET's reply for the Put's error and prior value.
func (c *client) setReply(err error, wantGet bool, prior, key []byte) {
	switch {
	case errors.Is(err, kv.ErrExists), errors.Is(err, kv.ErrNotFound):
		if wantGet && errors.Is(err, kv.ErrExists) {
			e, err := c.s.Store.Get(key, nil)
			if errors.Is(err, kv.ErrWrongType) {
				c.storeErr(err)
				return
			}
			c.w.Bulk(e.Value)
			return
		}
		c.w.NullBulk()
	case err != nil:
		c.storeErr(err)
	case wantGet:
		if prior == nil {
			c.w.NullBulk()
		} else {
			c.w.Bulk(prior)
		}
	default:
		c.w.OK()
	}
}

// setArgs are SET's options, parsed once per command.
type setArgs struct {
	o        kv.PutOptions
	wantGet  bool
	errReply string // the error to send when they are wrong
}

// parseSet reads SET's options.
func parseSet(args [][]byte) setArgs {
	o, wantGet, errReply := parseSetOptions(args)
	return setArgs{o, wantGet, errReply}
}

func parseSetOptions(args [][]byte) (o kv.PutOptions, wantGet bool, errReply string) {
	name := "set" // or setex, psetex: errors name the command sent
	if len(args) > 0 && !eq(args[0], "SET") {
		name = strings.ToLower(string(args[0]))
	}
	if len(args) < 3 {
		return o, false, "ERR wrong number of arguments for '" + name + "' command"
	}
	for i := 3; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch opt {
		case "NX":
			o.IfAbsent = true
		case "XX":
			o.IfPresent = true
		case "KEEPTTL":
			o.KeepTTL = true
		case "GET":
			wantGet, o.ReturnPrior = true, true
		case "EX", "PX", "EXAT", "PXAT":
			if i+1 >= len(args) || o.TTL != 0 {
				return o, false, "ERR syntax error"
			}
			n, ok := parseInt(args[i+1])
			i++
			if !ok || n <= 0 {
				return o, false, "ERR invalid expire time in '" + name + "' command"
			}
			switch opt {
			case "EX":
				o.TTL, ok = expireAfter(n, time.Second)
			case "PX":
				o.TTL, ok = expireAfter(n, time.Millisecond)
			case "EXAT", "PXAT":
				unit := time.Second
				if opt == "PXAT" {
					unit = time.Millisecond
				}
				if o.TTL, ok = expireAt(n, unit); ok {
					o.At = expireAtTime(n, unit) // the millisecond asked for
				}
			}
			if !ok {
				return o, false, "ERR invalid expire time in '" + name + "' command"
			}
			if o.TTL <= 0 {
				o.TTL = time.Millisecond // already past: expires at once
			}
		default:
			return o, false, "ERR syntax error"
		}
	}
	if (o.IfAbsent && o.IfPresent) || (o.KeepTTL && o.TTL != 0) {
		return o, false, "ERR syntax error"
	}
	return o, wantGet, ""
}

// scan: cursors are small integers naming the next key, kept per client
// (a bounded table): Redis clients parse the cursor as a number.
// scanOptions are SCAN's and the S/H/ZSCANs' MATCH, COUNT (10 unless
// given, at most 100,000) and SCAN's TYPE.
type scanOptions struct {
	pattern  []byte
	count    int
	onlyType string
}

// parseScanOptions reads the options after the cursor (withType: TYPE
// allowed), or returns Redis's error reply.
func parseScanOptions(args [][]byte, withType bool) (scanOptions, string) {
	o := scanOptions{count: 10}
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return o, "ERR syntax error"
		}
		switch {
		case eq(args[i], "MATCH"):
			o.pattern = args[i+1]
		case eq(args[i], "COUNT"):
			n, ok := parseInt(args[i+1])
			if !ok {
				return o, "ERR value is not an integer or out of range"
			}
			if n < 1 {
				return o, "ERR syntax error" // Redis's reply to a count below 1
			}
			o.count = int(min(n, 100000))
		case eq(args[i], "TYPE") && withType:
			o.onlyType = strings.ToLower(string(args[i+1]))
		default:
			return o, "ERR syntax error"
		}
	}
	return o, ""
}

func (c *client) scan(_ context.Context, args [][]byte) {
	if len(args) < 2 {
		c.wrongArgs("SCAN")
		return
	}
	id, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		c.w.Error("ERR invalid cursor")
		return
	}
	o, bad := parseScanOptions(args[2:], true)
	if bad != "" {
		c.w.Error(bad)
		return
	}
	pattern, count, onlyType := o.pattern, o.count, o.onlyType
	var from []byte
	if id != 0 {
		var ok bool
		if from, ok = c.s.cursors.get(id); !ok {
			c.w.Error("ERR invalid cursor")
			return
		}
	}
	prefix := literalPrefix(pattern)
	page, next, err := c.s.Store.Scan(prefix, from, count, true) // keys only: the kinds come along
	if err != nil {
		c.storeErr(err)
		return
	}
	var keys [][]byte
	for _, p := range page {
		if (pattern == nil || globMatch(pattern, p.Key)) && (onlyType == "" || onlyType == p.Kind.String()) {
			keys = append(keys, p.Key)
		}
	}
	var nextID uint64
	if next != nil {
		nextID = c.s.cursors.put(next)
	}
	c.w.Array(2)
	c.w.BulkString(strconv.FormatUint(nextID, 10))
	c.w.Array(len(keys))
	for _, k := range keys {
		c.w.Bulk(k)
	}
}

// literalPrefix returns the part of a glob before its first special char.
func literalPrefix(p []byte) []byte {
	if i := bytes.IndexAny(p, "*?[\\"); i >= 0 {
		return p[:i]
	}
	return p
}

// globMatch is Redis' stringmatch: * ? [abc] [^a-z] and \ escapes. It
// takes time proportional to len(p)·len(s) at most: a star backtracks
// only to the last star seen (every other element matches one byte), so
// a pattern like a*a*a*…b cannot make a KEYS or SCAN spin.
func globMatch(p, s []byte) bool {
	pi, si := 0, 0
	star, starS := -1, 0 // the pattern after the last star, and where in s it was tried
	for si < len(s) {
		if pi < len(p) && p[pi] == '*' {
			for pi < len(p) && p[pi] == '*' {
				pi++
			}
			if pi == len(p) {
				return true
			}
			star, starS = pi, si
			continue
		}
		if pi < len(p) {
			if n, ok := globOne(p[pi:], s[si]); ok {
				pi, si = pi+n, si+1
				continue
			}
		}
		if star < 0 {
			return false
		}
		starS++
		pi, si = star, starS
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// globOne matches b against the pattern element at the start of p (not a
// star) and says how many bytes of p the element spans.
func globOne(p []byte, b byte) (int, bool) {
	switch p[0] {
	case '?':
		return 1, true
	case '[':
		end := bytes.IndexByte(p[1:], ']')
		if end < 0 {
			return 0, false
		}
		class := p[1 : 1+end]
		neg := len(class) > 0 && class[0] == '^'
		if neg {
			class = class[1:]
		}
		match := false
		for i := 0; i < len(class); i++ {
			if i+2 < len(class) && class[i+1] == '-' {
				if b >= class[i] && b <= class[i+2] {
					match = true
				}
				i += 2
			} else if class[i] == b {
				match = true
			}
		}
		return 2 + end, match != neg
	case '\\':
		if len(p) > 1 {
			return 2, p[1] == b
		}
	}
	return 1, p[0] == b
}

func (c *client) hello(_ context.Context, args [][]byte) {
	if len(args) > 1 {
		v, ok := parseInt(args[1])
		if !ok || v != 2 {
			c.w.Error("NOPROTO sorry, this protocol version is not supported")
			return
		}
		for i := 2; i < len(args); i++ {
			switch strings.ToUpper(string(args[i])) {
			case "AUTH":
				if i+2 >= len(args) || c.s.Password == "" || string(args[i+2]) != c.s.Password {
					c.w.Error("WRONGPASS invalid username-password pair or user is disabled.")
					return
				}
				c.authed = true
				i += 2
			case "SETNAME":
				if i+1 >= len(args) {
					c.w.Error("ERR syntax error")
					return
				}
				c.setName(string(args[i+1]))
				i++
			default:
				c.w.Error("ERR syntax error")
				return
			}
		}
	}
	if !c.authed {
		c.w.Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	c.w.Array(14)
	c.w.BulkString("server")
	c.w.BulkString("redis")
	c.w.BulkString("version")
	c.w.BulkString("7.0.0")
	c.w.BulkString("proto")
	c.w.Int(2)
	c.w.BulkString("id")
	c.w.Int(c.id)
	c.w.BulkString("mode")
	c.w.BulkString("standalone")
	c.w.BulkString("role")
	c.w.BulkString("master")
	c.w.BulkString("modules")
	c.w.Array(0)
}

// configValues answers CONFIG GET for what clients and redis-benchmark ask.
func (s *Server) configValues() map[string]string {
	app := "no"
	save := ""
	if s.Store.Durability() == kv.Sync {
		app = "yes"
	}
	vals := map[string]string{"save": save, "appendonly": app, "appendfsync": map[bool]string{true: "always", false: "no"}[app == "yes"],
		"databases": "1", "maxmemory": strconv.FormatInt(s.Store.MemoryBudget(), 10), "timeout": "0",
		"proto-max-bulk-len": strconv.Itoa(s.Limits.MaxBulk),
		// No replication: the agent's peers are another layer.
		"replicaof": "", "slaveof": ""}
	for name, p := range s.limits.params() {
		vals[name] = strconv.FormatInt(p.Load(), 10)
	}
	return vals
}

// memoryValue reports whether b reads as Redis's memory values do: a
// number and an optional unit (k, kb, m, mb, g, gb; any case).
func memoryValue(b []byte) bool {
	s := strings.ToLower(string(b))
	for _, unit := range []string{"kb", "mb", "gb", "k", "m", "g", "b"} {
		if strings.HasSuffix(s, unit) {
			s = strings.TrimSuffix(s, unit)
			break
		}
	}
	_, ok := parseInt([]byte(s))
	return ok
}

// configSet serves CONFIG SET name value …: only the thresholds of the
// typed values' encodings (typed.go) are the client's to change; the rest
// is the agent's configuration. All or nothing.
func (c *client) configSet(args [][]byte) {
	if len(args) < 4 || len(args)%2 != 0 {
		c.wrongArgs("CONFIG|SET")
		return
	}
	params := c.s.limits.params()
	vals := make([]int64, 0, len(args)/2)
	seen := map[*atomic.Int64]bool{} // a parameter, under either of its names
	for i := 2; i < len(args); i += 2 {
		name := strings.ToLower(string(args[i]))
		p, ok := params[name]
		if !ok && name == "maxmemory" && !memoryValue(args[i+1]) {
			// As Redis answers a value it cannot read, before saying
			// that the store's memory is the agent's to set.
			c.w.Error("ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument couldn't be parsed into a memory value")
			return
		}
		if !ok {
			c.w.Error("ERR CONFIG SET of '" + string(cut(args[i])) + "' is not supported by hecd; configure the agent instead")
			return
		}
		if seen[p] {
			c.w.Error("ERR CONFIG SET failed (possibly related to argument '" + name + "') - duplicate parameter")
			return
		}
		seen[p] = true
		n, ok := parseInt(args[i+1])
		if !ok || n < 0 {
			c.w.Error("ERR CONFIG SET failed (possibly related to argument '" + name + "') - argument couldn't be parsed into an integer")
			return
		}
		vals = append(vals, n)
	}
	for i := 2; i < len(args); i += 2 {
		params[strings.ToLower(string(args[i]))].Store(vals[(i-2)/2])
	}
	c.w.OK()
}

func (c *client) config(_ context.Context, args [][]byte) {
	if len(args) < 2 {
		c.wrongArgs("CONFIG")
		return
	}
	switch strings.ToUpper(string(args[1])) {
	case "GET":
		if len(args) < 3 {
			c.wrongArgs("CONFIG|GET")
			return
		}
		vals := c.s.configValues()
		var out []string
		for _, pat := range args[2:] {
			for k, v := range vals {
				if globMatch(bytes.ToLower(pat), []byte(k)) {
					out = append(out, k, v)
					delete(vals, k) // each once, however many patterns match it
				}
			}
		}
		c.w.Array(len(out))
		for _, s := range out {
			c.w.BulkString(s)
		}
	case "SET":
		c.configSet(args)
	case "RESETSTAT", "REWRITE":
		c.w.Error("ERR CONFIG " + strings.ToUpper(string(args[1])) + " is not supported by hecd; configure the agent instead")
	default:
		c.w.Error("ERR unknown subcommand '" + string(args[1]) + "'. Try CONFIG HELP.")
	}
}

// save answers SAVE: with --durability sync every acknowledged write is
// on disk already; with async, writes reach it on their own schedule and
// SAVE cannot hurry them.
func (c *client) save(_ context.Context, _ [][]byte) {
	if c.s.Store.Durability() != kv.Sync {
		c.w.Error("ERR hecd runs with --durability async: acknowledged writes reach the disk on the store's schedule; SAVE cannot force them")
		return
	}
	c.w.OK()
}

// function answers FUNCTION: hecd runs no functions (nor scripts), so
// FLUSH has nothing to remove and LIST nothing to list; LOAD and the
// others are refused.
func (c *client) function(_ context.Context, args [][]byte) {
	switch sub := strings.ToUpper(string(args[1])); {
	case sub == "FLUSH" && (len(args) == 2 || len(args) == 3 && (strings.EqualFold(string(args[2]), "ASYNC") || strings.EqualFold(string(args[2]), "SYNC"))):
		c.w.OK()
	case sub == "FLUSH":
		c.w.Error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
	case sub == "LIST":
		c.w.Array(0)
	default:
		c.w.Error("ERR FUNCTION " + string(cut(args[1])) + " is not supported by hecd: it runs no functions")
	}
}

// replying: the client's replies are not being dropped (CLIENT REPLY), so
// a SET's may be deferred and written later.
func (c *client) replying() bool { return !c.replyOff && c.skipReply == 0 }

// clientReply serves CLIENT REPLY ON|OFF|SKIP.
func (c *client) clientReply(args [][]byte) {
	if len(args) != 3 {
		c.wrongArgs("client|reply")
		return
	}
	switch {
	case eq(args[2], "ON"):
		c.replyOff, c.skipReply = false, 0
		c.w.OK()
	case eq(args[2], "OFF"):
		c.replyOff = true
	case eq(args[2], "SKIP"):
		if !c.replyOff {
			c.skipReply = 1 // the next command's
		}
	default:
		c.w.Error("ERR syntax error")
	}
}

func (c *client) clientCmd(_ context.Context, args [][]byte) {
	if len(args) < 2 {
		c.wrongArgs("CLIENT")
		return
	}
	name := "client|" + strings.ToLower(string(cut(args[1])))
	c.seen.lastCmd.Store(&name)
	switch strings.ToUpper(string(args[1])) {
	case "SETNAME":
		if len(args) != 3 {
			c.wrongArgs("CLIENT|SETNAME")
			return
		}
		if bytes.ContainsAny(args[2], " \n") {
			c.w.Error("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.setName(string(args[2]))
		c.w.OK()
	case "GETNAME":
		if name := c.getName(); name == "" {
			c.w.NullBulk()
		} else {
			c.w.BulkString(name)
		}
	case "SETINFO":
		c.w.OK()
	case "ID":
		c.w.Int(c.id)
	case "LIST":
		c.clientList(args)
	case "INFO":
		c.w.BulkString(c.line(time.Now()))
	case "KILL":
		c.clientKill(args)
	case "REPLY":
		c.clientReply(args)
	default:
		c.w.Error("ERR unknown subcommand '" + string(args[1]) + "'. Try CLIENT HELP.")
	}
}

// info is INFO's text: every section, or those named (case-insensitive;
// "all", "everything" and "default" name every one).
// cpuSection is INFO's cpu: the agent process's CPU time (hecd serves
// RESP from the agent's process, beside its other services).
func cpuSection() string {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)         //nolint:errcheck // zeros on failure
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children) //nolint:errcheck
	sec := func(t syscall.Timeval) string { return fmt.Sprintf("%d.%06d", t.Sec, t.Usec) }
	return fmt.Sprintf("used_cpu_sys:%s\r\nused_cpu_user:%s\r\nused_cpu_sys_children:%s\r\nused_cpu_user_children:%s\r\n",
		sec(self.Stime), sec(self.Utime), sec(children.Stime), sec(children.Utime))
}

func (s *Server) info(want ...[]byte) string {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := s.Store.Stats()
	sections := []struct{ name, text string }{
		{"server", fmt.Sprintf("redis_version:7.0.0\r\nhec_version:%s\r\nredis_mode:standalone\r\nprocess_id:%d\r\nuptime_in_seconds:%d\r\n",
			s.Version, os.Getpid(), int(time.Since(s.started).Seconds()))},
		{"clients", fmt.Sprintf("connected_clients:%d\r\n", s.connected.Load())},
		{"memory", fmt.Sprintf("used_memory:%d\r\nused_memory_rss:%d\r\nmaxmemory:%d\r\n", ms.HeapAlloc, ms.Sys, st.MemoryBudget)},
		{"persistence", fmt.Sprintf("aof_enabled:%d\r\nhec_durability:%s\r\nhec_lsm_bytes:%d\r\nhec_vlog_bytes:%d\r\n",
			b2i(st.Durability == "sync"), st.Durability, st.LSMBytes, st.VlogBytes)},
		{"stats", fmt.Sprintf("total_connections_received:%d\r\ntotal_commands_processed:%d\r\nrejected_connections:%d\r\nkeyspace_hits:%d\r\nkeyspace_misses:%d\r\n",
			s.total.Load(), s.commands.Load(), s.rejected.Load(), st.Gets-st.Misses, st.Misses)},
		{"replication", "role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n"},
		{"cpu", cpuSection()},
		{"commandstats", ""},
		{"keyspace", ""},
	}
	// As Redis: no section named, or "default", is every section but
	// commandstats; "all" and "everything" are every one.
	dflt, all := len(want) == 0, false
	for _, w := range want {
		dflt = dflt || eq(w, "default")
		all = all || eq(w, "all") || eq(w, "everything")
	}
	var b strings.Builder
	for _, sec := range sections {
		named := all || dflt && sec.name != "commandstats"
		for _, w := range want {
			named = named || eq(w, sec.name)
		}
		if !named {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		text := sec.text
		switch sec.name {
		case "keyspace":
			n, _ := s.Store.Count()
			text = fmt.Sprintf("db0:keys=%d,expires=0,avg_ttl=0\r\n", n)
		case "commandstats":
			// Calls and calls refused (unknown arguments' count) are
			// counted; time per call is not measured, so not shown.
			text = s.commandStats()
		}
		fmt.Fprintf(&b, "# %s\r\n%s", strings.ToUpper(sec.name[:1])+sec.name[1:], text)
	}
	return b.String()
}
