package coll

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/shared/trace"
)

// Algorithm picks how a collective moves its data.
type Algorithm uint8

const (
	// Auto picks per call the cheapest of the collective's algorithms
	// (rows.go) under the model of the links (Config.Alpha, Rate,
	// ReduceRate): the ring for large buffers, recursive doubling or a
	// binomial tree for small ones, halving-doubling between.
	Auto Algorithm = iota
	// Ring: bandwidth-optimal. AllReduce is a reduce-scatter then an
	// allgather around the ring (2(n−1)/n of the buffer over each link);
	// Broadcast a pipelined chain; Reduce a reduce-scatter then a gather.
	Ring
	// Tree: latency-optimal, log2(n) steps. AllReduce is recursive
	// doubling; Broadcast and Reduce binomial trees.
	Tree
	// HalvingDoubling: AllReduce as a reduce-scatter by recursive halving
	// and an allgather by recursive doubling — the ring's bytes in
	// 2 log2(n) messages. Other collectives forced to it run Auto's pick.
	HalvingDoubling
	maxAlgorithm = HalvingDoubling
)

var algorithmNames = [...]string{Auto: "auto", Ring: "ring", Tree: "tree", HalvingDoubling: "halving-doubling"}

func (a Algorithm) String() string {
	if a <= maxAlgorithm {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// Valid reports whether a is a known algorithm (Auto included).
func (a Algorithm) Valid() bool { return a <= maxAlgorithm }

// ParseAlgorithm reads auto, ring, tree or halving-doubling.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := Auto; a <= maxAlgorithm; a++ {
		if s == a.String() {
			return a, nil
		}
	}
	return 0, fmt.Errorf("coll: unknown algorithm %q (auto, ring, tree, halving-doubling)", s)
}

// Config tunes a communicator. Zero values take the defaults.
type Config struct {
	// Chunk is the largest message (default 512 KiB, at most MaxChunk):
	// a buffer moves in chunks so that sending, receiving and reducing
	// overlap.
	Chunk int
	// Alpha is one message's latency and Rate one link's bandwidth in
	// bytes per second: the model that picks the algorithm. Unset, the
	// communicator measures them at its first collective that chooses
	// one (model.go), starting from 50 µs and 1 GB/s; given (both), they
	// are used as they are.
	Alpha time.Duration
	Rate  float64
	// ReduceRate is how fast a rank reduces, in bytes per second (0: the
	// model counts reductions as free). Measured with Alpha and Rate.
	ReduceRate float64
	// ModelFile keeps measured models across runs (a JSON file, written
	// by rank 0), one per Topology: a communicator of a topology it holds
	// takes rank 0's entry instead of measuring. Empty: measure each time.
	ModelFile string
	// Topology names what the model depends on — the nodes and links
	// the ranks sit on — for ModelFile; the size and chunk are added.
	Topology string
	// Algorithm forces an algorithm (default Auto).
	Algorithm Algorithm
	// History is how many collectives the flight recorder keeps
	// (default DefaultHistory; recorder.go).
	History int
	// SendTimeout bounds one message's send (default 5 s). Over the
	// peer layer a rank that takes nothing of it for the peer deadline
	// fails it sooner, and an abort ends it.
	SendTimeout time.Duration
	// Trace, while it records, gets each message this rank sends
	// (trace.StageSend), each step's receive from a peer
	// (trace.StageRecv) and each received message's reduction
	// (trace.StageReduce), under the collective's
	// trace.CollID(TraceComm, seq): the id every rank's agent gives it.
	// Off (or nil), a message pays one atomic load.
	Trace     *trace.Recorder
	TraceComm uint64
}

// MaxChunk bounds Config.Chunk (the peer layer's frame).
const MaxChunk = 4 << 20

