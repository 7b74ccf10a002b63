//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// HotCache is the map of hot keys xdp.c answers UDP GETs for.
//
// Each held key has a slot in an array the agent maps into its memory: one
// of two, chosen by its hash (hotHash, hot_hash in xdp.c), so XDP finds it
// with no map lookup.
// The slot's sequence count is odd while the slot is being written or
// holds nothing valid, even while it may be served; XDP reads it before
// and after copying the reply (fully ordered reads) and passes the GET up
// unless both are the same even value. So a reader never sends a value
// half old, half new.
//
// A write must never leave an older value servable once it is
// acknowledged. Every write path calls Invalidate(key) after the write is
// visible to readers of the store and before it is acknowledged:
// Invalidate makes the slot's count odd (a store to shared memory, no
// system call; keys not held cost one map lookup).
//
// A fill (Admit) races with writes. It reads the count (odd: the slot is
// not servable) before it reads the store, writes the slot, and makes the
// count even only if it is unchanged (compare-and-swap): a write that
// invalidated in between makes the fill fail. It then reads the key's
// version again and invalidates the slot if it changed.
type HotCache struct {
	slots, hits *ebpf.Map
	mem         []byte

	keys atomic.Pointer[map[string]int32] // held keys → slots; replaced whole, under mu

	mu    sync.Mutex
	owner [HotSlots]string // the key each slot holds ("": free)

	// unmap keeps close from unmapping the slots under an Invalidate
	// (which does not take mu, and may run on any writer's goroutine).
	unmap sync.RWMutex

	invalidations atomic.Uint64
}

// Slot layout (struct hot_slot in xdp.c).
const (
	slotSeq     = 0
	slotBodyLen = 8
	slotBodySum = 12
	slotVersion = 16
	slotExpires = 24
	slotKey     = 32
	slotBody    = 96
	slotSize    = slotBody + HotBodyMax
)

func init() {
	if unsafe.Sizeof(hecHotSlot{}) != slotSize || unsafe.Offsetof(hecHotSlot{}.Body) != slotBody ||
		unsafe.Offsetof(hecHotSlot{}.Key) != slotKey {
		panic("bpf: hot_slot layout differs from xdp.c")
	}
}

func newHotCache(slots, hits *ebpf.Map) (*HotCache, error) {
	size := HotSlots * slotSize
	page := unix.Getpagesize()
	size = (size + page - 1) / page * page
	mem, err := unix.Mmap(slots.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("bpf: mmap the hot map: %w", err)
	}
	h := &HotCache{slots: slots, hits: hits, mem: mem}
	m := map[string]int32{}
	h.keys.Store(&m)
	for i := range HotSlots {
		h.seq(int32(i)).Store(1) // nothing valid
	}
	return h, nil
}

func (h *HotCache) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unmap.Lock()
	defer h.unmap.Unlock()
	if h.mem != nil {
		empty := map[string]int32{}
		h.keys.Store(&empty)
		unix.Munmap(h.mem)
		h.mem = nil
	}
}

func (h *HotCache) slot(i int32) []byte { return h.mem[int(i)*slotSize : (int(i)+1)*slotSize] }

func (h *HotCache) seq(i int32) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&h.mem[int(i)*slotSize+slotSeq]))
}

// invalidate makes slot i's count odd and different from before, so
// readers pass and a fill in progress fails.
func (h *HotCache) invalidate(i int32) {
	s := h.seq(i)
	for {
		v := s.Load()
		n := v + 1
		if v&1 == 1 {
			n = v + 2
		}
		if s.CompareAndSwap(v, n) {
			return
		}
	}
}

// Invalidate stops key from being answered in XDP until it is admitted
// again. Safe from any goroutine; call it on every write of key, after
// the write is visible and before it is acknowledged.
func (h *HotCache) Invalidate(key []byte) {
	if i, ok := (*h.keys.Load())[string(key)]; ok {
		h.unmap.RLock()
		if h.mem != nil {
			h.invalidate(i)
		}
		h.unmap.RUnlock()
		h.invalidations.Add(1)
	}
}

// HotValue is what a fill reads from the store.
type HotValue struct {
	Body    []byte    // the reply after the frame header: "VALUE ...\r\n...\r\nEND\r\n"
	Version uint64    // changes with every write of the key
	Expires time.Time // zero: none
}

// Errors of Admit.
var (
	ErrHotFull  = errors.New("bpf: hot map full")
	ErrHotKey   = errors.New("bpf: key cannot be held in the hot map")
	ErrHotValue = errors.New("bpf: value too large for the hot map")
)

