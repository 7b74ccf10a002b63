package host

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host/handoff/shm"
	"github.com/hecsys/hec/shared/rail"
)

// BellRings reports whether c's shared-memory transport has seen the
// agent's ring end a sleep, so that its long waits sleep until the ring.
func BellRings(c *Client) bool {
	t, ok := c.t.(*shm.Transport)
	return ok && t.BellRings()
}

// GoExpecting is Client.Go for a call its caller expects to end between
// wakeAt and spinTo (what the EC client sets from the agent's rate).
func GoExpecting(ctx context.Context, c *Client, req Request, wakeAt, spinTo time.Time) (*Call, error) {
	call, err := c.Go(ctx, req)
	if err == nil {
		call.Expect(wakeAt, spinTo)
	}
	return call, err
}

// WithHeartbeatEvery sets how often the shared-memory transport beats its
// lease and looks at the agent's heartbeat.
func WithHeartbeatEvery(d time.Duration) Option { return func(o *options) { o.Heartbeat = d } }

// TickAt runs one of c's heartbeat looks as if the time were now.
func TickAt(c *Client, now time.Time) {
	c.t.(*shm.Transport).Look(now)
}

// Detached reports whether c's transport has given its agent up.
func Detached(c *Client) bool {
	return c.t.(*shm.Transport).Detached()
}

// WithCancelWakeHook has h run at the end of the wake a sleeping wait
// gets when its context ends.
func WithCancelWakeHook(h func()) Option { return func(o *options) { o.OnCancelWake = h } }

// CountCPUReads counts the reads of the process's CPU clock from now on
// (getrusage, each a system call) until restore.
func CountCPUReads() (reads func() int, restore func()) {
	var n atomic.Int64
	old := cpuTime
	cpuTime = func() time.Duration { n.Add(1); return old() }
	return func() int { return int(n.Load()) }, func() { cpuTime = old }
}

// GoLong is Client.Go for a call its caller knows to be long: its wait
// sleeps on the completion bell at once, not after spinning and yielding.
func GoLong(ctx context.Context, c *Client, req Request) (*Call, error) {
	call, err := c.Go(ctx, req)
	if err == nil {
		call.SetLong(true)
	}
	return call, err
}

// SleptLong reports whether the last wait of a call like req (its sleep
// class) on c's shared-memory transport slept a held sleep's length or
// more, so that the next one's first sleep is not held.
func SleptLong(c *Client, req Request) bool {
	return c.t.(*shm.Transport).SleptLong(req)
}

// WindowRuns is the transport's windowRuns: whether an op would name in
// and out each with one span.
func WindowRuns(c *Client, in, out [][]byte) (inRun, outRun []byte, ok bool) {
	return c.t.WindowRuns(in, out)
}

// SetTable gives m kind k's table, as if Calibrate had made it and
// tuning had kept the model's plan in every band.
func SetTable(m *MultiRail, k coll.Kind, t *rail.Table) {
	for b := range 41 {
		size := int64(1) << b
		t = t.Pin(size, t.Lookup(size), "set by the test")
	}
	m.mu.Lock()
	m.calSize = max(m.calSize, 1<<20)
	m.mu.Unlock()
	m.tables[k].Store(t)
}

// DPUSeq is the sequence number of d's last collective piece.
func DPUSeq(d *DPUComm) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seq
}
