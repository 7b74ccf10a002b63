package dpu

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/peer"
	"github.com/hecsys/hec/shared/rdmalink"
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

// PeerConfig is the peer layer's section ([peer]): agents talking to
// agents. Served when Addr is an address; NodeID and a cluster key are
// then required.
type PeerConfig struct {
	// Addr is the address other agents reach this one on. Default off.
	Addr string `toml:"addr"`
	// NodeID is this agent's id in its cluster (1..).
	NodeID uint32 `toml:"node_id"`
	// Peers is the static member list, "ID@HOST:PORT" each (this node may
	// be in it).
	Peers []string `toml:"peers"`
	// ClusterKeyFile holds the cluster key (at least 16 bytes) that
	// authenticates every peer connection.
	ClusterKeyFile string `toml:"cluster_key_file"`
	// Membership is "static" (default: Peers) or "etcd://HOST:PORT": the
	// agent registers under a lease and follows the member set there.
	Membership string `toml:"membership"`
	// Cluster names the cluster (the etcd key prefix). Default "hec".
	Cluster string `toml:"cluster"`
	// Deadline declares dead a peer that owes work and has sent nothing
	// for this long. Default 2s.
	Deadline Duration `toml:"deadline"`
	// Transport carries the peer links: "tcp" (default) or "rdma" (the
	// same frames over RDMA streams, rdmalink.Stream: Addr and every
	// member's address are then IPv4:PORT of RDMA devices' interfaces).
	Transport string `toml:"transport"`
}

func (c *PeerConfig) withDefaults() error {
	defString(&c.Addr, Off)
	defString(&c.Membership, "static")
	defString(&c.Cluster, "hec")
	defDuration(&c.Deadline, 2*time.Second)
	defString(&c.Transport, "tcp")
	return nil
}

func (c *PeerConfig) validate() error {
	if c.Transport != "tcp" && c.Transport != "rdma" {
		return fmt.Errorf("--peer-transport %q: want tcp or rdma: %w", c.Transport, ErrConfig)
	}
	if err := checkAddr("peer", c.Addr); err != nil {
		return err
	}
	if c.Addr == Off && c.Transport != "tcp" {
		return fmt.Errorf("--peer-transport %s without --peer ADDR: the peer layer is off: %w", c.Transport, ErrConfig)
	}
	if c.Addr != Off && c.NodeID == 0 {
		return fmt.Errorf("--peer %s: the peer layer needs --node-id N (1..): %w", c.Addr, ErrConfig)
	}
	if c.Addr != Off && c.ClusterKeyFile == "" {
		return fmt.Errorf("--peer %s: the peer layer needs --cluster-key-file F: %w", c.Addr, ErrConfig)
	}
	if _, err := parsePeers(c.Peers); err != nil {
		return fmt.Errorf("--peers: %v: %w", err, ErrConfig)
	}
	if c.Membership != "static" && !strings.HasPrefix(c.Membership, "etcd://") {
		return fmt.Errorf("--membership %q: want static or etcd://HOST:PORT: %w", c.Membership, ErrConfig)
	}
	return nil
}

func (c *PeerConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "peer", c.Addr, "address other agents reach this one on, or off")
	fs.Func("node-id", "this agent's id in its cluster (peer layer)", func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		c.NodeID = uint32(n)
		return err
	})
	fs.Var(listFlag{&c.Peers}, "peers", "static members, ID@HOST:PORT,... (peer layer)")
	fs.StringVar(&c.ClusterKeyFile, "cluster-key-file", c.ClusterKeyFile, "file holding the cluster key (peer layer)")
	fs.StringVar(&c.Membership, "membership", c.Membership, "static (--peers) or etcd://HOST:PORT")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "cluster name (the etcd key prefix)")
	fs.Var(&c.Deadline, "peer-deadline", "declare dead a peer that owes work and has sent nothing for this long")
	fs.StringVar(&c.Transport, "peer-transport", c.Transport, "carry the peer links over tcp or rdma (the same frames over RDMA streams; --peer and --peers then name IPv4:PORT of RDMA devices' interfaces)")
}

// peerService is the peer layer: the node, its membership, and the
// management endpoints that use it.
type peerService struct {
	cfg     PeerConfig
	addr    string
	node    *peer.Node
	members map[uint32]string
	etcd    *etcdMembership
}

func newPeerService(cfg PeerConfig) *peerService { return &peerService{cfg: cfg} }

func (s *peerService) Name() string { return "peer" }

