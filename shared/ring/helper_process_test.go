package ring

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hecsys/hec/shared/wire"
)

// runHelper is the body of the second process in two-process tests.
func runHelper(mode, path string) int {
	r, err := Map(path, 0, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	defer r.Close()
	switch mode {
	case "client":
		return helperClient(r)
	case "hold":
		return helperHold(r)
	case "hostile":
		return helperHostile(r)
	}
	fmt.Fprintln(os.Stderr, "helper: unknown mode", mode)
	return 2
}

func helperLease(r *Region) (*HostQP, error) {
	h, err := Attach(r)
	if err != nil {
		return nil, err
	}
	return h.Lease(context.Background(), -1)
}

// helperClient runs checksums of random buffers and checks every answer.
func helperClient(r *Region) int {
	q, err := helperLease(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	defer q.Release()
	n, _ := strconv.Atoi(os.Getenv("HEC_RING_OPS"))
	win := q.Window()
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	ds := make([]wire.Desc, 16)
	out := make([]wire.Desc, 16)
	for done := 0; done < n; done += len(ds) {
		want := make(map[uint64]uint32)
		for i := range ds {
			off := uint32(i * 4096)
			l := uint32(rng.IntN(4096))
			for j := uint32(0); j < l; j++ {
				win[off+j] = byte(rng.Uint32())
			}
			tag := uint64(done + i)
			ds[i] = wire.Desc{Op: wire.OpChecksum, Tag: tag, NSpan: 1, Spans: [4]wire.Span{{Off: off, Len: l}}}
			want[tag] = crc32.Checksum(win[off:off+l], castagnoli)
		}
		if err := roundTrip(q, ds, out); err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			return 1
		}
		for _, c := range out {
			if c.Status != wire.StatusOK || uint32(c.Arg0) != want[c.Tag] {
				fmt.Fprintf(os.Stderr, "client: tag %d: status %s crc %#x want %#x\n", c.Tag, c.Status, c.Arg0, want[c.Tag])
				return 1
			}
			delete(want, c.Tag)
		}
		if len(want) != 0 {
			fmt.Fprintln(os.Stderr, "client: missing completions", want)
			return 1
		}
		q.Beat()
	}
	fmt.Println("ok")
	return 0
}

// helperHold leases a pair, says which, and holds it (beating) until killed.
func helperHold(r *Region) int {
	q, err := helperLease(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		return 1
	}
	// Leave work in flight: submit pings that the agent will complete into a
	// completion ring nobody polls.
	q.Submit([]wire.Desc{{Op: wire.OpPing, Tag: 1}, {Op: wire.OpPing, Tag: 2}})
	fmt.Printf("leased %d\n", q.Index())
	os.Stdout.Sync()
	for {
		q.Beat()
		time.Sleep(10 * time.Millisecond)
	}
}

// helperHostile leases a pair of its own and then, for HEC_RING_FOR, writes
// random words over everything in the region except the pair named by
// HEC_RING_VICTIM (its control block, rings and window): the header, other
// control blocks (leases, indices, reset words), rings, and its own pair,
// where it also submits garbage descriptors with plausible indices.
func helperHostile(r *Region) int {
	victim, _ := strconv.Atoi(os.Getenv("HEC_RING_VICTIM"))
	dur, _ := time.ParseDuration(os.Getenv("HEC_RING_FOR"))
	h, err := Attach(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		return 1
	}
	l := h.l
	own, err := h.Lease(context.Background(), -1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		return 1
	}
	type rng struct{ lo, hi uint64 }
	var targets []rng
	targets = append(targets, rng{0, headerSize})
	for i := 0; i < l.QueuePairs; i++ {
		if i == victim {
			continue
		}
		targets = append(targets, rng{l.block(i), l.block(i) + qpBlockSize}, rng{l.sq(i), l.cq(i) + l.ringBytes})
	}
	mem := r.Bytes()
	store := func(off, v uint64) {
		(*atomic.Uint64)(unsafe.Pointer(&mem[off])).Store(v)
	}
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	end := time.Now().Add(dur)
	var writes, submits uint64
	var garbage [wire.DescSize]byte
	for time.Now().Before(end) {
		for k := 0; k < 1000; k++ {
			switch rnd.IntN(4) {
			case 0, 1: // a random word anywhere allowed
				t := targets[rnd.IntN(len(targets))]
				off := t.lo + uint64(rnd.IntN(int(t.hi-t.lo)/8))*8
				v := rnd.Uint64()
				if rnd.IntN(2) == 0 {
					v %= 300 // small values look like indices and epochs
				}
				store(off, v)
			case 2: // garbage descriptors into our own ring, published
				for i := range garbage {
					garbage[i] = byte(rnd.Uint32())
				}
				if rnd.IntN(2) == 0 {
					binary.LittleEndian.PutUint16(garbage[0:], uint16(rnd.IntN(4)))
					garbage[6], garbage[7] = byte(rnd.IntN(6)), 0
				}
				if own.Room() > 0 {
					copy(own.sq[(own.sqTail&own.mask)*descSize:], garbage[:])
					own.sqTail++
					own.word(qSQTail).Store(own.sqTail)
					submits++
				}
				var sink [8]wire.Desc
				own.Poll(sink[:])
			case 3: // our own indices, torn
				store(own.block+[]uint64{qSQTail, qCQHead, qResetReq}[rnd.IntN(3)], rnd.Uint64()%512)
			}
			writes++
		}
		if own.Check() != nil && rnd.IntN(8) == 0 {
			own.Release()
			if q, err := h.Lease(context.Background(), -1); err == nil {
				own = q
			}
		}
	}
	fmt.Printf("writes %d submits %d\n", writes, submits)
	return 0
}

func readLine(s *bufio.Scanner) string {
	if s.Scan() {
		return s.Text()
	}
	return ""
}
