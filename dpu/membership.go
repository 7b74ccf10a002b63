package dpu

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hecsys/hec/shared/peer"
)

// etcdMembership keeps an agent registered in etcd under a lease and the
// node's member set equal to what is registered: an agent that dies
// leaves the set when its lease expires.
type etcdMembership struct {
	cli    *clientv3.Client
	node   *peer.Node
	prefix string
	self   string
	ttl    int64
	log    *slog.Logger
}

// etcdLeaseTTL is how long a dead agent stays a member, in seconds.
const etcdLeaseTTL = 3

func newEtcdMembership(cfg PeerConfig, node *peer.Node, self string, log *slog.Logger) (*etcdMembership, error) {
	endpoint := "http://" + strings.TrimPrefix(cfg.Membership, "etcd://")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: nil})
	if err != nil {
		return nil, fmt.Errorf("--membership %s: %w", cfg.Membership, err)
	}
	return &etcdMembership{cli: cli, node: node, prefix: "/hec/" + cfg.Cluster + "/members/",
		self: self, ttl: etcdLeaseTTL, log: log}, nil
}

func (m *etcdMembership) run(ctx context.Context) {
	defer m.cli.Close()
	for ctx.Err() == nil {
		if err := m.session(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("membership: etcd", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// session registers under a fresh lease, follows the member set, and
// returns when the lease or the watch is lost.
func (m *etcdMembership) session(ctx context.Context) error {
	lease, err := m.cli.Grant(ctx, m.ttl)
	if err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	key := m.prefix + strconv.FormatUint(uint64(m.node.ID()), 10)
	if _, err := m.cli.Put(ctx, key, m.self, clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m.cli.Revoke(rctx, lease.ID) // a clean stop leaves at once
		cancel()
	}()
	alive, err := m.cli.KeepAlive(ctx, lease.ID)
	if err != nil {
		return fmt.Errorf("keep alive: %w", err)
	}
	get, err := m.cli.Get(ctx, m.prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("members: %w", err)
	}
	members := map[uint32]string{}
	for _, kv := range get.Kvs {
		m.add(members, string(kv.Key), string(kv.Value))
	}
	m.node.SetPeers(members)
	m.log.Info("membership: registered", "key", key, "members", len(members))
	watch := m.cli.Watch(ctx, m.prefix, clientv3.WithPrefix(), clientv3.WithRev(get.Header.Revision+1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-alive:
			if !ok {
				return fmt.Errorf("lease lost")
			}
		case wr, ok := <-watch:
			if !ok || wr.Err() != nil {
				return fmt.Errorf("watch ended: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					if id, ok := m.id(string(ev.Kv.Key)); ok {
						delete(members, id)
					}
				} else {
					m.add(members, string(ev.Kv.Key), string(ev.Kv.Value))
				}
			}
			m.node.SetPeers(members)
		}
	}
}

func (m *etcdMembership) id(key string) (uint32, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(key, m.prefix), 10, 32)
	return uint32(n), err == nil && n > 0
}

func (m *etcdMembership) add(members map[uint32]string, key, addr string) {
	if id, ok := m.id(key); ok {
		members[id] = addr
	}
}
