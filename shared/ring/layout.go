package ring

import (
	"errors"
	"fmt"
	"math/bits"
)

// Version is the layout version written in the header. Version 2 added the
// agent's heartbeat to every queue pair's control block.
const Version = 2

// Magic is the first word of a formatted region ("HECRGN01" little-endian).
const Magic uint64 = 0x3130_4e47_5243_4548

const (
	pageSize    = 4096
	headerSize  = pageSize
	qpBlockSize = 2048
	wordStride  = 128 // distance between single-writer words
	descSize    = 64

	// MaxWindow is the largest window: spans carry 32-bit offsets.
	MaxWindow = 1<<32 - pageSize
	// MaxQueuePairs bounds the queue pair table.
	MaxQueuePairs = 1024
	// MaxEntries bounds a ring.
	MaxEntries = 1 << 16
)

// Header offsets. Geometry words share the first line (written once, before
// the state word says ready); the agent's live words each have their own.
const (
	hMagic      = 0
	hVersion    = 8 // u32
	hQPs        = 12
	hEntries    = 16
	hBlockSize  = 20
	hWindow     = 24 // u64
	hRegion     = 32
	hQPTable    = 40
	hRings      = 48
	hArena      = 56
	hGeneration = 1 * wordStride
	hHeartbeat  = 2 * wordStride
	hState      = 3 * wordStride
	hSleeping   = 4 * wordStride // agent: 1 while it sleeps on the doorbell
	hDoorbell   = 5 * wordStride // hosts add 1 and futex-wake when the agent sleeps (a hint, not state)
)

// Agent state in the header.
const (
	agentFormatting uint64 = 0
	agentReady      uint64 = 1
	agentStopped    uint64 = 2
)

// Queue pair control block offsets (relative to the block).
const (
	qLease     = 0  // host CAS; agent when fencing: epoch<<32 | pid
	qStart     = 64 // host: holder's start time (same line pair as the lease; written once)
	qHeartbeat = 1 * wordStride
	qSQTail    = 2 * wordStride  // host
	qCQHead    = 3 * wordStride  // host
	qResetReq  = 4 * wordStride  // host
	qState     = 5 * wordStride  // agent: gen<<32 | resetAck<<16 | state
	qSQHead    = 6 * wordStride  // agent
	qCQTail    = 7 * wordStride  // agent
	qSleeping  = 8 * wordStride  // host: how many of its goroutines sleep on its completion bell
	qBell      = 9 * wordStride  // agent: adds 1 and futex-wakes when the host sleeps
	qAgentBeat = 10 * wordStride // agent: its heartbeat, copied into every pair's block
)

// QPState is the agent's view of a queue pair, published in its state word.
type QPState uint8

const (
	QPFree    QPState = 0 // lease free, indices zero
	QPActive  QPState = 1 // bound to a holder and served
	QPFaulted QPState = 2 // indices went wrong; holder must Reset
	QPFenced  QPState = 3 // holder gone or released; draining before free
	QPStopped QPState = 4 // the agent stopped serving the region
)

func (s QPState) String() string {
	switch s {
	case QPFree:
		return "free"
	case QPActive:
		return "active"
	case QPFaulted:
		return "faulted"
	case QPFenced:
		return "fenced"
	case QPStopped:
		return "stopped"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// releasedPID in a lease word means the holder gave the pair back and the
// agent has not fenced it yet: not free to take.
const releasedPID = 0xffff_ffff

func leaseWord(epoch, pid uint32) uint64 { return uint64(epoch)<<32 | uint64(pid) }
func leaseEpoch(w uint64) uint32         { return uint32(w >> 32) }
func leasePID(w uint64) uint32           { return uint32(w) }

func stateWord(gen uint32, ack uint16, s QPState) uint64 {
	return uint64(gen)<<32 | uint64(ack)<<16 | uint64(s)
}
func stateGen(w uint64) uint32    { return uint32(w >> 32) }
func stateAck(w uint64) uint16    { return uint16(w >> 16) }
func stateState(w uint64) QPState { return QPState(w) }

// Geometry is the shape of a region.
type Geometry struct {
	// QueuePairs is the number of queue pairs (1..MaxQueuePairs).
	QueuePairs int
	// Entries is the number of descriptors per ring, a power of two
	// (2..MaxEntries).
	Entries int
	// WindowSize is each queue pair's share of the arena in bytes, a
	// multiple of 4096 and at most MaxWindow.
	WindowSize uint64
}

// ErrGeometry is returned for a geometry that cannot be laid out.
var ErrGeometry = errors.New("ring: bad geometry")

func (g Geometry) validate() error {
	switch {
	case g.QueuePairs < 1 || g.QueuePairs > MaxQueuePairs:
		return fmt.Errorf("%d queue pairs (1..%d): %w", g.QueuePairs, MaxQueuePairs, ErrGeometry)
	case g.Entries < 2 || g.Entries > MaxEntries || bits.OnesCount(uint(g.Entries)) != 1:
		return fmt.Errorf("%d ring entries (power of two, 2..%d): %w", g.Entries, MaxEntries, ErrGeometry)
	case g.WindowSize == 0 || g.WindowSize%pageSize != 0 || g.WindowSize > MaxWindow:
		return fmt.Errorf("window of %d bytes (multiple of %d, at most %d): %w", g.WindowSize, pageSize, uint64(MaxWindow), ErrGeometry)
	}
	return nil
}

// layout is a Geometry with every offset worked out.
type layout struct {
	Geometry
	qpTable, rings, arena, size uint64
	ringBytes                   uint64 // one ring
}

func roundUp(n, to uint64) uint64 { return (n + to - 1) / to * to }

func newLayout(g Geometry) (layout, error) {
	if err := g.validate(); err != nil {
		return layout{}, err
	}
	l := layout{Geometry: g}
	n := uint64(g.QueuePairs)
	l.qpTable = headerSize
	l.rings = roundUp(l.qpTable+n*qpBlockSize, pageSize)
	l.ringBytes = uint64(g.Entries) * descSize
	l.arena = roundUp(l.rings+n*2*l.ringBytes, pageSize)
	l.size = l.arena + n*g.WindowSize
	return l, nil
}

func (l layout) block(qp int) uint64  { return l.qpTable + uint64(qp)*qpBlockSize }
func (l layout) sq(qp int) uint64     { return l.rings + uint64(qp)*2*l.ringBytes }
func (l layout) cq(qp int) uint64     { return l.sq(qp) + l.ringBytes }
func (l layout) window(qp int) uint64 { return l.arena + uint64(qp)*l.WindowSize }

// GeometryForSize returns the geometry that fits queuePairs pairs of entries
// descriptors into size bytes, giving the arena all that is left.
func GeometryForSize(size uint64, queuePairs, entries int) (Geometry, error) {
	g := Geometry{QueuePairs: queuePairs, Entries: entries, WindowSize: pageSize}
	l, err := newLayout(g)
	if err != nil {
		return Geometry{}, err
	}
	if size < l.size {
		return Geometry{}, fmt.Errorf("region of %d bytes is too small for %d queue pairs (need %d): %w", size, queuePairs, l.size, ErrGeometry)
	}
	w := (size - l.arena) / uint64(queuePairs) / pageSize * pageSize
	g.WindowSize = min(w, MaxWindow)
	return g, nil
}

// Size returns the number of bytes a region of geometry g needs.
func (g Geometry) Size() (uint64, error) {
	l, err := newLayout(g)
	return l.size, err
}
