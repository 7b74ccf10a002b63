package trace

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
)

// Stages of an op, as spans name them.
const (
	StageOp    = "op"    // the host's: from submission to the completion seen
	StageQueue = "queue" // the agent's: taken from the ring, waiting for a worker
	StageServe = "serve" // the agent's: its service's work, to the completion
	StageWait  = "wait"  // a collective's, on one rank: called, not yet started
	StageRun   = "run"   // a collective's, on one rank: started to its end
	// A collective's messages on one rank, per peer (Span.Peer):
	StageSend   = "send"   // a message handed to the transport until it took it
	StageRecv   = "recv"   // the messages of one step, posted until the last arrived
	StageReduce = "reduce" // a message reduced into the buffer, as it arrived (inside recv)
	// An erasure-coded object's requests to the agents holding its
	// shards (Span.Peer names the agent):
	StageCall   = "call"   // the coordinator's: a request sent until its reply
	StageHandle = "handle" // the holder's: the request served
	// Stages inside an agent's serve, which services record for the ops
	// that have them (dpu.Request.Stage):
	StageCode   = "code"   // EC: one round of the coder's work
	StageCopy   = "copy"   // EC on a window it cannot map: a round's copy in or out
	StageCommit = "commit" // KV: the store's write, its group commit included
	// A peer frame's way between two agents (Span.Peer names the other
	// node), recorded by the peer layer under the op the frame belongs
	// to: inside a collective's send, and for every frame of a link test
	// (LinkID).
	StageSeal  = "seal"  // the sender's: the frame's tag computed over its header and payload
	StageWrite = "write" // the sender's: the frame written until the kernel took its last byte
	StageRead  = "read"  // the receiver's: the frame's bytes read, from its header to its last
	StageOpen  = "open"  // the receiver's: the frame's tag checked
	// StageShare is a multi-rail op's share on one rail, from the op's
	// start to the share's end (Span.Peer names the rail, Span.Predicted
	// is the planner's time for it).
	StageShare = "share"
)

