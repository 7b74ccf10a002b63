package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/handofftest"
)

// The peer links measured: an agent on each guest per transport (node 1
// on the server's guest, node 2 on the client's), peered over RDMA
// (--peer-transport rdma) or TCP, and this process a host of each, its
// rank of a two-rank communicator; the client times allreduces, which the
// agents reduce and carry over their peer links.
var peerTransports = []struct {
	name string
	port int
}{{"rdma", 7480}, {"tcp", 7482}}

var peerSizes = []struct {
	name  string
	bytes int
	times int
}{{"1MiB", 1 << 20, 16}, {"16MiB", 16 << 20, 2}}

// peerKey is the two guests' cluster key (a benchmark's, not a secret).
const peerKey = "rdmaperf's cluster key, 32 bytes"

// peerAgents runs this guest's agents (node, at ip) and returns a host
// client of each, by transport.
func peerAgents(node uint32, ip string) (clients map[string]*host.Client, stop func(), err error) {
	dir, err := os.MkdirTemp("", "rdmaperf-peers")
	if err != nil {
		return nil, nil, err
	}
	keyFile := filepath.Join(dir, "cluster.key")
	if err := os.WriteFile(keyFile, []byte(peerKey), 0o600); err != nil {
		return nil, nil, err
	}
	clients = map[string]*host.Client{}
	var stops []func()
	stop = func() {
		for _, c := range clients {
			c.Close()
		}
		for _, s := range stops {
			s()
		}
	}
	for _, pt := range peerTransports {
		cfg := dpu.Config{Agent: dpu.AgentConfig{Shm: dpu.Off, TCP: "127.0.0.1:0", Mgmt: dpu.Off, StateDir: filepath.Join(dir, pt.name)},
			RESP: dpu.RESPConfig{Addr: dpu.Off}, UDP: dpu.UDPConfig{Addr: dpu.Off},
			Peer: dpu.PeerConfig{NodeID: node, Addr: fmt.Sprintf("%s:%d", ip, pt.port), ClusterKeyFile: keyFile, Transport: pt.name,
				Peers:    []string{fmt.Sprintf("1@10.9.0.1:%d", pt.port), fmt.Sprintf("2@10.9.0.2:%d", pt.port)},
				Deadline: dpu.Duration{Duration: 10 * time.Second}}}
		a, s, err := handofftest.RunAgent(cfg, nil)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("peers over %s: %w", pt.name, err)
		}
		stops = append(stops, s)
		c, err := host.Dial(context.Background(), "tcp://"+a.Addr("tcp"))
		if err != nil {
			stop()
			return nil, nil, err
		}
		clients[pt.name] = c
	}
	return clients, stop, nil
}

// peerCollectives runs the allreduces over each transport's agents, in
// order; rank 1 (the client) records them.
func peerCollectives(ctx context.Context, clients map[string]*host.Client) ([]Result, error) {
	var out []Result
	for i, pt := range peerTransports {
		r := Result{Transport: "peers " + pt.name, GBps: map[string]float64{}, CPUmsGB: map[string]float64{}}
		comm, err := clients[pt.name].JoinColl(ctx, wire.CollSpec{Comm: 0x5eed + uint64(i), Epoch: 1, Nodes: []uint32{1, 2}})
		if err != nil {
			return nil, fmt.Errorf("peers over %s: join: %w", pt.name, err)
		}
		small := make([]byte, 4096)
		t0 := time.Now()
		if err := comm.AllReduce(ctx, small, small, coll.Float32, coll.Sum); err != nil { // both ranks there
			return nil, fmt.Errorf("peers over %s: first allreduce: %w", pt.name, err)
		}
		fmt.Fprintf(os.Stderr, "rdmaperf: peers over %s: the ranks met after %v\n", pt.name, time.Since(t0).Round(time.Millisecond))
		var rtts []time.Duration
		for range 50 {
			t0 := time.Now()
			if err := comm.AllReduce(ctx, small[:64], small[:64], coll.Float32, coll.Sum); err != nil {
				return nil, err
			}
			rtts = append(rtts, time.Since(t0))
		}
		r.PingP50US = p50(rtts)
		for _, s := range peerSizes {
			send, recv := make([]byte, s.bytes), make([]byte, s.bytes)
			c0, t0 := cpu(), time.Now()
			for range s.times {
				if err := comm.AllReduce(ctx, send, recv, coll.Float32, coll.Sum); err != nil {
					return nil, fmt.Errorf("peers over %s: allreduce of %s: %w", pt.name, s.name, err)
				}
			}
			record(&r, s.name, s.bytes*s.times, time.Since(t0), cpu()-c0)
		}
		comm.Leave(ctx)
		out = append(out, r)
	}
	return out, nil
}
