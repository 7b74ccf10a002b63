package dpu

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/kv"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/mono"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// KVConfig is the kv store's section ([kv]).
type KVConfig struct {
	// Durability is "sync" (default: a write is acknowledged once on
	// disk, concurrent writes sharing fsyncs) or "async" (acknowledged in
	// memory; a crash may lose the last writes).
	Durability string `toml:"durability"`
}

func (c *KVConfig) withDefaults() error {
	defString(&c.Durability, "sync")
	return nil
}

func (c *KVConfig) validate() error {
	if _, err := kv.ParseDurability(c.Durability); err != nil {
		return fmt.Errorf("--durability %q: want sync or async: %w", c.Durability, ErrConfig)
	}
	return nil
}

func (c *KVConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Durability, "durability", c.Durability, "kv writes acknowledged once on disk (sync) or in memory (async)")
}

// kvService is the Badger-backed store in STATE_DIR/kv and its ops over
// the handoff. The store is Shared for the front ends (RESP, UDP GET) and
// the XDP fast path; every write calls Shared.Written.
type kvService struct {
	cfg   KVConfig
	store *kv.Store
	dir   string
}

func newKVService(cfg KVConfig) *kvService { return &kvService{cfg: cfg} }

func (s *kvService) Name() string { return "kv" }

func (s *kvService) Open(_ context.Context, env *Env) error {
	dur, _ := kv.ParseDurability(s.cfg.Durability)
	s.dir = filepath.Join(env.StateDir, "kv")
	st, err := kv.Open(s.dir, kv.WithDurability(dur), kv.WithLogger(env.Log), kv.WithWriteHook(env.Shared.Written),
		kv.WithFailHook(env.Fail), kv.WithOpenOnFirstUse())
	if err != nil {
		return fmt.Errorf("--state-dir %s: %w", env.StateDir, err)
	}
	s.store = st
	env.Shared.Store = st
	registerKVOps(env.Dispatcher, st)
	env.Metrics.MustRegister(newKVCollector(st))
	return nil
}

func (s *kvService) Start(context.Context, *Env) error { return nil }

func (s *kvService) Stop() {
	if s.store != nil {
		s.store.Close()
	}
}

func (s *kvService) Status() api.Service {
	if s.store == nil {
		return api.Service{Name: "kv", Addr: s.dir}
	}
	st := api.Service{Name: "kv", Addr: s.dir, Served: true, Note: "badger, " + s.store.Durability().String() + " durability"}
	if ls := s.store.LogSync(); ls != "" {
		st.Note += ", log synced by " + ls
	}
	if err := s.store.WriteErr(); err != nil {
		st.Note += "; " + err.Error()
	}
	return st
}

// kvCollector exports the store's counters.
type kvCollector struct {
	st *kv.Store

	ops, bytes, commits, writes, flushes, flushed, commitTime, cacheHits, cache *prometheus.Desc
	checkpoints, refused, refusals, free                                        *prometheus.Desc
}

