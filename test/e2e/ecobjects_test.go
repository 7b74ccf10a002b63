package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hecsys/hec/ec/object"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/test/testutil"
)

// objectCluster makes a cluster of n agents in namespaces for the object
// tests and removes it after.
func objectCluster(t *testing.T, name string, n int, args ...string) *cluster.State {
	t.Helper()
	return testCluster(t, cluster.Options{Name: name, Agents: n, AgentArgs: args})
}

// testCluster makes cluster o (test's hecd unless o says, its state in a
// temporary directory), shows the agents' logs if the test fails, and
// removes it after, checking that nothing is left.
func testCluster(t *testing.T, o cluster.Options) *cluster.State {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("agents in network namespaces: root only (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip (iproute2): make test installs it as root")
	}
	name, dir := o.Name, filepath.Join(t.TempDir(), "state")
	cluster.Down(name, dir, nil)
	var log bytes.Buffer
	o.StateDir, o.Log = dir, &log
	if o.Hecd == "" {
		o.Hecd = testutil.Hecd(t)
	}
	st, err := cluster.Up(context.Background(), o)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, nd := range st.Nodes {
				b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node%d", nd.Index), "hecd.log"))
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				t.Logf("node %d's log (tail):\n%s", nd.Index, b)
			}
		}
		if err := cluster.Down(name, dir, nil); err != nil {
			t.Errorf("down: %v", err)
		}
		if left := cluster.Remains(name, dir, nil); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	return st
}

// objectClients dials every node's agent over its region and returns the
// EC of 4+2 of each, by node.
func objectClients(t *testing.T, st *cluster.State) map[int]*host.EC {
	t.Helper()
	ecs := map[int]*host.EC{}
	for _, n := range st.Nodes {
		ecs[n.Index] = dialObjects(t, n)
	}
	return ecs
}

func dialObjects(t testing.TB, n cluster.Node) *host.EC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := host.Dial(ctx, n.Agent())
	if err != nil {
		t.Fatalf("node %d: %v", n.Index, err)
	}
	t.Cleanup(func() { c.Close() })
	e, err := c.EC(4, 2, host.WithRails(host.RailsDPU))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// TestECObjectsAcrossAgents is the list on 6 agents, 4+2: every
