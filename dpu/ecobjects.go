package dpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/ec/object"
	"github.com/hecsys/hec/shared/peer"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// Bounds on what hosts and peers can make the object service hold.
const (
	maxPuts        = 64              // Puts under way at once
	putIdle        = time.Minute     // a Put not written to for this long is aborted
	maxReaders     = 8               // objects being read, each with its stripes
	maxPeerServing = 32              // peer requests served at once
	readerIdle     = 5 * time.Second // a reader not read for this long is opened again: what it knew of the stores is old
	objectsDir     = "objects"       // under the state directory
	defaultMaxObj  = "4GiB"
)

// parseCode reads "K+M".
func parseCode(s string) (k, m int, err error) {
	a, b, ok := strings.Cut(s, "+")
	k, err1 := strconv.Atoi(strings.TrimSpace(a))
	m, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q: want K+M, as 4+2", s)
	}
	return k, m, ec.CheckCounts(k, m)
}

// objects is the ec service's share of erasure-coded objects across
// agents: this agent's shard store, served to peers over the peer layer
// and to the host's client-side coder (OpECShard), and a coordinator
// that codes, places and reads objects for the host (the OpECPut… ops).
type objects struct {
	node  *peer.Node
	store *object.Store
	coord *object.Coordinator
	self  uint32
	log   interface {
		Warn(string, ...any)
		Info(string, ...any)
	}

	mu      sync.Mutex
	puts    map[uint64]*putSession
	readers map[string]*objReader

	serving   chan struct{}
	degraded  prometheus.Gauge
	repaired  prometheus.Counter
	objBytes  *prometheus.CounterVec
	lastScrub atomic.Pointer[scrubReport]
	trace     *trace.Recorder // the agent's: what records the ops' peer messages
}

type putSession struct {
	mu   sync.Mutex
	w    *object.Writer
	next int64
	last time.Time
	// moved is closed (and replaced) whenever next moves: a host keeps
	// two data ops in flight, and the second may be served first.
	moved chan struct{}
}

