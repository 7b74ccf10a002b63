package coll

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hecsys/hec/shared/peer"
)

// GroupConfig is how a host process joins a group of ranks (the host
// rail): rank 0 listens at Root, every rank registers its peer address
// there, and rank 0 answers with every rank's — like NCCL's unique id,
// with an address in place of the id. Or the ranks meet in etcd: Root
// "etcd://HOST:PORT/NAME", NAME the group's, unique among the groups
// meeting there at once.
type GroupConfig struct {
	Root   string // rank 0's rendezvous address, host:port, or etcd://HOST:PORT/NAME
	Rank   int
	Size   int
	Listen string // this rank's peer listener (default 127.0.0.1:0)
	Key    []byte // the group's key (at least 16 bytes), shared by every rank
	// Deadline: a rank silent this long while another waits on it is
	// declared dead (default 3 s).
	Deadline time.Duration
	Comm     Config
	Log      *slog.Logger
}

// Group is one rank's membership: its communicator over the peer layer.
type Group struct {
	*Comm
	Transport *PeerTransport
	Node      *peer.Node

	ep     *Endpoint
	addr   string
	hosts  []string // the ranks' hosts, in rank order (SetPeers)
	gcfg   GroupConfig
	cancel context.CancelFunc
	done   chan struct{}
}

// Member is a rank's entry in the rendezvous.
type Member struct {
	Rank int    `json:"rank"`
	Node uint32 `json:"node"`
	Addr string `json:"addr"`
}

type register struct {
	Member
	Size int `json:"size"`
}

type roster struct {
	Comm    uint64   `json:"comm"`
	Members []Member `json:"members"`
	Error   string   `json:"error,omitempty"`
}

// Open joins the group: it starts this rank's peer node, registers it at
// the root, and returns once every rank has (or ctx ends).
func Open(ctx context.Context, cfg GroupConfig) (*Group, error) {
	var rootLn net.Listener
	if cfg.Rank == 0 && !isRegistry(cfg.Root) {
		var err error
		if rootLn, err = net.Listen("tcp", cfg.Root); err != nil {
			return nil, fmt.Errorf("coll: rendezvous at %s: %w", cfg.Root, err)
		}
		defer rootLn.Close()
	}
	g, err := Listen(cfg)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Group, error) {
		g.Close()
		return nil, err
	}
	var rootErr chan error
	if rootLn != nil {
		rootErr = make(chan error, 1)
		go func() { rootErr <- serveRendezvous(ctx, rootLn, cfg.Size) }()
	}
	meet := registerAt
	if isRegistry(cfg.Root) {
		meet = registerEtcd
	}
	me := Member{Rank: cfg.Rank, Node: g.Node.ID(), Addr: g.Addr()}
	r, err := meet(ctx, cfg.Root, register{Member: me, Size: cfg.Size}, func(r roster) {
		// Every rank knows the others before any sends: the root says go
		// once all are ready.
		addrs := make([]string, len(r.Members))
		for i, m := range r.Members {
			addrs[i] = m.Addr
		}
		g.SetPeers(addrs)
	})
	if err != nil {
		if rootErr != nil {
			if rerr := <-rootErr; rerr != nil {
				err = rerr
			}
		}
		return fail(err)
	}
	if rootErr != nil {
		if err := <-rootErr; err != nil {
			return fail(err)
		}
	}
	if err := g.Join(r.Comm); err != nil {
		return fail(err)
	}
	return g, nil
}

// Listen starts this rank's peer node without meeting the others: for
// ranks that swap their addresses through a store of their own (a
// training job's), which then call SetPeers with every rank's address
// (Addr), make sure every rank has, and Join. Rank r is node r+1.
func Listen(cfg GroupConfig) (*Group, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("coll: rank %d of %d", cfg.Rank, cfg.Size)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = 3 * time.Second
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("coll: peer listener at %s: %w", cfg.Listen, err)
	}
	node, err := peer.NewNode(peer.Config{ID: uint32(cfg.Rank) + 1, Listener: ln, Key: cfg.Key, Deadline: cfg.Deadline, Log: cfg.Log})
	if err != nil {
		ln.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); node.Run(runCtx) }()
	return &Group{Node: node, ep: NewEndpoint(node), addr: ln.Addr().String(), gcfg: cfg, cancel: cancel, done: done}, nil
}

// Addr is this rank's peer address, for the others' SetPeers.
func (g *Group) Addr() string { return g.addr }

// SetPeers tells this rank every rank's peer address, in rank order.
func (g *Group) SetPeers(addrs []string) {
	peers := map[uint32]string{}
	g.hosts = g.hosts[:0]
	for i, a := range addrs {
		peers[uint32(i)+1] = a
		h, _, err := net.SplitHostPort(a)
		if err != nil {
			h = a
		}
		g.hosts = append(g.hosts, h)
	}
	g.Node.SetPeers(peers)
}

