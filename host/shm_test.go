package host_test

import (
	"context"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host"
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
