package object

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/shared/crc32c"
)

// Transport carries a coordinator's messages to the stores.
type Transport interface {
	// Members are the agents objects are placed on, this one included.
	Members() []uint32
	// Call sends one encoded Request to node's store and returns its
	// encoded Reply.
	Call(ctx context.Context, node uint32, req []byte) ([]byte, error)
}

// Config configures a Coordinator. Zero values take the defaults.
type Config struct {
	K, M int // the code of new objects (default 4+2)
	// Quorum is how many shards must be durable before a Put is
	// acknowledged (default k+1, at most k+m, at least k).
	Quorum int
	// Chunk is the bytes of one shard of a stripe (default DefaultChunk).
	Chunk int
	// Node is the writer's id, in the versions it makes (0: a client).
	Node uint32
	// MaxSize bounds a Put (0: none but the stripes').
	MaxSize int64
	// CallTimeout bounds one message's round trip (default 30 s).
	CallTimeout time.Duration
	// Coder are the options of the erasure coders.
	Coder []ec.Option
}

// Coordinator puts, gets, lists, deletes and repairs objects over a
// Transport. It is safe for concurrent use.
type Coordinator struct {
	t   Transport
	cfg Config

	mu     sync.Mutex
	coders map[[2]int]*ec.Coder
}

// NewCoordinator checks cfg and returns a coordinator.
func NewCoordinator(t Transport, cfg Config) (*Coordinator, error) {
	if cfg.K == 0 && cfg.M == 0 {
		cfg.K, cfg.M = 4, 2
	}
	if err := ec.CheckCounts(cfg.K, cfg.M); err != nil {
		return nil, err
	}
	if cfg.Quorum == 0 {
		cfg.Quorum = min(cfg.K+1, cfg.K+cfg.M)
	}
	if cfg.Quorum < cfg.K || cfg.Quorum > cfg.K+cfg.M {
		return nil, fmt.Errorf("object: write quorum %d: want %d to %d for %d+%d", cfg.Quorum, cfg.K, cfg.K+cfg.M, cfg.K, cfg.M)
	}
	if cfg.Chunk == 0 {
		cfg.Chunk = DefaultChunk
	}
	if cfg.Chunk < ec.Align || cfg.Chunk > MaxChunk || cfg.Chunk%ec.Align != 0 {
		return nil, fmt.Errorf("object: chunk of %d bytes: want a multiple of %d up to %d", cfg.Chunk, ec.Align, MaxChunk)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	return &Coordinator{t: t, cfg: cfg, coders: map[[2]int]*ec.Coder{}}, nil
}

// Config is the coordinator's configuration, defaults filled in.
func (c *Coordinator) Config() Config { return c.cfg }

func (c *Coordinator) coder(k, m int) (*ec.Coder, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cd, ok := c.coders[[2]int{k, m}]; ok {
		return cd, nil
	}
	cd, err := ec.New(k, m, c.cfg.Coder...)
	if err != nil {
		return nil, err
	}
	if len(c.coders) > 16 {
		clear(c.coders)
	}
	c.coders[[2]int{k, m}] = cd
	return cd, nil
}

// call sends r to node and parses the reply; a reply's error status
// becomes the error.
func (c *Coordinator) call(ctx context.Context, node uint32, r *Request) (Reply, error) {
	return c.callMsg(ctx, node, r.Kind, r.Append(nil))
}

// callMsg is call of a request already encoded.
func (c *Coordinator) callMsg(ctx context.Context, node uint32, kind Kind, msg []byte) (Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	b, err := c.t.Call(ctx, node, msg)
	if err != nil {
		return Reply{}, fmt.Errorf("node %d: %s: %w", node, kind, err)
	}
	rep, err := ParseReply(b)
	if err != nil {
		return Reply{}, fmt.Errorf("node %d: %s: %w", node, kind, err)
	}
	if err := rep.Err(); err != nil {
		return rep, fmt.Errorf("node %d: %s: %w", node, kind, err)
	}
	return rep, nil
}

// parallel calls f(0..n-1) at once and returns their errors.
func parallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	wg.Wait()
	return errs
}

