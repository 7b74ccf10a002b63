package e2e

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// The tests here play the hostile host of issue 17 against a whole agent:
// they write into the region file as any process that may open it can.
// Offsets are the region layout's (shared/ring's package documentation):
// the header's words, then one 2048-byte control block per queue pair.
const (
	hdrMagic     = 0
	hdrHeartbeat = 2 * 128
	hdrState     = 3 * 128
	qpTable      = 4096
	qpBlock      = 2048
	qpResetReq   = 4 * 128
	qpState      = 5 * 128
	qpCQTail     = 7 * 128
)

// scribbler maps the region file for writing words into it.
type scribbler struct{ mem []byte }

func newScribbler(t *testing.T, path string) *scribbler {
	t.Helper()
	r, err := ring.Map(path, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &scribbler{mem: r.Bytes()}
}

func (s *scribbler) store(off int, v uint64) {
	(*atomic.Uint64)(unsafe.Pointer(&s.mem[off])).Store(v)
}

// TestTruncatedRegionUnderLoad: the region file is cut to one page, three
// times, while clients run checksums. The agent serves on (it rebuilds the
// region with a new generation), the clients go on after retryable errors,
// and a new client attaches. On the old code the agent died of SIGBUS.
func TestTruncatedRegionUnderLoad(t *testing.T) {
	cfg := agentConfig(t)
	a := startAgent(t, cfg)
	gen := a.Generation()
	st, err := os.Stat(cfg.Agent.Shm)
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	ctx := context.Background()
	var ok, retryable atomic.Int64
	errs := make(chan error, 4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		c := dial(t, "shm://"+cfg.Agent.Shm)
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			b := make([]byte, 32<<10) // Go memory: only the library touches the region
			if err := checksumLoop(ctx, c, b, seed, stop, func() { ok.Add(1) }, &retryable, time.Millisecond); err != nil {
				errs <- err
			}
		}(uint64(i))
	}
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		if err := os.Truncate(cfg.Agent.Shm, 4096); err != nil {
			t.Fatal(err)
		}
	}
	// The agent is alive, healthy, has restored the file, and serves a
	// new client. Restored means after the last truncation: the file's
	// size comes back before the region is formatted again, and a client
	// that attached in between had its lease fenced by the format (a
	// retryable error, as the others meet; CI met it once when this
	// waited for the first format only).
	deadline := time.Now().Add(10 * time.Second)
	restored := func() bool {
		st, err := os.Stat(cfg.Agent.Shm)
		return err == nil && st.Size() == size && a.Generation() >= gen+3
	}
	for !restored() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !restored() {
		t.Fatalf("the region was not restored and formatted again (generation %d, was %d)", a.Generation(), gen)
	}
	select {
	case err := <-a.done:
		t.Fatalf("agent stopped: %v", err)
	default:
	}
	resp, err := http.Get("http://" + a.Addr("mgmt") + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	fresh := dial(t, "shm://"+cfg.Agent.Shm)
	if err := fresh.Ping(ctx); err != nil {
		t.Fatalf("new client: %v", err)
	}
	before := ok.Load()
	for ok.Load() < before+300 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("generation %d -> %d; checksums ok %d, retryable errors %d", gen, a.Generation(), ok.Load(), retryable.Load())
	if ok.Load() < before+300 {
		t.Fatalf("clients did not go on after the truncations: %d ok after, %d before", ok.Load()-before, before)
	}
}

// TestScribbledRegionNextDialWorks: with the header's magic and state and
// every pair's state word, reset request and completion tail overwritten,
// the next Dial succeeds and its ops work. On the old code the header was
// never repaired (every Dial refused) and scribbled free pairs failed the
// lease or the first op.
func TestScribbledRegionNextDialWorks(t *testing.T) {
	cfg := agentConfig(t)
	a := startAgent(t, cfg)
	s := newScribbler(t, cfg.Agent.Shm)
	s.store(hdrMagic, 0x1234)
	s.store(hdrState, 2)
	for i := range cfg.Agent.QueuePairs {
		blk := qpTable + i*qpBlock
		s.store(blk+qpState, 0xffff_0000_0003)
		s.store(blk+qpResetReq, 5)
		s.store(blk+qpCQTail, 9)
	}
	t0 := time.Now()
	c := dial(t, "shm://"+cfg.Agent.Shm)
	ctx := context.Background()
	b := []byte("after the scribbles")
	for range 10 {
		got, err := c.Checksum(ctx, b)
		if err != nil || got != crc32.Checksum(b, castagnoli) {
			t.Fatalf("checksum: %#x %v", got, err)
		}
	}
	t.Logf("dialled and served %v after the scribbles (%s)", time.Since(t0).Round(time.Millisecond), c)
	// The status says what the region showed where it was repaired.
	var repaired int
	for _, q := range a.status(t).QueuePairs {
		if q.Repairs > 0 && q.RegionShowed != "" {
			repaired++
		}
	}
	if repaired < cfg.Agent.QueuePairs-1 {
		t.Fatalf("%d pairs report a repair of their state word, want at least %d", repaired, cfg.Agent.QueuePairs-1)
	}
}

