package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// The handoff scenarios (issue: the handoff contract): a 64-byte descriptor
// between two processes through the ring, against two atomic counters (the
// floor) and a Unix-domain socket, and batched descriptors per second.

func init() {
	children["floor"] = childFloor
	children["ring-rtt"] = childRingRTT
	children["ring-batch"] = childRingBatch
	children["unix-rtt"] = childUnixRTT
}

func benchHandoff(ctx context.Context, rep *Report, quick bool) error {
	n, batchN, reps := 200_000, 20_000_000, 3
	if quick {
		n, batchN = 20_000, 1_000_000
	}
	const s = "handoff"
	type run struct {
		floor, rtt, unix Latency
		batch            float64
	}
	var runs []run
	for r := range reps {
		progress(s, "rep %d of %d: floor, ring, Unix socket", r+1, reps)
		var x run
		var err error
		if x.floor, err = runFloor(n); err != nil {
			return err
		}
		if x.rtt, x.batch, err = runRing(n, batchN); err != nil {
			return err
		}
		if x.unix, err = runUnix(n / 4); err != nil {
			return err
		}
		runs = append(runs, x)
	}
	each := func(f func(run) float64) []float64 {
		out := make([]float64, len(runs))
		for i, x := range runs {
			out[i] = f(x)
		}
		return out
	}
	for _, x := range []struct {
		name string
		l    func(run) Latency
	}{
		{"shared-memory ping-pong (floor)", func(x run) Latency { return x.floor }},
		{"ring round trip, 64 B descriptor", func(x run) Latency { return x.rtt }},
		{"unix socket round trip, 64 B", func(x run) Latency { return x.unix }},
	} {
		for _, pc := range percentiles {
			rep.addN(s, x.name+" "+pc.name, each(func(r run) float64 { return pc.of(x.l(r)) }), "ns")
		}
	}
	rep.addN(s, "ring batched, one queue pair", each(func(x run) float64 { return x.batch }), "desc/s")
	rep.atMostN(s, "ring p50 / floor p50", each(func(x run) float64 { return x.rtt.P50 / x.floor.P50 }), 3, "×")
	rep.atLeastN(s, "unix p50 / ring p50", each(func(x run) float64 { return x.unix.P50 / x.rtt.P50 }), 10, "×")
	// Batching against the same run's floor: descriptors moved in the time
	// of one bare ping-pong round trip (the 10 M/s set where the floor was
	// 315 ns is 3.2).
	rep.atLeastN(s, "batched descriptors per floor round trip", each(func(x run) float64 { return x.batch * x.floor.P50 / 1e9 }), 3, "")
	return nil
}

// --- floor: two atomic counters in a shared file, nothing else.

func runFloor(n int) (Latency, error) {
	path := shmPath("floor")
	r, err := ring.Map(path, 4096, true)
	if err != nil {
		return Latency{}, err
	}
	defer os.Remove(path)
	defer r.Close()
	mem := r.Bytes()
	ping := (*atomic.Uint64)(unsafe.Pointer(&mem[0]))
	pong := (*atomic.Uint64)(unsafe.Pointer(&mem[128]))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var last uint64
		for {
			v := ping.Load()
			if v == last {
				continue
			}
			pong.Store(v)
			last = v
			if v == math.MaxUint64 {
				return
			}
		}
	}()
	var l Latency
	err = child("floor", &l, path, fmt.Sprint(n))
	ping.Store(math.MaxUint64)
	<-done
	return l, err
}

func childFloor(args []string) error {
	r, err := ring.Map(args[0], 0, false)
	if err != nil {
		return err
	}
	n := atoi(args[1])
	mem := r.Bytes()
	ping := (*atomic.Uint64)(unsafe.Pointer(&mem[0]))
	pong := (*atomic.Uint64)(unsafe.Pointer(&mem[128]))
	d := make([]time.Duration, 0, n)
	warm := n / 10
	prev := time.Now()
	for i := uint64(1); i <= uint64(n+warm); i++ {
		ping.Store(i)
		for pong.Load() != i {
		}
		now := time.Now()
		if i > uint64(warm) {
			d = append(d, now.Sub(prev))
		}
		prev = now
	}
	return emit(latencies(d))
}

// --- the ring: a minimal agent loop here, a host in the child.

var benchGeometry = ring.Geometry{QueuePairs: 2, Entries: 256, WindowSize: 1 << 20}

