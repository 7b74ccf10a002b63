package dpu

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/dpu/profile"
	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/mono"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// ECConfig is the erasure-coding service's section ([ec]).
type ECConfig struct {
	// SIMD caps the vector instructions the coder uses: best (default:
	// what the CPU has; with a DPU profile, ssse3 — 128-bit vectors, as
	// the Arm cores' NEON), or one of ec.ParseSIMD's names.
	SIMD string `toml:"simd"`
	// Objects across agents (they need the peer layer):
	// Code is the code of new objects, "K+M" (default 4+2).
	Code string `toml:"code"`
	// Quorum is how many shards must be durable before a Put is
	// acknowledged (default k+1).
	Quorum int `toml:"quorum"`
	// MaxObject bounds an object's size (default 4GiB).
	MaxObject string `toml:"max_object"`
	// Scrub is how often the agent verifies its shards and repairs the
	// objects it leads (default 10m; "off").
	Scrub string `toml:"scrub"`
}

// scrubEvery is Scrub's interval, 0 when off.
func (c *ECConfig) scrubEvery() time.Duration {
	if c.Scrub == Off || c.Scrub == "0" {
		return 0
	}
	d, _ := time.ParseDuration(c.Scrub)
	return d
}

func (c *ECConfig) withDefaults() error {
	defString(&c.Code, "4+2")
	defString(&c.MaxObject, defaultMaxObj)
	defString(&c.Scrub, "10m")
	return nil
}

func (c *ECConfig) validate() error {
	if _, err := ec.ParseSIMD(c.SIMD); err != nil {
		return fmt.Errorf("--ec-simd: %v: %w", err, ErrConfig)
	}
	k, m, err := parseCode(c.Code)
	if err != nil {
		return fmt.Errorf("--ec-code: %v: %w", err, ErrConfig)
	}
	if c.Quorum != 0 && (c.Quorum < k || c.Quorum > k+m) {
		return fmt.Errorf("--ec-quorum %d: want %d to %d for a %d+%d code: %w", c.Quorum, k, k+m, k, m, ErrConfig)
	}
	if n, err := humanize.ParseBytes(c.MaxObject); err != nil || n == 0 {
		return fmt.Errorf("--ec-max-object %q: want a size, as 4GiB: %w", c.MaxObject, ErrConfig)
	}
	if d, err := time.ParseDuration(c.Scrub); c.scrubEvery() != 0 && (err != nil || d <= 0) {
		return fmt.Errorf("--ec-scrub %q: want an interval, as 10m, or off: %w", c.Scrub, ErrConfig)
	}
	return nil
}

func (c *ECConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.SIMD, "ec-simd", c.SIMD, "cap the erasure coder's vector instructions: best, avx2, ssse3, generic, … (default best; ssse3 with a DPU profile)")
	fs.StringVar(&c.Code, "ec-code", c.Code, "code of new erasure-coded objects, K+M (default 4+2)")
	fs.IntVar(&c.Quorum, "ec-quorum", c.Quorum, "shards durable before a Put is acknowledged (default k+1)")
	fs.StringVar(&c.MaxObject, "ec-max-object", c.MaxObject, "largest erasure-coded object taken (default 4GiB)")
	fs.StringVar(&c.Scrub, "ec-scrub", c.Scrub, "how often to verify shards and repair the objects this agent leads, or off (default 10m)")
}

// maxCoders bounds the coders kept, one per shard shape (k, m) asked for:
// a host naming every shape cannot grow the agent without end.
const maxCoders = 64

// A round is the data coded between two yields (Request.Yield): a large
// op is coded column-wise, every shard's next columns per round, and each
// round is a slice of the worker. Each call into the coder costs some
// microseconds of its own and restarts its streams through memory, which
// small rounds pay too often: a 64 MiB 10+4 stripe in 256 KiB rounds coded
// 25 % slower, a 16 MiB one in 1 MiB rounds 5-30 % slower than in one call
// (4 MiB rounds: 2-11 %), on a core that codes some 40 GB/s. So a round is
// what this agent's coder does in ecRoundTime, at its rate so far (a slow
// Arm core yields as often as a fast one), within [ecRound, ecRoundMax] of
// input.
const (
	ecRoundTime = 100 * time.Microsecond
	ecRound     = 4 * YieldEvery
	ecRoundMax  = 16 * YieldEvery
	// ecInlineAlone is the most an op's spans may hold to run on the
	// poller of a one-core agent (Handler.InlineAlone): a round's least
	// input and as much again for what it writes. On the 2-vCPU machine
	// this was measured on, what the agent added to a 1 MiB 10+4 stripe
	// (1.4 MiB of spans, 17 µs of coding then) went from 5.5-6.3 µs to
	// 3.2-3.8 µs.
	ecInlineAlone = 2 * ecRound
)