// TestFrozenHeaderHeartbeat: another process holds the header's heartbeat
// word still; an attached client watches its own pair's copy and carries
// on without an error. On the old code the client gave up on the agent
// after its agent timeout and failed what it had in flight.
func TestFrozenHeaderHeartbeat(t *testing.T) {
	cfg := agentConfig(t)
	startAgent(t, cfg)
	ctx := context.Background()
	c, err := host.Dial(ctx, "shm://"+cfg.Agent.Shm, host.WithAgentTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := c.String()
	s := newScribbler(t, cfg.Agent.Shm)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				s.store(hdrHeartbeat, 7)
			}
		}
	}()
	var fails int
	var last error
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		if err := c.Ping(ctx); err != nil {
			fails++
			last = err
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if fails > 0 {
		t.Fatalf("%d pings failed with the header heartbeat frozen; last: %v", fails, last)
	}
	if after := c.String(); after != before {
		t.Fatalf("client re-attached: %s, then %s", before, after)
	}
}

// TestFloodBesideWellBehaved: one client keeps its ring full of the most
// costly descriptors the agent accepts (a scatter-gather list naming
// wire.MaxTouch bytes: four windows); another client's 1 MiB checksums
// complete, right, and none waits behind the flood's queue. A list naming
// more than MaxTouch is refused. On the old code the over-long list was
// served (1024 windows of CRC) and the other client's checksums queued
// behind every flood descriptor taken before them.
func TestFloodBesideWellBehaved(t *testing.T) {
	cfg := agentConfig(t)
	startAgent(t, cfg)
	// Behind a FIFO a checksum waits for the flood descriptors taken
	// before it: 41 and 43 complete meanwhile (median; the code before
	// the fair queue, on a 2-core machine). Shared fairly it is served at
	// the next slice of the running ones: 1–2 here when the machine is
	// quiet, 5–11 while other tests load it (this client then waits for
	// a core too). The bound sits between.
	if m, _ := floodBeside(t, cfg.Agent.Shm, besideFlood{inFlight: 64}); m > 20 {
		t.Fatalf("a 1 MiB checksum waited (median) while %d flood descriptors completed, more than 20", m)
	}
}

// TestFloodBesideWellBehavedOnOneCore: the same with hecd on a core of its
// own (GOMAXPROCS 1: its poller and its one worker share a P), as on a
// DPU, and this process on the others. The poller must reach the rings
// within a slice of the flood's work, and must not sleep in the kernel
// holding the P its worker needs. On the code before, it did both: the
// other client's request was seen only when a flood descriptor ended, and
// the worker then waited for Go's monitor to take the P back from the
// sleeping poller; 3 flood descriptors (median) completed during each
// 1 MiB checksum (the same in four runs). Now the checksum is served
// within the slice it arrives in, and 0 complete (each costs some 60
// slices).
//
// Beside the flood, a third pair may send one costly descriptor at a
// time: each is its pair's only work, served inside a slice of the
// flood's, and must yield in turn. The agent counts the slices of other
// work that passed while a lone request waited (a count, whatever this
// machine's load does to the time): at most one of each other pair with
// work (two lone requests that arrive together go one after the other). On the code before, a
// job served inside another's slice never yielded, and the checksum
// waited for all of the costly one.
//
// The agent calibrates its rails 300 ms after it is ready, while this
// test runs: that work is sliced too (rail.MeasureCPU). On the code
// before, it held the agent's one P for up to 20 ms at a time, and
// giving its buffers back for 75 ms: checksums took 80–500 ms then.
func TestFloodBesideWellBehavedOnOneCore(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 cores: one for the agent, one for its hosts")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("taskset not installed (make test-deps installs util-linux)")
	}
	last := runtime.NumCPU() - 1
	var old, hosts unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	for c := range last {
		hosts.Set(c)
	}
	setAffinity(t, &hosts)
	defer setAffinity(t, &old)
	for _, tc := range []struct {
		name    string
		polite  bool // a third pair sends one costly descriptor at a time
		outside bool // the checksummed buffer is outside the window: chunks in flight
	}{
		{"one flood", false, false},
		{"a flood and a pair sending one costly descriptor at a time", true, false},
		{"one flood, the checksums in chunks", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A round on a fresh agent: three pairs, the flood, the
			// well-behaved client, the third. The counts are the host's
			// view: a round in which this process lost its core to other
			// tests (CI) for longer than a slice may see one more
			// complete. Up to three rounds, and one must hold; the code
			// before fails every one (its counts are the same in every
			// run: 3 and 1).
			var seen []string
			for round := 1; ; round++ {
				mgmt, agent, why := floodRound(t, last, tc.polite, tc.outside)
				if why == "" {
					if round > 1 {
						t.Logf("held in round %d; before: %s", round, strings.Join(seen, "; "))
					}
					t.Logf("the agent's worst wait for a worker of a lone request: %.3f ms", 1e3*metricValue(t, mgmt, "hec_worker_lone_wait_max_seconds"))
					// One slice of each other pair with work: the flood's, and
					// the third pair's when its request came at the same time.
					others := 1.0
					if tc.polite {
						others = 2
					}
					if n := metricValue(t, mgmt, "hec_worker_lone_wait_max_slices"); n > others {
						t.Fatalf("a lone request waited while %v slices of other work were served, more than %v", n, others)
					}
					return
				}
				agent.Process.Kill() // its core is the next round's
				agent.Wait()
				seen = append(seen, fmt.Sprintf("round %d: %s", round, why))
				if round == 3 {
					t.Fatal(strings.Join(seen, "; "))
				}
			}
		})
	}
}