// each calls f for every node at once and returns the errors by node.
func each(nodes []uint32, f func(i int, node uint32) error) []error {
	return parallel(len(nodes), func(i int) error { return f(i, nodes[i]) })
}

// ---- what the stores hold of a name

// view is what every member reported of one name.
type view struct {
	members     []uint32
	shards      []Shard          // with Holder set to the node that answered
	unreachable map[uint32]error // members that did not answer
	grouped     []*version       // versions(), once
}

func (c *Coordinator) look(ctx context.Context, name string) (*view, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	members := c.t.Members()
	v := &view{members: members, unreachable: map[uint32]error{}}
	var mu sync.Mutex
	each(members, func(_ int, n uint32) error {
		rep, err := c.call(ctx, n, &Request{Kind: KindStat, Name: name})
		var got []Shard
		if err == nil {
			err = json.Unmarshal(rep.Body, &got)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			v.unreachable[n] = err
			return nil
		}
		for _, sh := range got {
			if sh.Name != name || sh.Header.Check(0) != nil || sh.Index < 0 || sh.Index >= len(sh.Place) {
				continue // a record that lies about what it is
			}
			sh.Holder = n
			v.shards = append(v.shards, sh)
		}
		return nil
	})
	if len(v.unreachable) == len(members) && len(members) > 0 {
		for _, err := range v.unreachable {
			return nil, fmt.Errorf("object: no agent answered: %w", err)
		}
	}
	return v, nil
}

// version is one version of a name as the stores hold it.
type version struct {
	Header
	committed bool
	// holders[i] are the nodes holding shard i with this header.
	holders [][]Shard
	liars   []Shard // shards of the version whose header disagrees
}

// versions groups the view by version, newest first; each version's
// header is the one most of its shards carry.
func (v *view) versions() []*version {
	if v.grouped != nil {
		return v.grouped
	}
	by := map[Version][]Shard{}
	for _, sh := range v.shards {
		by[sh.Version] = append(by[sh.Version], sh)
	}
	var out []*version
	for ver, shards := range by {
		best, votes := -1, 0
		for i := range shards {
			n := 0
			for j := range shards {
				if shards[i].Header.Same(&shards[j].Header) {
					n++
				}
			}
			if n > votes {
				best, votes = i, n
			}
		}
		vv := &version{Header: shards[best].Header}
		vv.Version = ver
		vv.holders = make([][]Shard, len(vv.Place))
		for _, sh := range shards {
			if !sh.Header.Same(&vv.Header) {
				vv.liars = append(vv.liars, sh)
				continue
			}
			vv.committed = vv.committed || sh.Committed
			vv.holders[sh.Index] = append(vv.holders[sh.Index], sh)
		}
		out = append(out, vv)
	}
	slices.SortFunc(out, func(a, b *version) int { return strings.Compare(string(b.Version), string(a.Version)) })
	v.grouped = out
	return out
}

// readable counts the shards of v some store holds.
func (v *version) readable() int {
	n := 0
	for _, hs := range v.holders {
		if len(hs) > 0 {
			n++
		}
	}
	return n
}