func runRing(n, batchN int) (Latency, float64, error) {
	path := shmPath("ring")
	size, _ := benchGeometry.Size()
	r, err := ring.Map(path, size, true)
	if err != nil {
		return Latency{}, 0, err
	}
	defer os.Remove(path)
	defer r.Close()
	a, err := ring.Format(r, ring.AgentConfig{Geometry: benchGeometry, CheckPIDs: true})
	if err != nil {
		return Latency{}, 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); echoAgent(ctx, a) }()
	defer func() { cancel(); <-done }()

	var l Latency
	if err := child("ring-rtt", &l, path, fmt.Sprint(n)); err != nil {
		return l, 0, err
	}
	var rate struct{ Rate float64 }
	if err := child("ring-batch", &rate, path, fmt.Sprint(batchN)); err != nil {
		return l, 0, err
	}
	return l, rate.Rate, nil
}

// echoAgent completes every descriptor at once with StatusOK. It takes at
// most 32 descriptors at a time and publishes their completions together,
// so the host sees progress (and refills the ring) while a batch is served.
func echoAgent(ctx context.Context, a *ring.Agent) {
	in := make([]ring.Incoming, 32)
	var w ring.Waiter
	last := time.Now()
	busy := false
	for iter := 0; ctx.Err() == nil; iter++ {
		if iter%64 == 0 {
			if now := time.Now(); now.Sub(last) > 10*time.Millisecond {
				a.Housekeep(now)
				last = now
			}
		}
		busy = false
		for _, q := range a.QueuePairs() {
			n := q.Take(in)
			for i := 0; i < n; i++ {
				d := &in[i].Desc
				if in[i].Err != nil {
					d.Status = wire.StatusBadSpan
				}
				q.Complete(d)
			}
			if n > 0 {
				q.Publish()
				busy = true
			}
		}
		if busy {
			w.Reset()
		} else {
			w.Wait()
		}
	}
}

func benchLease(path string) (*ring.HostQP, func(), error) {
	r, err := ring.Map(path, 0, false)
	if err != nil {
		return nil, nil, err
	}
	h, err := ring.Attach(r)
	if err != nil {
		return nil, nil, err
	}
	q, err := h.Lease(context.Background(), -1)
	if err != nil {
		return nil, nil, err
	}
	return q, func() { q.Release(); r.Close() }, nil
}

func childRingRTT(args []string) error {
	q, done, err := benchLease(args[0])
	if err != nil {
		return err
	}
	defer done()
	n := atoi(args[1])
	warm := n / 10
	d := make([]time.Duration, 0, n)
	req := []wire.Desc{{Op: wire.OpPing}}
	out := make([]wire.Desc, 1)
	var w ring.Waiter
	prev := time.Now()
	for i := 0; i < n+warm; i++ {
		req[0].Tag = uint64(i)
		q.Submit(req)
		w.Reset()
		for {
			k, err := q.Poll(out)
			if err != nil {
				return err
			}
			if k == 1 {
				break
			}
			w.Wait()
		}
		if out[0].Tag != uint64(i) {
			return fmt.Errorf("tag %d, want %d", out[0].Tag, i)
		}
		now := time.Now()
		if i >= warm {
			d = append(d, now.Sub(prev))
		}
		prev = now
		if i%4096 == 0 {
			q.Beat()
		}
	}
	return emit(latencies(d))
}

func childRingBatch(args []string) error {
	q, done, err := benchLease(args[0])
	if err != nil {
		return err
	}
	defer done()
	total := atoi(args[1])
	batch := make([]wire.Desc, q.Entries())
	for i := range batch {
		batch[i] = wire.Desc{Op: wire.OpPing, Tag: uint64(i)}
	}
	out := make([]wire.Desc, q.Entries())
	var w ring.Waiter
	start := time.Now()
	sent, got := 0, 0
	for got < total {
		if room := min(q.Room(), total-sent); room > 0 {
			sent += q.Submit(batch[:room])
		}
		k, err := q.Poll(out)
		if err != nil {
			return err
		}
		got += k
		if k > 0 {
			w.Reset()
		} else {
			w.Wait()
		}
		if got%(1<<16) < k {
			q.Beat()
		}
	}
	el := time.Since(start)
	return emit(struct{ Rate float64 }{float64(total) / el.Seconds()})
}

// --- Unix-domain socket round trip of 64 bytes.

func runUnix(n int) (Latency, error) {
	dir, err := os.MkdirTemp("", "hec-bench-unix")
	if err != nil {
		return Latency{}, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		return Latency{}, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, wire.DescSize)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	var l Latency
	err = child("unix-rtt", &l, path, fmt.Sprint(n))
	return l, err
}

func childUnixRTT(args []string) error {
	c, err := net.Dial("unix", args[0])
	if err != nil {
		return err
	}
	defer c.Close()
	n := atoi(args[1])
	warm := n / 10
	buf := make([]byte, wire.DescSize)
	d := make([]time.Duration, 0, n)
	prev := time.Now()
	for i := 0; i < n+warm; i++ {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		now := time.Now()
		if i >= warm {
			d = append(d, now.Sub(prev))
		}
		prev = now
	}
	return emit(latencies(d))
}