// ecService codes Reed-Solomon (ec.Coder) over the handoff: spans of the
// caller's window, in place, through the span accessor.
type ecService struct {
	cfg     ECConfig
	profile string
	opts    []ec.Option
	path    ec.SIMD

	mu     sync.Mutex
	coders map[uint64]*shapeCoder
	last   atomic.Pointer[shapeCoder] // the coder asked for last: most ops find it here, without the lock

	// rate is the coder's input bytes times outputs per microsecond, a
	// moving average over the rounds coded (roundWidth).
	rate atomic.Uint64

	scratch          sync.Pool // *ecScratch
	bytes            *prometheus.CounterVec
	shmBytes         [2]prometheus.Counter // bytes' (encode, shm) and (reconstruct, shm)
	encoded, rebuilt atomic.Uint64         // for the status
	obj              *objects
}

func newECService(cfg ECConfig, dpuProfile string) *ecService {
	s := &ecService{cfg: cfg, profile: dpuProfile, coders: map[uint64]*shapeCoder{}}
	s.scratch.New = func() any { return new(ecScratch) }
	return s
}

func (s *ecService) Name() string { return "ec" }

func (s *ecService) Open(_ context.Context, env *Env) error {
	simd, _ := ec.ParseSIMD(s.cfg.SIMD)
	if p, err := profile.Parse(s.profile); err == nil && p.Name != "none" && s.cfg.SIMD == "" {
		simd = ec.SSSE3 // the Arm cores' 128-bit NEON
	}
	s.opts = []ec.Option{ec.WithSIMD(simd), ec.WithConcurrency(env.Dispatcher.workers)}
	c, err := ec.New(1, 1, s.opts...)
	if err != nil {
		return fmt.Errorf("ec: %w", err)
	}
	s.path = c.SIMD()
	s.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hec_ec_bytes_total",
		Help: "Bytes the agent's erasure coder coded (the DPU rail), by op (encode: data in; reconstruct: shards rebuilt) and transport.",
	}, []string{"op", "transport"})
	env.Metrics.MustRegister(s.bytes)
	s.shmBytes = [2]prometheus.Counter{s.bytes.WithLabelValues("encode", "shm"), s.bytes.WithLabelValues("reconstruct", "shm")}
	// Ops of up to a round (ecInlineAlone) run on the poller of a
	// one-core agent: a worker between rounds yields anyway.
	env.Dispatcher.Handle(wire.OpECEncode, Handler{InlineMax: 16 << 10, InlineAlone: ecInlineAlone, Serve: s.serveEncode, Account: s.account})
	env.Dispatcher.Handle(wire.OpECReconstruct, Handler{InlineMax: 16 << 10, InlineAlone: ecInlineAlone, Serve: s.serveReconstruct, Account: s.account})
	return s.openObjects(env)
}

func (s *ecService) Start(ctx context.Context, env *Env) error {
	env.Go(func() { s.obj.run(ctx, s.cfg.scrubEvery()) })
	return nil
}
func (s *ecService) Stop() {}

func (s *ecService) Status() api.Service {
	return api.Service{Name: "ec", Served: true, Note: "reed-solomon, cauchy matrix, " + string(s.path)}
}

// FillStatus reports the coder's vector path and what it has coded.
func (s *ecService) FillStatus(st *api.Status) {
	st.EC = &api.ECStatus{SIMD: string(s.path), EncodedBytes: s.encoded.Load(), RebuiltBytes: s.rebuilt.Load()}
}

// shapeCoder is a coder and its shape's key (ecService.coder).
type shapeCoder struct {
	key uint64
	c   *ec.Coder
}

