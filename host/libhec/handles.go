package main

/*
#define HEC_NO_PROTOTYPES
#include "hec.h"
void hec__set_error(const char *msg, size_t n);
void *hec__handle(uintptr_t id);
*/
import "C"

import (
	"cmp"
	"context"
	"github.com/hecsys/hec/coll"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hecsys/hec/host"
)

// defaultTimeout bounds a call when hec_dial was given none.
const defaultTimeout = 30 * time.Second

// handles maps the handles given to C to what they stand for. A handle is
// a number from next (never 0, never reused), disguised as a pointer.
type handles struct {
	mu   sync.Mutex
	next uintptr
	m    map[uintptr]any
}

var reg = handles{next: 0x1000, m: map[uintptr]any{}}

func (h *handles) add(v any) uintptr {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next += 16
	h.m[h.next] = v
	return h.next
}

func (h *handles) remove(id uintptr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

// lookup returns the handle's value when it is a T.
func lookup[T any](p unsafe.Pointer) (T, error) {
	reg.mu.Lock()
	v, ok := reg.m[uintptr(p)]
	reg.mu.Unlock()
	t, isT := v.(T)
	if !ok || !isT {
		var zero T
		return zero, fail(C.HEC_EBADHANDLE, "handle %#x: NULL, closed or not one of this library's", uintptr(p))
	}
	return t, nil
}

// client is a hec_client: the Go client and what the C API keeps for it.
type client struct {
	c       *host.Client
	timeout time.Duration

	mu     sync.Mutex
	allocs []span // live hec_alloc buffers, by address
	ecs    map[ecKey]*host.EC
}

type span struct{ p, n uintptr }

type ecKey struct{ k, m, rails int }

// ctx bounds a call by the client's timeout.
func (cl *client) ctx() (context.Context, func()) {
	c := &callCtx{timeout: cl.timeout}
	return c, c.end
}

// callCtx is a context whose deadline is set, and timer started, only
// when something looks: the host library calls Err on every turn of its
// spin loop and Done only before it sleeps, and a short op (a PING) ends
// within a few turns. A timer per call (context.WithTimeout) and a clock
// read per turn cost a third of a PING's round trip. The timeout counts
// from the first look at the clock, a few microseconds into the call.
type callCtx struct {
	timeout  time.Duration
	deadline atomic.Int64 // unix nanoseconds; 0 until first needed
	looks    atomic.Uint32
	expired  atomic.Bool

	mu    sync.Mutex
	done  chan struct{}
	timer *time.Timer
	ended bool // the deadline passed: done is closed
}

func (c *callCtx) deadlineNanos() int64 {
	if d := c.deadline.Load(); d != 0 {
		return d
	}
	c.deadline.CompareAndSwap(0, time.Now().Add(c.timeout).UnixNano())
	return c.deadline.Load()
}

func (c *callCtx) Deadline() (time.Time, bool) { return time.Unix(0, c.deadlineNanos()), true }
func (c *callCtx) Value(any) any               { return nil }

func (c *callCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		c.timer = time.AfterFunc(time.Until(time.Unix(0, c.deadlineNanos())), c.expire)
	}
	return c.done
}

// Err looks at the clock on every 64th call.
func (c *callCtx) Err() error {
	if c.looks.Add(1)%64 != 0 && !c.expired.Load() {
		return nil
	}
	if time.Now().UnixNano() < c.deadlineNanos() {
		return nil
	}
	c.expire()
	return context.DeadlineExceeded
}

func (c *callCtx) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	c.expired.Store(true)
	if c.done == nil {
		c.done = make(chan struct{})
	}
	close(c.done)
}

// end releases the timer when there is one.
func (c *callCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
}