// object back byte-identical with any two agents killed (all 15 pairs); a
// corrupted shard on disk read around and reported; two writers putting
// one name 100 times each with no read ever a mix; an agent wiped and
// brought back to full redundancy by repair; a Put with more than m agents
// down refused with the previous version still read; a partitioned agent
// and one killed mid-Put.
func TestECObjectsAcrossAgents(t *testing.T) {
	top := t // clients dialled in subtests live as long as the test
	st := objectCluster(t, "eco", 6, "--ec-scrub", "off")
	ecs := objectClients(t, st)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	mgmt := st.Nodes[0].Client()

	objs := map[string][]byte{
		"empty": {}, "small": randomBytes(1000, 1), "odd": randomBytes(5<<20+7, 2), "big": randomBytes(9<<20, 3),
		"dir/a b/ünïcode": randomBytes(70000, 4),
	}
	for name, b := range objs {
		if _, err := ecs[1].Put(ctx, name, b); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	if l, err := ecs[4].List(ctx, ""); err != nil || len(l) != len(objs) {
		t.Fatalf("list from node 4: %d objects, %v", len(l), err)
	}

	t.Run("any two agents killed", func(t *testing.T) {
		pairs := 0
		for a := 1; a <= 6; a++ {
			for b := a + 1; b <= 6; b++ {
				pairs++
				if err := st.Stop(a); err != nil {
					t.Fatal(err)
				}
				if err := st.Stop(b); err != nil {
					t.Fatal(err)
				}
				reader := 1
				for reader == a || reader == b {
					reader++
				}
				for name, want := range objs {
					got, _, err := ecs[reader].Get(ctx, name)
					if err != nil || !bytes.Equal(got, want) {
						t.Errorf("agents %d and %d killed: %s through node %d: %d bytes, %v", a, b, name, reader, len(got), err)
					}
				}
				for _, n := range []int{a, b} {
					if err := st.Start(ctx, n, false); err != nil {
						t.Fatal(err)
					}
					ecs[n] = dialObjects(top, st.Nodes[n-1])
				}
			}
		}
		if pairs != 15 {
			t.Fatalf("%d pairs", pairs)
		}
	})

	t.Run("a corrupted shard", func(t *testing.T) {
		stat, err := ecs[1].Stat(ctx, "odd")
		if err != nil {
			t.Fatal(err)
		}
		node := stat.Place[2] // a data shard
		files, _ := filepath.Glob(filepath.Join(st.Dir, fmt.Sprintf("node%d", node), "objects", "*", string(stat.Version)+"-2.shard"))
		if len(files) != 1 {
			t.Fatalf("node %d: shard files %v", node, files)
		}
		b, _ := os.ReadFile(files[0])
		b[len(b)/2] ^= 0x5a
		os.WriteFile(files[0], b, 0o644)
		got, read, err := ecs[3].Get(ctx, "odd")
		if err != nil || !bytes.Equal(got, objs["odd"]) {
			t.Fatalf("get around a corrupt shard: %v", err)
		}
		if !strings.Contains(strings.Join(read.Problems, "\n"), "corrupt") {
			t.Fatalf("the get did not report the corruption: %q", read.Problems)
		}
		t.Logf("get reported: %q", read.Problems)
		after, _ := ecs[3].Stat(ctx, "odd")
		if after.Shards[2].State != object.StateCorrupt {
			t.Fatalf("stat after the read: shard 2 %+v", after.Shards[2])
		}
		res, err := mgmt.ECRepair(ctx, "odd", false)
		if err != nil || len(res) != 1 || res[0].After != 6 {
			t.Fatalf("repair: %+v %v", res, err)
		}
		if after, _ := ecs[3].Stat(ctx, "odd"); after.Healthy != 6 {
			t.Fatalf("stat after repair: %+v", after.Shards)
		}
	})

	t.Run("concurrent puts never mix", func(t *testing.T) {
		const size = 300 << 10 // two stripes at 4+2
		fill := func(w, i int) []byte { return bytes.Repeat([]byte{byte(w + 1), byte(i)}, size/2) }
		if _, err := ecs[1].Put(ctx, "hot", fill(7, 0)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var reads, mixes atomic.Int64
		for r := 3; r <= 4; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					got, _, err := ecs[r].Get(ctx, "hot")
					if err != nil {
						t.Errorf("reader on node %d: %v", r, err)
						return
					}
					reads.Add(1)
					if len(got) != size || !bytes.Equal(got, bytes.Repeat(got[:2], size/2)) {
						mixes.Add(1)
					}
				}
			}()
		}
		var ww sync.WaitGroup
		for w := 1; w <= 2; w++ {
			ww.Add(1)
			go func() {
				defer ww.Done()
				for i := 1; i <= 100; i++ {
					if _, err := ecs[w].Put(ctx, "hot", fill(w, i)); err != nil {
						t.Errorf("writer on node %d, put %d: %v", w, i, err)
						return
					}
				}
			}()
		}
		ww.Wait()
		close(stop)
		wg.Wait()
		t.Logf("%d reads beside 200 puts, %d mixed", reads.Load(), mixes.Load())
		if mixes.Load() != 0 || reads.Load() == 0 {
			t.Fatalf("%d of %d reads mixed two Puts", mixes.Load(), reads.Load())
		}
		got, _, err := ecs[5].Get(ctx, "hot")
		if err != nil || (!bytes.Equal(got, fill(1, 100)) && !bytes.Equal(got, fill(2, 100))) {
			t.Fatalf("after both writers: not one of the last Puts (%v)", err)
		}
	})

	t.Run("a wiped agent is repaired", func(t *testing.T) {
		if err := st.Start(ctx, 5, true); err != nil {
			t.Fatal(err)
		}
		ecs[5] = dialObjects(top, st.Nodes[4])
		stat, err := ecs[1].Stat(ctx, "big")
		if err != nil || stat.Healthy != 5 {
			t.Fatalf("stat after the wipe: %d healthy, %v", stat.Healthy, err)
		}
		res, err := mgmt.ECRepair(ctx, "", true)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if len(r.Failed) > 0 || r.After != r.Shards {
				t.Errorf("repair %s: %+v", r.Name, r)
			}
		}
		for name, want := range objs {
			if s, err := ecs[2].Stat(ctx, name); err != nil || s.Healthy != 6 {
				t.Errorf("%s after repair: %d healthy, %v", name, s.Healthy, err)
			}
			// Read with two agents other than the wiped one down: its
			// rebuilt shard takes part.
			stat, _ := ecs[2].Stat(ctx, name)
			var down []int
			for _, n := range stat.Place {
				if int(n) != 5 && int(n) != 2 && len(down) < 2 {
					down = append(down, int(n))
				}
			}
			for _, n := range down {
				st.Stop(n)
			}
			if got, _, err := ecs[2].Get(ctx, name); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s through the repaired agent: %v", name, err)
			}
			for _, n := range down {
				if err := st.Start(ctx, n, false); err != nil {
					t.Fatal(err)
				}
				ecs[n] = dialObjects(top, st.Nodes[n-1])
			}
		}
	})

	t.Run("more than m agents down", func(t *testing.T) {
		for _, n := range []int{4, 5, 6} {
			st.Stop(n)
		}
		_, err := ecs[1].Put(ctx, "small", randomBytes(1000, 99))
		if err == nil || !strings.Contains(err.Error(), "quorum") {
			t.Fatalf("put with 3 of 6 agents down: %v", err)
		}
		t.Logf("put with three agents down: %v", err)
		for _, n := range []int{4, 5, 6} {
			if err := st.Start(ctx, n, false); err != nil {
				t.Fatal(err)
			}
			ecs[n] = dialObjects(top, st.Nodes[n-1])
		}
		if got, _, err := ecs[6].Get(ctx, "small"); err != nil || !bytes.Equal(got, objs["small"]) {
			t.Fatalf("after the failed put: %v", err)
		}
	})

	t.Run("a partitioned agent", func(t *testing.T) {
		link := func(state string) {
			cmd, _ := st.Exec(3, "ip", "link", "set", "eth0", state)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("ip link set eth0 %s: %v %s", state, err, out)
			}
		}
		link("down")
		want := randomBytes(3<<20, 5)
		_, err := ecs[1].Put(ctx, "during-partition", want)
		if err != nil {
			link("up")
			t.Fatalf("put with one agent cut off: %v", err)
		}
		if got, _, err := ecs[2].Get(ctx, "during-partition"); err != nil || !bytes.Equal(got, want) {
			t.Errorf("get with one agent cut off: %v", err)
		}
		link("up")
		res, err := mgmt.ECRepair(ctx, "during-partition", false)
		if err != nil || len(res) != 1 || res[0].After != 6 {
			t.Fatalf("repair after the partition healed: %+v %v", res, err)
		}
	})

	t.Run("an agent killed mid-put", func(t *testing.T) {
		old := objs["big"]
		next := randomBytes(24<<20, 6)
		done := make(chan error, 1)
		go func() { _, err := ecs[1].Put(ctx, "big", next); done <- err }()
		time.Sleep(30 * time.Millisecond)
		st.Stop(4)
		err := <-done
		got, _, gerr := ecs[2].Get(ctx, "big")
		switch {
		case gerr != nil:
			t.Fatalf("get after the kill: %v (put: %v)", gerr, err)
		case err == nil && !bytes.Equal(got, next):
			t.Fatal("the put succeeded, the get returned other bytes")
		case err != nil && !bytes.Equal(got, old) && !bytes.Equal(got, next):
			t.Fatalf("the put failed (%v) and the get returned neither version", err)
		}
		t.Logf("put with node 4 killed under it: %v", err)
		if err := st.Start(ctx, 4, false); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, name := range []string{"", "ctl\x01char", strings.Repeat("n", object.MaxName+1)} {
			if _, err := ecs[1].Put(ctx, name, []byte("x")); !errors.Is(err, object.ErrName) {
				t.Errorf("put %q: %v", name, err)
			}
		}
		if _, _, err := ecs[1].Get(ctx, "never-written"); err == nil {
			t.Error("get of an object never written succeeded")
		}
	})
}

