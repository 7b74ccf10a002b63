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
	"time"

	"github.com/hecsys/hec/ec/object"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/test/cluster"
)

// The ec-objects scenario (issue: erasure-coded objects across agents):
// six agents in namespaces, every link limited to the same rate with tc,
// 64 MiB objects in 4+2. Put and Get through node 1's agent over its
// region (inline: the agent codes and places) beside the same Put and Get
// coded in this process, which sends every shard to its agent itself over
// the agents' TCP handoffs from node 1's namespace (client-side, as HDFS
// and MinIO clients do), in the same run, interleaved. Host CPU is this
// process's: it is the host.
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
	st, err := cluster.Up(ctx, cluster.Options{Name: name, Agents: 6, Hecd: hecd, StateDir: state, Rates: map[int]string{0: rate},
		AgentArgs: []string{"--ec-scrub", "off"}})
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
	var in, out []sample
	for i := 0; i < reps; i++ {
		a, err := measure(func() error { _, err := ecIn.Put(ctx, "inline", data); return err },
			func() ([]byte, error) { b, _, err := ecIn.Get(ctx, "inline"); return b, err })
		if err != nil {
			return fmt.Errorf("inline: %w", err)
		}
		b, err := measure(func() error { _, err := cs.Put(ctx, "client", data); return err },
			func() ([]byte, error) { b, _, _, err := cs.Get(ctx, "client"); return b, err })
		if err != nil {
			return fmt.Errorf("client-side: %w", err)
		}
		in, out = append(in, a), append(out, b)
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
	rep.addN(s, "client-side Put (host codes, sends 6 shards), "+what, col(out, func(x sample) float64 { return x.putGBs * 1e3 }), "MB/s")
	rep.addN(s, "inline Get, "+what, col(in, func(x sample) float64 { return x.getGBs * 1e3 }), "MB/s")
	rep.addN(s, "client-side Get, "+what, col(out, func(x sample) float64 { return x.getGBs * 1e3 }), "MB/s")
	rep.addN(s, "inline Put, host CPU", col(in, func(x sample) float64 { return x.putCPU }), "s/GB")
	rep.addN(s, "client-side Put, host CPU", col(out, func(x sample) float64 { return x.putCPU }), "s/GB")
	rep.addN(s, "inline Put, the six agents' CPU", col(in, func(x sample) float64 { return x.putAgents }), "s/GB")
	rep.addN(s, "client-side Put, the six agents' CPU", col(out, func(x sample) float64 { return x.putAgents }), "s/GB")
	rep.addN(s, "inline Get, host CPU", col(in, func(x sample) float64 { return x.getCPU }), "s/GB")
	rep.addN(s, "client-side Get, host CPU", col(out, func(x sample) float64 { return x.getCPU }), "s/GB")
	ratios := func(f func(sample) float64) []float64 {
		v := make([]float64, len(in))
		for i := range in {
			v[i] = f(in[i]) / f(out[i])
		}
		return v
	}
	rep.atMostN(s, "inline / client-side host CPU per GB, Put", ratios(func(x sample) float64 { return x.putCPU }), 0.2, "×")
	rep.atLeastN(s, "inline / client-side Put throughput", ratios(func(x sample) float64 { return x.putGBs }), 1.0, "×")
	allowed := rateBits / 8 * 4 / 6 / 1e9 // what the sender's link allows: rate × k/(k+m)
	put := col(in, func(x sample) float64 { return x.putGBs / allowed })
	rep.atLeastN(s, fmt.Sprintf("inline Put / what node 1's link allows (%s × 4/6 = %.0f MB/s)", rate, allowed*1e3), put, 0.8, "×")
	return nil
}
