package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/affinity"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// The hostile scenario (issue 17): what a host that breaks the rules costs
// the agent and the other hosts. The agent runs on a core of its own (as on
// a DPU), the hosts on the others.
//
//   - A pair whose holder never consumes its completions and publishes one
//     more descriptor: hecd's CPU over 5 s, against its CPU with the same
//     client attached and quiet, in the same run.
//   - A pair flooded with the most costly descriptors the agent accepts (a
//     scatter-gather list naming wire.MaxTouch bytes: four windows), beside
//     a well-behaved client running 1 MiB checksums: that client's rate
//     against its rate alone, and the agent's worst wait for a worker of a
//     pair's lone request, in slices of other work served meanwhile
//     (dpu.YieldEvery bytes, or a request's end; the check) and in time.
//     For reference, the same client beside two threads that only burn
//     CPU, and the longest stall of a thread spinning alone on the
//     agent's core (what the machine takes from that core: a wait in time
//     cannot be shorter).

func init() {
	children["flood"] = childFlood
	children["burn"] = childBurn
}

// childBurn spins two threads until interrupted.
func childBurn([]string) error {
	var stop atomic.Bool
	for range 2 {
		go func() {
			for !stop.Load() {
			}
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	fmt.Println("ready")
	<-sig
	stop.Store(true)
	fmt.Println(0)
	return nil
}

// hostileFor is each phase's length (a quick run's: 1 s): 3 s rather than
// 5, for make bench's 15 minutes.
const hostileFor = 3 * time.Second

func benchHostile(ctx context.Context, rep *Report, quick bool) error {
	if runtime.NumCPU() < 2 {
		return fmt.Errorf("hostile: needs 2 cores (the agent's and the hosts'), have %d", runtime.NumCPU())
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("taskset not installed: %w", err)
	}
	dir, hecd, err := scratchHecd("hostile")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The agent has the last core to itself, as it has a DPU's cores; this
	// process and the children it starts (the hosts) have the others. On a
	// shared core the figures would be the kernel's sharing out of CPU
	// between the flood, the client and the agent, not the agent's.
	hosts := make([]int, runtime.NumCPU()-1)
	for i := range hosts {
		hosts[i] = i
	}
	old, err := pinAll(hosts...)
	if err != nil {
		return err
	}
	defer setAll(old)
	d, reps := hostileFor, 2
	if quick {
		d, reps = time.Second, 1
	}
	const s = "hostile"
	var rs []hostileRound
	for r := range reps {
		progress(s, "repetition %d of %d: a full completion ring, a flood, two burning threads (%v each)", r+1, reps, d)
		h, err := hostileRun(ctx, hecd, filepath.Join(dir, strconv.Itoa(r)), d)
		if err != nil {
			return err
		}
		rs = append(rs, h)
	}
	col := func(f func(h hostileRound) float64) []float64 {
		var out []float64
		for _, h := range rs {
			out = append(out, f(h))
		}
		return out
	}
	rep.addN(s, "hecd CPU, one client attached and quiet", col(func(h hostileRound) float64 { return h.idle }), "% of a core")
	rep.addN(s, "hecd CPU, one client holding its completion ring full with a descriptor pending", col(func(h hostileRound) float64 { return h.full }), "% of a core")
	// CPU-seconds per wall second: a fraction, the same on any machine.
	rep.atMostN(s, "hecd CPU with a completion ring held full (share of a core)", col(func(h hostileRound) float64 { return h.full }), 2, "%")
	f0 := rs[0].flood
	rep.addN(s, fmt.Sprintf("one costly descriptor alone (CRC of %d MiB through a list)", f0.touch>>20), col(func(h hostileRound) float64 { return h.flood.costly.Seconds() * 1e3 }), "ms")
	rep.addN(s, fmt.Sprintf("a slice (%d KiB of that work)", dpu.YieldEvery>>10), col(func(h hostileRound) float64 { return h.slice * 1e6 }), "µs")
	rep.addN(s, "1 MiB checksums alone", col(func(h hostileRound) float64 { return h.flood.alone }), "ops/s")
	rep.addN(s, "1 MiB checksums beside a pair flooding costly descriptors", col(func(h hostileRound) float64 { return h.flood.beside }), "ops/s")
	rep.addN(s, "1 MiB checksums beside two CPU-burning threads of another process (no agent work: the machine's share)", col(func(h hostileRound) float64 { return h.burn.beside }), "ops/s")
	rep.addN(s, "1 MiB checksum latency alone, median", col(func(h hostileRound) float64 { return h.flood.aloneP50.Seconds() * 1e3 }), "ms")
	rep.addN(s, "1 MiB checksum latency beside the flood, p50", col(func(h hostileRound) float64 { return h.flood.p50.Seconds() * 1e3 }), "ms")
	rep.addN(s, "1 MiB checksum latency beside the flood, p99", col(func(h hostileRound) float64 { return h.flood.p99.Seconds() * 1e3 }), "ms")
	rep.addN(s, "client's worst wait beside the flood (latency beyond its median alone)", col(func(h hostileRound) float64 { return h.flood.worstWait.Seconds() * 1e3 }), "ms")
	rep.addN(s, "agent's worst wait for a worker of a pair's lone request (hec_worker_lone_wait_max_seconds)", col(func(h hostileRound) float64 { return h.lone * 1e3 }), "ms")
	rep.addN(s, "the same in slices of time", col(func(h hostileRound) float64 { return h.lone / h.slice }), "slices")
	rep.addN(s, "the machine: longest stall of a thread spinning alone on the agent's core, no agent work", col(func(h hostileRound) float64 { return h.stall.Seconds() * 1e3 }), "ms")
	rep.addN(s, "the machine: share of that thread's time lost in stalls over 10 µs", col(func(h hostileRound) float64 { return h.stallShare * 100 }), "%")
	rep.addN(s, "agent's worst wait of a lone request, in slices of other work served meanwhile (hec_worker_lone_wait_max_slices)", col(func(h hostileRound) float64 { return h.loneSlices }), "slices")
	rep.addN(s, "flood descriptors served meanwhile", col(func(h hostileRound) float64 { return float64(h.flood.floods) }), "descriptors")
	rep.atLeastN(s, "1 MiB checksum rate beside the flood / alone", col(func(h hostileRound) float64 { return h.flood.beside / h.flood.alone }), 0.4, "×")
	rep.atMostN(s, "agent's worst wait of a lone request beside the flood, in slices of other work", col(func(h hostileRound) float64 { return h.loneSlices }), 1, " slice")
	return nil
}

// hostileRound is one repetition's figures, from an agent of its own (the
// worst-wait metric is a maximum over the agent's life).
type hostileRound struct {
	idle, full  float64 // hecd CPU, % of a core
	flood, burn floodResult
	lone        float64 // seconds
	loneSlices  float64
	slice       float64 // seconds
	stall       time.Duration
	stallShare  float64
}

func hostileRun(ctx context.Context, hecd, dir string, d time.Duration) (hostileRound, error) {
	var h hostileRound
	last := runtime.NumCPU() - 1
	shm := shmPath("hostile")
	defer os.Remove(shm)
	// The machine's own stalls of the agent's core, before the agent is
	// there to share it.
	if err := affinity.Do([]int{last}, func() error {
		h.stall, h.stallShare = spinStalls(d)
		return nil
	}); err != nil {
		return h, err
	}
	addrs, err := loopbackAddrs(2)
	if err != nil {
		return h, err
	}
	// Every default of the region (64 MiB, 16 pairs of 256 entries); only
	// the handoff's transports.
	cmd := exec.Command("taskset", "-c", strconv.Itoa(last), hecd, "--shm", shm, "--state-dir", filepath.Join(dir, "state"), "--tcp", addrs[0], "--mgmt", addrs[1],
		"--resp", "off", "--udp", "off", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return h, err
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	if err := waitCalibrated(ctx, addrs[1]); err != nil {
		return h, err
	}
	if h.idle, h.full, err = fullCompletionRing(shm, cmd.Process.Pid, d); err != nil {
		return h, fmt.Errorf("full completion ring: %w", err)
	}
	if h.flood, err = floodBeside(ctx, shm, d, "flood"); err != nil {
		return h, fmt.Errorf("flood: %w", err)
	}
	if h.lone, err = metricValue(ctx, addrs[1], "hec_worker_lone_wait_max_seconds"); err != nil {
		return h, err
	}
	if h.loneSlices, err = metricValue(ctx, addrs[1], "hec_worker_lone_wait_max_slices"); err != nil {
		return h, err
	}
	if h.burn, err = floodBeside(ctx, shm, d, "burn"); err != nil {
		return h, fmt.Errorf("burn: %w", err)
	}
	// A slice is YieldEvery bytes of a long request's work: its time is
	// taken from a costly descriptor served alone.
	h.slice = h.flood.costly.Seconds() * float64(dpu.YieldEvery) / float64(h.flood.touch)
	return h, nil
}

// spinStalls spins on this thread for d reading the clock and returns the
// longest gap between two readings and the share of d lost in gaps over
// 10 µs: time the machine (kernel threads, interrupts, the hypervisor)
// took from whatever runs on this core.
func spinStalls(d time.Duration) (longest time.Duration, share float64) {
	const stall = 10 * time.Microsecond
	var lost time.Duration
	t0 := time.Now()
	last := t0
	for last.Sub(t0) < d {
		now := time.Now()
		if g := now.Sub(last); g > stall {
			lost += g
			longest = max(longest, g)
		}
		last = now
	}
	return longest, float64(lost) / float64(last.Sub(t0))
}

// metricValue scrapes one unlabelled metric from hecd's /metrics.
func metricValue(ctx context.Context, mgmt, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+mgmt+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// fullCompletionRing measures hecd's CPU (% of a core) over d with one
// leased pair quiet, then with that pair's completion ring full and one
// more descriptor published, as a client that never polls would leave it.
func fullCompletionRing(shm string, pid int, d time.Duration) (idle, full float64, err error) {
	r, err := ring.Map(shm, 0, false)
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	h, err := ring.Attach(r)
	if err != nil {
		return 0, 0, err
	}
	q, err := h.Lease(context.Background(), -1)
	if err != nil {
		return 0, 0, err
	}
	defer q.Release()
	stop := make(chan struct{})
	defer close(stop)
	go func() { // keep the lease
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				q.Beat()
			}
		}
	}()
	cpuOver := func() float64 {
		c0, t0 := procCPU(pid), time.Now()
		time.Sleep(d)
		return 100 * (procCPU(pid) - c0) / time.Since(t0).Seconds()
	}
	time.Sleep(time.Second) // the agent's waiter reaches its long sleep
	idle = cpuOver()

	n := q.Entries()
	ds := make([]wire.Desc, n)
	for i := range ds {
		ds[i] = wire.Desc{Op: wire.OpPing, Tag: uint64(i)}
	}
	if got := q.Submit(ds); got != n {
		return 0, 0, fmt.Errorf("submitted %d of %d", got, n)
	}
	time.Sleep(200 * time.Millisecond) // all completed: the completion ring is full
	// One more, written as a hostile holder would: past Submit's check of
	// room, straight into the ring, then the tail (the layout's offsets,
	// read from the header as any client may).
	mem := r.Bytes()
	g := h.Geometry()
	rings := binary.LittleEndian.Uint64(mem[48:])
	sq := rings + uint64(q.Index())*2*uint64(g.Entries)*wire.DescSize
	ds[0].Marshal(mem[sq:]) // slot n & (n-1) = 0
	tail := (*atomic.Uint64)(unsafe.Pointer(&mem[4096+q.Index()*2048+2*128]))
	tail.Store(uint64(n + 1))
	time.Sleep(200 * time.Millisecond)
	full = cpuOver()
	return idle, full, nil
}

type floodResult struct {
	touch              int
	costly             time.Duration
	alone, beside      float64 // 1 MiB checksums per second
	aloneP50, p50, p99 time.Duration
	worstWait          time.Duration
	floods             int
}

// floodBeside runs 1 MiB checksums alone for d, then for d beside a child
// process: "flood" keeps 64 costly descriptors in flight on another pair;
// "burn" spins two threads and touches no agent (the reference: what any
// busy neighbour costs on this machine).
func floodBeside(ctx context.Context, shm string, d time.Duration, child string) (floodResult, error) {
	var res floodResult
	c, err := host.Dial(ctx, "shm://"+shm)
	if err != nil {
		return res, err
	}
	defer c.Close()
	win := c.WindowSize()
	res.touch = wire.MaxSpans * win
	sgl, err := c.Alloc(wire.MaxSpans * wire.SpanSize)
	if err != nil {
		return res, err
	}
	for i := 0; i < wire.MaxSpans; i++ {
		copy(sgl[i*wire.SpanSize:], wire.AppendSGL(nil, []wire.Span{{Off: 0, Len: uint32(win)}}))
	}
	costly := host.Request{Op: wire.OpChecksum, Flags: wire.FlagSGL, In: [][]byte{sgl}}
	var one []time.Duration
	for range 9 {
		t0 := time.Now()
		if _, err := c.Do(ctx, costly); err != nil {
			return res, fmt.Errorf("costly descriptor: %w", err)
		}
		one = append(one, time.Since(t0))
	}
	slices.Sort(one)
	res.costly = one[len(one)/2]

	buf, err := c.Alloc(1 << 20)
	if err != nil {
		return res, err
	}
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	want := crc32.Checksum(buf, crc32.MakeTable(crc32.Castagnoli))
	run := func() ([]time.Duration, float64, error) {
		var took []time.Duration
		t0 := time.Now()
		for time.Since(t0) < d {
			t1 := time.Now()
			got, err := c.Checksum(ctx, buf)
			took = append(took, time.Since(t1))
			if err != nil || got != want {
				return nil, 0, fmt.Errorf("1 MiB checksum: %#x, %v", got, err)
			}
		}
		rate := float64(len(took)) / time.Since(t0).Seconds()
		slices.Sort(took)
		return took, rate, nil
	}
	alone, rate, err := run()
	if err != nil {
		return res, err
	}
	res.alone, res.aloneP50 = rate, alone[len(alone)/2]

	self, _ := os.Executable()
	fl := exec.Command(self, "child", child, shm)
	fl.Stderr = os.Stderr
	out, err := fl.StdoutPipe()
	if err != nil {
		return res, err
	}
	if err := fl.Start(); err != nil {
		return res, err
	}
	br := bufio.NewReader(out)
	if line, err := br.ReadString('\n'); err != nil || line != "ready\n" {
		fl.Process.Kill()
		fl.Wait()
		return res, fmt.Errorf("flood child did not start: %q %v", line, err)
	}
	time.Sleep(200 * time.Millisecond) // its ring is full
	beside, rate, err := run()
	fl.Process.Signal(os.Interrupt)
	var said strings.Builder
	io.Copy(&said, br)
	if werr := fl.Wait(); werr != nil && err == nil {
		return res, fmt.Errorf("flood child: %v (%s)", werr, strings.TrimSpace(said.String()))
	}
	if err != nil {
		return res, err
	}
	fmt.Sscanf(strings.TrimSpace(said.String()), "%d", &res.floods)
	res.beside = rate
	res.p50, res.p99 = beside[len(beside)/2], beside[len(beside)*99/100]
	res.worstWait = max(beside[len(beside)-1]-res.aloneP50, 0)
	return res, nil
}

// childFlood keeps 64 of the most costly descriptors the agent accepts in
// flight until interrupted, then prints how many completed.
func childFlood(args []string) error {
	ctx := context.Background()
	c, err := host.Dial(ctx, "shm://"+args[0])
	if err != nil {
		return err
	}
	defer c.Close()
	win := c.WindowSize()
	sgl, err := c.Alloc(wire.MaxSpans * wire.SpanSize)
	if err != nil {
		return err
	}
	for i := 0; i < wire.MaxSpans; i++ {
		copy(sgl[i*wire.SpanSize:], wire.AppendSGL(nil, []wire.Span{{Off: 0, Len: uint32(win)}}))
	}
	reqs := make([]host.Request, 64)
	for i := range reqs {
		reqs[i] = host.Request{Op: wire.OpChecksum, Flags: wire.FlagSGL, In: [][]byte{sgl}}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	fmt.Println("ready")
	done := 0
	var inflight []*host.Call
	for {
		select {
		case <-stop:
			fmt.Println(done)
			return nil
		default:
		}
		if len(inflight) == 0 {
			if inflight, err = c.GoBatch(ctx, reqs); err != nil {
				return err
			}
		}
		if _, err := c.Wait(ctx, inflight[0]); err != nil {
			return err
		}
		inflight = inflight[1:]
		done++
		if len(inflight) < len(reqs)/2 {
			more, err := c.GoBatch(ctx, reqs[:len(reqs)-len(inflight)])
			if err != nil {
				return err
			}
			inflight = append(inflight, more...)
		}
	}
}