// Comm is a communicator: ranks 0..Size()-1 over a Transport. Every rank
// calls the same collectives in the same order; a Comm runs one at a time
// (calls from several goroutines wait their turn). A collective that fails
// aborts the communicator on every rank: each call then returns an error
// that names the rank that failed, and the communicator must be rebuilt
// (a new Transport without that rank).
type Comm struct {
	t    Transport
	cfg  Config
	rank int
	size int

	mu         sync.Mutex // one collective at a time
	seq        uint32
	calibrated bool // the model is measured, given, or not needed
	broken     error
	scratch    []byte
	sinks      []Sink // the receives under way (one collective at a time)
	got        atomic.Uint64

	sctx sendCtx // the running collective's sends

	rec *recorder // the flight recorder
	// The running collective's kind and number (its first, where a
	// calibration before it took more), for its spans.
	kind   string
	runSeq uint32

	sendMu    sync.Mutex // sendErr, closed and brokenWhy (Close and Status may come from anywhere)
	sendErr   error
	closed    bool
	brokenWhy string // broken's text, for Status
}

// New returns a communicator over t.
func New(t Transport, cfg Config) (*Comm, error) {
	if t.Size() < 1 || t.Rank() < 0 || t.Rank() >= t.Size() {
		return nil, fmt.Errorf("coll: rank %d of %d", t.Rank(), t.Size())
	}
	if cfg.Chunk <= 0 {
		cfg.Chunk = 512 << 10
	}
	if cfg.Chunk > MaxChunk {
		return nil, fmt.Errorf("coll: chunk of %d bytes: at most %d", cfg.Chunk, MaxChunk)
	}
	cfg.Chunk &^= 7 // whole elements of every type
	if cfg.Chunk == 0 {
		cfg.Chunk = 8
	}
	given := cfg.Alpha > 0 && cfg.Rate > 0
	if cfg.Alpha <= 0 {
		cfg.Alpha = 50 * time.Microsecond
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 1e9
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = 5 * time.Second
	}
	c := &Comm{t: t, cfg: cfg, rank: t.Rank(), size: t.Size(), rec: newRecorder(cfg.History)}
	c.calibrated = given || cfg.Algorithm != Auto || c.size == 1
	if a, ok := t.(abortSignal); ok {
		c.sctx.abort = a.abortSignal()
	}
	return c, nil
}

// Rank is this process's rank; Size the number of ranks.
func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// Close makes the communicator's later sends fail with ErrClosed. It
// does not tell the other ranks.
func (c *Comm) Close() {
	c.sendMu.Lock()
	c.closed = true
	c.sendMu.Unlock()
}

// send sends b to rank to on the caller's goroutine: a collective's
// messages go out in the order it sends them, and each send's bytes are
// the kernel's (or the peer's mailbox's) before the next step reads or
// writes them, so no send is waited for later and no goroutine is woken
// to make one. Received messages are applied meanwhile by the
// transport's reader (DirectReceiver). After a failure nothing more is
// sent: the first failure is kept (sendFailed returns it) and the
// communicator aborted on every rank.
func (c *Comm) send(ctx context.Context, to int, b []byte) {
	c.sendMu.Lock()
	if c.closed && c.sendErr == nil {
		c.sendErr = ErrClosed
	}
	failed := c.sendErr != nil
	c.sendMu.Unlock()
	if failed {
		return
	}
	now := time.Now()
	c.sctx.Context, c.sctx.deadline = ctx, now.Add(c.cfg.SendTimeout)
	var sctx context.Context = &c.sctx
	traced := c.cfg.Trace.On()
	var span *sinkTrace
	if traced {
		// The transport's layers record their stages of the message
		// (the peer layer: its frame's seal and write) under the
		// collective.
		span = c.spanOf(to)
		sctx = trace.WithOp(sctx, trace.Op{ID: span.id, Name: span.name})
	}
	err := c.t.Send(sctx, to, c.seq, b)
	c.sctx.Context = nil
	if traced {
		span.add(trace.StageSend, len(b), now, err)
	}
	if err == nil {
		return
	}
	aborted := errors.Is(err, ErrAborted) // by another rank: it told every rank
	var re *RankError
	if !aborted && !errors.As(err, &re) {
		err = &RankError{Rank: to, Why: err.Error()}
	}
	c.sendMu.Lock()
	first := c.sendErr == nil
	if first {
		c.sendErr = err
	}
	c.sendMu.Unlock()
	if first && !aborted {
		// Fail this rank's waits now, and the others'.
		c.t.Abort(fmt.Sprintf("rank %d: %v", c.rank, err))
	}
}

