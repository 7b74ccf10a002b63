//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// ClassStats are one class's counters, summed over CPUs.
type ClassStats struct {
	Class    Class
	Packets  uint64
	Bytes    uint64
	Passed   uint64
	Answered uint64
	Dropped  [NumDrops]uint64
	HotMiss  uint64 // UDP GETs passed up: not held, expired or being replaced
	HotTorn  uint64 // of those, entries that changed while read
}

// Stats returns the per-class counters.
func (p *Program) Stats() ([]ClassStats, error) {
	out := make([]ClassStats, NumClasses)
	var per []hecClassStats
	for c := Class(0); c < NumClasses; c++ {
		if err := p.objs.HecStats.Lookup(uint32(c), &per); err != nil {
			return nil, fmt.Errorf("bpf: stats: %w", err)
		}
		s := &out[c]
		s.Class = c
		for _, v := range per {
			s.Packets += v.Packets
			s.Bytes += v.Bytes
			s.Passed += v.Passed
			s.Answered += v.Answered
			for i := range s.Dropped {
				s.Dropped[i] += v.Dropped[i]
			}
			s.HotMiss += v.HotMiss
			s.HotTorn += v.HotTorn
		}
	}
	return out, nil
}

// Talker is one source's traffic.
type Talker struct {
	Addr    netip.Addr
	Packets uint64
	Bytes   uint64
}

// Talkers returns the n sources with the most bytes (n <= 0: all). The
// program keeps a per-CPU table of 1024 buckets, one source each, a
// heavy source keeping its bucket against light ones that share it: a
// count is exact while its source has its bucket to itself, and a lower
// bound when another source wore it down (see struct talker in xdp.c).
func (p *Program) Talkers(n int) ([]Talker, error) {
	sums := map[netip.Addr]*Talker{}
	var per []hecTalker
	var k uint32
	it := p.objs.HecTalkers.Iterate()
	for it.Next(&k, &per) {
		for _, v := range per {
			if v.Packets == 0 {
				continue
			}
			a := netip.AddrFrom16(v.Addr).Unmap()
			t := sums[a]
			if t == nil {
				t = &Talker{Addr: a}
				sums[a] = t
			}
			t.Packets += v.Packets
			t.Bytes += v.Bytes
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("bpf: talkers: %w", err)
	}
	out := make([]Talker, 0, len(sums))
	for _, t := range sums {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Talker) int {
		if a.Bytes != b.Bytes {
			if a.Bytes > b.Bytes {
				return -1
			}
			return 1
		}
		return a.Addr.Compare(b.Addr)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// ACLRule is an allow-list entry: a source prefix and whether it is allowed.
type ACLRule struct {
	Prefix netip.Prefix
	Allow  bool
}

const (
	aclAllow = 1
	aclDeny  = 2
)

func (p *Program) aclKey(pfx netip.Prefix) (m *ebpf.Map, key any, err error) {
	if !pfx.IsValid() {
		return nil, nil, fmt.Errorf("bpf: acl: invalid prefix")
	}
	pfx = pfx.Masked()
	a := pfx.Addr()
	if a.Is4In6() {
		a = a.Unmap()
		pfx = netip.PrefixFrom(a, max(pfx.Bits()-96, 0))
	}
	if a.Is4() {
		return p.objs.HecAcl4, hecAcl4Key{Prefixlen: uint32(pfx.Bits()), Addr: a.As4()}, nil
	}
	return p.objs.HecAcl6, hecAcl6Key{Prefixlen: uint32(pfx.Bits()), Addr: a.As16()}, nil
}

// ACLAdd adds (or changes) a rule.
func (p *Program) ACLAdd(r ACLRule) error {
	m, k, err := p.aclKey(r.Prefix)
	if err != nil {
		return err
	}
	v := uint32(aclDeny)
	if r.Allow {
		v = aclAllow
	}
	if err := m.Put(k, v); err != nil {
		return fmt.Errorf("bpf: acl add %s: %w", r.Prefix, err)
	}
	return nil
}

// ErrNoRule is returned by ACLDel for a prefix not in the list.
var ErrNoRule = errors.New("bpf: no such allow-list rule")

// ACLDel removes the rule for prefix.
func (p *Program) ACLDel(pfx netip.Prefix) error {
	m, k, err := p.aclKey(pfx)
	if err != nil {
		return err
	}
	if err := m.Delete(k); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("%w: %s", ErrNoRule, pfx)
		}
		return fmt.Errorf("bpf: acl del %s: %w", pfx, err)
	}
	return nil
}

// ACLList returns the rules, IPv4 first, each by address then length.
func (p *Program) ACLList() ([]ACLRule, error) {
	var out []ACLRule
	var k4 hecAcl4Key
	var v uint32
	it := p.objs.HecAcl4.Iterate()
	for it.Next(&k4, &v) {
		out = append(out, ACLRule{Prefix: netip.PrefixFrom(netip.AddrFrom4(k4.Addr), int(k4.Prefixlen)), Allow: v == aclAllow})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("bpf: acl list: %w", err)
	}
	var k6 hecAcl6Key
	it = p.objs.HecAcl6.Iterate()
	for it.Next(&k6, &v) {
		out = append(out, ACLRule{Prefix: netip.PrefixFrom(netip.AddrFrom16(k6.Addr), int(k6.Prefixlen)), Allow: v == aclAllow})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("bpf: acl list: %w", err)
	}
	slices.SortFunc(out, func(a, b ACLRule) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return a.Prefix.Bits() - b.Prefix.Bits()
	})
	return out, nil
}