// floodRound runs one round of TestFloodBesideWellBehavedOnOneCore on a
// fresh agent pinned to core last and returns its management address,
// the agent, and why the round failed ("" when it held).
func floodRound(t *testing.T, last int, polite, outside bool) (mgmt string, agent *exec.Cmd, why string) {
	t.Helper()
	region, mgmt, _, agent := startHecdFlags(t, []string{"taskset", "-c", strconv.Itoa(last)}, []string{"--queue-pairs", "3"})
	var third *atomic.Int64
	if polite {
		var stop func()
		third, stop = costlyOneAtATime(t, region)
		defer stop()
	}
	m, o := floodBeside(t, region, besideFlood{inFlight: 256, other: third, outside: outside})
	// 0 here; 1 leaves room for this process losing its core to other
	// tests now and then, and still fails the code before (3, four runs).
	if m > 1 {
		return mgmt, agent, fmt.Sprintf("a 1 MiB checksum waited (median) while %d flood descriptors completed, more than 1", m)
	}
	// Served inside a slice of the third pair's descriptor, the checksum
	// ends before it: 0 of them complete meanwhile (median). On the code
	// before, the checksum waited for the whole descriptor: 1.
	if polite && o > 0 {
		return mgmt, agent, fmt.Sprintf("a 1 MiB checksum waited (median) while %d of the third pair's descriptors completed, want 0", o)
	}
	return mgmt, agent, ""
}

// costlyOneAtATime sends the most costly descriptor the agent accepts over
// and over from a client of its own, one in flight, until the returned
// function is called; n counts those completed.
func costlyOneAtATime(t *testing.T, shm string) (n *atomic.Int64, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := dial(t, "shm://"+shm)
	costly := costlyRequest(t, c)
	done := make(chan error, 1)
	n = new(atomic.Int64)
	go func() {
		for ctx.Err() == nil {
			if _, err := c.Do(ctx, costly); err != nil && ctx.Err() == nil {
				done <- err
				return
			}
			n.Add(1)
		}
		done <- nil
	}()
	return n, func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("a costly descriptor at a time: %v", err)
		}
		t.Logf("%d costly descriptors sent one at a time", n.Load())
		if n.Load() == 0 {
			t.Fatal("no costly descriptor completed one at a time")
		}
	}
}

// costlyRequest returns the most costly descriptor the agent accepts, for
// c: a scatter-gather list naming its whole window wire.MaxSpans times.
func costlyRequest(t *testing.T, c *host.Client) host.Request {
	t.Helper()
	sglBuf, err := c.Alloc(wire.MaxSpans * wire.SpanSize)
	if err != nil {
		t.Fatal(err)
	}
	whole := make([]wire.Span, wire.MaxSpans)
	for i := range whole {
		whole[i] = wire.Span{Off: 0, Len: uint32(c.WindowSize())}
	}
	copy(sglBuf, wire.AppendSGL(nil, whole))
	return host.Request{Op: wire.OpChecksum, Flags: wire.FlagSGL, In: [][]byte{sglBuf}}
}

// metricValue scrapes one unlabelled metric from the agent at mgmt.
func metricValue(t *testing.T, mgmt, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + mgmt + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics lacks %s", name)
	return 0
}

