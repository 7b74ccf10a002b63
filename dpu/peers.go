package dpu

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hecsys/hec/shared/peer"
)

// parsePeers reads "ID@HOST:PORT" members.
func parsePeers(list []string) (map[uint32]string, error) {
	m := map[uint32]string{}
	for _, s := range list {
		for _, item := range strings.Split(s, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			id, addr, ok := strings.Cut(item, "@")
			n, err := strconv.ParseUint(id, 10, 32)
			if !ok || err != nil || n == 0 || addr == "" {
				return nil, fmt.Errorf("peer %q: want ID@HOST:PORT with ID ≥ 1", item)
			}
			m[uint32(n)] = addr
		}
	}
	return m, nil
}

// startPeers starts the peer layer: the node, its membership, and the
// management endpoints that use it.
func (a *Agent) startPeers(ctx context.Context) (func(), error) {
	key, err := os.ReadFile(a.cfg.ClusterKeyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	key = []byte(strings.TrimSpace(string(key)))
	members, _ := parsePeers(a.cfg.Peers)
	node, err := peer.NewNode(peer.Config{ID: a.cfg.NodeID, Listen: a.cfg.Peer, Peers: members, Key: key,
		Deadline: a.cfg.PeerDeadline.Duration, Log: a.log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { node.Run(ctx); close(done) }()
	for deadline := time.Now().Add(5 * time.Second); node.Addr() == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			<-done
			return nil, fmt.Errorf("peer listener on %s did not start", a.cfg.Peer)
		}
	}
	a.peers = node
	note := fmt.Sprintf("node %d, %d static members", a.cfg.NodeID, len(members))
	var mdone chan struct{}
	if strings.HasPrefix(a.cfg.Membership, "etcd://") {
		m, err := newEtcdMembership(ctx, a.cfg, node, a.log)
		if err != nil {
			cancel()
			<-done
			return nil, err
		}
		mdone = make(chan struct{})
		go func() { m.run(ctx); close(mdone) }()
		note = fmt.Sprintf("node %d, members from %s", a.cfg.NodeID, a.cfg.Membership)
	}
	a.addService(Service{Name: "peer", Addr: node.Addr(), Served: true, Note: note})
	return func() {
		cancel()
		<-done
		if mdone != nil {
			<-mdone
		}
	}, nil
}

// servePeers adds the peer endpoints to mux: GET /v1/peers, and POST
// /v1/peers/test?peer=ID&pings=N&bytes=B, the round trips and bulk
// transfer behind hecctl cluster ping.
func (a *Agent) servePeers(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		if a.peers == nil {
			http.Error(w, "the peer layer is not served (hecd --peer ADDR)", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a.peers.Peers())
	})
	mux.HandleFunc("POST /v1/peers/test", func(w http.ResponseWriter, r *http.Request) {
		if a.peers == nil {
			http.Error(w, "the peer layer is not served (hecd --peer ADDR)", http.StatusNotFound)
			return
		}
		q := r.URL.Query()
		id, err := strconv.ParseUint(q.Get("peer"), 10, 32)
		pings, err2 := strconv.Atoi(q.Get("pings"))
		size, err3 := strconv.ParseInt(q.Get("bytes"), 10, 64)
		if err != nil || err2 != nil || err3 != nil || pings < 0 || pings > 100000 || size < 0 || size > 16<<30 {
			http.Error(w, "want peer=ID, pings=N (0..100000), bytes=B (0..16 GiB)", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
		defer cancel()
		res := peer.LinkTest{Peer: uint32(id), Pings: pings, Bytes: size}
		var rtts []time.Duration
		for i := 0; i < pings && res.Error == ""; i++ {
			d, err := a.peers.Ping(ctx, uint32(id))
			if err != nil {
				res.Error = err.Error()
			}
			rtts = append(rtts, d)
		}
		if len(rtts) > 0 && res.Error == "" {
			slices.Sort(rtts)
			res.RTTMinUs, res.RTTP50Us = float64(rtts[0])/1e3, float64(rtts[len(rtts)/2])/1e3
		}
		if size > 0 && res.Error == "" {
			d, err := a.peers.Transfer(ctx, uint32(id), size, 1<<20, 0)
			if err != nil {
				res.Error = err.Error()
			} else {
				res.Seconds, res.GBPerSec = d.Seconds(), float64(size)/d.Seconds()/1e9
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if res.Error != "" {
			w.WriteHeader(http.StatusBadGateway)
		}
		json.NewEncoder(w).Encode(res)
	})
}