// ValidHotKey reports whether key can be held: 1..HotKeyMax bytes, none
// a space or control character (what a memcached GET line can carry).
func ValidHotKey(key []byte) bool {
	if len(key) < 1 || len(key) > HotKeyMax {
		return false
	}
	for _, c := range key {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// Admit holds key in the hot map, filled by read (called twice: the
// fill, then the re-check of the version). It returns nil also when a
// concurrent write made the fill fail (the key stays held but not served
// until Admit runs again).
func (h *HotCache) Admit(key []byte, read func() (HotValue, error)) error {
	if !ValidHotKey(key) {
		return fmt.Errorf("%w: %q", ErrHotKey, key)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mem == nil {
		return ErrClosed
	}
	i, held := (*h.keys.Load())[string(key)]
	if held && h.seq(i).Load()&1 == 0 {
		return nil // served already
	}
	if !held {
		i = -1
		for _, c := range hotSlotsOf(key) {
			if h.owner[c] == "" {
				i = c
				break
			}
		}
		if i < 0 {
			return ErrHotFull
		}
		h.invalidate(i)
		h.owner[i] = string(key)
		h.publish(string(key), i, true)
		h.hits.Put(uint32(i), make([]uint64, ebpf.MustPossibleCPU()))
	}
	// From here a write of key invalidates slot i.
	s0 := h.seq(i).Load() // odd
	v, err := read()
	if err != nil {
		h.dropLocked(string(key), i)
		return err
	}
	if len(v.Body) > HotBodyMax || len(v.Body) == 0 {
		h.dropLocked(string(key), i)
		return fmt.Errorf("%w: %d bytes of reply", ErrHotValue, len(v.Body))
	}
	var exp uint64
	if !v.Expires.IsZero() {
		left := time.Until(v.Expires)
		if left <= time.Millisecond {
			h.dropLocked(string(key), i)
			return nil // expired: not worth holding
		}
		exp = uint64(MonotonicNow() + left - time.Millisecond)
	}
	b, le := h.slot(i), binary.LittleEndian
	le.PutUint32(b[slotBodyLen:], uint32(len(v.Body)))
	le.PutUint32(b[slotBodySum:], bodySum(v.Body))
	le.PutUint64(b[slotVersion:], v.Version)
	le.PutUint64(b[slotExpires:], exp)
	clear(b[slotKey : slotKey+HotKeyMax+4])
	copy(b[slotKey:], key)
	le.PutUint32(b[slotKey+HotKeyMax:], uint32(len(key)))
	n := copy(b[slotBody:], v.Body)
	clear(b[slotBody+n : slotBody+(n+7)&^7])
	if !h.seq(i).CompareAndSwap(s0, s0+1) {
		return nil // a write came: stays unserved until admitted again
	}
	if again, err := read(); err != nil || again.Version != v.Version {
		h.invalidate(i)
	}
	return nil
}

// publish adds (or removes) key → i in the held set.
func (h *HotCache) publish(key string, i int32, add bool) {
	old := *h.keys.Load()
	m := make(map[string]int32, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	if add {
		m[key] = i
	} else {
		delete(m, key)
	}
	h.keys.Store(&m)
}

// Evict stops holding key.
func (h *HotCache) Evict(key []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i, ok := (*h.keys.Load())[string(key)]; ok && h.mem != nil {
		h.dropLocked(string(key), i)
	}
}

func (h *HotCache) dropLocked(key string, i int32) {
	h.invalidate(i)
	h.publish(key, i, false)
	h.owner[i] = ""
}

// Occupants returns the keys held in the two slots key may take: the
// ones to evict (Evict) when Admit reports ErrHotFull.
func (h *HotCache) Occupants(key []byte) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, c := range hotSlotsOf(key) {
		if o := h.owner[c]; o != "" && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// hotHash is hot_hash of xdp.c: the words of struct hot_key (the bytes
// zero-padded to HotKeyMax, then the 32-bit length) that hold the key's
// bytes, little-endian, then its length.
func hotHash(key []byte) uint64 {
	var k [HotKeyMax + 4]byte
	copy(k[:], key)
	binary.LittleEndian.PutUint32(k[HotKeyMax:], uint32(len(key)))
	h := uint64(0x9e3779b97f4a7c15)
	for i := 0; i < len(key); i += 8 {
		h ^= binary.LittleEndian.Uint64(k[i:])
		h *= 0xff51afd7ed558ccd
		h ^= h >> 29
	}
	h ^= uint64(len(key))
	h *= 0xff51afd7ed558ccd
	return h ^ h>>32
}

// hotSlotsOf returns the two slots key may take.
func hotSlotsOf(key []byte) [2]int32 {
	h := hotHash(key)
	return [2]int32{int32(h & (HotSlots - 1)), int32(h >> 32 & (HotSlots - 1))}
}

// bodySum is the sum of body's 16-bit words as the program loads them
// (little-endian: bpfel, on amd64 and arm64), zero-padded, folded to 32
// bits with end-around carry: the reply's UDP checksum adds it.
func bodySum(b []byte) uint32 {
	var s uint64
	for i := 0; i+1 < len(b); i += 2 {
		s += uint64(binary.LittleEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint64(b[len(b)-1])
	}
	for s>>32 != 0 {
		s = s&0xffffffff + s>>32
	}
	return uint32(s)
}

// HotEntry is one held key.
type HotEntry struct {
	Key    string
	Served bool   // valid: XDP answers it
	Hits   uint64 // GETs answered in XDP since admitted or last reset
}

// Entries returns the held keys with their hit counts, and resets the
// counts when reset is set.
func (h *HotCache) Entries(reset bool) ([]HotEntry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []HotEntry
	var per []uint64
	var zero []uint64
	for k, i := range *h.keys.Load() {
		if err := h.hits.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("bpf: hot hits: %w", err)
		}
		e := HotEntry{Key: k, Served: h.seq(i).Load()&1 == 0}
		for _, v := range per {
			e.Hits += v
		}
		if reset {
			if zero == nil {
				zero = make([]uint64, len(per))
			}
			h.hits.Put(uint32(i), zero)
		}
		out = append(out, e)
	}
	return out, nil
}

// Counts returns how many keys are held and how many of those XDP may
// serve now (no system call: for status and metrics).
func (h *HotCache) Counts() (held, served int) {
	h.unmap.RLock()
	defer h.unmap.RUnlock()
	for _, i := range *h.keys.Load() {
		held++
		if h.mem != nil && h.seq(i).Load()&1 == 0 {
			served++
		}
	}
	return held, served
}

// Len returns the number of held keys.
func (h *HotCache) Len() int { return len(*h.keys.Load()) }

// Invalidations counts Invalidate calls that found the key held.
func (h *HotCache) Invalidations() uint64 { return h.invalidations.Load() }

func MonotonicNow() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
