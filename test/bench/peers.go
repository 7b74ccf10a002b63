package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/hecsys/hec/host/cluster"
)

// The peers scenario (issue: peers and clusters): agent-to-agent bulk
// bandwidth between two cluster nodes (network namespaces joined by veths
// through a bridge) next to iperf3 between the same namespaces, in the
// same run. Needs root (namespaces) and iperf3.
func benchPeers(ctx context.Context, rep *Report, quick bool) error {
	const s = "peers"
	if os.Geteuid() != 0 {
		return fmt.Errorf("the peers scenario makes network namespaces: run make bench as root")
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return fmt.Errorf("iperf3 not installed (make bench installs it as root): %w", err)
	}
	dir, hecd, err := scratchHecd("peers")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	const name = "bench"
	state := filepath.Join(dir, "cluster")
	cluster.Down(name, state, nil)
	st, err := cluster.Up(ctx, cluster.Options{Name: name, Agents: 2, Hecd: hecd, StateDir: state})
	if err != nil {
		return err
	}
	defer cluster.Down(name, state, nil)
	runs, size := 5, int64(1<<30)
	if quick {
		runs, size = 2, 256<<20
	}
	var agent, iperf, rtt []float64
	for i := 0; i < runs; i++ {
		res, err := st.Ping(ctx, 20, size)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Error != "" {
				return fmt.Errorf("agent %d → %d: %s", r.From, r.To, r.Error)
			}
			if r.From == 1 {
				agent, rtt = append(agent, r.GBPerSec), append(rtt, r.RTTP50Us)
			}
		}
		g, err := iperf3(st)
		if err != nil {
			return err
		}
		iperf = append(iperf, g)
	}
	rep.addN(s, "agent-to-agent round trip p50 (peer frames, veth)", rtt, "µs")
	rep.addN(s, fmt.Sprintf("agent-to-agent bandwidth, %d MiB in 1 MiB authenticated frames", size>>20), agent, "GB/s")
	rep.addN(s, "iperf3 between the same namespaces, 3 s", iperf, "GB/s")
	// Each run's agent figure against its own iperf3's, side by side in
	// time.
	rep.atLeastN(s, "agent-to-agent bandwidth / iperf3", ratio(agent, iperf), 0.8, "×")
	return nil
}

// iperf3 runs one iperf3 test from node 1 to node 2 and returns GB/s.
func iperf3(st *cluster.State) (float64, error) {
	srv, err := st.Exec(2, "iperf3", "-s", "-B", st.Nodes[1].Addr, "-p", "5299")
	if err != nil {
		return 0, err
	}
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var r struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	var out []byte
	for i := 0; i < 50; i++ { // the server takes a moment to listen
		cli, _ := st.Exec(1, "iperf3", "-c", st.Nodes[1].Addr, "-p", "5299", "-t", "3", "-J")
		out, err = cli.Output()
		r.Error, r.End.SumReceived.BitsPerSecond = "", 0
		if err == nil {
			if err = json.Unmarshal(out, &r); err == nil && r.End.SumReceived.BitsPerSecond > 0 {
				return r.End.SumReceived.BitsPerSecond / 8e9, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("iperf3 measured nothing: %v %s: %s", err, r.Error, out)
}
