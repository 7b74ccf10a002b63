package host_test

import (
	"context"
	"testing"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host"
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