// buffer turns C memory into a slice after checking it against the window:
// memory in the window must lie inside one live hec_alloc buffer.
func (cl *client) buffer(p unsafe.Pointer, n C.size_t, what string) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	if p == nil {
		return nil, fail(C.HEC_EINVAL, "%s is NULL with a length of %d", what, n)
	}
	if uint64(n) > 1<<48 {
		return nil, fail(C.HEC_ERANGE, "%s: a length of %d", what, n)
	}
	b := unsafe.Slice((*byte)(p), int(n))
	if !cl.c.InWindow(b[:1]) {
		return b, nil // the caller's own memory: copied by the library
	}
	at := uintptr(p)
	cl.mu.Lock()
	i, found := cl.find(at)
	if !found {
		i-- // the buffer starting before p
	}
	ok := i >= 0 && at >= cl.allocs[i].p && at < cl.allocs[i].p+cl.allocs[i].n
	var end uintptr
	if ok {
		end = cl.allocs[i].p + cl.allocs[i].n
	}
	cl.mu.Unlock()
	switch {
	case !ok:
		return nil, fail(C.HEC_EINVAL, "%s %p is in the shared window but in no live hec_alloc buffer (freed?)", what, p)
	case at+uintptr(n) > end:
		return nil, fail(C.HEC_ERANGE, "%s: %d bytes from %p run %d past the end of its hec_alloc buffer", what, n, p, at+uintptr(n)-end)
	}
	return b, nil
}

// find returns where the buffer starting at p is, or would be, in
// cl.allocs, and whether it is there. With cl.mu held.
func (cl *client) find(p uintptr) (int, bool) {
	return slices.BinarySearchFunc(cl.allocs, p, func(s span, p uintptr) int { return cmp.Compare(s.p, p) })
}

// railsNames are package host's names of the HEC_RAILS_* values.
var railsNames = map[int]string{C.HEC_RAILS_AUTO: host.RailsAuto, C.HEC_RAILS_HOST: host.RailsHost, C.HEC_RAILS_DPU: host.RailsDPU}

func (cl *client) ec(k, m, rails int) (*host.EC, error) {
	r := railsNames[rails]
	if r == "" {
		return nil, fail(C.HEC_EINVAL, "rails %d (want HEC_RAILS_AUTO, HEC_RAILS_HOST or HEC_RAILS_DPU)", rails)
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	key := ecKey{k, m, rails}
	if e := cl.ecs[key]; e != nil {
		return e, nil
	}
	e, err := cl.c.EC(k, m, host.WithRails(r))
	if err != nil {
		return nil, err
	}
	if cl.ecs == nil {
		cl.ecs = map[ecKey]*host.EC{}
	}
	cl.ecs[key] = e
	return e, nil
}

// comm is a hec_coll: a communicator on the DPU rail (hec_coll_join) or
// the host rail (hec_coll_host_listen, then hec_coll_host_join).
type comm struct {
	cl *client
	d  host.Communicator // nil while a host-rail rank has listened but not joined

	g          *coll.Group // the host-rail rank until it joins
	rank, size int
}

// op is a hec_op: an asynchronous call and, once done, its result (err,
// or the collective's).
type op struct {
	done <-chan struct{}
	err  error
	coll *host.CollOp
}

// result is the op's error once done.
func (o *op) result() error {
	if o.coll != nil {
		return o.coll.Err()
	}
	return o.err
}

// answer turns err into the code returned to C and records its message as
// the calling thread's last error.
func answer(err error) C.int {
	code := codeOf(err)
	if code != C.HEC_OK {
		msg := err.Error()
		C.hec__set_error((*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
	}
	return code
}

// guard runs f, answering a panic with HEC_EINTERNAL rather than taking the
// caller's process down.
func guard(f func() error) (code C.int) {
	defer func() {
		if r := recover(); r != nil {
			code = answer(fail(C.HEC_EINTERNAL, "panic: %v\n%s", r, debug.Stack()))
		}
	}()
	return answer(f())
}

// now runs a call whose arguments were checked (err: they were not).
func now(f func() error, err error) error {
	if err != nil {
		return err
	}
	return f()
}

// later returns what starts a call whose arguments were checked as an
// asynchronous op, its handle stored in *out.
func later(out **C.hec_op) func(f func() error, err error) error {
	return func(f func() error, err error) error {
		if err != nil {
			return err
		}
		return start(out, f)
	}
}

// start runs f (a call bounded by its client's timeout) as an asynchronous
// op and stores its handle in *out.
func start(out **C.hec_op, f func() error) error {
	if out == nil {
		return fail(C.HEC_EINVAL, "the op pointer is NULL")
	}
	done := make(chan struct{})
	o := &op{done: done}
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				o.err = fail(C.HEC_EINTERNAL, "panic: %v", r)
			}
		}()
		o.err = f()
	}()
	*out = (*C.hec_op)(handle(reg.add(o)))
	return nil
}

// handle disguises id as a pointer (in C: no Go code holds an invalid
// pointer).
func handle(id uintptr) unsafe.Pointer { return C.hec__handle(C.uintptr_t(id)) }
