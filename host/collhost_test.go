package host_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host"
)

// hostComms makes n host-rail communicators the way a job with a store
// of its own does: each rank listens, the addresses are swapped, each
// rank joins.
func hostComms(t *testing.T, n int) []*host.HostComm {
	t.Helper()
	hs := make([]*host.HostComm, n)
	for r, g := range hostGroups(t, n, 0x5eed) {
		hs[r] = host.NewHostComm(g)
		t.Cleanup(func() { hs[r].Leave(context.Background()) })
	}
	return hs
}

// hostGroups makes n groups of host processes (ranks of this process),
// each joined to communicator comm: each rank listens, the addresses are
// swapped, each rank joins.
func hostGroups(t *testing.T, n int, comm uint64) []*coll.Group {
	t.Helper()
	key := []byte("host-comm-test-key-0123456789")
	gs := make([]*coll.Group, n)
	addrs := make([]string, n)
	for r := range n {
		g, err := coll.Listen(coll.GroupConfig{Rank: r, Size: n, Key: key, Deadline: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		gs[r], addrs[r] = g, g.Addr()
	}
	for _, g := range gs {
		g.SetPeers(addrs)
		if err := g.Join(comm); err != nil {
			t.Fatal(err)
		}
	}
	return gs
}

func f32s(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// TestHostCommInFlight: every rank starts the same 8 allreduces of odd
// counts at once, then an allgather and a broadcast, without waiting in
// between; each matches its counterparts by issue order.
func TestHostCommInFlight(t *testing.T) {
	const n, inFlight = 3, 8
	hs := hostComms(t, n)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ops []*host.CollOp
			var bufs [][]byte
			for i := range inFlight {
				count := 1 + 7919*i
				v := make([]float32, count)
				for j := range v {
					v[j] = float32(r + 1 + i + j%3)
				}
				b := f32s(v)
				o, err := h.Start(ctx, coll.KindAllReduce, b, b, coll.Float32, coll.Sum, 0)
				if err != nil {
					errs <- err
					return
				}
				ops, bufs = append(ops, o), append(bufs, b)
			}
			gathered := make([]byte, 5*n)
			og, err := h.Start(ctx, coll.KindAllGather, []byte{byte(r), 1, 2, 3, 4}, gathered, coll.Uint8, coll.Sum, 0)
			if err != nil {
				errs <- err
				return
			}
			for i, o := range ops {
				if err := o.Wait(ctx); err != nil {
					errs <- fmt.Errorf("rank %d allreduce %d: %w", r, i, err)
					return
				}
				for j := range len(bufs[i]) / 4 {
					got := math.Float32frombits(binary.LittleEndian.Uint32(bufs[i][4*j:]))
					want := float32(n*(n+1)/2 + n*(i+j%3))
					if got != want {
						errs <- fmt.Errorf("rank %d allreduce %d element %d: %v, want %v", r, i, j, got, want)
						return
					}
				}
			}
			if err := og.Wait(ctx); err != nil {
				errs <- err
				return
			}
			for q := range n {
				if gathered[5*q] != byte(q) {
					errs <- fmt.Errorf("rank %d allgather: %v", r, gathered)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestHostCommRankGone: a rank that leaves mid-job fails the others'
// next collective, naming it, within the peer deadline, and breaks the
// communicator off.
func TestHostCommRankGone(t *testing.T) {
	hs := hostComms(t, 3)
	hs[1].Leave(context.Background())
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range []int{0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 4<<10)
			err := hs[r].Run(ctx, coll.KindAllReduce, b, b, coll.Float32, coll.Sum, 0)
			if err == nil || !errors.Is(err, host.ErrCommBroken) {
				t.Errorf("rank %d: %v, want a broken communicator", r, err)
				return
			}
			t.Logf("rank %d after %v: %v", r, time.Since(start).Round(time.Millisecond), err)
			if _, err := hs[r].Start(ctx, coll.KindBarrier, nil, nil, coll.Uint8, coll.Sum, 0); !errors.Is(err, host.ErrCommBroken) {
				t.Errorf("rank %d: the next collective started: %v", r, err)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the ranks learned of the departure after %v", d)
	}
}