func newKVCollector(st *kv.Store) *kvCollector {
	return &kvCollector{
		st:          st,
		ops:         prometheus.NewDesc("hec_kv_ops_total", "Key-value store operations, all front ends together.", []string{"kind"}, nil),
		bytes:       prometheus.NewDesc("hec_kv_disk_bytes", "Key-value store size on disk.", []string{"part"}, nil),
		commits:     prometheus.NewDesc("hec_kv_commits_total", "Durable rounds of the store's group committer: log syncs in sync mode, Badger transactions in async mode.", nil, nil),
		writes:      prometheus.NewDesc("hec_kv_grouped_writes_total", "Writes in those rounds; writes/commits is the mean group size.", nil, nil),
		flushes:     prometheus.NewDesc("hec_kv_flushes_total", "Badger transactions writing SETs acknowledged from the cache.", nil, nil),
		flushed:     prometheus.NewDesc("hec_kv_flushed_writes_total", "Writes in those transactions (a key written many times between flushes counts once).", nil, nil),
		commitTime:  prometheus.NewDesc("hec_kv_commit_seconds_total", "Time the group committer spent in Badger's commit (write, and fsync in sync mode).", nil, nil),
		cacheHits:   prometheus.NewDesc("hec_kv_cache_hits_total", "Gets answered from the store's read cache.", nil, nil),
		cache:       prometheus.NewDesc("hec_kv_cache", "The store's read cache: entries and bytes held.", []string{"what"}, nil),
		checkpoints: prometheus.NewDesc("hec_kv_checkpoints_total", "The store's log started over once Badger held, synced, everything in it.", nil, nil),
		refused: prometheus.NewDesc("hec_kv_writes_refused", "1 while the store refuses writes, by reason: disk_full (resumes once space returns) or failed_sync (until the agent restarts).",
			[]string{"reason"}, nil),
		refusals: prometheus.NewDesc("hec_kv_disk_full_refusals_total", "Writes refused because the store's disk was too full.", nil, nil),
		free:     prometheus.NewDesc("hec_kv_disk_free_bytes", "Free space on the store's file system (last read), and what the store keeps free.", []string{"what"}, nil),
	}
}

func (c *kvCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ops, c.bytes, c.commits, c.writes, c.flushes, c.flushed, c.commitTime, c.cacheHits, c.cache,
		c.checkpoints, c.refused, c.refusals, c.free} {
		ch <- d
	}
}