// current is the version readers get: the newest committed one.
func (v *view) current(name string) (*version, error) {
	for _, vv := range v.versions() {
		if !vv.committed {
			continue
		}
		if vv.Tomb() {
			return vv, fmt.Errorf("%w: %s was deleted", ErrNotFound, name)
		}
		return vv, nil
	}
	if len(v.unreachable) > 0 {
		return nil, fmt.Errorf("%w: %s (%d agents did not answer)", ErrNotFound, name, len(v.unreachable))
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
}

// ---- Put

// Create starts a Put of size bytes under name. Write the bytes, then
// Close to commit; Abort to give up. The code is the coordinator's
// unless k and m are given (both 0: the default).
func (c *Coordinator) Create(ctx context.Context, name string, size int64, k, m int) (*Writer, error) {
	if k == 0 && m == 0 {
		k, m = c.cfg.K, c.cfg.M
	}
	if err := ec.CheckCounts(k, m); err != nil {
		return nil, err
	}
	quorum := c.cfg.Quorum
	if k != c.cfg.K || m != c.cfg.M {
		quorum = min(k+1, k+m)
	}
	if size < 0 {
		return nil, fmt.Errorf("%w: size %d", ErrBadMeta, size)
	}
	place, err := Place(name, c.t.Members(), k+m)
	if err != nil {
		return nil, err
	}
	h := Header{Name: name, Version: NewVersion(c.cfg.Node), Size: size, K: k, M: m, Chunk: c.cfg.Chunk, Place: place}
	if err := h.Check(c.cfg.MaxSize); err != nil {
		return nil, err
	}
	coder, err := c.coder(k, m)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Writer{c: c, ctx: ctx, cancel: cancel, h: h, quorum: quorum, coder: coder,
		targets: make([]*target, k+m)}
	w.next()
	meta, _ := json.Marshal(&h)
	for i, n := range place {
		t := &target{node: n, index: i, in: make(chan *stripe, 2), done: make(chan struct{})}
		w.targets[i] = t
		go w.send(t, meta)
	}
	return w, nil
}

// Put stores data under name (Create, Write, Close).
func (c *Coordinator) Put(ctx context.Context, name string, data []byte) (Header, error) {
	w, err := c.Create(ctx, name, int64(len(data)), 0, 0)
	if err != nil {
		return Header{}, err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return Header{}, err
	}
	return w.Close()
}

// Writer is a Put under way.
type Writer struct {
	c       *Coordinator
	ctx     context.Context
	cancel  context.CancelFunc
	h       Header
	quorum  int
	coder   *ec.Coder
	targets []*target
	buf     []byte // the stripe being filled: the data part of all
	all     []byte // the stripe's shards, data then parity, chunk bytes each
	stripe  int
	written int64
	err     error
	closed  bool
}

type target struct {
	node  uint32
	index int
	in    chan *stripe
	done  chan struct{}
	mu    sync.Mutex
	err   error // the first failure: nothing more goes to it
}

// fail records the target's first failure.
func (t *target) fail(err error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
}

// failure is the target's first failure, nil while it has none.
func (t *target) failure() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// stripe is one coded stripe on its way to the targets.
type stripe struct {
	n      int
	all    []byte // the shards' buffer, given back when every target is done with it
	shards [][]byte
	crcs   []uint32
	dcrc   uint32
	refs   atomic.Int32
}

// done is a target's release of the stripe.
func (s *stripe) done() {
	if s.refs.Add(-1) == 0 {
		putBuf(s.all)
	}
}

// Header is the version being written.
func (w *Writer) Header() Header { return w.h }

// writesInFlight is how many pieces a Put keeps on their way to one agent:
// one at a time would leave the link idle for a round trip per piece.
const writesInFlight = 4

// send prepares the target's shard, then writes each stripe's piece as it
// comes, a few at once; after a failure it drains its stripes without
// sending.
func (w *Writer) send(t *target, meta []byte) {
	defer close(t.done)
	if _, err := w.c.call(w.ctx, t.node, &Request{Kind: KindPrepare, Name: w.h.Name, Index: t.index, Meta: meta}); err != nil {
		t.fail(err)
	}
	sem := make(chan struct{}, writesInFlight)
	var wg sync.WaitGroup
	for s := range t.in {
		if t.failure() != nil {
			s.done()
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r := Request{Kind: KindWrite, Name: w.h.Name, Version: w.h.Version, Index: t.index, Stripe: s.n,
				CRC: s.crcs[t.index], DataCRC: s.dcrc, Data: s.shards[t.index]}
			msg := r.Append(getBuf(requestHead + len(r.Name) + len(r.Version) + len(r.Data))[:0])
			s.done()
			_, err := w.c.callMsg(w.ctx, t.node, KindWrite, msg)
			putBuf(msg)
			if err != nil {
				t.fail(err)
			}
		}()
	}
	wg.Wait()
}

// live counts the targets not failed so far.
func (w *Writer) live() int {
	n := 0
	for _, t := range w.targets {
		select {
		case <-t.done:
			if t.failure() == nil {
				n++
			}
		default:
			n++ // still sending; errors are read once it is done
		}
	}
	return n
}

// Write takes the next bytes of the object, coding and sending each
// stripe as it fills.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.written+int64(len(p)) > w.h.Size {
		w.fail(fmt.Errorf("%w: %d bytes written to a Put of %d", ErrShard, w.written+int64(len(p)), w.h.Size))
		return 0, w.err
	}
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		w.written += int64(k)
		if len(w.buf) == cap(w.buf) && w.written < w.h.Size {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *Writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// flush codes the stripe in buf and hands it to every target.
func (w *Writer) flush() error {
	if err := w.ctx.Err(); err != nil {
		w.fail(err)
		return err
	}
	if live := w.live(); live < w.quorum {
		w.fail(w.quorumErr("sending", live))
		return w.err
	}
	s := &stripe{n: w.stripe}
	size := w.h.ShardBytes(w.stripe)
	shards := make([][]byte, w.h.K+w.h.M)
	all := w.all
	if size != w.h.Chunk {
		// The last stripe, of smaller shards: laid out again.
		all = getBuf(size * len(shards))
		copy(all, w.buf)
		clear(all[len(w.buf):])
	} else {
		clear(all[len(w.buf) : w.h.K*size]) // a pooled buffer: no old bytes in the padding
	}
	for i := range shards {
		shards[i] = all[i*size : (i+1)*size : (i+1)*size]
	}
	if err := w.coder.Encode(shards); err != nil {
		w.fail(err)
		return err
	}
	s.shards, s.crcs = shards, ec.Checksums(shards)
	if len(w.buf) == w.h.K*size {
		// The data shards are the stripe's bytes, unpadded.
		s.dcrc = joinedCRC(s.crcs[:w.h.K], size)
	} else {
		s.dcrc = crc32c.Checksum(w.buf)
	}
	if size != w.h.Chunk {
		putBuf(w.all) // copied out above
	}
	s.all = all
	s.refs.Store(int32(len(w.targets)))
	for i, t := range w.targets {
		select {
		case t.in <- s:
		case <-w.ctx.Done():
			for range w.targets[i:] {
				s.done()
			}
			w.fail(w.ctx.Err())
			return w.err
		}
	}
	w.stripe++
	w.next()
	return nil
}

// next gives the writer a fresh stripe to fill (the last one is the
// targets' until they have sent it).
func (w *Writer) next() {
	w.all = getBuf((w.h.K + w.h.M) * w.h.Chunk)
	w.buf = w.all[:0:w.h.StripeBytes()]
}

func (w *Writer) quorumErr(stage string, n int) error {
	var why []string
	for _, t := range w.targets {
		if err := t.failure(); err != nil {
			why = append(why, err.Error())
		}
	}
	return fmt.Errorf("%w: %s %s: %d of %d agents took their shards, %d needed (%s); the previous version stays",
		ErrQuorum, w.h.Name, stage, n, len(w.targets), w.quorum, strings.Join(why, "; "))
}

// Close sends the last stripe, seals the shards and commits them once a
// quorum is durable. On error the version was aborted, and readers get
// the previous one.
func (w *Writer) Close() (Header, error) {
	if w.closed {
		return w.h, errors.New("object: Close twice")
	}
	if w.err == nil && w.written != w.h.Size {
		w.fail(fmt.Errorf("%w: %d of %d bytes written", ErrShard, w.written, w.h.Size))
	}
	if w.err == nil {
		w.flush()
	}
	w.closed = true
	for _, t := range w.targets {
		close(t.in)
	}
	for _, t := range w.targets {
		<-t.done
	}
	defer w.cancel()
	if w.err != nil {
		w.abort()
		return w.h, w.err
	}
	var live []*target
	for _, t := range w.targets {
		if t.failure() == nil {
			live = append(live, t)
		}
	}
	errs := each(nodesOf(live), func(i int, n uint32) error {
		_, err := w.c.call(w.ctx, n, &Request{Kind: KindSeal, Name: w.h.Name, Version: w.h.Version, Index: live[i].index})
		if err != nil {
			live[i].fail(err)
		}
		return err
	})
	sealed := 0
	for _, err := range errs {
		if err == nil {
			sealed++
		}
	}
	if sealed < w.quorum {
		w.abort()
		return w.h, w.quorumErr("sealing", sealed)
	}
	var sealedOn []*target
	for _, t := range live {
		if t.failure() == nil {
			sealedOn = append(sealedOn, t)
		}
	}
	committed := 0
	for i, err := range each(nodesOf(sealedOn), func(_ int, n uint32) error {
		_, err := w.c.call(w.ctx, n, &Request{Kind: KindCommit, Name: w.h.Name, Version: w.h.Version})
		return err
	}) {
		if err != nil {
			sealedOn[i].fail(err)
		} else {
			committed++
		}
	}
	if committed < w.quorum {
		return w.h, fmt.Errorf("%s: committed on %d agents, %d needed: readers may see this version or the one before: %w",
			w.h.Name, committed, w.quorum, ErrQuorum)
	}
	return w.h, nil
}

// Abort gives the Put up: the version is forgotten, the previous one stays.
func (w *Writer) Abort() {
	if w.closed {
		return
	}
	w.fail(errors.New("object: put aborted"))
	w.closed = true
	for _, t := range w.targets {
		close(t.in)
	}
	for _, t := range w.targets {
		<-t.done
	}
	w.abort()
	w.cancel()
}

func (w *Writer) abort() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), w.c.cfg.CallTimeout)
	defer cancel()
	each(w.h.Place, func(_ int, n uint32) error {
		_, err := w.c.call(ctx, n, &Request{Kind: KindAbort, Name: w.h.Name, Version: w.h.Version})
		return err
	})
}

