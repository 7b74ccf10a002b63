package coll

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// The flight recorder: each communicator keeps its last collectives
// (Config.History, default 1,000) — number, kind, size, type, state and
// times — so that a hang or a failure is diagnosed from what every rank
// last did (Comm.Status), as PyTorch's NCCL watchdog reports each rank's
// last enqueued and completed collective. It costs a collective three
// reads of the clock and no allocation: the records are a ring made
// once.

// State is where a collective is.
type State uint8

const (
	Enqueued  State = iota // called, waiting for the one before it
	Started                // running: Record.Messages counts its steps
	Completed              // ended on this rank
	Failed                 // ended with an error (Record.Err)
)

var stateNames = [...]string{Enqueued: "enqueued", Started: "started", Completed: "completed", Failed: "failed"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText writes the state's name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if n == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("coll: unknown collective state %q", b)
}

// Record is one collective in the flight recorder.
type Record struct {
	Seq   uint32 `json:"seq"` // its number (0 while enqueued)
	Kind  string `json:"kind"`
	Bytes int    `json:"bytes"` // this rank's buffer
	DType DType  `json:"-"`
	State State  `json:"state"`
	// Messages is how many messages this rank has received in it so
	// far: the steps it has got through.
	Messages uint64    `json:"messages"`
	Enqueued time.Time `json:"enqueued"`
	Started  time.Time `json:"started,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
	Err      string    `json:"error,omitempty"`

	got0 uint64 // Comm.got at its start
}

// MarshalJSON writes the record with its type's name.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record
	return json.Marshal(struct {
		plain
		DType string `json:"dtype"`
	}{plain(r), r.DType.String()})
}

// Status is a communicator's progress on this rank: what its flight
// recorder says, and what this rank last heard from each other rank.
type Status struct {
	Rank, Size int
	// Calls counts the collectives called; Started and Completed are
	// the numbers of the last one started and the last one completed on
	// this rank (0: none).
	Calls              uint64
	Started, Completed uint32
	// Heard is, by rank, the number of the last collective this rank
	// received a message of from it (0: none, or a transport that does
	// not tell): a rank stuck behind the others was last heard at an
	// earlier number. Empty where the transport does not tell.
	Heard []uint32
	// Broken is the failure that made the communicator unusable.
	Broken string
	// Recent are the last collectives, oldest first, the running one and
	// those waiting for it included.
	Recent []Record
}

// recorder is the flight recorder's ring.
type recorder struct {
	mu        sync.Mutex
	ring      []Record
	next      uint64 // records ever made: ring[(next-1)%len] is the latest
	started   uint32
	completed uint32
}

// DefaultHistory is how many collectives a communicator remembers.
const DefaultHistory = 1000

func newRecorder(n int) *recorder {
	if n <= 0 {
		n = DefaultHistory
	}
	return &recorder{ring: make([]Record, n)}
}

// enqueue records a call; its handle is its place in the ring's history.
func (r *recorder) enqueue(kind string, bytes int, dt DType) uint64 {
	now := time.Now()
	r.mu.Lock()
	h := r.next
	r.next++
	r.ring[h%uint64(len(r.ring))] = Record{Kind: kind, Bytes: bytes, DType: dt, Enqueued: now}
	r.mu.Unlock()
	return h
}

// at is the record of handle h, nil when it has left the ring (more
// calls than its length since).
func (r *recorder) at(h uint64) *Record {
	if r.next-h > uint64(len(r.ring)) {
		return nil
	}
	return &r.ring[h%uint64(len(r.ring))]
}

func (r *recorder) start(h uint64, seq uint32, got uint64) {
	now := time.Now()
	r.mu.Lock()
	if rec := r.at(h); rec != nil {
		rec.Seq, rec.State, rec.Started, rec.got0 = seq, Started, now, got
	}
	r.started = seq
	r.mu.Unlock()
}

func (r *recorder) end(h uint64, got uint64, err error) {
	now := time.Now()
	r.mu.Lock()
	if rec := r.at(h); rec != nil {
		rec.Ended, rec.Messages = now, got-rec.got0
		if err != nil {
			rec.State, rec.Err = Failed, err.Error()
		} else {
			rec.State = Completed
			r.completed = rec.Seq
		}
	}
	r.mu.Unlock()
}

// lastCompleted is the number of the last collective completed here.
func (r *recorder) lastCompleted() uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.completed
}

// snapshot fills st's recorder part: the running collective's messages
// counted up to got.
func (r *recorder) snapshot(st *Status, got uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st.Calls, st.Started, st.Completed = r.next, r.started, r.completed
	n := min(r.next, uint64(len(r.ring)))
	st.Recent = make([]Record, 0, n)
	for h := r.next - n; h < r.next; h++ {
		rec := r.ring[h%uint64(len(r.ring))]
		if rec.State == Started {
			rec.Messages = got - rec.got0
		}
		st.Recent = append(st.Recent, rec)
	}
}

// heardFrom is a transport that tells, by rank, the number of the last
// collective it received a message of (PeerTransport, Local).
type heardFrom interface {
	Heard() []uint32
}

// Status is this rank's view of the communicator (it does not wait for
// the collective running).
func (c *Comm) Status() Status {
	st := Status{Rank: c.rank, Size: c.size}
	c.rec.snapshot(&st, c.got.Load())
	if h, ok := c.t.(heardFrom); ok {
		st.Heard = h.Heard()
	}
	c.sendMu.Lock()
	if c.brokenWhy != "" {
		st.Broken = c.brokenWhy
	}
	c.sendMu.Unlock()
	return st
}

// Stuck names, from a status, the ranks last heard at an earlier
// collective than this rank's running or failed one, with the number
// each was last heard at: the ranks that did not reach it, as far as
// this rank can tell (a rank hears only those it receives from).
func (st Status) Stuck() []RankHeard {
	at := st.Started
	var out []RankHeard
	for r, h := range st.Heard {
		if r != st.Rank && h != 0 && seqAhead(at, h+1) {
			out = append(out, RankHeard{Rank: r, Seq: h})
		}
	}
	return out
}

// RankHeard is a rank and the collective it was last heard at.
type RankHeard struct {
	Rank int    `json:"rank"`
	Seq  uint32 `json:"seq"`
}
