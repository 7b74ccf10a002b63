package resp

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The server's connected clients, for CLIENT LIST, CLIENT INFO and
// CLIENT KILL. What another client's loop changes — its name, its last
// command, when it last sent — is kept in atomics, so listing a client
// never waits for its loop.

type registry struct {
	mu   sync.Mutex
	byID map[int64]*client
}

// seen is what CLIENT LIST shows of a client that its own loop changes.
type seen struct {
	name    atomic.Pointer[string]
	lastCmd atomic.Pointer[string] // its name, lower case (CLIENT's with the subcommand)
	active  atomic.Int64           // Unix nanoseconds of its last request read
	multi   atomic.Int32           // commands queued in MULTI; -1: none
}

func (r *registry) add(c *client) {
	c.created = time.Now()
	c.seen.active.Store(c.created.UnixNano())
	c.seen.multi.Store(-1)
	r.mu.Lock()
	if r.byID == nil {
		r.byID = map[int64]*client{}
	}
	r.byID[c.id] = c
	r.mu.Unlock()
}

// remove forgets c; it must run before c's descriptor is closed, so a
// KILL never shuts down a descriptor reused by another connection.
func (r *registry) remove(c *client) {
	r.mu.Lock()
	delete(r.byID, c.id)
	r.mu.Unlock()
}

// list returns the clients in the order they connected.
func (r *registry) list() []*client {
	r.mu.Lock()
	out := make([]*client, 0, len(r.byID))
	for _, c := range r.byID {
		out = append(out, c)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b *client) int { return int(a.id - b.id) })
	return out
}

// kill disconnects every client match accepts, but self (whose loop
// closes it once its reply is written, when killSelf), and returns how
// many.
func (r *registry) kill(self *client, killSelf bool, match func(*client) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.byID {
		if !match(c) {
			continue
		}
		if c == self {
			if killSelf {
				c.closing = true
				delete(r.byID, c.id)
				n++
			}
			continue
		}
		unix.Shutdown(c.fd, unix.SHUT_RDWR) // its loop sees the end and closes it
		delete(r.byID, c.id)                // gone at once, as in Redis
		n++
	}
	return n
}

func (c *client) getName() string {
	if p := c.seen.name.Load(); p != nil {
		return *p
	}
	return ""
}

func (c *client) setName(name string) { c.seen.name.Store(&name) }

// line is the client's line of CLIENT LIST, in Redis 7's fields (those
// hecd has no such thing for at Redis's values for a plain client).
func (c *client) line(now time.Time) string {
	cmd := "NULL"
	if lc := c.seen.lastCmd.Load(); lc != nil {
		cmd = *lc
	}
	flags := "N"
	if m := c.seen.multi.Load(); m >= 0 {
		flags = "x"
	}
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=%s db=0 sub=0 psub=0 ssub=0 multi=%d "+
		"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=%s user=default redir=-1 resp=2 lib-name= lib-ver=\n",
		c.id, c.remote, c.local, c.fd, c.getName(), int(now.Sub(c.created).Seconds()),
		int(now.Sub(time.Unix(0, c.seen.active.Load())).Seconds()), flags, c.seen.multi.Load(), cmd)
}

// clientList serves CLIENT LIST [ID id ...].
func (c *client) clientList(args [][]byte) {
	var ids map[int64]bool
	if len(args) > 2 {
		if !eq(args[2], "ID") || len(args) == 3 {
			c.w.Error("ERR syntax error")
			return
		}
		ids = map[int64]bool{}
		for _, a := range args[3:] {
			id, ok := parseInt(a)
			if !ok || id <= 0 {
				c.w.Error("ERR Invalid client ID")
				return
			}
			ids[id] = true
		}
	}
	now := time.Now()
	var b strings.Builder
	for _, o := range c.s.registry.list() {
		if ids == nil || ids[o.id] {
			b.WriteString(o.line(now))
		}
	}
	c.w.BulkString(b.String())
}

// clientKill serves CLIENT KILL addr:port (the old form: +OK, or an error
// when no client has that address; the caller itself may be killed) and
// CLIENT KILL <filter value> ... (ID, ADDR, LADDR, USER, SKIPME, MAXAGE:
// the number killed; SKIPME yes by default).
func (c *client) clientKill(args [][]byte) {
	if len(args) == 2 {
		c.wrongArgs("client|kill")
		return
	}
	if len(args) == 3 {
		addr := string(args[2])
		if n := c.s.registry.kill(c, true, func(o *client) bool { return o.remote == addr }); n == 0 {
			c.w.Error("ERR No such client")
			return
		}
		c.w.OK()
		return
	}
	if len(args) < 4 || len(args)%2 != 0 {
		c.w.Error("ERR syntax error")
		return
	}
	var filters []func(*client) bool
	skipMe := true
	now := time.Now()
	for i := 2; i < len(args); i += 2 {
		v := string(args[i+1])
		switch strings.ToUpper(string(args[i])) {
		case "ID":
			id, ok := parseInt(args[i+1])
			if !ok || id <= 0 {
				c.w.Error("ERR client-id should be greater than 0")
				return
			}
			filters = append(filters, func(o *client) bool { return o.id == id })
		case "ADDR":
			filters = append(filters, func(o *client) bool { return o.remote == v })
		case "TYPE":
			// Every client of hecd is a normal one: no replicas, no
			// pub/sub.
			switch strings.ToLower(v) {
			case "normal":
			case "master", "replica", "slave", "pubsub":
				filters = append(filters, func(*client) bool { return false })
			default:
				c.w.Error("ERR Unknown client type '" + string(cut(args[i+1])) + "'")
				return
			}
		case "LADDR":
			filters = append(filters, func(o *client) bool { return o.local == v })
		case "USER":
			if v != "default" {
				c.w.Error("ERR No such user '" + string(cut(args[i+1])) + "'")
				return
			}
		case "SKIPME":
			switch strings.ToLower(v) {
			case "yes":
				skipMe = true
			case "no":
				skipMe = false
			default:
				c.w.Error("ERR syntax error")
				return
			}
		case "MAXAGE":
			age, ok := parseInt(args[i+1])
			if !ok {
				c.w.Error("ERR syntax error")
				return
			}
			filters = append(filters, func(o *client) bool { return now.Sub(o.created) >= time.Duration(age)*time.Second })
		default:
			c.w.Error("ERR syntax error")
			return
		}
	}
	n := c.s.registry.kill(c, !skipMe, func(o *client) bool {
		for _, f := range filters {
			if !f(o) {
				return false
			}
		}
		return true
	})
	c.w.Int(int64(n))
}
