package resp

import (
	"bytes"
	"context"
	"errors"

	"github.com/hecsys/hec/kv"
)

// Transactions: MULTI queues a client's commands and EXEC runs them with
// no other client's operation in between, from any front end (the
// store's gate, kv.Store.Gate: every RESP command, handoff op and UDP GET
// holds it shared, EXEC alone); WATCH makes EXEC run nothing if a watched
// key changed since — its existence or its version, whoever wrote it.

type watch struct {
	key     []byte
	exists  bool
	version uint64
}

// txState is a client's transaction.
type txState struct {
	multi   bool
	failed  bool     // a command was refused while queueing: EXEC aborts
	queued  []queued // the commands, copied out of the read buffer
	watched []watch  // WATCH's keys and what they were
}

type queued struct {
	cmd  *command
	args [][]byte
}

func (t *txState) reset() {
	t.multi, t.failed = false, false
	clear(t.queued)
	t.queued = t.queued[:0]
	t.watched = nil
}

// queue keeps a command for EXEC, or refuses it (the transaction then
// fails at EXEC, as in Redis).
func (c *client) queue(cmd *command, args [][]byte) {
	switch {
	case cmd == nil:
		c.unknown(args)
		c.tx.failed = true
	case !cmd.arityOK(len(args)):
		c.wrongArgs(cmd.name)
		c.tx.failed = true
	case cmd.flags&noMulti != 0:
		c.w.Error("ERR Command not allowed inside a transaction")
		c.tx.failed = true
	default:
		cp := make([][]byte, len(args))
		for i, a := range args {
			cp[i] = bytes.Clone(a)
		}
		c.tx.queued = append(c.tx.queued, queued{cmd, cp})
		c.seen.multi.Store(int32(len(c.tx.queued)))
		c.w.Simple("QUEUED")
	}
}

func (c *client) multiCmd(_ context.Context, _ [][]byte) {
	if c.tx.multi {
		c.w.Error("ERR MULTI calls can not be nested")
		return
	}
	c.tx.multi = true
	c.seen.multi.Store(0)
	c.w.OK()
}

func (c *client) discard(_ context.Context, _ [][]byte) {
	if !c.tx.multi {
		c.w.Error("ERR DISCARD without MULTI")
		return
	}
	c.tx.reset()
	c.seen.multi.Store(-1)
	c.w.OK()
}

func (c *client) watchCmd(_ context.Context, args [][]byte) {
	if c.tx.multi {
		c.w.Error("ERR WATCH inside MULTI is not allowed")
		return
	}
	for _, k := range args[1:] {
		e, err := c.s.Store.Lookup(k, nil)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			c.storeErr(err)
			return
		}
		c.tx.watched = append(c.tx.watched, watch{key: bytes.Clone(k), exists: err == nil, version: e.Version})
	}
	c.w.OK()
}

func (c *client) unwatch(_ context.Context, _ [][]byte) {
	c.tx.watched = nil
	c.w.OK()
}

// execCmd runs the queued commands alone among RESP clients, unless a
// watched key changed: then nothing runs and the reply is the nil array.
func (c *client) execCmd(ctx context.Context, _ [][]byte) {
	defer c.seen.multi.Store(-1)
	defer c.tx.reset()
	switch {
	case !c.tx.multi:
		c.w.Error("ERR EXEC without MULTI")
		return
	case c.tx.failed:
		c.w.Error("EXECABORT Transaction discarded because of previous errors.")
		return
	}
	c.s.Store.Gate().Lock()
	defer c.s.Store.Gate().Unlock()
	for _, w := range c.tx.watched {
		e, err := c.s.Store.Lookup(w.key, nil)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			c.storeErr(err)
			return
		}
		if (err == nil) != w.exists || w.exists && e.Version != w.version {
			c.w.NullArray()
			return
		}
	}
	defer func(d bool) { c.canDefer = d }(c.canDefer)
	c.canDefer = false // each SET done before the next command
	c.w.Array(len(c.tx.queued))
	for _, q := range c.tx.queued {
		q.cmd.run(c, ctx, q.args)
	}
}

// resetCmd serves RESET: out of a transaction, no watched keys, back to
// the connection's first state ("+RESET").
func (c *client) resetCmd(_ context.Context, _ [][]byte) {
	c.tx.reset()
	c.seen.multi.Store(-1)
	c.setName("")
	c.authed = c.s.Password == ""
	c.w.Simple("RESET")
}