// Sample is one sampled packet head.
type Sample struct {
	Time    time.Duration // CLOCK_MONOTONIC when sampled
	Len     int           // the packet's length on the wire
	Data    []byte        // its first bytes (the snap length)
	Ifindex int
	Class   Class
	Verdict string // "pass", "drop" or "answer"
}

var verdicts = [...]string{"pass", "drop", "answer"}

// SampleReader reads samples from the ring buffer; one reader at a time.
type SampleReader struct {
	r *ringbuf.Reader
}

// Samples opens the ring buffer of sampled packets.
func (p *Program) Samples() (*SampleReader, error) {
	r, err := ringbuf.NewReader(p.objs.HecSamples)
	if err != nil {
		return nil, fmt.Errorf("bpf: samples: %w", err)
	}
	return &SampleReader{r: r}, nil
}

// ErrClosed is returned by Read once the reader is closed.
var ErrClosed = errors.New("bpf: sample reader closed")

// Read waits for the next sample until deadline (zero: no deadline);
// os.ErrDeadlineExceeded when none came.
func (s *SampleReader) Read(deadline time.Time) (Sample, error) {
	s.r.SetDeadline(deadline)
	rec, err := s.r.Read()
	if err != nil {
		if errors.Is(err, ringbuf.ErrClosed) {
			return Sample{}, ErrClosed
		}
		return Sample{}, err
	}
	return decodeSample(rec.RawSample)
}

// Close stops the reader; a Read in progress returns ErrClosed.
func (s *SampleReader) Close() error { return s.r.Close() }

const sampleHeader = 24

func decodeSample(b []byte) (Sample, error) {
	if len(b) < sampleHeader {
		return Sample{}, fmt.Errorf("bpf: sample of %d bytes", len(b))
	}
	le := binary.LittleEndian
	caplen := int(le.Uint32(b[12:]))
	if caplen > SnapMax || sampleHeader+caplen > len(b) {
		return Sample{}, fmt.Errorf("bpf: sample caplen %d", caplen)
	}
	s := Sample{
		Time:    time.Duration(le.Uint64(b[0:])),
		Len:     int(le.Uint32(b[8:])),
		Ifindex: int(le.Uint32(b[16:])),
		Class:   Class(b[20]),
		Data:    append([]byte(nil), b[sampleHeader:sampleHeader+caplen]...),
	}
	if v := int(b[21]); v < len(verdicts) {
		s.Verdict = verdicts[v]
	}
	return s, nil
}