func (c *kvCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.st.Stats()
	for kind, v := range map[string]uint64{"get": s.Gets, "put": s.Puts, "delete": s.Deletes, "scan": s.Scans, "miss": s.Misses} {
		ch <- prometheus.MustNewConstMetric(c.ops, prometheus.CounterValue, float64(v), kind)
	}
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.LSMBytes), "lsm")
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.VlogBytes), "vlog")
	ch <- prometheus.MustNewConstMetric(c.commits, prometheus.CounterValue, float64(s.Commits))
	ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(s.Writes))
	ch <- prometheus.MustNewConstMetric(c.flushes, prometheus.CounterValue, float64(s.Flushes))
	ch <- prometheus.MustNewConstMetric(c.flushed, prometheus.CounterValue, float64(s.Flushed))
	ch <- prometheus.MustNewConstMetric(c.commitTime, prometheus.CounterValue, s.CommitTime.Seconds())
	ch <- prometheus.MustNewConstMetric(c.cacheHits, prometheus.CounterValue, float64(s.CacheHits))
	ch <- prometheus.MustNewConstMetric(c.cache, prometheus.GaugeValue, float64(s.CacheEntries), "entries")
	ch <- prometheus.MustNewConstMetric(c.cache, prometheus.GaugeValue, float64(s.CacheBytes), "bytes")
	ch <- prometheus.MustNewConstMetric(c.checkpoints, prometheus.CounterValue, float64(s.Checkpoints))
	err := c.st.WriteErr()
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, b2f(errors.Is(err, kv.ErrDiskFull)), "disk_full")
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, b2f(errors.Is(err, kv.ErrWritesRefused)), "failed_sync")
	ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(s.Refusals))
	if s.DiskReserve > 0 {
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(s.DiskFree), "free")
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(s.DiskReserve), "reserve")
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// registerKVOps serves the kv ops of the handoff from st. Keys and values
// are read from, and values written into, the queue pair's window (or the
// frame's payload) through the accessor: in place when it is mapped.
func registerKVOps(d *Dispatcher, st *kv.Store) {
	// Each op holds the store's gate shared, so no op runs between the
	// commands of a RESP EXEC (which holds it alone).
	handle := func(op wire.Op, h Handler) {
		serve := h.Serve
		h.Serve = func(ctx context.Context, req *Request, resp *wire.Desc) {
			g := st.Gate()
			g.RLock()
			defer g.RUnlock()
			serve(ctx, req, resp)
		}
		d.Handle(op, h)
	}
	handle(wire.OpKVGet, Handler{Serve: func(_ context.Context, req *Request, resp *wire.Desc) {
		in, ok := spanArgs(req, resp, 2, 1)
		if !ok {
			return
		}
		e, err := st.Get(in[0], nil)
		if err != nil {
			resp.Status = kvStatus(err)
			return
		}
		out := req.Spans[1]
		resp.Arg0, resp.Arg1 = uint64(len(e.Value)), e.Version
		if uint64(len(e.Value)) > uint64(out.Len) {
			resp.Status = wire.StatusTooLarge
			return
		}
		if err := req.Mem.WriteAt(e.Value, uint64(out.Off)); err != nil {
			resp.Status = wire.StatusBadSpan
			return
		}
		resp.NSpan = 1
		resp.Spans[0] = wire.Span{Off: out.Off, Len: uint32(len(e.Value))}
	}})
	handle(wire.OpKVPut, Handler{Serve: func(_ context.Context, req *Request, resp *wire.Desc) {
		if req.Arg1&^(wire.KVIfAbsent|wire.KVIfPresent) != 0 || req.Arg0 > maxTTLMillis {
			resp.Status = wire.StatusBadArg
			return
		}
		in, ok := spanArgs(req, resp, 2, 2)
		if !ok {
			return
		}
		var t0 time.Time
		if req.Tracing() {
			t0 = mono.Now()
		}
		_, err := st.Put(in[0], in[1], kv.PutOptions{TTL: time.Duration(req.Arg0) * time.Millisecond,
			IfAbsent: req.Arg1&wire.KVIfAbsent != 0, IfPresent: req.Arg1&wire.KVIfPresent != 0})
		if !t0.IsZero() {
			req.Stage(trace.StageCommit, t0, mono.Now()) // the store's write, its group commit included
		}
		resp.Status = kvStatus(err)
	}})
	handle(wire.OpKVDelete, Handler{Serve: func(_ context.Context, req *Request, resp *wire.Desc) {
		in, ok := spanArgs(req, resp, 1, 1)
		if !ok {
			return
		}
		n, err := st.Delete(in[0])
		resp.Status, resp.Arg0 = kvStatus(err), uint64(n)
	}})
	handle(wire.OpKVScan, Handler{Serve: func(_ context.Context, req *Request, resp *wire.Desc) {
		if req.Arg0 == 0 || req.Arg0 > 100000 {
			resp.Status = wire.StatusBadArg
			return
		}
		in, ok := spanArgs(req, resp, 3, 2)
		if !ok {
			return
		}
		prefix, cursor := in[0], in[1]
		if len(cursor) == 0 {
			cursor = nil
		}
		page, next, err := st.Scan(prefix, cursor, int(req.Arg0), false)
		if err != nil {
			resp.Status = kvStatus(err)
			return
		}
		room := req.Spans[2]
		var buf []byte
		n := 0
		var cut *kv.KV // the first that did not fit
		for i, p := range page {
			if p.Kind != kv.KindString {
				continue // the handoff serves strings; RESP's typed values are RESP's
			}
			rec := 8 + len(p.Key) + len(p.Value)
			if uint64(len(buf)+rec+len(p.Key)) > uint64(room.Len) {
				next, cut = p.Key, &page[i] // the rest does not fit: continue from here
				break
			}
			buf = binary.LittleEndian.AppendUint32(buf, uint32(len(p.Key)))
			buf = binary.LittleEndian.AppendUint32(buf, uint32(len(p.Value)))
			buf = append(buf, p.Key...)
			buf = append(buf, p.Value...)
			n++
		}
		if n == 0 && cut != nil {
			resp.Status, resp.Arg0 = wire.StatusTooLarge, uint64(8+len(cut.Key)*2+len(cut.Value))
			return
		}
		recs := len(buf)
		buf = append(buf, next...)
		if uint64(len(buf)) > uint64(room.Len) {
			resp.Status = wire.StatusTooLarge
			return
		}
		if err := req.Mem.WriteAt(buf, uint64(room.Off)); err != nil {
			resp.Status = wire.StatusBadSpan
			return
		}
		resp.Arg0 = uint64(n)
		resp.NSpan = 2
		resp.Spans[0] = wire.Span{Off: room.Off, Len: uint32(recs)}
		resp.Spans[1] = wire.Span{Off: room.Off + uint32(recs), Len: uint32(len(next))}
	}})
	handle(wire.OpKVBatch, Handler{Serve: func(_ context.Context, req *Request, resp *wire.Desc) {
		in, ok := spanArgs(req, resp, 1, 1)
		if !ok {
			return
		}
		ops, err := DecodeKVBatch(in[0])
		if err != nil {
			resp.Status = wire.StatusBadArg
			return
		}
		resp.Status, resp.Arg0 = kvStatus(st.Batch(ops)), uint64(len(ops))
	}})
}

