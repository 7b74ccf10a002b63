package dpu

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the agent's own counters at scrape time, so the hot
// path touches only its atomics.
type collector struct {
	a *Agent

	ops, errs, qps, faults, fences, gen, services *prometheus.Desc
	kvOps, kvBytes, respClients, udpReqs          *prometheus.Desc
	kvCommits, kvWrites, kvCacheHits, kvCache     *prometheus.Desc
	kvFlushes, kvFlushed                          *prometheus.Desc
	kvCommitTime                                  *prometheus.Desc
	peerUp, peerBytes, peerFrames, peerRefused    *prometheus.Desc
	xdpPackets, xdpBytes, xdpVerdicts, xdpHot     *prometheus.Desc
}

func newCollector(a *Agent) *collector {
	return &collector{
		a:            a,
		ops:          prometheus.NewDesc("hec_ops_total", "Ops served, by op.", []string{"op"}, nil),
		errs:         prometheus.NewDesc("hec_op_errors_total", "Ops that completed with a status other than ok, by op (op=rejected: failed validation or unknown op).", []string{"op"}, nil),
		qps:          prometheus.NewDesc("hec_queue_pairs", "Queue pairs by state.", []string{"state"}, nil),
		faults:       prometheus.NewDesc("hec_queue_pair_faults_total", "Times a queue pair was faulted (indices went wrong).", nil, nil),
		fences:       prometheus.NewDesc("hec_queue_pair_fences_total", "Times a queue pair was fenced (holder released, died or went silent).", nil, nil),
		gen:          prometheus.NewDesc("hec_agent_generation", "The generation the agent formatted the region with.", nil, nil),
		services:     prometheus.NewDesc("hec_service_served", "1 when a configured service is served, 0 when it is not (not built or disabled).", []string{"service"}, nil),
		kvOps:        prometheus.NewDesc("hec_kv_ops_total", "Key-value store operations, all front ends together.", []string{"kind"}, nil),
		kvBytes:      prometheus.NewDesc("hec_kv_disk_bytes", "Key-value store size on disk.", []string{"part"}, nil),
		kvCommits:    prometheus.NewDesc("hec_kv_commits_total", "Durable rounds of the store's group committer: log syncs in sync mode, Badger transactions in async mode.", nil, nil),
		kvWrites:     prometheus.NewDesc("hec_kv_grouped_writes_total", "Writes in those rounds; writes/commits is the mean group size.", nil, nil),
		kvFlushes:    prometheus.NewDesc("hec_kv_flushes_total", "Badger transactions writing SETs acknowledged from the cache.", nil, nil),
		kvFlushed:    prometheus.NewDesc("hec_kv_flushed_writes_total", "Writes in those transactions (a key written many times between flushes counts once).", nil, nil),
		kvCommitTime: prometheus.NewDesc("hec_kv_commit_seconds_total", "Time the group committer spent in Badger's commit (write, and fsync in sync mode).", nil, nil),
		kvCacheHits:  prometheus.NewDesc("hec_kv_cache_hits_total", "Gets answered from the store's read cache.", nil, nil),
		kvCache:      prometheus.NewDesc("hec_kv_cache", "The store's read cache: entries and bytes held.", []string{"what"}, nil),
		peerUp:       prometheus.NewDesc("hec_peer_up", "1 while a peer is alive (not declared dead), by peer node id.", []string{"peer"}, nil),
		peerBytes:    prometheus.NewDesc("hec_peer_bytes_total", "Bytes of peer frames, by peer and direction.", []string{"peer", "dir"}, nil),
		peerFrames:   prometheus.NewDesc("hec_peer_frames_total", "Peer frames, by peer and direction.", []string{"peer", "dir"}, nil),
		peerRefused:  prometheus.NewDesc("hec_peer_refused_total", "Peer connections and frames refused, by reason (auth: wrong key, forged or replayed frame; frame: malformed; old_epoch: dropped; bound: over a limit on connections or transfers).", []string{"reason"}, nil),
		respClients:  prometheus.NewDesc("hec_resp_clients", "Connected RESP clients.", nil, nil),
		udpReqs:      prometheus.NewDesc("hec_udp_requests_total", "UDP GET datagrams, by outcome.", []string{"outcome"}, nil),
		xdpPackets:   prometheus.NewDesc("hec_xdp_packets_total", "Packets seen by the XDP program on the agent's interface, by class.", []string{"class"}, nil),
		xdpBytes:     prometheus.NewDesc("hec_xdp_bytes_total", "Bytes seen by the XDP program, by class.", []string{"class"}, nil),
		xdpVerdicts:  prometheus.NewDesc("hec_xdp_verdicts_total", "What the XDP program did with packets, by class and verdict (passed, answered, dropped_acl, dropped_malformed).", []string{"class", "verdict"}, nil),
		xdpHot:       prometheus.NewDesc("hec_xdp_hot_keys", "Keys held in the XDP hot-GET map, by state (held, served).", []string{"state"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ops, c.errs, c.qps, c.faults, c.fences, c.gen, c.services, c.kvOps, c.kvBytes, c.respClients, c.udpReqs,
		c.kvCommits, c.kvWrites, c.kvCacheHits, c.kvCache, c.kvCommitTime, c.kvFlushes, c.kvFlushed,
		c.peerUp, c.peerBytes, c.peerFrames, c.peerRefused, c.xdpPackets, c.xdpBytes, c.xdpVerdicts, c.xdpHot} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, o := range c.a.disp.OpCounts() {
		if o.Op != "rejected" {
			ch <- prometheus.MustNewConstMetric(c.ops, prometheus.CounterValue, float64(o.Count), o.Op)
		}
		ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(o.Errors), o.Op)
	}
	states := map[string]float64{"free": 0, "active": 0, "faulted": 0, "fenced": 0}
	var faults, fences uint64
	for _, q := range c.a.disp.QueuePairs() {
		states[q.State]++
		faults += q.Faults
		fences += q.Fences
	}
	for s, n := range states {
		ch <- prometheus.MustNewConstMetric(c.qps, prometheus.GaugeValue, n, s)
	}
	ch <- prometheus.MustNewConstMetric(c.faults, prometheus.CounterValue, float64(faults))
	ch <- prometheus.MustNewConstMetric(c.fences, prometheus.CounterValue, float64(fences))
	ch <- prometheus.MustNewConstMetric(c.gen, prometheus.GaugeValue, float64(c.a.Generation()))
	if st := c.a.store; st != nil {
		s := st.Stats()
		for kind, v := range map[string]uint64{"get": s.Gets, "put": s.Puts, "delete": s.Deletes, "scan": s.Scans, "miss": s.Misses} {
			ch <- prometheus.MustNewConstMetric(c.kvOps, prometheus.CounterValue, float64(v), kind)
		}
		ch <- prometheus.MustNewConstMetric(c.kvBytes, prometheus.GaugeValue, float64(s.LSMBytes), "lsm")
		ch <- prometheus.MustNewConstMetric(c.kvBytes, prometheus.GaugeValue, float64(s.VlogBytes), "vlog")
		ch <- prometheus.MustNewConstMetric(c.kvCommits, prometheus.CounterValue, float64(s.Commits))
		ch <- prometheus.MustNewConstMetric(c.kvWrites, prometheus.CounterValue, float64(s.Writes))
		ch <- prometheus.MustNewConstMetric(c.kvFlushes, prometheus.CounterValue, float64(s.Flushes))
		ch <- prometheus.MustNewConstMetric(c.kvFlushed, prometheus.CounterValue, float64(s.Flushed))
		ch <- prometheus.MustNewConstMetric(c.kvCommitTime, prometheus.CounterValue, s.CommitTime.Seconds())
		ch <- prometheus.MustNewConstMetric(c.kvCacheHits, prometheus.CounterValue, float64(s.CacheHits))
		ch <- prometheus.MustNewConstMetric(c.kvCache, prometheus.GaugeValue, float64(s.CacheEntries), "entries")
		ch <- prometheus.MustNewConstMetric(c.kvCache, prometheus.GaugeValue, float64(s.CacheBytes), "bytes")
	}
	if n := c.a.peers; n != nil {
		for _, p := range n.Peers() {
			id := strconv.FormatUint(uint64(p.ID), 10)
			up := 0.0
			if p.Alive {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(c.peerUp, prometheus.GaugeValue, up, id)
			ch <- prometheus.MustNewConstMetric(c.peerBytes, prometheus.CounterValue, float64(p.SentBytes), id, "sent")
			ch <- prometheus.MustNewConstMetric(c.peerBytes, prometheus.CounterValue, float64(p.RecvBytes), id, "received")
			ch <- prometheus.MustNewConstMetric(c.peerFrames, prometheus.CounterValue, float64(p.SentFrames), id, "sent")
			ch <- prometheus.MustNewConstMetric(c.peerFrames, prometheus.CounterValue, float64(p.RecvFrames), id, "received")
		}
		ch <- prometheus.MustNewConstMetric(c.peerRefused, prometheus.CounterValue, float64(n.AuthFailures.Load()), "auth")
		ch <- prometheus.MustNewConstMetric(c.peerRefused, prometheus.CounterValue, float64(n.BadFrames.Load()), "frame")
		ch <- prometheus.MustNewConstMetric(c.peerRefused, prometheus.CounterValue, float64(n.OldEpoch.Load()), "old_epoch")
		ch <- prometheus.MustNewConstMetric(c.peerRefused, prometheus.CounterValue, float64(n.Refused.Load()), "bound")
	}
	if r := c.a.resp; r != nil {
		ch <- prometheus.MustNewConstMetric(c.respClients, prometheus.GaugeValue, float64(r.Clients()))
	}
	if u := c.a.udp; u != nil {
		ch <- prometheus.MustNewConstMetric(c.udpReqs, prometheus.CounterValue, float64(u.Hits.Load()), "hit")
		ch <- prometheus.MustNewConstMetric(c.udpReqs, prometheus.CounterValue, float64(u.Misses.Load()), "miss")
		ch <- prometheus.MustNewConstMetric(c.udpReqs, prometheus.CounterValue, float64(u.Errors.Load()), "error")
	}
	if x := c.a.xdp; x != nil {
		if st, err := x.status(0); err == nil {
			for _, cl := range st.Classes {
				ch <- prometheus.MustNewConstMetric(c.xdpPackets, prometheus.CounterValue, float64(cl.Packets), cl.Class)
				ch <- prometheus.MustNewConstMetric(c.xdpBytes, prometheus.CounterValue, float64(cl.Bytes), cl.Class)
				ch <- prometheus.MustNewConstMetric(c.xdpVerdicts, prometheus.CounterValue, float64(cl.Passed), cl.Class, "passed")
				ch <- prometheus.MustNewConstMetric(c.xdpVerdicts, prometheus.CounterValue, float64(cl.Answered), cl.Class, "answered")
				for r, n := range cl.Dropped {
					ch <- prometheus.MustNewConstMetric(c.xdpVerdicts, prometheus.CounterValue, float64(n), cl.Class, "dropped_"+r)
				}
			}
			if st.Hot != nil {
				ch <- prometheus.MustNewConstMetric(c.xdpHot, prometheus.GaugeValue, float64(st.Hot.Held), "held")
				ch <- prometheus.MustNewConstMetric(c.xdpHot, prometheus.GaugeValue, float64(st.Hot.Served), "served")
			}
		}
	}
	for _, s := range c.a.Services() {
		v := 0.0
		if s.Served {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.services, prometheus.GaugeValue, v, s.Name)
	}
}