func nodesOf(ts []*target) []uint32 {
	out := make([]uint32, len(ts))
	for i, t := range ts {
		out[i] = t.node
	}
	return out
}

// ---- Get

// Open finds the version of name readers get now (or version v, when
// given) and returns a reader of it.
func (c *Coordinator) Open(ctx context.Context, name string, v Version) (*Reader, error) {
	var view *view
	var cur *version
	for try := 0; ; try++ {
		var err error
		if view, err = c.look(ctx, name); err != nil {
			return nil, err
		}
		cur = nil
		if v == "" {
			if cur, err = view.current(name); err != nil {
				return nil, err
			}
		} else {
			for _, vv := range view.versions() {
				if vv.Version == v && !vv.Tomb() {
					cur = vv
				}
			}
			if cur == nil {
				return nil, fmt.Errorf("%w: %s version %s (superseded and collected, or never written)", ErrNotFound, name, v)
			}
		}
		// The stores answer one by one: one may have committed the
		// version before another answered without it sealed. A committed
		// version had a quorum sealed, so look again before giving up.
		if cur.readable() >= cur.K || try == 3 {
			break
		}
		select {
		case <-time.After(time.Duration(try+1) * 10 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	coder, err := c.coder(cur.K, cur.M)
	if err != nil {
		return nil, err
	}
	r := &Reader{c: c, v: cur, coder: coder, bad: map[[2]int]bool{}}
	for _, vv := range view.versions() {
		// A newer Put under way: should it commit twice over during
		// this read, stores collect this version under the reader.
		r.newer = r.newer || vv.Version > cur.Version
	}
	for _, l := range cur.liars {
		r.note(fmt.Sprintf("node %d: shard %d's record disagrees with the others': ignored", l.Holder, l.Index))
	}
	for i, hs := range cur.holders {
		if len(hs) == 0 {
			r.note(fmt.Sprintf("shard %d (node %d): missing", i, cur.Place[i]))
		}
		for _, h := range hs {
			for _, s := range h.Corrupt {
				r.bad[[2]int{i, s}] = true
			}
		}
	}
	return r, nil
}

// Reader reads one version of an object, stripe by stripe.
type Reader struct {
	c     *Coordinator
	v     *version
	coder *ec.Coder

	mu     sync.Mutex
	bad    map[[2]int]bool // (shard, stripe) found corrupt or unreadable
	report []string
	gone   atomic.Bool // a holder no longer had the version: newer ones collected it
	newer  bool        // newer versions were seen when it opened
}

// Gone reports whether a read failed because stores had collected the
// version under the reader (two newer Puts committed meanwhile): reading
// again reads a newer one.
func (r *Reader) Gone() bool { return r.gone.Load() || r.newer }

// Header is the version read.
func (r *Reader) Header() Header { return r.v.Header }

// Report says what the reader found wrong: shards missing, corrupted,
// unreachable, or whose record lied.
func (r *Reader) Report() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.report)
}

func (r *Reader) note(s string) {
	r.mu.Lock()
	if !slices.Contains(r.report, s) {
		r.report = append(r.report, s)
	}
	r.mu.Unlock()
}

// fetch reads shard i of stripe s from one of its holders, and returns it
// with its CRC (checked) and the stripe's data CRC its holder recorded.
func (r *Reader) fetch(ctx context.Context, i, s int) ([]byte, uint32, uint32, error) {
	var last error
	for _, h := range r.v.holders[i] {
		rep, err := r.c.call(ctx, h.Holder, &Request{Kind: KindRead, Name: r.v.Name, Version: r.v.Version, Index: i, Stripe: s})
		if err == nil && (len(rep.Body) != r.v.ShardBytes(s) || crc32c.Checksum(rep.Body) != rep.CRC) {
			err = fmt.Errorf("node %d: %w: shard %d stripe %d came back damaged", h.Holder, ErrCorrupt, i, s)
		}
		if err == nil {
			return rep.Body, rep.CRC, rep.DataCRC, nil
		}
		if errors.Is(err, ErrNotFound) {
			r.gone.Store(true)
		}
		if errors.Is(err, ErrCorrupt) {
			r.note(fmt.Sprintf("shard %d on node %d: stripe %d corrupt", i, h.Holder, s))
		} else {
			r.note(fmt.Sprintf("shard %d on node %d: %v", i, h.Holder, err))
		}
		last = err
	}
	if last == nil {
		last = fmt.Errorf("shard %d: no holder", i)
	}
	return nil, 0, 0, last
}

// Stripe reads and, when data shards are missing, rebuilds stripe s; it
// returns the stripe's object bytes.
func (r *Reader) Stripe(ctx context.Context, s int) ([]byte, error) {
	h := &r.v.Header
	if s < 0 || s >= h.Stripes() {
		return nil, fmt.Errorf("object: stripe %d of %d", s, h.Stripes())
	}
	shards, crcs, dcrcs, err := r.gather(ctx, s, nil)
	if err != nil {
		return nil, err
	}
	direct := true // every data shard read, none rebuilt
	for i := 0; i < h.K; i++ {
		direct = direct && shards[i] != nil
	}
	data, err := r.join(shards, s)
	if err != nil {
		return nil, err
	}
	var sum uint32
	if size := h.ShardBytes(s); direct && int64(len(data)) == int64(h.K)*int64(size) {
		// The data is the data shards whole, each checked against its
		// CRC as it came.
		sum = joinedCRC(crcs[:h.K], size)
	} else {
		sum = crc32c.Checksum(data)
	}
	if !agrees(dcrcs, sum) {
		return nil, fmt.Errorf("%w: %s stripe %d decodes to bytes that fail its CRC", ErrCorrupt, h.Name, s)
	}
	return data, nil
}

// gather reads k valid shards of stripe s, data shards first, more as
// reads fail; skip names shards not to read. It returns the shards (nil
// where not read), their CRCs by index, and the stripe's data CRC as each
// holder read recorded it.
func (r *Reader) gather(ctx context.Context, s int, skip []int) ([][]byte, []uint32, []uint32, error) {
	h := &r.v.Header
	n := h.K + h.M
	shards, sums := make([][]byte, n), make([]uint32, n)
	var order []int
	for i := 0; i < n; i++ {
		r.mu.Lock()
		bad := r.bad[[2]int{i, s}]
		r.mu.Unlock()
		if len(r.v.holders[i]) > 0 && !bad && !slices.Contains(skip, i) {
			order = append(order, i)
		}
	}
	var dcrcs []uint32
	got := 0
	for len(order) > 0 && got < h.K {
		batch := order[:min(h.K-got, len(order))]
		order = order[len(batch):]
		res := make([][]byte, len(batch))
		crcs, dcs := make([]uint32, len(batch)), make([]uint32, len(batch))
		parallel(len(batch), func(j int) error {
			b, c, dc, err := r.fetch(ctx, batch[j], s)
			res[j], crcs[j], dcs[j] = b, c, dc
			if err != nil {
				r.mu.Lock()
				r.bad[[2]int{batch[j], s}] = true
				r.mu.Unlock()
			}
			return err
		})
		for j, b := range res {
			if b != nil {
				shards[batch[j]], sums[batch[j]] = b, crcs[j]
				dcrcs = append(dcrcs, dcs[j])
				got++
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, err
		}
	}
	if got < h.K {
		return nil, nil, nil, fmt.Errorf("%w: %s stripe %d: %d of %d shards readable, %d needed", ErrUnread, h.Name, s, got, n, h.K)
	}
	return shards, sums, dcrcs, nil
}

// join returns the object bytes of a stripe from k of its shards.
func (r *Reader) join(shards [][]byte, s int) ([]byte, error) {
	h := &r.v.Header
	missing := false
	for i := 0; i < h.K; i++ {
		missing = missing || shards[i] == nil
	}
	if missing {
		if err := r.coder.Reconstruct(shards, true); err != nil {
			return nil, err
		}
	}
	data := make([]byte, 0, h.StripeData(s))
	for i := 0; i < h.K && int64(len(data)) < h.StripeData(s); i++ {
		data = append(data, shards[i][:min(int64(len(shards[i])), h.StripeData(s)-int64(len(data)))]...)
	}
	return data, nil
}

// joinedCRC is the CRC of shards of size bytes each laid end to end, from
// theirs: no pass over the data.
func joinedCRC(crcs []uint32, size int) uint32 {
	sum := crcs[0]
	for _, c := range crcs[1:] {
		sum = crc32c.Combine(sum, c, int64(size))
	}
	return sum
}

// agrees reports whether most stores' record of a stripe's CRC is sum.
func agrees(dcrcs []uint32, sum uint32) bool {
	n := 0
	for _, c := range dcrcs {
		if c == sum {
			n++
		}
	}
	return n*2 > len(dcrcs)
}

// WriteTo writes the whole object to w, reading the next stripe while it
// writes one.
func (r *Reader) WriteTo(ctx context.Context, w interface{ Write([]byte) (int, error) }) (int64, error) {
	type result struct {
		b   []byte
		err error
	}
	n := r.v.Stripes()
	next := make(chan chan result, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(next)
		for s := 0; s < n; s++ {
			ch := make(chan result, 1)
			select {
			case next <- ch:
			case <-ctx.Done():
				return
			}
			b, err := r.Stripe(ctx, s)
			ch <- result{b, err}
		}
	}()
	var total int64
	for ch := range next {
		res := <-ch
		if res.err != nil {
			return total, res.err
		}
		k, err := w.Write(res.b)
		total += int64(k)
		if err != nil {
			return total, err
		}
	}
	return total, ctx.Err()
}

// Get returns the object's bytes and what the reader found wrong on the
// way. A read whose version is collected under it (Reader.Gone) starts
// again on the newer one, a few times.
func (c *Coordinator) Get(ctx context.Context, name string) ([]byte, Header, []string, error) {
	for try := 0; ; try++ {
		r, err := c.Open(ctx, name, "")
		if err != nil {
			return nil, Header{}, nil, err
		}
		var b buffer
		b.b = make([]byte, 0, max(0, r.v.Size))
		_, err = r.WriteTo(ctx, &b)
		if err != nil && r.Gone() && try < maxRereads {
			continue
		}

		return b.b, r.v.Header, r.Report(), err
	}
}

// maxRereads bounds the reads Get starts again after a version was
// collected under it.
const maxRereads = 8

type buffer struct{ b []byte }

func (b *buffer) Write(p []byte) (int, error) { b.b = append(b.b, p...); return len(p), nil }

// ---- Delete and List

// Delete writes a tombstone for name on every agent of its placement and,
// once all have it, purges it. A quorum of tombstones is a delete: fewer
// is an error (the object may still be read).
func (c *Coordinator) Delete(ctx context.Context, name string) error {
	view, err := c.look(ctx, name)
	if err != nil {
		return err
	}
	cur, err := view.current(name)
	if err != nil {
		return err
	}
	th := Header{Name: name, Version: NewVersion(c.cfg.Node), Size: -1, K: cur.K, M: cur.M, Place: cur.Place}
	return c.tombstone(ctx, th)
}

func (c *Coordinator) tombstone(ctx context.Context, th Header) error {
	meta, _ := json.Marshal(&th)
	members := c.t.Members()
	errs := each(th.Place, func(i int, n uint32) error {
		if !slices.Contains(members, n) {
			return nil // it left the members, and its shards with it
		}
		_, err := c.call(ctx, n, &Request{Kind: KindDelete, Name: th.Name, Index: i, Meta: meta})
		return err
	})
	applied := 0
	var why []string
	for _, err := range errs {
		if err == nil {
			applied++
		} else {
			why = append(why, err.Error())
		}
	}
	if applied == len(th.Place) {
		each(th.Place, func(_ int, n uint32) error {
			_, err := c.call(ctx, n, &Request{Kind: KindPurge, Name: th.Name, Version: th.Version})
			return err
		})
		return nil
	}
	if applied < min(th.K+1, th.K+th.M) {
		return fmt.Errorf("%w: delete of %s applied on %d of %d agents (%s): it may still be read", ErrQuorum, th.Name, applied, len(th.Place), strings.Join(why, "; "))
	}
	return nil // tombstones stay until repair reaches the rest
}

// List returns the newest committed header of every object whose name
// starts with prefix, by name; tombstoned names are left out. Agents that
// did not answer are reported in the error only when none did.
func (c *Coordinator) List(ctx context.Context, prefix string) ([]Header, error) {
	all, err := c.list(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, h := range all {
		if !h.Tomb() {
			out = append(out, h)
		}
	}
	return out, nil
}

func (c *Coordinator) list(ctx context.Context, prefix string) ([]Header, error) {
	if len(prefix) > MaxName {
		return nil, fmt.Errorf("%w: prefix of %d bytes", ErrName, len(prefix))
	}
	members := c.t.Members()
	newest := map[string]Header{}
	var mu sync.Mutex
	errs := each(members, func(_ int, n uint32) error {
		rep, err := c.call(ctx, n, &Request{Kind: KindList, Name: prefix})
		var hs []Header
		if err == nil {
			err = json.Unmarshal(rep.Body, &hs)
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, h := range hs {
			if !strings.HasPrefix(h.Name, prefix) || h.Check(0) != nil {
				continue
			}
			if o, ok := newest[h.Name]; !ok || h.Version > o.Version {
				newest[h.Name] = h
			}
		}
		return nil
	})
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed == len(members) && failed > 0 {
		return nil, fmt.Errorf("object: list: no agent answered: %w", errs[0])
	}
	out := make([]Header, 0, len(newest))
	for _, h := range newest {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