// coder returns the coder of k+m shards, made on first use.
func (s *ecService) coder(k, m int) (*ec.Coder, error) {
	key := uint64(k)<<16 | uint64(m)
	if l := s.last.Load(); l != nil && l.key == key {
		return l.c, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.coders[key]
	if !ok {
		c, err := ec.New(k, m, s.opts...)
		if err != nil {
			return nil, err
		}
		if len(s.coders) >= maxCoders {
			clear(s.coders)
		}
		sc = &shapeCoder{key: key, c: c}
		s.coders[key] = sc
	}
	s.last.Store(sc)
	return sc.c, nil
}

// ecShards are the shard spans of one op: in (read), out (written), each
// w bytes.
type ecShards struct {
	k, m    int
	w       uint32
	in, out []wire.Span
	idx     []int // reconstruct: the shard index of each in, then of each out
}

// ecScratch is what an op needs for its length and no longer: the plain
// form's spans cut into shards, the spans' views and each round's
// columns of them, then what Account needs of it. From a pool
// (ecService.scratch), as every op needs them and a 1 MiB stripe codes
// in 15 µs; Serve takes it (Request.Kept) and Account puts it back.
type ecScratch struct {
	spans []wire.Span
	views [][]byte

	encode bool   // else a reconstruct
	n      uint64 // the bytes coded: read (encode) or rebuilt
	// The last round's start, input bytes and outputs: timed by Account,
	// after the op's completion is out, where the clock is read anyway.
	last             time.Time
	lastIn, lastOuts int
}

// takeSpans returns n more spans of sc's (grown as needed).
func (sc *ecScratch) takeSpans(n int) []wire.Span {
	if cap(sc.spans)-len(sc.spans) < n {
		sc.spans = make([]wire.Span, 0, max(2*cap(sc.spans), len(sc.spans)+n))
	}
	out := sc.spans[len(sc.spans) : len(sc.spans)+n : len(sc.spans)+n]
	sc.spans = sc.spans[:len(sc.spans)+n]
	return out
}

func (sc *ecScratch) release(pool *sync.Pool) {
	clear(sc.views)
	*sc = ecScratch{spans: sc.spans[:0], views: sc.views}
	pool.Put(sc)
}

// even cuts span s into n spans of equal length, taken from sc; ok is
// false unless it divides and is not empty.
func even(sc *ecScratch, s wire.Span, n int) ([]wire.Span, uint32, bool) {
	if n <= 0 || s.Len == 0 || s.Len%uint32(n) != 0 {
		return nil, 0, false
	}
	w := s.Len / uint32(n)
	out := sc.takeSpans(n)
	for i := range out {
		out[i] = wire.Span{Off: s.Off + uint32(i)*w, Len: w}
	}
	return out, w, true
}

// sameLen reports whether every span has length w > 0.
func sameLen(spans []wire.Span, w uint32) bool {
	for _, sp := range spans {
		if sp.Len != w || w == 0 {
			return false
		}
	}
	return true
}

func (s *ecService) counts(req *Request) (*ec.Coder, wire.Status) {
	k, m, ok := wire.ECShardsOf(req.Arg0)
	if !ok || ec.CheckCounts(k, m) != nil {
		return nil, wire.StatusBadArg
	}
	c, err := s.coder(k, m)
	if err != nil {
		return nil, wire.StatusBadArg
	}
	return c, wire.StatusOK
}

// encodeShards reads OpECEncode's spans.
func encodeShards(req *Request, sc *ecScratch, k, m int) (ecShards, wire.Status) {
	sh := ecShards{k: k, m: m}
	if req.Flags&wire.FlagSGL != 0 {
		spans, st := req.SGL()
		if st != wire.StatusOK {
			return sh, st
		}
		if len(spans) != k+m || !sameLen(spans, spans[0].Len) {
			return sh, wire.StatusBadArg
		}
		sh.in, sh.out, sh.w = spans[:k], spans[k:], spans[0].Len
		return sh, wire.StatusOK
	}
	if req.NSpan != 2 {
		return sh, wire.StatusBadArg
	}
	var ok bool
	if sh.in, sh.w, ok = even(sc, req.Spans[0], k); !ok || req.Spans[1].Len != uint32(m)*sh.w || uint64(m)*uint64(sh.w) > 1<<32-1 {
		return sh, wire.StatusBadArg
	}
	sh.out, _, _ = even(sc, req.Spans[1], m)
	return sh, wire.StatusOK
}

// reconstructShards reads OpECReconstruct's spans and its index bytes (a
// private copy: the host may rewrite them while the op runs).
func reconstructShards(req *Request, sc *ecScratch, k, m int) (ecShards, wire.Status) {
	sh := ecShards{k: k, m: m}
	var idxSpan wire.Span
	if req.Flags&wire.FlagSGL != 0 {
		spans, st := req.SGL()
		if st != wire.StatusOK {
			return sh, st
		}
		r := len(spans) - k - 1
		if r < 1 || !sameLen(spans[:k+r], spans[0].Len) {
			return sh, wire.StatusBadArg
		}
		sh.in, sh.out, sh.w, idxSpan = spans[:k], spans[k:k+r], spans[0].Len, spans[k+r]
	} else {
		if req.NSpan != 3 {
			return sh, wire.StatusBadArg
		}
		var ok bool
		if sh.in, sh.w, ok = even(sc, req.Spans[0], k); !ok || req.Spans[2].Len%sh.w != 0 || req.Spans[2].Len == 0 {
			return sh, wire.StatusBadArg
		}
		sh.out, _, _ = even(sc, req.Spans[2], int(req.Spans[2].Len/sh.w))
		idxSpan = req.Spans[1]
	}
	r := len(sh.out)
	if idxSpan.Len != uint32(k+r) || r > m {
		return sh, wire.StatusBadArg
	}
	raw := make([]byte, idxSpan.Len)
	if err := req.Mem.ReadAt(raw, uint64(idxSpan.Off)); err != nil {
		return sh, wire.StatusBadSpan
	}
	seen := make([]bool, k+m)
	for _, b := range raw {
		i := int(b)
		if i >= k+m || seen[i] {
			return sh, wire.StatusBadArg
		}
		seen[i] = true
		sh.idx = append(sh.idx, i)
	}
	return sh, wire.StatusOK
}

// views returns the spans' bytes in place, in dst (as long as spans), or
// nil when any is not mapped.
func views(dst [][]byte, mem ring.Accessor, spans []wire.Span) [][]byte {
	out := dst[:len(spans)]
	if w, ok := mem.(*ring.MappedWindow); ok {
		// The shared window: View inlined, not a call through the
		// interface per shard.
		for i, sp := range spans {
			b, ok := w.View(sp)
			if !ok {
				return nil
			}
			out[i] = b
		}
		return out
	}
	for i, sp := range spans {
		b, ok := mem.View(sp)
		if !ok {
			return nil
		}
		out[i] = b
	}
	return out
}

// rounds codes the op's columns round by round — in place where the
// window is mapped, through staged copies where it is not — calling code
// with each round's columns, the in ones then the out ones (with
// outEmpty, out columns of length 0 and room for the round: what a
// rebuild fills), and yielding between rounds.
func (s *ecService) rounds(req *Request, sc *ecScratch, sh ecShards, outEmpty bool, code func(cols [][]byte) error) wire.Status {
	w := int(sh.w)
	cw := s.roundWidth(w, sh.k, len(sh.out))
	nin, nout := len(sh.in), len(sh.out)
	// The views of the spans, then each round's columns of them.
	if cap(sc.views) < 2*(nin+nout) {
		sc.views = make([][]byte, 2*(nin+nout))
	}
	slots := sc.views[:2*(nin+nout)]
	in, out := views(slots[:nin:nin], req.Mem, sh.in), views(slots[nin:nin+nout:nin+nout], req.Mem, sh.out)
	staged := in == nil || out == nil
	var scratch []byte
	if staged {
		cw = min(cw, w)
		scratch = make([]byte, (len(sh.in)+len(sh.out))*cw)
	}
	cols := slots[nin+nout:]
	ins, outs := cols[:nin:nin], cols[nin:]
	for c := 0; c < w; c += cw {
		if c > 0 {
			req.Yield()
		}
		n := min(cw, w-c)
		var copied time.Time // a staged round's copy in, when tracing
		if staged && req.Tracing() {
			copied = mono.Now()
		}
		for i := range ins {
			if staged {
				ins[i] = scratch[i*cw : i*cw+n]
				if err := req.Mem.ReadAt(ins[i], uint64(sh.in[i].Off)+uint64(c)); err != nil {
					return wire.StatusBadSpan
				}
			} else {
				ins[i] = in[i][c : c+n : c+n]
			}
		}
		if !copied.IsZero() {
			req.Stage(trace.StageCopy, copied, mono.Now())
		}
		for j := range outs {
			if staged {
				outs[j] = scratch[(len(ins)+j)*cw : (len(ins)+j)*cw+n : (len(ins)+j)*cw+n]
			} else {
				outs[j] = out[j][c : c+n : c+n]
			}
			if outEmpty {
				outs[j] = outs[j][:0]
			}
		}
		t0 := req.start // the first round's, on the poller: from the op's start
		if c > 0 || t0.IsZero() {
			t0 = mono.Now()
		}
		if err := code(cols); err != nil {
			return wire.StatusBadArg
		}
		if req.Tracing() {
			req.Stage(trace.StageCode, t0, mono.Now())
		}
		if c+n < w {
			s.observe(len(ins)*n, len(outs), time.Since(t0))
		} else { // the last: Account times it
			sc.last, sc.lastIn, sc.lastOuts = t0, len(ins)*n, len(outs)
		}
		if staged {
			if req.Tracing() {
				copied = mono.Now()
			}
			for j, o := range outs {
				if err := req.Mem.WriteAt(o[:n], uint64(sh.out[j].Off)+uint64(c)); err != nil {
					return wire.StatusBadSpan
				}
			}
			if !copied.IsZero() {
				req.Stage(trace.StageCopy, copied, mono.Now())
			}
		}
	}
	return wire.StatusOK
}

// roundWidth is the columns of each round of an op w columns wide, from
// k input shards into outs outputs: rounds of about ecRoundTime (at most
// half as much again), as even as Align allows, so that no round is a
// sliver (a 1 MiB 10+4 stripe's 104,896 columns were a round of 104,832
// and one of 64: a second call into the coder, and a yield, for nothing).
func (s *ecService) roundWidth(w, k, outs int) int {
	most := ecRound
	if r := s.rate.Load(); r > 0 {
		most = min(max(int(r)*int(ecRoundTime/time.Microsecond)/max(outs, 1), ecRound), ecRoundMax)
	}
	most = max(most/k/ec.Align*ec.Align, ec.Align)
	n := max((w+most/2)/most, 1)
	return ((w+n-1)/n + ec.Align - 1) / ec.Align * ec.Align
}

// observe adds a round of in bytes into outs outputs that took d to the
// coder's rate.
func (s *ecService) observe(in, outs int, d time.Duration) {
	us := uint64(d / time.Microsecond)
	if us < 5 {
		return // too short to tell
	}
	r := uint64(in) * uint64(outs) / us
	if old := s.rate.Load(); old != 0 {
		r = (7*old + r) / 8
	}
	s.rate.Store(r) // workers racing here lose a sample, no more
}

func (s *ecService) serveEncode(_ context.Context, req *Request, resp *wire.Desc) {
	c, st := s.counts(req)
	if st == wire.StatusOK {
		sc := s.scratch.Get().(*ecScratch)
		req.Kept = sc
		var sh ecShards
		if sh, st = encodeShards(req, sc, c.DataShards(), c.ParityShards()); st == wire.StatusOK {
			st = s.rounds(req, sc, sh, false, c.Encode)
			if st == wire.StatusOK {
				s.done(req, resp, sh)
				sc.encode, sc.n = true, uint64(sh.k)*uint64(sh.w)
			}
		}
	}
	resp.Status = st
}

func (s *ecService) serveReconstruct(_ context.Context, req *Request, resp *wire.Desc) {
	c, st := s.counts(req)
	if st == wire.StatusOK {
		sc := s.scratch.Get().(*ecScratch)
		req.Kept = sc
		var sh ecShards
		if sh, st = reconstructShards(req, sc, c.DataShards(), c.ParityShards()); st == wire.StatusOK {
			k, n := sh.k, sh.k+sh.m
			shards := make([][]byte, n)
			st = s.rounds(req, sc, sh, true, func(cols [][]byte) error {
				clear(shards)
				for i, b := range cols {
					shards[sh.idx[i]] = b
				}
				return c.ReconstructSome(shards, sh.idx[k:])
			})
			if st == wire.StatusOK {
				s.done(req, resp, sh)
				sc.n = uint64(len(sh.out)) * uint64(sh.w)
			}
		}
	}
	resp.Status = st
}

// done completes an op: Arg0 = w; the plain form names the bytes written
// (a stream transport sends them back).
func (s *ecService) done(req *Request, resp *wire.Desc, sh ecShards) {
	resp.Arg0 = uint64(sh.w)
	if req.Flags&wire.FlagSGL == 0 {
		resp.NSpan = 1
		resp.Spans[0] = req.Spans[req.NSpan-1]
	}
}

// account is the handlers' Account: an op's bytes and its last round's
// rate, once the host has its completion; its scratch back to the pool.
func (s *ecService) account(req *Request, resp *wire.Desc, end time.Time) {
	sc, ok := req.Kept.(*ecScratch)
	if !ok {
		return
	}
	if resp.Status == wire.StatusOK {
		switch {
		case req.Transport == "shm" && sc.encode:
			s.shmBytes[0].Add(float64(sc.n))
		case req.Transport == "shm":
			s.shmBytes[1].Add(float64(sc.n))
		case sc.encode:
			s.bytes.WithLabelValues("encode", req.Transport).Add(float64(sc.n))
		default:
			s.bytes.WithLabelValues("reconstruct", req.Transport).Add(float64(sc.n))
		}
		if sc.encode {
			s.encoded.Add(sc.n)
		} else {
			s.rebuilt.Add(sc.n)
		}
		if sc.lastIn > 0 {
			s.observe(sc.lastIn, sc.lastOuts, end.Sub(sc.last))
		}
	}
	sc.release(&s.scratch)
}
