package host_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// TestLongOpsSleepUntilTheRing: a host whose long ops outlast the spin
// sleeps on its pair's bell, short sleeps first; once the agent's ring has
// ended one (agent and host share this kernel), its waits sleep until the
// ring instead of waking every 20 µs to 1 ms. The ops stay right.
func TestLongOpsSleepUntilTheRing(t *testing.T) {
	c := agentClient(t)
	const k, m, w = 10, 4, 256 << 10 // 2.5 MiB of data: a long op, some hundreds of µs on the agent
	shards := stripe(t, c, k, m, w, true, 7)
	want := make([][]byte, k+m)
	for i := range want {
		want[i] = append([]byte(nil), shards[i]...)
	}
	local, err := ec.New(k, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := local.Encode(want); err != nil {
		t.Fatal(err)
	}
	e, err := c.EC(k, m, host.WithRails(host.RailsDPU))
	if err != nil {
		t.Fatal(err)
	}
	ops := 0
	for ; ops < 200 && !host.BellRings(c); ops++ {
		if _, err := e.Encode(context.Background(), shards); err != nil {
			t.Fatal(err)
		}
	}
	if !host.BellRings(c) {
		t.Fatalf("after %d long ops no ring of the agent's was seen to end a sleep", ops)
	}
	for range 20 { // the long sleeps: each op still completes, with the library's parity
		clear(shards[k][:64])
		if _, err := e.Encode(context.Background(), shards); err != nil {
			t.Fatal(err)
		}
	}
	for i := k; i < k+m; i++ {
		if string(shards[i]) != string(want[i]) {
			t.Fatalf("parity shard %d differs from the library's", i)
		}
	}
	t.Logf("learned after %d ops", ops)
}

// TestExpectedEndsDoNotHoldTheWaiter: a call expected to end later than
// it does completes when the agent answers, not when the expectation
// says (its waiter's sleep is ended by the agent's ring); one expected to
// have ended already completes as any other, with the agent's answer; and
// a wait whose context has ended does not sleep until the expected end.
func TestExpectedEndsDoNotHoldTheWaiter(t *testing.T) {
	c := agentClient(t)
	ctx := context.Background()
	buf, err := c.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(buf)
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	want := crc32.Checksum(buf, crc32.MakeTable(crc32.Castagnoli))
	for _, tc := range []struct {
		name           string
		wakeAt, spinTo time.Duration // from submission
	}{
		{"expected in a minute", time.Minute, time.Minute + time.Millisecond},
		{"expected a moment ago", -time.Millisecond, -time.Microsecond},
		{"expected now, looked for briefly", 0, time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 50 {
				now := time.Now()
				call, err := host.GoExpecting(ctx, c, host.Request{Op: wire.OpChecksum, In: [][]byte{buf}}, now.Add(tc.wakeAt), now.Add(tc.spinTo))
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				var res host.Result
				go func() {
					var err error
					res, err = c.Wait(ctx, call)
					done <- err
				}()
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the waiter still waits 10 s after the call was submitted")
				}
				if uint32(res.Arg0) != want {
					t.Fatalf("checksum %08x, want %08x", res.Arg0, want)
				}
			}
		})
	}
	t.Run("context ended before the wait", func(t *testing.T) {
		// The call may complete first: either answer will do, a sleep
		// until the expected end will not.
		cctx, cancel := context.WithCancel(ctx)
		now := time.Now()
		call, err := host.GoExpecting(cctx, c, host.Request{Op: wire.OpChecksum, In: [][]byte{buf}}, now.Add(time.Minute), now.Add(2*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		done := make(chan error, 1)
		go func() { _, err := c.Wait(cctx, call); done <- err }()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("%v, want the agent's answer or context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter still waits 10 s after its context ended")
		}
	})
}