// Join makes this rank's communicator comm (an id every rank agrees on)
// among the group's ranks, whose addresses SetPeers gave.
func (g *Group) Join(comm uint64) error {
	nodes := make([]uint32, g.gcfg.Size)
	for i := range nodes {
		nodes[i] = uint32(i) + 1
	}
	t, err := g.ep.Join(comm, 1, nodes)
	if err != nil {
		return err
	}
	cfg := g.gcfg.Comm
	if cfg.Topology == "" {
		// The model depends on where the ranks are, not on the ports
		// they drew: a group of the same hosts takes the same entry.
		cfg.Topology = "hosts " + strings.Join(g.hosts, ",")
	}
	c, err := New(t, cfg)
	if err != nil {
		t.Close()
		return err
	}
	g.Comm, g.Transport = c, t
	return nil
}

// Close leaves the group (without telling the others: a rank that closes
// while they wait on it is a rank that died).
func (g *Group) Close() {
	if g.Comm != nil {
		g.Comm.Close()
	}
	if g.Transport != nil {
		g.Transport.Close()
	}
	g.cancel()
	<-g.done
}

// Rebuild replaces the communicator with one without the given ranks (see
// PeerTransport.Without).
func (g *Group) Rebuild(dead ...int) error {
	t, err := g.Transport.Without(dead...)
	if err != nil {
		return err
	}
	c, err := New(t, g.Comm.cfg)
	if err != nil {
		return err
	}
	g.Comm.Close()
	g.Comm, g.Transport = c, t
	return nil
}

type ready struct {
	Ready bool `json:"ready,omitempty"`
	Go    bool `json:"go,omitempty"`
}

func registerAt(ctx context.Context, root string, me register, set func(roster)) (roster, error) {
	var r roster
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", root)
		if err != nil {
			// The root may not listen yet: try again until ctx ends.
			select {
			case <-ctx.Done():
				return r, fmt.Errorf("coll: rendezvous at %s: %w", root, err)
			case <-time.After(50 * time.Millisecond):
				continue
			}
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		dec := json.NewDecoder(bufio.NewReader(c))
		err = json.NewEncoder(c).Encode(me)
		if err == nil {
			err = dec.Decode(&r)
		}
		if err == nil && r.Error == "" {
			set(r)
			var g ready
			if err = json.NewEncoder(c).Encode(ready{Ready: true}); err == nil {
				if err = dec.Decode(&g); err == nil && !g.Go {
					err = errors.New("the root did not say go")
				}
			}
		}
		stop()
		c.Close()
		if err != nil {
			if ctx.Err() != nil {
				return r, fmt.Errorf("coll: rendezvous at %s: not every rank registered: %w", root, ctx.Err())
			}
			return r, fmt.Errorf("coll: rendezvous at %s: %w", root, err)
		}
		if r.Error != "" {
			return r, fmt.Errorf("coll: rendezvous at %s: %s", root, r.Error)
		}
		return r, nil
	}
}

// serveRendezvous takes size registrations and answers each with the
// roster. A registration that disagrees (size, a rank out of range or
// taken) is answered with an error and the others keep waiting.
func serveRendezvous(ctx context.Context, ln net.Listener, size int) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var b [8]byte
	rand.Read(b[:])
	comm := binary.LittleEndian.Uint64(b[:]) >> 1
	members := make([]Member, size)
	conns := make([]net.Conn, size)
	decs := make([]*json.Decoder, size)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for got := 0; got < size; {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("coll: rendezvous: %d of %d ranks registered: %w", got, size, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var reg register
		dec := json.NewDecoder(bufio.NewReader(c))
		if err := dec.Decode(&reg); err != nil {
			c.Close()
			continue
		}
		why := ""
		switch {
		case reg.Size != size:
			why = fmt.Sprintf("rank %d says %d ranks, the root %d", reg.Rank, reg.Size, size)
		case reg.Rank < 0 || reg.Rank >= size:
			why = fmt.Sprintf("rank %d of %d", reg.Rank, size)
		case conns[reg.Rank] != nil:
			why = fmt.Sprintf("rank %d registered twice", reg.Rank)
		case reg.Node == 0 || reg.Addr == "":
			why = "a registration without a node or an address"
		}
		if why != "" {
			json.NewEncoder(c).Encode(roster{Error: why})
			c.Close()
			continue
		}
		c.SetDeadline(time.Time{})
		members[reg.Rank], conns[reg.Rank], decs[reg.Rank] = reg.Member, c, dec
		got++
	}
	// The roster to all; once every rank has its peers set, go.
	for _, c := range conns {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := json.NewEncoder(c).Encode(roster{Comm: comm, Members: members}); err != nil {
			return fmt.Errorf("coll: rendezvous: %w", err)
		}
	}
	for r, dec := range decs {
		var rd ready
		if err := dec.Decode(&rd); err != nil || !rd.Ready {
			return fmt.Errorf("coll: rendezvous: rank %d did not get ready: %v", r, err)
		}
	}
	for _, c := range conns {
		if err := json.NewEncoder(c).Encode(ready{Go: true}); err != nil {
			return fmt.Errorf("coll: rendezvous: %w", err)
		}
	}
	return nil
}