// sendCtx is a context whose deadline the communicator moves before each
// send: a deadline per message without allocating one. Its Err reports
// the communicator's abort too (when the transport tells of it), so that
// a send blocked on a rank that does not read gives up when another rank
// has abandoned the collective (a transport looks at Err while it waits).
type sendCtx struct {
	context.Context
	deadline time.Time
	abort    <-chan struct{}
}

func (s *sendCtx) Err() error {
	if err := s.Context.Err(); err != nil {
		return err
	}
	select {
	case <-s.abort:
		return context.Canceled
	default:
		return nil
	}
}

func (s *sendCtx) Deadline() (time.Time, bool) {
	if dl, ok := s.Context.Deadline(); ok && dl.Before(s.deadline) {
		return dl, true
	}
	return s.deadline, true
}

// abortSignal is a Transport that tells of its abort on a channel,
// closed once the communicator is abandoned.
type abortSignal interface {
	abortSignal() <-chan struct{}
}

// sendFailed returns the first send's failure, if any.
func (c *Comm) sendFailed() error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.sendErr
}

// recv receives the next message from rank from into dst: reduced into it
// when reduce, else copied.
func (c *Comm) recv(ctx context.Context, from int, dst []byte, dt DType, op Op, reduce bool) error {
	sinks := append(c.sinks[:0], Sink{Seq: c.seq, Dst: dst, DType: dt, Op: op, Reduce: reduce})
	return c.recvPlan(ctx, from, sinks, nil, nil)
}

// planChunks appends to sinks one sink per chunk of dst: src op the
// message into it when src is set, else as recv.
func (c *Comm) planChunks(sinks []Sink, dst, src []byte, dt DType, op Op, reduce bool) []Sink {
	for off := 0; off < len(dst); off += c.cfg.Chunk {
		end := min(off+c.cfg.Chunk, len(dst))
		s := Sink{Seq: c.seq, Dst: dst[off:end], DType: dt, Op: op, Reduce: reduce}
		if src != nil {
			s.Src = src[off:end]
		}
		sinks = append(sinks, s)
	}
	return sinks
}

// recvPlan receives the next len(sinks) messages from rank from into
// sinks, in order, posted all at once where the transport can
// (DirectReceiver); start, when not nil, runs once they are posted (the
// sends that the awaited messages answer: what arrives while it sends
// finds its sink); filled(k) runs once sinks[k] holds its message. sinks
// is the communicator's scratch (c.sinks), kept for the next call.
func (c *Comm) recvPlan(ctx context.Context, from int, sinks []Sink, start func(), filled func(k int)) (err error) {
	c.sinks = sinks
	defer clear(sinks) // hold no caller's buffer past the call
	c.sendMu.Lock()
	serr := c.sendErr
	c.sendMu.Unlock()
	if serr != nil {
		return serr
	}
	if c.cfg.Trace.On() {
		t0, n := time.Now(), 0
		st := c.spanOf(from)
		for i := range sinks {
			n += len(sinks[i].Dst)
			sinks[i].trace = st
		}
		defer func() { st.add(trace.StageRecv, n, t0, err) }()
	}
	if dr, ok := c.t.(DirectReceiver); ok {
		return dr.RecvPlan(ctx, from, sinks, start, func(k int) {
			c.got.Add(1)
			if filled != nil {
				filled(k)
			}
		})
	}
	if start != nil {
		start()
	}
	for k := range sinks {
		m, err := c.t.Recv(ctx, from)
		if err != nil {
			return err
		}
		err = sinks[k].Apply(from, m.Seq, m.Data)
		m.Release()
		if err != nil {
			return err
		}
		c.got.Add(1)
		if filled != nil {
			filled(k)
		}
	}
	return nil
}

// spanOf is what the running collective's spans with peer rank are
// recorded under.
func (c *Comm) spanOf(peer int) *sinkTrace {
	return &sinkTrace{rec: c.cfg.Trace, id: trace.CollID(c.cfg.TraceComm, c.runSeq), name: c.kind, peer: "rank " + strconv.Itoa(peer)}
}

// Received counts the messages this rank has received: a watchdog that
// sees it stand still knows the communicator makes no progress (a rank
// alive but not calling the collective).
func (c *Comm) Received() uint64 { return c.got.Load() }