// Span is one stage of one op on one process. Times are the recording
// process's clock (Unix nanoseconds); a reader that merges processes of
// several machines shifts each by its measured offset.
type Span struct {
	ID     string `json:"id"`    // the op's, the same on every process (OpID, CollID)
	Proc   string `json:"proc"`  // the process that recorded it
	Name   string `json:"name"`  // the op's kind: checksum, ec-encode, allreduce
	Stage  string `json:"stage"` // StageOp, StageQueue, …
	Start  int64  `json:"start"` // Unix nanoseconds
	Dur    int64  `json:"dur"`   // nanoseconds
	Status string `json:"status,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	// Peer is the other end of a send, receive or call: "rank 2",
	// "node 3"; a share's rail.
	Peer string `json:"peer,omitempty"`
	// Predicted is what the planner expected the span to take
	// (nanoseconds; a share's), 0 where nothing was predicted.
	Predicted int64 `json:"predicted,omitempty"`
}

// End is when the span ended.
func (s Span) End() int64 { return s.Start + s.Dur }

// OpID names a handed-off op: origin is where it came from as both ends
// name it (Origin, TCPOrigin), tag its descriptor's.
func OpID(origin string, tag uint64) string {
	return origin + " tag " + strconv.FormatUint(tag, 16)
}

// Origin is a shared-memory queue pair's name: the holder's process id
// (its lease's, which the agent reads) and the pair's index.
func Origin(pid uint32, qp int) string {
	return "pid " + strconv.FormatUint(uint64(pid), 10) + " qp " + strconv.Itoa(qp)
}

// TCPOrigin is a TCP handoff connection's name: the host's end of it.
func TCPOrigin(hostAddr string) string { return "tcp " + hostAddr }

// CollID names collective seq of communicator comm.
func CollID(comm uint64, seq uint32) string {
	return "coll " + strconv.FormatUint(comm, 16) + " #" + strconv.FormatUint(uint64(seq), 10)
}

// SplitID names the n-th multi-rail op of process pid: its shares' spans
// go under it.
func SplitID(pid int, n uint64) string {
	return "split " + strconv.Itoa(pid) + " #" + strconv.FormatUint(n, 10)
}

// LinkID names a link test (a bulk transfer between two agents: hecctl
// cluster ping) from node from on communicator comm, as both ends know it
// from its frames' headers.
func LinkID(from uint32, comm uint64) string {
	return "link " + strconv.FormatUint(uint64(from), 10) + " #" + strconv.FormatUint(comm, 16)
}

// NameLink is a link test's kind of op.
const NameLink = "link"

// Op is what a layer below an op records its spans under: the op's id and
// kind.
type Op struct{ ID, Name string }

type opKey struct{}

// WithOp returns ctx carrying op, for the layers below to record their
// stages of it under (the peer layer's seal and write of a frame).
func WithOp(ctx context.Context, op Op) context.Context { return context.WithValue(ctx, opKey{}, op) }

// OpOf returns the op ctx carries, if any.
func OpOf(ctx context.Context) (Op, bool) {
	op, ok := ctx.Value(opKey{}).(Op)
	return op, ok
}

// Reply is what a process answers a request for its spans.
type Reply struct {
	Proc  string `json:"proc"`
	Now   int64  `json:"now"` // its clock when it answered (Unix nanoseconds)
	Spans []Span `json:"spans"`
	// Lost counts the spans of the recording dropped for want of room.
	Lost  uint64 `json:"lost,omitempty"`
	Error string `json:"error,omitempty"` // why there is no recording
}

// Recorder keeps the latest spans, up to its capacity, while at least
// one recording is under way. It is safe for concurrent use.
type Recorder struct {
	on atomic.Int32 // recordings under way

	mu       sync.Mutex
	capacity int
	buf      []Span // made at the first recording
	added    uint64 // spans ever added; buf[added%len(buf)] is the next slot
}

// DefaultCapacity is the spans a recorder keeps unless told otherwise:
// about 6 MiB of them, taken at the first recording.
const DefaultCapacity = 1 << 16

// NewRecorder returns a recorder of capacity spans (DefaultCapacity when
// not positive). It takes their memory when a recording first begins.
func NewRecorder(capacity int) *Recorder {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Recorder{capacity: capacity}
}

// On reports whether spans are recorded now: the one check an op pays
// while no one records.
func (r *Recorder) On() bool { return Compiled && r != nil && r.on.Load() > 0 }

// Begin starts a recording; end stops it (once). Recordings may overlap:
// spans are kept while any is under way.
func (r *Recorder) Begin() (end func()) {
	r.mu.Lock()
	if r.buf == nil {
		r.buf = make([]Span, r.capacity)
	}
	r.mu.Unlock()
	r.on.Add(1)
	var once sync.Once
	return func() { once.Do(func() { r.on.Add(-1) }) }
}

// Add keeps s, when a recording is under way.
func (r *Recorder) Add(s Span) {
	if !r.On() {
		return
	}
	r.mu.Lock() // On: Begin made buf
	r.buf[r.added%uint64(len(r.buf))] = s
	r.added++
	r.mu.Unlock()
}

// Mark is a point in a recorder's history, for Since.
type Mark uint64

// Mark returns the point from which Since reads.
func (r *Recorder) Mark() Mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Mark(r.added)
}

// Since returns the spans added after m, oldest first, and how many of
// them were dropped for want of room.
func (r *Recorder) Since(m Mark) (spans []Span, lost uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from := uint64(m)
	if from > r.added {
		from = r.added
	}
	if n := uint64(len(r.buf)); r.added-from > n {
		lost = r.added - from - n
		from = r.added - n
	}
	spans = make([]Span, 0, r.added-from)
	for i := from; i < r.added && len(r.buf) > 0; i++ {
		spans = append(spans, r.buf[i%uint64(len(r.buf))])
	}
	return spans, lost
}