// spanArgs checks that req names exactly n spans and returns the bytes of
// the first k of them (inputs); on failure it sets resp's status.
func spanArgs(req *Request, resp *wire.Desc, n, k int) ([][]byte, bool) {
	if int(req.NSpan) != n {
		resp.Status = wire.StatusBadArg
		return nil, false
	}
	in := make([][]byte, k)
	for i := range in {
		b, err := ring.Bytes(req.Mem, req.Spans[i], nil)
		if err != nil {
			resp.Status = wire.StatusBadSpan
			return nil, false
		}
		in[i] = b
	}
	return in, true
}

// maxTTLMillis bounds a TTL over the handoff (100 years): larger ones are
// refused, not wrapped around.
const maxTTLMillis = uint64(100 * 365 * 24 * time.Hour / time.Millisecond)

// ErrBatch is returned by DecodeKVBatch for malformed records.
var ErrBatch = errors.New("dpu: malformed kv batch")

// DecodeKVBatch decodes OpKVBatch records. The ops alias b.
func DecodeKVBatch(b []byte) ([]kv.Op, error) {
	var ops []kv.Op
	for len(b) > 0 {
		if len(b) < 17 || b[0] > 1 || len(ops) >= 1<<16 {
			return nil, ErrBatch
		}
		kl, vl := uint64(binary.LittleEndian.Uint32(b[1:])), uint64(binary.LittleEndian.Uint32(b[5:]))
		ttl := binary.LittleEndian.Uint64(b[9:])
		if kl+vl > uint64(len(b)-17) || ttl > maxTTLMillis {
			return nil, ErrBatch
		}
		op := kv.Op{Delete: b[0] == 1, Key: b[17 : 17+kl], Value: b[17+kl : 17+kl+vl], TTL: time.Duration(ttl) * time.Millisecond}
		ops = append(ops, op)
		b = b[17+kl+vl:]
	}
	return ops, nil
}

func kvStatus(err error) wire.Status {
	switch {
	case err == nil:
		return wire.StatusOK
	case errors.Is(err, kv.ErrNotFound):
		return wire.StatusNotFound
	case errors.Is(err, kv.ErrExists):
		return wire.StatusExists
	case errors.Is(err, kv.ErrMismatch):
		return wire.StatusMismatch
	case errors.Is(err, kv.ErrKeySize), errors.Is(err, kv.ErrNotNumber), errors.Is(err, kv.ErrOverflow),
		errors.Is(err, kv.ErrWrongType): // a key the RESP front end made a list, set, hash or sorted set
		return wire.StatusBadArg
	case errors.Is(err, kv.ErrValueSize):
		return wire.StatusTooLarge
	case errors.Is(err, kv.ErrClosed):
		return wire.StatusUnavailable
	case errors.Is(err, kv.ErrDiskFull):
		return wire.StatusNoSpace
	case errors.Is(err, kv.ErrWritesRefused):
		return wire.StatusReadOnly
	}
	return wire.StatusInternal
}
