package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/hecsys/hec/ec/object"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
)

// The ec-objects scenario (issue: erasure-coded objects across agents):
// six agents in namespaces, every link limited to the same rate with tc,
// 64 MiB objects in 4+2. Put and Get through node 1's agent over its
// region (inline: the agent codes and places) beside the same Put and Get
// coded in this process, which sends every shard to its agent itself over
// the agents' TCP handoffs from node 1's namespace (client-side, as HDFS
// and MinIO clients do), in the same run, interleaved. Host CPU is this
// process's: it is the host. The inline Put runs twice: from a buffer of
// the application's heap, which the host library copies into the window
// on the way, and from a buffer the application has in the window
// (Client.Alloc), handed over in place — the zero-copy handoff.
func benchECObjects(ctx context.Context, rep *Report, quick bool) error {
	const s = "ec-objects"
	if os.Geteuid() != 0 {
		return fmt.Errorf("the ec-objects scenario makes network namespaces: run make bench as root")
	}
	dir, hecd, err := scratchHecd("ecobj")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	const name, rate, rateBits = "ecb", "2gbit", 2e9
	state := filepath.Join(dir, "cluster")
	cluster.Down(name, state, nil)
	// Regions of 320 MiB in 4 queue pairs: a pair's window (80 MiB) holds
	// a whole 64 MiB object for the zero-copy Put. Pages are only used as
	// touched.
	st, err := cluster.Up(ctx, cluster.Options{Name: name, Agents: 6, Hecd: hecd, StateDir: state, Rates: map[int]string{0: rate},
		AgentArgs: []string{"--ec-scrub", "off", "--region-size", strconv.Itoa(320 << 20), "--queue-pairs", "4"}})
	if err != nil {
		return err
	}
	defer cluster.Down(name, state, nil)
	size, reps := 64<<20, 5
	if quick {
		reps = 2
	}
	n1 := st.Nodes[0]
	inline, err := host.Dial(ctx, n1.Agent())
	if err != nil {
		return err
	}
	defer inline.Close()
	ecIn, err := inline.EC(4, 2, host.WithRails(host.RailsDPU))
	if err != nil {
		return err
	}
	agents := map[uint32]*host.Client{}
	for _, n := range st.Nodes {
		c, err := host.Dial(ctx, "tcp://"+n.TCP(), host.WithToken(n.Token()), host.WithDialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
			return cluster.DialIn(ctx, n1.NS, network, addr)
		}))
		if err != nil {
			return fmt.Errorf("client-side: node %d: %w", n.Index, err)
		}
		defer c.Close()
		agents[uint32(n.Index)] = c
	}
	cs, err := host.NewClientSideObjects(agents, object.Config{K: 4, M: 2})
	if err != nil {
		return err
	}
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	agentsCPU := func() float64 {
		var c float64
		for _, n := range st.Nodes {
			c += procCPU(n.PID)
		}
		return c
	}
	type sample struct{ putGBs, getGBs, putCPU, getCPU, putAgents float64 } // CPU: seconds per GB
	// measure times a Put, then the Get (when get is set) of what it put.
	measure := func(put func() error, get func() ([]byte, error)) (sample, error) {
		var x sample
		runtime.GC() // the garbage of the run before is not this one's CPU
		a0, c0, t0 := agentsCPU(), cpuTime(), time.Now()
		if err := put(); err != nil {
			return x, err
		}
		took, cpu := time.Since(t0), cpuTime()-c0
		x.putGBs, x.putCPU = float64(size)/took.Seconds()/1e9, cpu.Seconds()/(float64(size)/1e9)
		x.putAgents = (agentsCPU() - a0) / (float64(size) / 1e9)
		if get == nil {
			return x, nil
		}
		runtime.GC()
		c0, t0 = cpuTime(), time.Now()
		got, err := get()
		if err != nil {
			return x, err
		}
		took, cpu = time.Since(t0), cpuTime()-c0
		if !bytes.Equal(got, data) {
			return x, fmt.Errorf("the get returned other bytes")
		}
		x.getGBs, x.getCPU = float64(size)/took.Seconds()/1e9, cpu.Seconds()/(float64(size)/1e9)
		return x, nil
	}
	// One untimed Put and Get of each path first: the first Put of a
	// process pays for connections and buffers a stream of them reuses.
	if _, err := ecIn.Put(ctx, "inline", data); err != nil {
		return fmt.Errorf("inline warm-up: %w", err)
	}
	if _, err := cs.Put(ctx, "client", data); err != nil {
		return fmt.Errorf("client-side warm-up: %w", err)
	}
	win, err := inline.Alloc(size)
	if err != nil {
		return fmt.Errorf("zero-copy: a 64 MiB buffer in node 1's window: %w", err)
	}
	copy(win, data) // made there by the application: not timed
	if _, err := ecIn.Put(ctx, "window", win); err != nil {
		return fmt.Errorf("zero-copy warm-up: %w", err)
	}
	if b, _, err := ecIn.Get(ctx, "window"); err != nil || !bytes.Equal(b, data) {
		return fmt.Errorf("zero-copy: the object put from the window does not read back (%v)", err)
	}
	var in, zc, out []sample
	for i := 0; i < reps; i++ {
		a, err := measure(func() error { _, err := ecIn.Put(ctx, "inline", data); return err },
			func() ([]byte, error) { b, _, err := ecIn.Get(ctx, "inline"); return b, err })
		if err != nil {
			return fmt.Errorf("inline: %w", err)
		}
		w, err := measure(func() error { _, err := ecIn.Put(ctx, "window", win); return err }, nil)
		if err != nil {
			return fmt.Errorf("zero-copy: %w", err)
		}
		b, err := measure(func() error { _, err := cs.Put(ctx, "client", data); return err },
			func() ([]byte, error) { b, _, _, err := cs.Get(ctx, "client"); return b, err })
		if err != nil {
			return fmt.Errorf("client-side: %w", err)
		}
		in, zc, out = append(in, a), append(zc, w), append(out, b)
	}
	col := func(xs []sample, f func(sample) float64) []float64 {
		v := make([]float64, len(xs))
		for i, x := range xs {
			v[i] = f(x)
		}
		return v
	}
	what := fmt.Sprintf("64 MiB, 4+2, 6 agents, links at %s", rate)
	rep.addN(s, "inline Put (agent codes and places), "+what, col(in, func(x sample) float64 { return x.putGBs * 1e3 }), "MB/s")
	rep.addN(s, "inline Put from the window (a buffer from Alloc: no copy), "+what, col(zc, func(x sample) float64 { return x.putGBs * 1e3 }), "MB/s")
	rep.addN(s, "client-side Put (host codes, sends 6 shards), "+what, col(out, func(x sample) float64 { return x.putGBs * 1e3 }), "MB/s")
	rep.addN(s, "inline Get, "+what, col(in, func(x sample) float64 { return x.getGBs * 1e3 }), "MB/s")
	rep.addN(s, "client-side Get, "+what, col(out, func(x sample) float64 { return x.getGBs * 1e3 }), "MB/s")
	rep.addN(s, "inline Put, host CPU", col(in, func(x sample) float64 { return x.putCPU }), "s/GB")
	rep.addN(s, "inline Put from the window, host CPU", col(zc, func(x sample) float64 { return x.putCPU }), "s/GB")
	rep.addN(s, "client-side Put, host CPU", col(out, func(x sample) float64 { return x.putCPU }), "s/GB")
	rep.addN(s, "inline Put, the six agents' CPU", col(in, func(x sample) float64 { return x.putAgents }), "s/GB")
	rep.addN(s, "inline Put from the window, the six agents' CPU", col(zc, func(x sample) float64 { return x.putAgents }), "s/GB")
	rep.addN(s, "client-side Put, the six agents' CPU", col(out, func(x sample) float64 { return x.putAgents }), "s/GB")
	rep.addN(s, "inline Get, host CPU", col(in, func(x sample) float64 { return x.getCPU }), "s/GB")
	rep.addN(s, "client-side Get, host CPU", col(out, func(x sample) float64 { return x.getCPU }), "s/GB")
	ratios := func(xs []sample, f func(sample) float64) []float64 {
		v := make([]float64, len(xs))
		for i := range xs {
			v[i] = f(xs[i]) / f(out[i])
		}
		return v
	}
	putCPU := func(x sample) float64 { return x.putCPU }
	putGBs := func(x sample) float64 { return x.putGBs }
	rep.atMostN(s, "inline / client-side host CPU per GB, Put", ratios(in, putCPU), 0.2, "×")
	rep.atLeastN(s, "inline / client-side Put throughput", ratios(in, putGBs), 1.0, "×")
	rep.atMostN(s, "inline from the window / client-side host CPU per GB, Put", ratios(zc, putCPU), 0.2, "×")
	rep.atLeastN(s, "inline from the window / client-side Put throughput", ratios(zc, putGBs), 1.0, "×")
	allowed := rateBits / 8 * 4 / 6 / 1e9 // what the sender's link allows: rate × k/(k+m)
	ofLink := func(x sample) float64 { return x.putGBs / allowed }
	link := fmt.Sprintf("what node 1's link allows (%s × 4/6 = %.0f MB/s)", rate, allowed*1e3)
	rep.atLeastN(s, "inline Put / "+link, col(in, ofLink), 0.8, "×")
	rep.atLeastN(s, "inline Put from the window / "+link, col(zc, ofLink), 0.8, "×")
	return nil
}