// turn waits, up to a second, until the Put's next byte is at off,
// and returns holding p.mu; false (not holding it) when it will not be.
func (p *putSession) turn(ctx context.Context, off uint64) bool {
	timeout := time.NewTimer(time.Second)
	defer timeout.Stop()
	for {
		p.mu.Lock()
		if uint64(p.next) == off {
			return true
		}
		moved, past := p.moved, off < uint64(p.next)
		p.mu.Unlock()
		if past {
			return false
		}
		select {
		case <-moved:
		case <-timeout.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

type scrubReport struct {
	At       time.Time             `json:"at"`
	Led      int                   `json:"led"`
	Degraded int                   `json:"degraded"`
	Corrupt  int                   `json:"corrupt_found"`
	Repairs  []object.RepairResult `json:"repairs,omitempty"`
}

// peerTransport carries a coordinator's messages: to this agent's store
// directly, to the others' over the peer layer. A message of a traced op
// (withTracedOp) is recorded, while the agent records, as a call to its
// node (trace.StageCall) under the op's id, which goes with it to the
// peer (peer.CallTraced).
type peerTransport struct {
	node  *peer.Node
	store *object.Store
}

func (t peerTransport) Members() []uint32 { return t.node.Members() }

func (t peerTransport) Call(ctx context.Context, node uint32, req []byte) (b []byte, err error) {
	if op := tracedOpOf(ctx); op != nil {
		defer op.record(trace.StageCall, node, req, time.Now(), &b, &err)
		if node != t.node.ID() {
			return t.node.CallTraced(ctx, node, op.id, req)
		}
	}
	if node == t.node.ID() {
		return t.store.Serve(ctx, req), nil
	}
	return t.node.Call(ctx, node, req)
}

// tracedOp is the host op that an object's messages to the agents
// holding its shards belong to, while the agent records: a get's own, a
// put's begin (a put's writes go on across its data ops).
type tracedOp struct {
	id  string
	rec *trace.Recorder
}

type tracedOpKey struct{}

// withTracedOp is ctx carrying req's op for the calls made under it,
// while the agent records (nothing otherwise).
func withTracedOp(ctx context.Context, req *Request) context.Context {
	if !req.Tracing() {
		return ctx
	}
	return context.WithValue(ctx, tracedOpKey{}, &tracedOp{id: req.TraceID(), rec: req.disp.trace})
}

// tracedOpOf is the op ctx carries, nil when none or when the agent no
// longer records.
func tracedOpOf(ctx context.Context) *tracedOp {
	op, _ := ctx.Value(tracedOpKey{}).(*tracedOp)
	if op == nil || !op.rec.On() {
		return nil
	}
	return op
}

// record adds the span of a message req to or from node (its kind names
// it: "shard write"), from t0 to now; reply and err are its outcome.
func (op *tracedOp) record(stage string, node uint32, req []byte, t0 time.Time, reply *[]byte, err *error) {
	s := trace.Span{ID: op.id, Name: "shard", Stage: stage, Start: t0.UnixNano(), Dur: int64(time.Since(t0)),
		Bytes: int64(len(req) + len(*reply)), Peer: "node " + strconv.FormatUint(uint64(node), 10)}
	if len(req) > 0 {
		s.Name += " " + object.Kind(req[0]).String()
	}
	if *err != nil {
		s.Status = "failed"
	}
	op.rec.Add(s)
}

// openObjects opens the shard store and, when the peer layer is up, the
// coordinator; it registers the ops either way (they say why they cannot
// serve).
func (s *ecService) openObjects(env *Env) error {
	var node *peer.Node
	if env.Shared != nil {
		node = env.Shared.Peer
	}
	o := &objects{node: node, log: env.Log, puts: map[uint64]*putSession{}, readers: map[string]*objReader{},
		serving: make(chan struct{}, maxPeerServing), trace: env.Dispatcher.Trace()}
	o.degraded = prometheus.NewGauge(prometheus.GaugeOpts{Name: "hec_ec_objects_degraded",
		Help: "Objects this agent leads (the lowest id holding a shard) found below full redundancy by its last scrub."})
	o.repaired = prometheus.NewCounter(prometheus.CounterOpts{Name: "hec_ec_shards_repaired_total",
		Help: "Shards this agent rebuilt or re-committed on others (repairs and scrubs)."})
	o.objBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hec_ec_object_bytes_total",
		Help: "Object bytes the agent coded and placed (put) or read and decoded (get) for hosts."}, []string{"op"})
	env.Metrics.MustRegister(o.degraded, o.repaired, o.objBytes)
	s.obj = o
	if o.node != nil {
		o.self = o.node.ID()
		maxObj, _ := humanize.ParseBytes(s.cfg.MaxObject)
		st, err := object.OpenStore(object.StoreConfig{Dir: filepath.Join(env.StateDir, objectsDir), Node: o.self,
			MaxSize: int64(maxObj), Log: env.Log})
		if err != nil {
			return fmt.Errorf("--state-dir %s: %w", env.StateDir, err)
		}
		k, m, _ := parseCode(s.cfg.Code)
		coord, err := object.NewCoordinator(peerTransport{o.node, st}, object.Config{K: k, M: m, Quorum: s.cfg.Quorum,
			Node: o.self, MaxSize: int64(maxObj), Coder: s.opts})
		if err != nil {
			return fmt.Errorf("--ec-quorum %d with --ec-code %s: %v: %w", s.cfg.Quorum, s.cfg.Code, err, ErrConfig)
		}
		o.store, o.coord = st, coord
		o.node.Handle(peer.TypeRequest, o.servePeer)
	}
	d := env.Dispatcher
	d.Handle(wire.OpECPutBegin, Handler{Inline: true, Serve: o.servePutBegin})
	d.Handle(wire.OpECPutData, Handler{Detached: true, Serve: o.servePutData})
	d.Handle(wire.OpECPutEnd, Handler{Detached: true, Serve: o.servePutEnd})
	d.Handle(wire.OpECGet, Handler{Detached: true, Serve: o.serveGet})
	d.Handle(wire.OpECStat, Handler{Detached: true, Serve: o.serveStat})
	d.Handle(wire.OpECDelete, Handler{Detached: true, Serve: o.serveDelete})
	d.Handle(wire.OpECList, Handler{Detached: true, Serve: o.serveList})
	d.Handle(wire.OpECShard, Handler{Serve: o.serveShard})
	if env.Mux != nil {
		o.routes(env.Mux)
	}
	return nil
}

// errNoPeers is the reason every object op gives on an agent without the
// peer layer.
var errNoPeers = errors.New("erasure-coded objects live across agents: this agent serves no peer layer (hecd --peer ADDR --node-id N --cluster-key-file F)")

// servePeer answers a peer's request on a goroutine of its own (at most
// maxPeerServing at once: beyond that the peer's connection waits), so
// that the connection goes on reading.
//
// A request of a traced op (peer.Traced) is recorded, while this agent
// records too, as handled for that node (trace.StageHandle) under the
// op's id; a malformed one goes to the store as it is, which refuses it.
func (o *objects) servePeer(from uint32, h peer.Header, payload []byte) {
	var op *tracedOp
	if id, rest, err := peer.Traced(h, payload); err == nil && id != "" {
		payload = rest
		if o.trace.On() {
			op = &tracedOp{id: id, rec: o.trace}
		}
	}
	req := append(object.Buffer(len(payload))[:0], payload...)
	o.serving <- struct{}{}
	go func() {
		defer func() { <-o.serving }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var t0 time.Time
		if op != nil {
			t0 = time.Now()
		}
		out := o.store.ServeAppend(ctx, req, object.Buffer(0)[:0])
		if op != nil {
			var err error
			op.record(trace.StageHandle, from, req, t0, &out, &err)
		}
		object.Release(req)
		o.node.Reply(ctx, from, h, out)
		object.Release(out)
	}()
}

// run scrubs every interval (jittered, so that agents do not all scrub
// at once) until ctx ends.
func (o *objects) run(ctx context.Context, every time.Duration) {
	if o.coord == nil || every <= 0 {
		return
	}
	for {
		d := every/2 + time.Duration(rand.Int64N(int64(every)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		o.expire()
		o.scrub(ctx)
	}
}

// scrub verifies this agent's shards, then repairs the names it leads.
func (o *objects) scrub(ctx context.Context) *scrubReport {
	rep := &scrubReport{At: time.Now()}
	if o.coord == nil {
		return rep
	}
	rep.Corrupt = len(o.store.Verify(ctx))
	for _, name := range o.store.Names() {
		led, degraded, res, err := o.coord.Scrub(ctx, name, o.self)
		if err != nil {
			o.log.Warn("ec scrub", "object", name, "err", err)
			continue
		}
		if led {
			rep.Led++
		}
		if degraded {
			rep.Degraded++
			rep.Repairs = append(rep.Repairs, res)
			o.repaired.Add(float64(len(res.Rebuilt) + len(res.Commits)))
		}
	}
	o.degraded.Set(float64(rep.Degraded))
	o.lastScrub.Store(rep)
	return rep
}

// expire aborts Puts and drops readers left idle.
func (o *objects) expire() {
	o.mu.Lock()
	var stale []*putSession
	for h, p := range o.puts {
		if time.Since(p.last) > putIdle {
			stale = append(stale, p)
			delete(o.puts, h)
		}
	}
	for k, r := range o.readers {
		if time.Since(r.last.Load().(time.Time)) > readerIdle {
			delete(o.readers, k)
		}
	}
	o.mu.Unlock()
	for _, p := range stale {
		p.mu.Lock()
		p.w.Abort()
		p.mu.Unlock()
	}
}

// fail completes resp with the status of err and, when the request's last
// span is room, its text.
func fail(req *Request, resp *wire.Desc, err error) { failWith(req, resp, objectStatus(err), err) }

// failWith completes resp with status and, when the request's last span
// is room, err's text (Arg1 its length).
func failWith(req *Request, resp *wire.Desc, status wire.Status, err error) {
	resp.Status = status
	if req.NSpan == 0 {
		return
	}
	room := req.Spans[req.NSpan-1]
	msg := []byte(err.Error())
	msg = msg[:min(len(msg), int(room.Len))]
	if len(msg) > 0 && req.Mem.WriteAt(msg, uint64(room.Off)) == nil {
		resp.Arg1 = uint64(len(msg))
		resp.NSpan = 1
		resp.Spans[0] = wire.Span{Off: room.Off, Len: uint32(len(msg))}
	}
}

func objectStatus(err error) wire.Status {
	switch {
	case err == nil:
		return wire.StatusOK
	case errors.Is(err, errNoPeers):
		return wire.StatusUnsupported
	case errors.Is(err, object.ErrNotFound):
		return wire.StatusNotFound
	case errors.Is(err, object.ErrTooLarge):
		return wire.StatusTooLarge
	case errors.Is(err, object.ErrName), errors.Is(err, object.ErrBadMeta), errors.Is(err, object.ErrShard), errors.Is(err, ec.ErrShardCount),
		errors.Is(err, object.ErrMembers):
		return wire.StatusBadArg
	case errors.Is(err, object.ErrQuorum), errors.Is(err, object.ErrUnread), errors.Is(err, object.ErrCorrupt):
		return wire.StatusUnavailable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return wire.StatusTimeout
	}
	return wire.StatusInternal
}

// spanIn reads span i of req.
func spanIn(req *Request, i int) ([]byte, error) {
	if int(req.NSpan) <= i {
		return nil, fmt.Errorf("%w: span %d of %d", object.ErrShard, i, req.NSpan)
	}
	return ring.Bytes(req.Mem, req.Spans[i], nil)
}

// spanJSON writes v's JSON into the room span i (spanOut).
func spanJSON(req *Request, resp *wire.Desc, i int, v any) {
	b, _ := json.Marshal(v)
	spanOut(req, resp, i, b)
}

// spanOut writes b into the room span i and completes with it (Arg0 its
// length), or with StatusTooLarge and the room needed.
func spanOut(req *Request, resp *wire.Desc, i int, b []byte) {
	room := req.Spans[i]
	if uint64(len(b)) > uint64(room.Len) {
		resp.Status, resp.Arg0 = wire.StatusTooLarge, uint64(len(b))
		return
	}
	if err := req.Mem.WriteAt(b, uint64(room.Off)); err != nil {
		resp.Status = wire.StatusBadSpan
		return
	}
	resp.Arg0, resp.NSpan = uint64(len(b)), 1
	resp.Spans[0] = wire.Span{Off: room.Off, Len: uint32(len(b))}
}

func (o *objects) servePutBegin(ctx context.Context, req *Request, resp *wire.Desc) {
	if o.coord == nil {
		fail(req, resp, errNoPeers)
		return
	}
	name, err := spanIn(req, 0)
	if err != nil || req.NSpan != 1 || req.Arg0 > 1<<62 {
		resp.Status = wire.StatusBadArg
		return
	}
	k, m := 0, 0
	if req.Arg1 != 0 {
		var ok bool
		if k, m, ok = wire.ECShardsOf(req.Arg1); !ok {
			resp.Status = wire.StatusBadArg
			return
		}
	}
	o.mu.Lock()
	n := len(o.puts)
	o.mu.Unlock()
	if n >= maxPuts {
		o.expire()
		resp.Status = wire.StatusBusy
		return
	}
	// Placing and preparing go on in the background: Begin itself does
	// not wait on the network.
	w, err := o.coord.Create(context.WithoutCancel(withTracedOp(ctx, req)), string(name), int64(req.Arg0), k, m)
	if err != nil {
		resp.Status = objectStatus(err)
		return
	}
	h := rand.Uint64() | 1
	o.mu.Lock()
	o.puts[h] = &putSession{w: w, last: time.Now(), moved: make(chan struct{})}
	o.mu.Unlock()
	resp.Arg0 = h
}

func (o *objects) put(h uint64) *putSession {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.puts[h]
}

func (o *objects) servePutData(ctx context.Context, req *Request, resp *wire.Desc) {
	p := o.put(req.Arg0)
	if p == nil {
		resp.Status = wire.StatusNotFound
		return
	}
	if req.NSpan != 1 || !p.turn(ctx, req.Arg1) {
		resp.Status = wire.StatusBadArg
		return
	}
	defer p.mu.Unlock()
	b, err := ring.Bytes(req.Mem, req.Spans[0], nil)
	if err != nil {
		resp.Status = wire.StatusBadSpan
		return
	}
	if _, err := p.w.Write(b); err != nil {
		resp.Status = objectStatus(err)
		return
	}
	p.next += int64(len(b))
	p.last = time.Now()
	close(p.moved)
	p.moved = make(chan struct{})
	o.objBytes.WithLabelValues("put").Add(float64(len(b)))
}

func (o *objects) servePutEnd(_ context.Context, req *Request, resp *wire.Desc) {
	o.mu.Lock()
	p := o.puts[req.Arg0]
	delete(o.puts, req.Arg0)
	o.mu.Unlock()
	if p == nil {
		resp.Status = wire.StatusNotFound
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if req.Arg1 == 1 {
		p.w.Abort()
		return
	}
	h, err := p.w.Close()
	if err != nil {
		fail(req, resp, err)
		return
	}
	if req.NSpan == 1 && req.Spans[0].Len >= uint32(len(h.Version)) { // committed either way
		spanOut(req, resp, 0, []byte(h.Version))
	}
}

// jsonOp serves an op of a name (or prefix) in Spans[0] whose answer is
// JSON in the room of Spans[1].
func (o *objects) jsonOp(answer func(ctx context.Context, arg string) (any, error)) func(context.Context, *Request, *wire.Desc) {
	return func(ctx context.Context, req *Request, resp *wire.Desc) {
		if o.coord == nil {
			fail(req, resp, errNoPeers)
			return
		}
		arg, err := spanIn(req, 0)
		if err != nil || req.NSpan != 2 {
			resp.Status = wire.StatusBadArg
			return
		}
		v, err := answer(withTracedOp(ctx, req), string(arg))
		if err != nil {
			fail(req, resp, err)
			return
		}
		spanJSON(req, resp, 1, v)
	}
}

func (o *objects) serveStat(ctx context.Context, req *Request, resp *wire.Desc) {
	o.jsonOp(func(ctx context.Context, name string) (any, error) { return o.coord.Stat(ctx, name) })(ctx, req, resp)
}

func (o *objects) serveList(ctx context.Context, req *Request, resp *wire.Desc) {
	o.jsonOp(func(ctx context.Context, prefix string) (any, error) { return o.coord.List(ctx, prefix) })(ctx, req, resp)
}

func (o *objects) serveDelete(ctx context.Context, req *Request, resp *wire.Desc) {
	if o.coord == nil {
		fail(req, resp, errNoPeers)
		return
	}
	name, err := spanIn(req, 0)
	if err != nil || req.NSpan < 1 {
		resp.Status = wire.StatusBadArg
		return
	}
	if err := o.coord.Delete(withTracedOp(ctx, req), string(name)); err != nil {
		fail(req, resp, err)
	}
}

func (o *objects) serveShard(ctx context.Context, req *Request, resp *wire.Desc) {
	if o.store == nil {
		resp.Status = wire.StatusUnsupported
		return
	}
	in, err := spanIn(req, 0)
	if err != nil || req.NSpan != 2 {
		resp.Status = wire.StatusBadArg
		return
	}
	spanOut(req, resp, 1, o.store.Serve(ctx, in))
}

// objReader is an object version being read by offsets: its stripes are
// decoded once, the next one ahead of the reader.
type objReader struct {
	r    *object.Reader
	h    object.Header
	last atomic.Value // time.Time

	mu      sync.Mutex
	stripes map[int]*stripeRead
}

type stripeRead struct {
	done chan struct{}
	data []byte
	err  error
}

// stripe is stripe s, read now unless under way; the next one is read
// ahead. ctx's traced op (withTracedOp), if any, is what reads them.
func (r *objReader) stripe(ctx context.Context, s int) *stripeRead {
	op, _ := ctx.Value(tracedOpKey{}).(*tracedOp)
	r.mu.Lock()
	defer r.mu.Unlock()
	get := func(s int) *stripeRead {
		if sr, ok := r.stripes[s]; ok {
			return sr
		}
		sr := &stripeRead{done: make(chan struct{})}
		r.stripes[s] = sr
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if op != nil {
				ctx = context.WithValue(ctx, tracedOpKey{}, op)
			}
			sr.data, sr.err = r.r.Stripe(ctx, s)
			close(sr.done)
		}()
		return sr
	}
	for k := range r.stripes {
		if k < s-1 || k > s+1 {
			delete(r.stripes, k)
		}
	}
	sr := get(s)
	if s+1 < r.h.Stripes() {
		get(s + 1)
	}
	return sr
}

func readerKey(name string, v object.Version) string { return name + "\x00" + string(v) }

func (o *objects) reader(ctx context.Context, name string, v object.Version) (*objReader, error) {
	key := readerKey(name, v)
	o.mu.Lock()
	r := o.readers[key]
	o.mu.Unlock()
	if r != nil && time.Since(r.last.Load().(time.Time)) < readerIdle {
		r.last.Store(time.Now())
		return r, nil
	}
	or, err := o.coord.Open(ctx, name, v)
	if err != nil {
		return nil, err
	}
	r = &objReader{r: or, h: or.Header(), stripes: map[int]*stripeRead{}}
	r.last.Store(time.Now())
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.readers) >= maxReaders {
		var oldest string
		var t time.Time
		for k, x := range o.readers {
			if lt := x.last.Load().(time.Time); oldest == "" || lt.Before(t) {
				oldest, t = k, lt
			}
		}
		delete(o.readers, oldest)
	}
	o.readers[key] = r
	return r, nil
}

func (o *objects) serveGet(ctx context.Context, req *Request, resp *wire.Desc) {
	if o.coord == nil {
		fail(req, resp, errNoPeers)
		return
	}
	ctx = withTracedOp(ctx, req)
	if req.NSpan != 3 {
		resp.Status = wire.StatusBadArg
		return
	}
	name, err := spanIn(req, 0)
	v, err2 := spanIn(req, 1)
	if err != nil || err2 != nil {
		resp.Status = wire.StatusBadSpan
		return
	}
	if err := object.Version(v).Check(); err != nil {
		fail(req, resp, err)
		return
	}
	r, err := o.reader(ctx, string(name), object.Version(v))
	if err != nil {
		fail(req, resp, err)
		return
	}
	off := int64(req.Arg0)
	if off < 0 || off > r.h.Size {
		resp.Status = wire.StatusBadArg
		return
	}
	if off == r.h.Size {
		return // Arg0 = 0: the end
	}
	// Fill the room, across stripes when it spans their boundary.
	key := readerKey(string(name), object.Version(v))
	retried := false
	room := req.Spans[2]
	n := 0
	for n < int(room.Len) && off < r.h.Size {
		s := int(off / r.h.StripeBytes())
		sr := r.stripe(ctx, s)
		select {
		case <-sr.done:
		case <-ctx.Done():
			resp.Status = wire.StatusTimeout
			return
		}
		if sr.err != nil && !retried {
			// What the reader knew of the stores may be old (an agent
			// back since): once more with a fresh look.
			retried = true
			o.mu.Lock()
			if o.readers[key] == r {
				delete(o.readers, key)
			}
			o.mu.Unlock()
			if r, err = o.reader(ctx, string(name), object.Version(v)); err != nil {
				fail(req, resp, err)
				return
			}
			continue
		}
		if sr.err != nil {
			r.mu.Lock()
			delete(r.stripes, s) // try again on the next call
			r.mu.Unlock()
			if r.r.Gone() {
				sr.err = fmt.Errorf("%w: %v", object.ErrNotFound, sr.err)
			}
			fail(req, resp, sr.err)
			return
		}
		in := sr.data[off-int64(s)*r.h.StripeBytes():]
		k := min(len(in), int(room.Len)-n)
		if err := req.Mem.WriteAt(in[:k], uint64(room.Off)+uint64(n)); err != nil {
			resp.Status = wire.StatusBadSpan
			return
		}
		n += k
		off += int64(k)
	}
	resp.Arg0, resp.NSpan = uint64(n), 1
	resp.Arg1 = uint64(len(r.r.Report())) // what the reader found wrong: the host asks stat which
	resp.Spans[0] = wire.Span{Off: room.Off, Len: uint32(n)}
	o.objBytes.WithLabelValues("get").Add(float64(n))
}

// routes serve the operator's view: GET /v1/ec/objects?prefix=P (the
// objects), GET /v1/ec/stat?name=N, POST /v1/ec/repair?name=N or ?all=1,
// POST /v1/ec/scrub (one pass now) and GET /v1/ec/scrub (the last).
func (o *objects) routes(mux *Mux) {
	ready := func(w http.ResponseWriter) bool {
		if o.coord == nil {
			http.Error(w, errNoPeers.Error(), http.StatusNotFound)
			return false
		}
		return true
	}
	reply := func(w http.ResponseWriter, v any, err error) {
		if err != nil {
			code := http.StatusBadGateway
			switch objectStatus(err) {
			case wire.StatusNotFound:
				code = http.StatusNotFound
			case wire.StatusBadArg:
				code = http.StatusBadRequest
			}
			http.Error(w, err.Error(), code)
			return
		}
		writeJSON(w, v)
	}
	mux.HandleFunc("GET /v1/ec/objects", func(w http.ResponseWriter, r *http.Request) {
		if ready(w) {
			l, err := o.coord.List(r.Context(), r.URL.Query().Get("prefix"))
			reply(w, l, err)
		}
	})
	mux.HandleFunc("GET /v1/ec/stat", func(w http.ResponseWriter, r *http.Request) {
		if ready(w) {
			st, err := o.coord.Stat(r.Context(), r.URL.Query().Get("name"))
			reply(w, st, err)
		}
	})
	mux.HandleFunc("POST /v1/ec/repair", func(w http.ResponseWriter, r *http.Request) {
		if !ready(w) {
			return
		}
		if r.URL.Query().Get("all") != "" {
			res, err := o.coord.RepairAll(r.Context())
			for _, x := range res {
				o.repaired.Add(float64(len(x.Rebuilt) + len(x.Commits)))
			}
			reply(w, res, err)
			return
		}
		res, err := o.coord.Repair(r.Context(), r.URL.Query().Get("name"))
		o.repaired.Add(float64(len(res.Rebuilt) + len(res.Commits)))
		reply(w, []object.RepairResult{res}, err)
	})
	mux.HandleFunc("POST /v1/ec/scrub", func(w http.ResponseWriter, r *http.Request) {
		if ready(w) {
			reply(w, o.scrub(r.Context()), nil)
		}
	})
	mux.HandleFunc("GET /v1/ec/scrub", func(w http.ResponseWriter, r *http.Request) {
		if ready(w) {
			reply(w, o.lastScrub.Load(), nil)
		}
	})
}