// TestECObjectsAsANewUser does what the user does, with hecctl
// alone: a cluster of six, a file put, two agents killed from inside the
// cluster, the file back, stat showing the missing shards, the agents
// restarted (one with its disk wiped), repair, full redundancy; then the
// background scrub brings a wiped agent back by itself.
func TestECObjectsAsANewUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("agents in network namespaces: root only (CI runs as root)")
	}
	ctl := testutil.Hecctl(t)
	dir := filepath.Join(t.TempDir(), "state")
	cl := []string{"--name", "ecu", "--state", dir}
	cluster.Down("ecu", dir, nil)
	t.Cleanup(func() {
		hecctl(t, nil, append([]string{"cluster", "down"}, cl...)...)
		if left := cluster.Remains("ecu", dir, nil); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	run := func(args ...string) string {
		t.Helper()
		r := hecctl(t, nil, args...)
		if r.code != 0 {
			t.Fatalf("hecctl %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	in := func(node int, args ...string) string {
		t.Helper()
		return run(append(append([]string{"cluster", "exec"}, cl...), append([]string{fmt.Sprint(node), "--", ctl}, args...)...)...)
	}
	run(append([]string{"cluster", "up", "--agents", "6", "--hecd", testutil.Hecd(t), "--agent-arg=--ec-scrub=1s"}, cl...)...)
	file := filepath.Join(t.TempDir(), "photo.raw")
	want := randomBytes(7<<20+123, 11)
	os.WriteFile(file, want, 0o644)
	out := in(1, "ec", "put", "photo", file)
	if !strings.Contains(out, "4+2") {
		t.Fatalf("put said %q", out)
	}
	// Kill two agents from inside the cluster, as an operator with a shell
	// on a node would.
	st, err := cluster.Load("ecu", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 5} {
		in(1, "ec", "ls") // warm
		cmd, _ := st.Exec(1, "kill", "-9", fmt.Sprint(st.Nodes[n-1].PID))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kill node %d's agent: %v %s", n, err, b)
		}
	}
	back := filepath.Join(t.TempDir(), "photo.back")
	in(3, "ec", "get", "photo", back)
	if got, _ := os.ReadFile(back); !bytes.Equal(got, want) {
		t.Fatalf("get with two agents killed: %d bytes, not the file", len(got))
	}
	stat := in(1, "ec", "stat", "photo")
	if !strings.Contains(stat, "4 of 6 shards healthy") || strings.Count(stat, "unreachable") != 2 {
		t.Fatalf("stat with two agents killed:\n%s", stat)
	}
	run(append([]string{"cluster", "start", "2"}, cl...)...)
	run(append([]string{"cluster", "start", "5", "--wipe"}, cl...)...)
	// Node 2 is back with its shard; node 5's is gone with its disk (the
	// scrub may have rebuilt it already: it runs every second here).
	rep := in(4, "ec", "repair", "photo")
	if !strings.Contains(rep, "of 6 shards healthy") {
		t.Fatalf("repair said:\n%s", rep)
	}
	if stat := in(6, "ec", "stat", "photo"); !strings.Contains(stat, "6 of 6 shards healthy") {
		t.Fatalf("stat after repair:\n%s", stat)
	}
	t.Logf("repair: %s", strings.TrimSpace(rep))
	// The scrub alone: wipe another agent and wait.
	run(append([]string{"cluster", "start", "3", "--wipe"}, cl...)...)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(in(1, "ec", "stat", "photo"), "6 of 6 shards healthy") {
		if time.Now().After(deadline) {
			t.Fatalf("the scrub did not restore full redundancy within 30 s:\n%s", in(1, "ec", "stat", "photo"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	in(1, "ec", "get", "photo", back)
	if got, _ := os.ReadFile(back); !bytes.Equal(got, want) {
		t.Fatal("get after the scrub: not the file")
	}
	// The scrubs said so in the metrics: shards rebuilt, and (once the
	// next pass ran) nothing degraded.
	var repaired float64
	for _, n := range st.Nodes {
		v, _, err := n.Client().Metric(context.Background(), "hec_ec_shards_repaired_total")
		if err != nil {
			t.Fatal(err)
		}
		repaired += v
	}
	if repaired < 1 {
		t.Fatalf("hec_ec_shards_repaired_total summed over the agents: %v", repaired)
	}
	testutil.WaitFor(t, 10*time.Second, "no agent counting a degraded object", func() bool {
		for _, n := range st.Nodes {
			if v, _, err := n.Client().Metric(context.Background(), "hec_ec_objects_degraded"); err != nil || v != 0 {
				return false
			}
		}
		return true
	})
	if ls := in(2, "ec", "ls"); !strings.Contains(ls, "photo") {
		t.Fatalf("ls: %q", ls)
	}
	in(2, "ec", "rm", "photo")
	if ls := in(5, "ec", "ls"); strings.Contains(ls, "photo") {
		t.Fatalf("ls after rm: %q", ls)
	}
	r := hecctl(t, nil, append(append([]string{"cluster", "exec"}, cl...), "1", "--", ctl, "ec", "get", "photo", back)...)
	if r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("get after rm: exit %d %s", r.code, r.stderr)
	}
}