// setAffinity sets the CPU affinity of every thread of this process.
func setAffinity(t *testing.T, set *unix.CPUSet) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		unix.SchedSetaffinity(tid, set) //nolint:errcheck // a thread may have exited
	}
}

// besideFlood says how floodBeside runs.
type besideFlood struct {
	inFlight int           // the flood's descriptors in flight: the ring's entries
	other    *atomic.Int64 // a count of other work, or nil
	outside  bool          // checksum a buffer outside the window: the client sends it in chunks, several in flight
}

// floodBeside floods the agent at shm with the most costly descriptors it
// accepts (b.inFlight of them at a time) from one client while another
// runs 1 MiB checksums for a second, checks every checksum, and returns
// the median count of flood descriptors that completed during one
// checksum, and the same for b.other's count.
func floodBeside(t *testing.T, shm string, b besideFlood) (int64, int64) {
	inFlight, other := b.inFlight, b.other
	t.Helper()
	ctx := context.Background()
	flood := dial(t, "shm://"+shm)
	win := flood.WindowSize()
	sglBuf, err := flood.Alloc(8 * wire.SpanSize)
	if err != nil {
		t.Fatal(err)
	}
	whole := make([]wire.Span, wire.MaxSpans+1)
	for i := range whole {
		whole[i] = wire.Span{Off: 0, Len: uint32(win)}
	}
	copy(sglBuf, wire.AppendSGL(nil, whole))
	overLong := host.Request{Op: wire.OpChecksum, Flags: wire.FlagSGL, In: [][]byte{sglBuf[:len(whole)*wire.SpanSize]}}
	if _, err := flood.Do(ctx, overLong); !errors.Is(err, wire.StatusBadSpan) {
		t.Fatalf("a list naming %d windows: %v, want %s", len(whole), err, wire.StatusBadSpan)
	}
	costly := host.Request{Op: wire.OpChecksum, Flags: wire.FlagSGL, In: [][]byte{sglBuf[:wire.MaxSpans*wire.SpanSize]}}
	// One slice: the time of one costly descriptor alone (median of 5).
	var alone []time.Duration
	for range 5 {
		t0 := time.Now()
		if _, err := flood.Do(ctx, costly); err != nil {
			t.Fatal(err)
		}
		alone = append(alone, time.Since(t0))
	}
	slices.Sort(alone)
	slice := alone[2]

	well := dial(t, "shm://"+shm)
	buf, err := well.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if b.outside {
		buf = make([]byte, 1<<20)
	}
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	want := crc32.Checksum(buf, castagnoli)

	stop := make(chan struct{})
	var floods atomic.Int64
	floodErr := make(chan error, 1)
	go func() {
		defer close(floodErr)
		reqs := make([]host.Request, inFlight)
		for i := range reqs {
			reqs[i] = costly
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			calls, err := flood.GoBatch(ctx, reqs)
			if err != nil {
				floodErr <- err
				return
			}
			for _, c := range calls {
				if _, err := flood.Wait(ctx, c); err != nil {
					floodErr <- err
					return
				}
				floods.Add(1)
			}
		}
	}()
	time.Sleep(100 * time.Millisecond) // the flood's queue is full
	// For each checksum: its time, and how many flood descriptors
	// completed meanwhile (a count, which does not depend on how fast
	// this machine is today).
	var took []time.Duration
	var behind, behindOther []int64
	if other == nil {
		other = new(atomic.Int64)
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end) || len(took) < 21; {
		t0, f0, o0 := time.Now(), floods.Load(), other.Load()
		got, err := well.Checksum(ctx, buf)
		took, behind = append(took, time.Since(t0)), append(behind, floods.Load()-f0)
		behindOther = append(behindOther, other.Load()-o0)
		if err != nil || got != want {
			t.Fatalf("checksum %d beside the flood: %#x %v", len(took), got, err)
		}
	}
	close(stop)
	if err := <-floodErr; err != nil {
		t.Fatal(err)
	}
	slices.Sort(took)
	slices.Sort(behind)
	slices.Sort(behindOther)
	median, worst := took[len(took)/2], took[len(took)-1]
	t.Logf("slice (one costly descriptor alone) %v; %d flood descriptors done; well-behaved: %d checksums of 1 MiB, median %v (%.1f slices), worst %v (%.1f slices); flood descriptors completed during one: median %d, most %d",
		slice, floods.Load(), len(took), median, float64(median)/float64(slice), worst, float64(worst)/float64(slice), behind[len(behind)/2], behind[len(behind)-1])
	if floods.Load() < int64(inFlight) {
		t.Fatalf("the flood did not run: %d descriptors", floods.Load())
	}
	return behind[len(behind)/2], behindOther[len(behindOther)/2]
}
