package host_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/rail"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/testutil"
)

// multiRails makes n ranks of both rails: host-rail communicators
// among this process's goroutines (coll.Listen, SetPeers, Join) and a DPU
// rail of n agents peered with one another, each rank's client joined to
// its agent; each rank's MultiRail over the two.
func multiRails(t *testing.T, n int) []*host.MultiRail {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "cluster.key")
	if err := os.WriteFile(keyFile, []byte("multi-rail test cluster key, 32b"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := testutil.FreeAddrs(t, n)
	var members []string
	for i, a := range addrs {
		members = append(members, fmt.Sprintf("%d@%s", i+1, a))
	}
	clients := make([]*host.Client, n)
	for i := range n {
		shm := filepath.Join("/dev/shm", fmt.Sprintf("hec-multirail-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), i))
		t.Cleanup(func() { os.Remove(shm) })
		a, err := dpu.New(dpu.Config{
			Agent: dpu.AgentConfig{Shm: shm, RegionSize: 32 << 20, QueuePairs: 2, TCP: dpu.Off, Mgmt: dpu.Off,
				StateDir: filepath.Join(dir, fmt.Sprint(i))},
			RESP: dpu.RESPConfig{Addr: dpu.Off}, UDP: dpu.UDPConfig{Addr: dpu.Off},
			Peer: dpu.PeerConfig{NodeID: uint32(i + 1), Addr: addrs[i], ClusterKeyFile: keyFile, Peers: members,
				Deadline: dpu.Duration{Duration: 2 * time.Second}},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		<-a.Ready()
		if clients[i], err = host.Dial(context.Background(), "shm://"+shm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { clients[i].Close() })
	}
	gs := hostGroups(t, n, 0x3a11)
	for _, g := range gs {
		t.Cleanup(g.Close)
	}
	nodes := make([]uint32, n)
	for i := range nodes {
		nodes[i] = uint32(i + 1)
	}
	ms := make([]*host.MultiRail, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d, err := clients[r].JoinColl(ctx, wire.CollSpec{Comm: 0x3a11, Epoch: 1, Nodes: nodes})
			ms[r], errs[r] = host.NewMultiRail(gs[r].Comm, d), err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d joins its agent: %v", r, err)
		}
	}
	return ms
}

// onEveryRank runs f on every rank at once and fails on any error.
func onEveryRank(t *testing.T, ms []*host.MultiRail, f func(r int, m *host.MultiRail) error) {
	t.Helper()
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for r, m := range ms {
		wg.Go(func() { errs[r] = f(r, m) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// evenRails are two rails alike, so that every band of a table made of
// them splits half and half.
var evenRails = []rail.Rail{{Name: rail.Host, Kind: rail.HostCPU, Alpha: time.Microsecond, Rate: 1e9},
	{Name: rail.DPU, Kind: rail.DPUCores, Alpha: time.Microsecond, Rate: 1e9}}

// TestMultiRailSplitsEveryKindThatSplits: with a table that splits every
// size (rails alike), allreduce, broadcast and reduce run half on each
// rail at once (the DPU rail's share handed to the agents first) and
// give exactly what one rail gives, at sizes that are no power of two,
// on 3 ranks; the kinds
// whose buffers do not cut into one range per rail run on one rail
// alone and are exact too.
func TestMultiRailSplitsEveryKindThatSplits(t *testing.T) {
	const n = 3
	ms := multiRails(t, n)
	for _, m := range ms {
		for _, k := range []coll.Kind{coll.KindAllReduce, coll.KindBroadcast, coll.KindReduce,
			coll.KindAllGather, coll.KindReduceScatter, coll.KindAllToAll} {
			gain := 0.0
			if k == coll.KindAllGather || k == coll.KindReduceScatter || k == coll.KindAllToAll {
				gain = rail.NoSplit
			}
			host.SetTable(m, k, rail.NewTable(evenRails, 64, gain, 1, rail.Time))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, k := range []coll.Kind{coll.KindAllReduce, coll.KindBroadcast, coll.KindReduce,
		coll.KindAllGather, coll.KindReduceScatter, coll.KindAllToAll} {
		for _, count := range []int{3 * 16, 3 * 1000, 3 * 100_003} {
			size := 4 * count
			p := ms[0].PlanFor(k, size)
			wantShares := 2
			if k == coll.KindAllGather || k == coll.KindReduceScatter || k == coll.KindAllToAll || size < 4096 {
				wantShares = 1 // a few bytes: shares of whole 64-byte lines leave one rail all
			}
			if len(p.Shares) != wantShares {
				t.Fatalf("%v of %d bytes: plan %s, want %d shares", k, size, rail.Words(p), wantShares)
			}
			hostSeq0, dpuSeq0 := ms[0].Host.Seq(), host.DPUSeq(ms[0].DPU)
			onEveryRank(t, ms, func(r int, m *host.MultiRail) error {
				sn, rn := k.Sizes(size, n)
				send, recv := make([]byte, sn), make([]byte, rn)
				for i := range sn / 4 {
					binary.LittleEndian.PutUint32(send[4*i:], math.Float32bits(float32((i*7+r*3)%5)))
				}
				if k == coll.KindReduce && r != 0 {
					recv = nil // off the root recv may be empty
				}
				if err := m.Run(ctx, k, send, recv, coll.Float32, coll.Sum, 0); err != nil {
					return err
				}
				want := make([]byte, len(recv))
				for i := range len(recv) / 4 {
					var v float32
					switch k {
					case coll.KindAllReduce, coll.KindReduce:
						for q := range n {
							v += float32((i*7 + q*3) % 5)
						}
					case coll.KindBroadcast:
						v = float32(i * 7 % 5)
					case coll.KindAllGather: // block q is rank q's send
						q, j := i/(sn/4), i%(sn/4)
						v = float32((j*7 + q*3) % 5)
					case coll.KindReduceScatter: // this rank's block of the sum
						for q := range n {
							v += float32(((r*rn/4+i)*7 + q*3) % 5)
						}
					case coll.KindAllToAll: // block q is rank q's block r
						blk := sn / 4 / n
						q, j := i/blk, i%blk
						v = float32(((r*blk+j)*7 + q*3) % 5)
					}
					binary.LittleEndian.PutUint32(want[4*i:], math.Float32bits(v))
				}
				if !bytes.Equal(recv, want) {
					return fmt.Errorf("%v of %d bytes on %s: wrong result", k, size, rail.Words(p))
				}
				return nil
			})
			if moved := ms[0].Host.Seq() != hostSeq0; moved != (p.Shares[0].Rail == rail.Host || len(p.Shares) == 2) {
				t.Errorf("%v of %d bytes on %s: the host rail ran (%v) where the plan says otherwise", k, size, rail.Words(p), moved)
			}
			if moved := host.DPUSeq(ms[0].DPU) != dpuSeq0; moved != (p.Shares[0].Rail == rail.DPU || len(p.Shares) == 2) {
				t.Errorf("%v of %d bytes on %s: the DPU rail ran (%v) where the plan says otherwise", k, size, rail.Words(p), moved)
			}
		}
	}
}

// TestMultiRailCalibratesEachKind: after Calibrate (allreduce), the first
// call of another kind measures the rails for it on every rank and makes
// its table (one that never splits, for an allgather), and its tuning
// pins the size's band with what it measured; a barrier runs on one
// rail. Results stay exact meanwhile.
func TestMultiRailCalibratesEachKind(t *testing.T) {
	const n = 2
	ms := multiRails(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	onEveryRank(t, ms, func(r int, m *host.MultiRail) error {
		if _, err := m.Calibrate(ctx, 1<<20); err != nil {
			return err
		}
		if m.TableFor(coll.KindAllGather) != nil {
			return fmt.Errorf("allgather's table made before its first call")
		}
		if err := m.Tune(ctx, coll.KindAllGather, 64<<10); err != nil {
			return err
		}
		return m.Run(ctx, coll.KindBarrier, nil, nil, coll.Float32, coll.Sum, 0)
	})
	for r, m := range ms {
		tab := m.TableFor(coll.KindAllGather)
		if tab == nil || !tab.Pinned(64<<10) {
			t.Fatalf("rank %d: allgather's table %v, its 64 KiB band not tuned", r, tab)
		}
		for _, size := range []int64{8, 64 << 10, 1 << 20, 64 << 20} {
			if p := tab.Lookup(size); len(p.Shares) != 1 {
				t.Errorf("rank %d: an allgather of %d bytes planned as %s: it cannot split", r, size, rail.Words(p))
			}
		}
		if p := m.PlanFor(coll.KindAllGather, 64<<10); p.Predicted <= 0 || !strings.Contains(tab.Explain(), "measured at 64 KiB") {
			t.Errorf("rank %d: the tuned band predicts %v; table:\n%s", r, p.Predicted, tab.Explain())
		}
		if p := m.PlanFor(coll.KindBarrier, 0); len(p.Shares) != 1 {
			t.Errorf("rank %d: a barrier planned as %s", r, rail.Words(p))
		}
	}
	if ms[0].TableFor(coll.KindAllGather).Explain() != ms[1].TableFor(coll.KindAllGather).Explain() {
		t.Errorf("the ranks' tables differ:\n%s\n%s", ms[0].TableFor(coll.KindAllGather).Explain(), ms[1].TableFor(coll.KindAllGather).Explain())
	}
}

// TestMultiRailKeepsItsTables: a MultiRail with a table file keeps the
// table it measured and tuned for its topology; the next one of that
// topology takes it without measuring (its tuned band too), one of
// another topology or with Fresh measures, and a damaged file is
// measured over.
func TestMultiRailKeepsItsTables(t *testing.T) {
	const n = 2
	file := filepath.Join(t.TempDir(), "rails-tables.json")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run := func(topology string, fresh bool) []*host.MultiRail {
		ms := multiRails(t, n)
		onEveryRank(t, ms, func(r int, m *host.MultiRail) error {
			m.TableFile, m.Topology, m.Fresh = file, topology, fresh
			if r == 1 {
				m.TableFile = "" // rank 0's file decides
			}
			if _, err := m.Calibrate(ctx, 1<<20); err != nil {
				return err
			}
			return m.Tune(ctx, coll.KindAllReduce, 256<<10)
		})
		return ms
	}
	first := run("a", false)
	if first[0].Kept(coll.KindAllReduce) {
		t.Fatal("the first run took a table from an empty file")
	}
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), `"a|ranks=2|allreduce|objective=time"`) || !strings.Contains(string(b), `"tuned"`) {
		t.Fatalf("the table file after the first run: %s, %v", b, err)
	}
	second := run("a", false)
	for r, m := range second {
		if !m.Kept(coll.KindAllReduce) {
			t.Fatalf("rank %d: the second run of topology a measured again", r)
		}
		if got, want := m.Table().Explain(), first[0].Table().Explain(); got != want {
			t.Errorf("rank %d took\n%s\nwant what the first run kept\n%s", r, got, want)
		}
	}
	for _, c := range []struct {
		topology string
		fresh    bool
		damage   bool
	}{{"b", false, false}, {"a", true, false}, {"a", false, true}} {
		if c.damage {
			os.WriteFile(file, []byte(`{"a|ranks=2|allreduce|objective=time": {"rails": [{"name": "host", "kind": "host-cpu", "rate_bytes_per_s": -1}]}}`), 0o644)
		}
		for r, m := range run(c.topology, c.fresh) {
			if m.Kept(coll.KindAllReduce) {
				t.Errorf("topology %s, fresh %v, damaged file %v: rank %d took a kept table", c.topology, c.fresh, c.damage, r)
			}
		}
	}
}