func (s *peerService) Open(ctx context.Context, env *Env) error {
	servePeers(env.Mux, s)
	if s.cfg.Addr == Off {
		return nil
	}
	key, err := os.ReadFile(s.cfg.ClusterKeyFile)
	if err != nil {
		return fmt.Errorf("--cluster-key-file: %w", err)
	}
	key = []byte(strings.TrimSpace(string(key)))
	s.members, _ = parsePeers(s.cfg.Peers)
	var ln net.Listener
	var dial func(context.Context, string) (net.Conn, error)
	if s.cfg.Transport == "rdma" {
		if ln, err = rdmalink.ListenStream(s.cfg.Addr); err != nil {
			return fmt.Errorf("--peer %s --peer-transport rdma: %w", s.cfg.Addr, err)
		}
		dial = rdmalink.DialStream
	} else if ln, err = env.Listen("peer", s.cfg.Addr); err != nil {
		return err
	}
	node, err := peer.NewNode(peer.Config{ID: s.cfg.NodeID, Listener: ln, Dial: dial, Peers: s.members, Key: key,
		Deadline: s.cfg.Deadline.Duration, Log: env.Log, Trace: env.Dispatcher.Trace()})
	if err != nil {
		ln.Close()
		return fmt.Errorf("--cluster-key-file %s: %w", s.cfg.ClusterKeyFile, err)
	}
	if strings.HasPrefix(s.cfg.Membership, "etcd://") {
		if s.etcd, err = newEtcdMembership(s.cfg, node, ln.Addr().String(), env.Log); err != nil {
			ln.Close()
			return err
		}
	}
	s.node, s.addr = node, ln.Addr().String()
	env.Shared.Peer = node
	env.Shared.SetAddr("peer", ln.Addr().String())
	env.Metrics.MustRegister(newPeerCollector(node))
	return nil
}

func (s *peerService) Start(ctx context.Context, env *Env) error {
	if s.node == nil {
		return nil
	}
	env.Go(func() { s.node.Run(ctx) })
	if s.etcd != nil {
		env.Go(func() { s.etcd.run(ctx) })
	}
	return nil
}

func (s *peerService) Stop() {
	if s.node != nil {
		s.node.Close()
	}
}

func (s *peerService) Status() api.Service {
	if s.node == nil {
		return api.Service{Name: "peer", Addr: Off, Note: "off (hecd --peer ADDR --node-id N --cluster-key-file F)"}
	}
	note := fmt.Sprintf("node %d, %d static members", s.cfg.NodeID, len(s.members))
	if s.etcd != nil {
		note = fmt.Sprintf("node %d, members from %s", s.cfg.NodeID, s.cfg.Membership)
	}
	return api.Service{Name: "peer", Addr: s.addr, Served: true, Note: note}
}

func (s *peerService) FillStatus(st *api.Status) {
	if s.node != nil {
		st.NodeID, st.Peers = s.cfg.NodeID, s.node.Peers()
	}
}

// peerCollector exports every peer's liveness and traffic.
type peerCollector struct {
	n                                  *peer.Node
	up, bytes, frames, refused, paused *prometheus.Desc
}

func newPeerCollector(n *peer.Node) *peerCollector {
	return &peerCollector{n: n,
		up:      prometheus.NewDesc("hec_peer_up", "1 while a peer is alive (not declared dead), by peer node id.", []string{"peer"}, nil),
		bytes:   prometheus.NewDesc("hec_peer_bytes_total", "Bytes of peer frames, by peer and direction.", []string{"peer", "dir"}, nil),
		frames:  prometheus.NewDesc("hec_peer_frames_total", "Peer frames, by peer and direction.", []string{"peer", "dir"}, nil),
		refused: prometheus.NewDesc("hec_peer_refused_total", "Peer connections and frames refused, by reason (auth: wrong key, forged or replayed frame; frame: malformed; old_epoch: dropped; bound: over a limit on connections or transfers).", []string{"reason"}, nil),
		paused:  prometheus.NewDesc("hec_peer_local_pauses_total", "Times the liveness check found this agent had not run for a while (stopped, starved, its machine paused); the silence meanwhile was not held against peers.", nil, nil),
	}
}

func (c *peerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.bytes, c.frames, c.refused, c.paused} {
		ch <- d
	}
}

func (c *peerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.n.Peers() {
		id := strconv.FormatUint(uint64(p.ID), 10)
		up := 0.0
		if p.Alive {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, id)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(p.SentBytes), id, "sent")
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(p.RecvBytes), id, "received")
		ch <- prometheus.MustNewConstMetric(c.frames, prometheus.CounterValue, float64(p.SentFrames), id, "sent")
		ch <- prometheus.MustNewConstMetric(c.frames, prometheus.CounterValue, float64(p.RecvFrames), id, "received")
	}
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.n.AuthFailures.Load()), "auth")
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.n.BadFrames.Load()), "frame")
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.n.OldEpoch.Load()), "old_epoch")
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.n.Refused.Load()), "bound")
	ch <- prometheus.MustNewConstMetric(c.paused, prometheus.CounterValue, float64(c.n.Paused.Load()))
}

// servePeers adds the peer endpoints to mux: GET /v1/peers, and POST
// /v1/peers/test?peer=ID&pings=N&bytes=B, the round trips and bulk
// transfer behind hecctl cluster ping.
func servePeers(mux *Mux, s *peerService) {
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		if s.node == nil {
			http.Error(w, "the peer layer is not served (hecd --peer ADDR)", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.node.Peers())
	})
	mux.HandleFunc("POST /v1/peers/test", func(w http.ResponseWriter, r *http.Request) {
		if s.node == nil {
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
		res := api.LinkTest{Peer: uint32(id), Pings: pings, Bytes: size}
		var rtts []time.Duration
		for i := 0; i < pings && res.Error == ""; i++ {
			d, err := s.node.Ping(ctx, uint32(id))
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
			d, err := s.node.Transfer(ctx, uint32(id), size, 1<<20, 0)
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