// chunks calls f for each chunk of b (none when b is empty).
func (c *Comm) chunks(b []byte, f func([]byte) error) error {
	for off := 0; off < len(b); off += c.cfg.Chunk {
		if err := f(b[off:min(off+c.cfg.Chunk, len(b))]); err != nil {
			return err
		}
	}
	return nil
}

func (c *Comm) sendAll(ctx context.Context, to int, b []byte) {
	c.chunks(b, func(p []byte) error { c.send(ctx, to, p); return nil })
}

func (c *Comm) recvAll(ctx context.Context, from int, b []byte, dt DType, op Op, reduce bool) error {
	return c.recvPlan(ctx, from, c.planChunks(c.sinks[:0], b, nil, dt, op, reduce), nil, nil)
}

// run runs one collective: it takes the communicator, numbers the
// collective, and on failure aborts it everywhere. Its sends are done
// when it returns (they are made on this goroutine): the caller may reuse
// its buffers. The flight recorder notes it (bytes of dt: this rank's
// buffer) as it is called, starts and ends.
func (c *Comm) run(ctx context.Context, name string, bytes int, dt DType, f func() error) error {
	h := c.rec.enqueue(name, bytes, dt)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		err := fmt.Errorf("coll: %s: communicator unusable since an earlier failure (rebuild it): %w", name, c.broken)
		c.rec.end(h, c.got.Load(), err)
		return err
	}
	c.nextSeq()
	c.kind, c.runSeq = name, c.seq
	c.rec.start(h, c.seq, c.got.Load())
	err := f()
	var re *RankError
	if ferr := c.sendFailed(); err == nil || (ferr != nil && errors.As(ferr, &re) && !errors.As(err, &re)) {
		err = ferr // a send's failure names the rank that failed
	}
	if err == nil {
		c.rec.end(h, c.got.Load(), nil)
		return nil
	}
	if !errors.Is(err, ErrAborted) {
		c.t.Abort(fmt.Sprintf("rank %d: %s #%d: %v", c.rank, name, c.seq, err))
	}
	c.broken = err
	err = fmt.Errorf("coll: %s #%d on rank %d of %d (%s): %w", name, c.seq, c.rank, c.size, c.behind(), err)
	c.rec.end(h, c.got.Load(), err)
	c.sendMu.Lock()
	c.brokenWhy = err.Error()
	c.sendMu.Unlock()
	return err
}

// behind says, for a failure of the running collective, which ranks this
// one last heard at an earlier collective (the ones that did not reach
// it, as far as this rank can tell) and the last it completed itself.
func (c *Comm) behind() string {
	var b strings.Builder
	fmt.Fprintf(&b, "this rank's last completed: #%d", c.rec.lastCompleted())
	if h, ok := c.t.(heardFrom); ok {
		st := Status{Rank: c.rank, Started: c.seq, Heard: h.Heard()}
		for _, r := range st.Stuck() {
			fmt.Fprintf(&b, "; rank %d last heard at #%d", r.Rank, r.Seq)
		}
	}
	return b.String()
}

// nextSeq numbers the next collective (with c.mu held).
// Seq is the sequence number of the next collective: the ones before it
// have ended on this rank. It waits for the collective running, if any.
func (c *Comm) Seq() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

func (c *Comm) nextSeq() { c.seq = (c.seq + 1) & (1<<SeqBits - 1) }

func (c *Comm) check(dt DType, op Op, bufs ...[]byte) error {
	if !dt.Valid() {
		return fmt.Errorf("coll: unknown dtype %v", dt)
	}
	if op != 0 && !op.Valid() {
		return fmt.Errorf("coll: unknown reduction %v", op)
	}
	for _, b := range bufs {
		if len(b)%dt.Size() != 0 {
			return fmt.Errorf("coll: a buffer of %d bytes is not a whole number of %v", len(b), dt)
		}
	}
	return nil
}

// segment returns the bytes of segment i when count elements of es bytes
// are cut into n nearly equal segments (the first count%n one longer).
func segment(count, n, i, es int) (off, length int) {
	q, r := count/n, count%n
	start := i*q + min(i, r)
	l := q
	if i < r {
		l++
	}
	return start * es, l * es
}

func mod(a, n int) int { return ((a % n) + n) % n }