// TestAStallOfTheWholeMachineIsNotAnAgentDeath: the host's heartbeat
// looks judge the agent on the time they were there to see. After a look
// seconds late (the host did not run: a virtual machine paused, a stopped
// process), the agent, which did not run either, gets a fresh window
// instead of being given up at once, as both ranks' hosts once gave up
// their live agents after a 2.25 s stall of the bench's machine; an agent
// that then stays silent for the timeout is still given up.
func TestAStallOfTheWholeMachineIsNotAnAgentDeath(t *testing.T) {
	shm := filepath.Join("/dev/shm", fmt.Sprintf("hec-stall-%d", os.Getpid()))
	g := ring.Geometry{QueuePairs: 1, Entries: 8, WindowSize: 64 << 10}
	size, err := g.Size()
	if err != nil {
		t.Fatal(err)
	}
	r, err := ring.Map(shm, size, true)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(shm)
	a, err := ring.Format(r, ring.AgentConfig{Geometry: g, LeaseTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The agent housekeeps (binds the pair, beats) until stopped.
	var frozen atomic.Bool
	done := make(chan struct{})
	defer func() { frozen.Store(true); close(done) }()
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if !frozen.Load() {
				a.Housekeep(time.Now())
			}
		}
	}()
	const timeout = 2 * time.Second
	c, err := host.Dial(context.Background(), "shm://"+shm, host.WithAgentTimeout(timeout), host.WithHeartbeatEvery(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frozen.Store(true)
	time.Sleep(20 * time.Millisecond) // its last housekeeping pass is over
	t0 := time.Now()
	host.TickAt(c, t0) // sees the agent's last beat
	for _, d := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, 3500 * time.Millisecond} {
		host.TickAt(c, t0.Add(d))
		if host.Detached(c) {
			t.Fatalf("given up at a look %v after the first, 3 s of it a stall of the host itself", d)
		}
	}
	// The agent stays silent: given up once it has been silent for the
	// timeout in looks the host was there for (the stall counting for
	// half the timeout at most: 0.5 s + 1 s by 3.5 s, and whatever the
	// agent's last housekeeping pass left before the first look), not
	// before.
	for d := 3750 * time.Millisecond; d <= 6500*time.Millisecond; d += 250 * time.Millisecond {
		host.TickAt(c, t0.Add(d))
		gone := host.Detached(c)
		if d <= 3750*time.Millisecond && gone || d >= 4250*time.Millisecond && !gone {
			t.Fatalf("at %v: given up %v", d, gone)
		}
	}
}

// TestACancelledSleepIsOverWhenTheCallReturns: a wait sleeping on the
// bell is woken, when its context ends, by a callback that reads the
// shared region; the call returns only once that callback is over, so a
// Close right after cannot unmap the region under it (the race detector
// once caught Close's unmapping racing that read, in an e2e test).
//
// The op takes 5 ms on the agent whatever its cores, and is a long call,
// whose wait sleeps on the bell at once, where the context's end finds
// it. The test used 2.5 MiB EC encodes before, which on a core with GFNI
// took some 60 µs: their waits were awake when the context ended, and as
// few as one try in 200 tested anything (none, some runs here). Then
// ordinary calls, whose waits spin and yield for a millisecond before
// they sleep: on a loaded machine their yields took the whole op, so
// that no wait slept (CI once; every run of three here, on the code
// before and after, with four CPU burners).
func TestACancelledSleepIsOverWhenTheCallReturns(t *testing.T) {
	const slowOp = wire.Op(0x7fe1)
	shm, _, stop := startAgentWith(func(a *dpu.Agent) {
		a.Dispatcher().Handle(slowOp, dpu.Handler{Serve: func(context.Context, *dpu.Request, *wire.Desc) {
			time.Sleep(5 * time.Millisecond)
		}})
	})
	t.Cleanup(stop)
	var started, over, hooked atomic.Bool
	c, err := host.Dial(context.Background(), "shm://"+shm, host.WithCancelWakeHook(func() {
		if !hooked.Load() {
			return
		}
		started.Store(true)
		time.Sleep(20 * time.Millisecond) // a wake that takes its time
		over.Store(true)
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	do := func(ctx context.Context) error {
		call, err := host.GoLong(ctx, c, host.Request{Op: slowOp})
		if err == nil {
			_, err = c.Wait(ctx, call)
		}
		return err
	}
	for ops := 0; !host.BellRings(c); ops++ {
		if ops == 20 {
			t.Fatalf("after %d ops of 5 ms no ring of the agent's was seen to end a sleep", ops)
		}
		if err := do(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	hooked.Store(true)
	const tries = 10
	woken := 0
	for try := range tries {
		started.Store(false)
		over.Store(false)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(2*time.Millisecond+time.Duration(try)*200*time.Microsecond, cancel)
		err := do(ctx)
		if started.Load() {
			woken++
			if !over.Load() {
				t.Fatalf("the call returned (%v) while the wake on its context's end was still running", err)
			}
		}
		cancel()
		// The agent may still be serving the cancelled call's op: let it
		// finish before the next.
		if err := do(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if woken == 0 {
		t.Fatalf("no wait of %d was woken by its context's end: the test saw nothing", tries)
	}
	t.Logf("%d waits of %d woken by their context's end", woken, tries)
}

// TestALongWaitIsRememberedForItsClass: a wait that slept a held sleep's
// length or more keeps the next call like it from holding its P, and only
// calls like it: a 20 ms op's long sleeps do not mark a 0.3 ms op with
// other arguments, nor the same op with a buffer. The ops are long calls,
// whose waits sleep at once: an ordinary wait spins and yields first,
// and on a loaded machine (CI, four CPU burners here) its yields took
// the whole op, so that it never slept.
func TestALongWaitIsRememberedForItsClass(t *testing.T) {
	const sleepOp = wire.Op(0x7fe2) // sleeps Arg0 µs
	shm, _, stop := startAgentWith(func(a *dpu.Agent) {
		a.Dispatcher().Handle(sleepOp, dpu.Handler{Serve: func(_ context.Context, r *dpu.Request, _ *wire.Desc) {
			time.Sleep(time.Duration(r.Arg0) * time.Microsecond)
		}})
	})
	t.Cleanup(stop)
	c, err := host.Dial(context.Background(), "shm://"+shm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	long := host.Request{Op: sleepOp, Arg0: 20000, Arg1: 1}
	short := host.Request{Op: sleepOp, Arg0: 300, Arg1: 2}
	for ops := 0; !host.SleptLong(c, long); ops++ {
		if ops == 20 {
			t.Fatalf("after %d ops of 20 ms their waits are not remembered as long", ops)
		}
		call, err := host.GoLong(context.Background(), c, long)
		if err == nil {
			_, err = c.Wait(context.Background(), call)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	for _, other := range []host.Request{short, {Op: sleepOp, Arg0: 20000, Arg1: 1, In: [][]byte{buf}}} {
		if host.SleptLong(c, other) {
			t.Errorf("%+v: taken for a long sleeper after 20 ms ops of another class", other)
		}
	}
}
