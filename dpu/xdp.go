package dpu

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/bpf"
	"github.com/hecsys/hec/kv"
	"github.com/hecsys/hec/kv/udp"
	"github.com/hecsys/hec/shared/api"
)

// XDPConfig is the XDP fast path's section ([xdp]).
type XDPConfig struct {
	// Iface names the interface the XDP fast path attaches to (counters,
	// allow-list, samples, hot GETs answered in the kernel). Default off.
	Iface string `toml:"iface"`
	// Mode is auto (default: native, else generic), native or generic.
	Mode string `toml:"mode"`
	// Replace lets the agent replace an XDP program it did not attach.
	Replace bool `toml:"replace"`
	// PinDir is where the counters, talkers and allow-list are pinned
	// (bpffs), so they outlive a restart. Default
	// /sys/fs/bpf/hec/nsINODE-IFACE; "off" pins nothing.
	PinDir string `toml:"pin_dir"`
	// ACLDefault is what the allow-list does with sources it does not
	// name on the service ports: allow (default) or deny.
	ACLDefault string `toml:"acl_default"`
	// HotKeys bounds the keys whose UDP GETs XDP answers. Default 1024
	// (at most 4096); 0 turns hot GETs off.
	HotKeys *int `toml:"hot_keys"`
	// HotMaxValue is the largest value held for XDP. Default 512 bytes.
	HotMaxValue int `toml:"hot_max_value"`
	// HotMinRate is how many GETs per second reaching user space make a
	// key hot. Default 100.
	HotMinRate float64 `toml:"hot_min_rate"`
}

func (c *XDPConfig) withDefaults() error {
	defString(&c.Iface, Off)
	defString(&c.Mode, "auto")
	defString(&c.ACLDefault, "allow")
	if c.HotKeys == nil {
		n := 1024
		c.HotKeys = &n
	}
	defInt(&c.HotMaxValue, 512)
	if c.HotMinRate == 0 {
		c.HotMinRate = 100
	}
	return nil
}

func (c *XDPConfig) validate() error {
	if _, err := bpf.ParseMode(c.Mode); err != nil {
		return fmt.Errorf("--xdp-mode: %v: %w", err, ErrConfig)
	}
	if c.ACLDefault != "allow" && c.ACLDefault != "deny" {
		return fmt.Errorf("--acl-default %q: want allow or deny: %w", c.ACLDefault, ErrConfig)
	}
	if *c.HotKeys < 0 || *c.HotKeys > bpf.HotSlots {
		return fmt.Errorf("--hot-keys %d: want 0..%d: %w", *c.HotKeys, bpf.HotSlots, ErrConfig)
	}
	if c.HotMaxValue < 0 || c.HotMaxValue > bpf.HotBodyMax-HotReplyOverhead {
		return fmt.Errorf("--hot-max-value %d: want 0..%d: %w", c.HotMaxValue, bpf.HotBodyMax-HotReplyOverhead, ErrConfig)
	}
	if c.HotMinRate < 0 {
		return fmt.Errorf("--hot-min-rate %g: negative: %w", c.HotMinRate, ErrConfig)
	}
	return nil
}

func (c *XDPConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Iface, "xdp", c.Iface, "interface to attach the XDP fast path to (counters, allow-list, samples, hot GETs), or off")
	fs.StringVar(&c.Mode, "xdp-mode", c.Mode, "XDP attach mode: auto (native, else generic), native or generic")
	fs.BoolVar(&c.Replace, "xdp-replace", c.Replace, "replace an XDP program on the interface that hecd did not attach")
	fs.StringVar(&c.PinDir, "xdp-pin-dir", c.PinDir, "bpffs directory for the counters and allow-list (default /sys/fs/bpf/hec/nsINODE-IFACE), or off")
	fs.StringVar(&c.ACLDefault, "acl-default", c.ACLDefault, "sources the allow-list does not name, on the service ports: allow or deny")
	fs.Var(intPtr{&c.HotKeys}, "hot-keys", "keys whose UDP GETs XDP answers (0: off, at most 4096)")
	fs.IntVar(&c.HotMaxValue, "hot-max-value", c.HotMaxValue, "largest value held for XDP, in bytes")
	fs.Float64Var(&c.HotMinRate, "hot-min-rate", c.HotMinRate, "GETs per second reaching user space that make a key hot")
}

// xdpService is the XDP fast path: the program on the agent's interface,
// the hot-GET admission, and the management API over both. A program that
// cannot load or attach is reported as not served, never fatal: the
// services behind it still serve.
type xdpService struct {
	cfg  XDPConfig
	note string // why it is not served
	x    atomic.Pointer[xdp]
}

func newXDPService(cfg XDPConfig) *xdpService {
	return &xdpService{cfg: cfg, note: "off (hecd --xdp IFACE)"}
}

func (s *xdpService) Name() string { return "xdp" }

func (s *xdpService) Open(_ context.Context, env *Env) error {
	serveXDP(env.Mux, s)
	if s.cfg.Iface != Off {
		env.Metrics.MustRegister(newXDPCollector(s))
	}
	return nil
}

// Start loads and attaches the program once every listener is open: it
// classifies by their ports.
func (s *xdpService) Start(ctx context.Context, env *Env) error {
	if s.cfg.Iface == Off {
		return nil
	}
	x, err := startXDP(ctx, env, s.cfg)
	if err != nil {
		s.note = err.Error()
		env.Log.Error("xdp fast path not served", "iface", s.cfg.Iface, "err", err)
		return nil
	}
	s.x.Store(x)
	return nil
}

func (s *xdpService) Stop() {
	if x := s.x.Load(); x != nil {
		x.close()
	}
}

func (s *xdpService) Status() api.Service {
	x := s.x.Load()
	if x == nil {
		return api.Service{Name: "xdp", Addr: s.cfg.Iface, Note: s.note}
	}
	note := x.mode.String() + " mode"
	if x.hot != nil {
		note += ", hot GETs answered in XDP"
	}
	return api.Service{Name: "xdp", Addr: s.cfg.Iface, Served: true, Note: note}
}

// xdp is the loaded, attached program and its hot-key admission.
type xdp struct {
	cfg    XDPConfig
	log    *slog.Logger
	store  *kv.Store
	shared *Shared
	prog   *bpf.Program
	ifname string
	mode   bpf.Mode
	hot    *bpf.HotCache // nil: hot GETs off

	mu   sync.Mutex
	seen map[string]uint32 // GETs that reached user space since the last admission round
	idle map[string]int    // held keys: rounds without a hit in XDP

	sampling sync.Mutex // one sample reader at a time
}

// Hot-GET admission: every round the keys GET-requested at least
// hotMinRate per second in user space are admitted (the most requested
// first); held keys idle for hotIdleRounds rounds are evicted.
const (
	hotRound      = 200 * time.Millisecond
	hotIdleRounds = 25
	hotSeenMax    = 1 << 16
)

func portOf(addr string) uint16 {
	if addr == "" || addr == Off {
		return 0
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(p, 10, 16)
	return uint16(n)
}

// netnsID names the network namespace the agent runs in (its inode), so
// agents in several namespaces of one host pin apart.
func netnsID() string {
	fi, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		return "ns"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return "ns" + strconv.FormatUint(st.Ino, 10)
	}
	return "ns"
}

// startXDP loads the program and attaches it to the configured interface.
func startXDP(ctx context.Context, env *Env, c XDPConfig) (*xdp, error) {
	mode, err := bpf.ParseMode(c.Mode)
	if err != nil {
		return nil, err
	}
	pin := c.PinDir
	if pin == "" {
		pin = filepath.Join(bpf.DefaultPinRoot, netnsID()+"-"+c.Iface)
	}
	if pin == Off {
		pin = ""
	}
	sh := env.Shared
	cfg := bpf.Config{
		Ports: bpf.Ports{RESP: portOf(sh.Addr("resp")), UDPGet: portOf(sh.Addr("udp")), Peer: portOf(sh.Addr("peer")),
			Mgmt: portOf(sh.Addr("mgmt"))},
		DefaultDeny: c.ACLDefault == "deny",
		HotGET:      *c.HotKeys > 0 && sh.Addr("udp") != "" && sh.Store != nil,
		PinDir:      pin,
	}
	prog, err := bpf.Load(cfg)
	if err != nil {
		return nil, err
	}
	x := &xdp{cfg: c, log: env.Log, store: sh.Store, shared: sh, prog: prog, ifname: c.Iface,
		seen: map[string]uint32{}, idle: map[string]int{}}
	if x.mode, err = prog.Attach(c.Iface, mode, c.Replace); err != nil {
		prog.Close()
		return nil, err
	}
	if cfg.HotGET {
		x.hot = prog.Hot()
		sh.OnWrite(x.hot.Invalidate)
		sh.OnGETSeen(x.seenGET)
		env.Go(func() { x.admitLoop(ctx) })
	}
	return x, nil
}

func (x *xdp) close() {
	if x.hot != nil {
		x.shared.OnWrite(nil)
		x.shared.OnGETSeen(nil)
	}
	if err := x.prog.Close(); err != nil {
		x.log.Warn("xdp close", "err", err)
	}
}

// seenGET counts a GET that reached user space (udp.Server.Seen).
func (x *xdp) seenGET(key []byte) {
	if !bpf.ValidHotKey(key) {
		return
	}
	x.mu.Lock()
	if n, ok := x.seen[string(key)]; ok {
		x.seen[string(key)] = n + 1
	} else if len(x.seen) < hotSeenMax {
		x.seen[string(key)] = 1
	}
	x.mu.Unlock()
}

func (x *xdp) admitLoop(ctx context.Context) {
	t := time.NewTicker(hotRound)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			x.admitRound()
		}
	}
}

type candidate struct {
	key  string
	gets uint32
}

// admitRound admits this round's hottest keys and evicts idle ones.
func (x *xdp) admitRound() {
	x.mu.Lock()
	seen := x.seen
	x.seen = make(map[string]uint32, len(seen))
	x.mu.Unlock()

	held, err := x.hot.Entries(true)
	if err != nil {
		x.log.Warn("hot keys", "err", err)
		return
	}
	hits := make(map[string]uint64, len(held))
	for _, e := range held {
		hits[e.Key] = e.Hits
		if e.Hits > 0 || seen[e.Key] > 0 {
			x.idle[e.Key] = 0
		} else if x.idle[e.Key]++; x.idle[e.Key] >= hotIdleRounds {
			x.hot.Evict([]byte(e.Key))
			delete(x.idle, e.Key)
			delete(hits, e.Key) // gone: not a candidate to evict below
		}
	}
	min := uint32(x.cfg.HotMinRate * hotRound.Seconds())
	min = max(min, 1)
	var cands []candidate
	for k, n := range seen {
		if n >= min {
			cands = append(cands, candidate{k, n})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int { return int(b.gets) - int(a.gets) })
	coldest := func(keys []string) (string, uint64) {
		k, h := "", uint64(1<<63)
		for _, o := range keys {
			if hits[o] < h {
				k, h = o, hits[o]
			}
		}
		return k, h
	}
	evict := func(k string) {
		x.hot.Evict([]byte(k))
		delete(hits, k)
		delete(x.idle, k)
	}
	for _, c := range cands {
		err := x.admit(c.key)
		if errors.Is(err, bpf.ErrHotFull) {
			// Both slots the key may take are held: take the colder
			// one's, if colder than this key.
			if k, h := coldest(x.hot.Occupants([]byte(c.key))); k != "" && h < uint64(c.gets) {
				evict(k)
				err = x.admit(c.key)
			}
		}
		if err == nil && x.hot.Len() > *x.cfg.HotKeys {
			held := make([]string, 0, len(hits))
			for k := range hits {
				if k != c.key {
					held = append(held, k)
				}
			}
			if k, h := coldest(held); k != "" && h < uint64(c.gets) {
				evict(k)
			} else {
				evict(c.key)
				continue
			}
		}
		if err != nil {
			if !errors.Is(err, bpf.ErrHotFull) && !errors.Is(err, bpf.ErrHotValue) && !errors.Is(err, kv.ErrNotFound) {
				x.log.Debug("hot admit", "key", c.key, "err", err)
			}
			continue
		}
		x.idle[c.key] = 0
		hits[c.key] = uint64(c.gets)
	}
}

// admit holds key with its current value.
func (x *xdp) admit(key string) error {
	k := []byte(key)
	return x.hot.Admit(k, func() (bpf.HotValue, error) {
		e, err := x.store.Get(k, nil)
		if err != nil {
			return bpf.HotValue{}, err
		}
		if len(e.Value) > x.cfg.HotMaxValue {
			return bpf.HotValue{}, fmt.Errorf("%w: %d bytes", bpf.ErrHotValue, len(e.Value))
		}
		reply := udp.AppendReply(nil, 0, k, &e, false)
		return bpf.HotValue{Body: reply[udp.HeaderSize:], Version: e.Version, Expires: e.ExpiresAt}, nil
	})
}

// status reads the counters, the hot map's state and (talkers > 0) the
// top talkers.
func (x *xdp) status(talkers int) (api.XDPStatus, error) {
	st := api.XDPStatus{Interface: x.ifname, Mode: x.mode.String(), Arch: runtime.GOARCH, DefaultDeny: x.prog.Config().DefaultDeny,
		Drops: map[string]uint64{}}
	st.JITedBytes, _ = x.prog.JITedBytes()
	cs, err := x.prog.Stats()
	if err != nil {
		return st, err
	}
	for _, c := range cs {
		xc := api.XDPClass{Class: c.Class.String(), Packets: c.Packets, Bytes: c.Bytes, Passed: c.Passed, Answered: c.Answered,
			Dropped: map[string]uint64{}, HotMiss: c.HotMiss, HotTorn: c.HotTorn}
		for i, r := range bpf.DropReasons {
			xc.Dropped[r] = c.Dropped[i]
			st.Drops[r] += c.Dropped[i]
		}
		st.Classes = append(st.Classes, xc)
	}
	if talkers > 0 {
		ts, err := x.prog.Talkers(talkers)
		if err != nil {
			return st, err
		}
		for _, t := range ts {
			st.Talkers = append(st.Talkers, api.XDPTalker{Addr: t.Addr.String(), Packets: t.Packets, Bytes: t.Bytes})
		}
	}
	if x.hot != nil {
		h := &api.XDPHot{Invalidations: x.hot.Invalidations()}
		h.Held, h.Served = x.hot.Counts()
		st.Hot = h
	}
	return st, nil
}

func serveXDP(mux *Mux, s *xdpService) {
	off := func(w http.ResponseWriter) *xdp {
		x := s.x.Load()
		if x == nil {
			http.Error(w, "xdp is not served by this agent: "+s.note, http.StatusNotFound)
		}
		return x
	}
	mux.HandleFunc("GET /v1/xdp", func(w http.ResponseWriter, r *http.Request) {
		x := off(w)
		if x == nil {
			return
		}
		n, _ := strconv.Atoi(r.URL.Query().Get("talkers"))
		if n <= 0 {
			n = 10
		}
		st, err := x.status(n)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, st)
	})
	mux.HandleFunc("GET /v1/xdp/samples", func(w http.ResponseWriter, r *http.Request) {
		x := off(w)
		if x == nil {
			return
		}
		q := r.URL.Query()
		every, snap, count, secs := uint64(1), uint64(128), uint64(0), 5.0
		var err error
		for name, dst := range map[string]*uint64{"every": &every, "snap": &snap, "max": &count} {
			if v := q.Get(name); v != "" {
				if *dst, err = strconv.ParseUint(v, 10, 32); err != nil {
					http.Error(w, name+": "+err.Error(), http.StatusBadRequest)
					return
				}
			}
		}
		if v := q.Get("seconds"); v != "" {
			if secs, err = strconv.ParseFloat(v, 64); err != nil || secs <= 0 || secs > 3600 {
				http.Error(w, "seconds: want 0 < s <= 3600", http.StatusBadRequest)
				return
			}
		}
		// The stream's own packets would be sampled into the stream:
		// management traffic only when asked for by name.
		mask := uint32(1<<bpf.NumClasses-1) &^ (1 << bpf.ClassMgmt)
		if v := q.Get("classes"); v != "" && v != "default" {
			mask = 0
			for _, name := range strings.Split(v, ",") {
				c, ok := bpf.ParseClass(name)
				if name == "all" {
					mask, ok = 1<<bpf.NumClasses-1, true
				}
				if !ok {
					http.Error(w, fmt.Sprintf("classes: %q: want all or resp, udp_get, peer, mgmt, other", name), http.StatusBadRequest)
					return
				}
				mask |= 1 << c
			}
		}
		if every == 0 || snap == 0 || snap > bpf.SnapMax {
			http.Error(w, fmt.Sprintf("every >= 1, 1 <= snap <= %d", bpf.SnapMax), http.StatusBadRequest)
			return
		}
		if !x.sampling.TryLock() {
			http.Error(w, "another inspect is reading samples", http.StatusConflict)
			return
		}
		defer x.sampling.Unlock()
		rd, err := x.prog.Samples()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer rd.Close()
		if err := x.prog.SetSampling(uint32(every), uint32(snap), mask); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer x.prog.SetSampling(0, 0, 0)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		fl, _ := w.(http.Flusher)
		enc := json.NewEncoder(w)
		wall := time.Now().Add(-bpf.MonotonicNow()) // + a monotonic time: its wall time
		end := time.Now().Add(time.Duration(secs * float64(time.Second)))
		for n := uint64(0); count == 0 || n < count; {
			if r.Context().Err() != nil || time.Now().After(end) {
				return
			}
			dl := time.Now().Add(200 * time.Millisecond)
			if dl.After(end) {
				dl = end
			}
			s, err := rd.Read(dl)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if err != nil {
				return
			}
			if enc.Encode(api.XDPSample{Time: wall.Add(s.Time), TimeNS: int64(s.Time), Len: s.Len, Class: s.Class.String(), Verdict: s.Verdict, Data: s.Data}) != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
			n++
		}
	})
	mux.HandleFunc("GET /v1/acl", func(w http.ResponseWriter, r *http.Request) {
		x := off(w)
		if x == nil {
			return
		}
		rules, err := x.prog.ACLList()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out := []api.ACLRule{}
		for _, r := range rules {
			out = append(out, api.ACLRule{Prefix: r.Prefix.String(), Allow: r.Allow})
		}
		writeJSON(w, api.ACL{DefaultDeny: x.prog.Config().DefaultDeny, Rules: out})
	})
	mux.HandleFunc("POST /v1/acl", func(w http.ResponseWriter, r *http.Request) {
		x := off(w)
		if x == nil {
			return
		}
		var rule api.ACLRule
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&rule); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		pfx, err := parsePrefix(rule.Prefix)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := x.prog.ACLAdd(bpf.ACLRule{Prefix: pfx, Allow: rule.Allow}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("DELETE /v1/acl", func(w http.ResponseWriter, r *http.Request) {
		x := off(w)
		if x == nil {
			return
		}
		pfx, err := parsePrefix(r.URL.Query().Get("prefix"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := x.prog.ACLDel(pfx); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, bpf.ErrNoRule) {
				code = http.StatusNotFound
			}
			http.Error(w, err.Error(), code)
			return
		}
		w.Write([]byte("ok\n"))
	})
}

// parsePrefix reads a prefix or a single address (a /32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("prefix %q: want ADDR/BITS or ADDR", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// HotReplyOverhead bounds the bytes a reply adds to the key and value
// ("VALUE ", the key of up to bpf.HotKeyMax bytes, " 0 ", the length,
// the CRLFs and "END"): HotMaxValue stays under bpf.HotBodyMax minus it.
const HotReplyOverhead = 6 + bpf.HotKeyMax + 3 + 4 + 2 + 2 + 5

// xdpCollector exports the program's counters and the hot map's state.
type xdpCollector struct {
	s                             *xdpService
	packets, bytes, verdicts, hot *prometheus.Desc
}

func newXDPCollector(s *xdpService) *xdpCollector {
	return &xdpCollector{s: s,
		packets:  prometheus.NewDesc("hec_xdp_packets_total", "Packets seen by the XDP program on the agent's interface, by class.", []string{"class"}, nil),
		bytes:    prometheus.NewDesc("hec_xdp_bytes_total", "Bytes seen by the XDP program, by class.", []string{"class"}, nil),
		verdicts: prometheus.NewDesc("hec_xdp_verdicts_total", "What the XDP program did with packets, by class and verdict (passed, answered, dropped_acl, dropped_malformed).", []string{"class", "verdict"}, nil),
		hot:      prometheus.NewDesc("hec_xdp_hot_keys", "Keys held in the XDP hot-GET map, by state (held, served).", []string{"state"}, nil),
	}
}

func (c *xdpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.bytes, c.verdicts, c.hot} {
		ch <- d
	}
}

func (c *xdpCollector) Collect(ch chan<- prometheus.Metric) {
	x := c.s.x.Load()
	if x == nil {
		return
	}
	st, err := x.status(0)
	if err != nil {
		return
	}
	for _, cl := range st.Classes {
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(cl.Packets), cl.Class)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(cl.Bytes), cl.Class)
		ch <- prometheus.MustNewConstMetric(c.verdicts, prometheus.CounterValue, float64(cl.Passed), cl.Class, "passed")
		ch <- prometheus.MustNewConstMetric(c.verdicts, prometheus.CounterValue, float64(cl.Answered), cl.Class, "answered")
		for r, n := range cl.Dropped {
			ch <- prometheus.MustNewConstMetric(c.verdicts, prometheus.CounterValue, float64(n), cl.Class, "dropped_"+r)
		}
	}
	if st.Hot != nil {
		ch <- prometheus.MustNewConstMetric(c.hot, prometheus.GaugeValue, float64(st.Hot.Held), "held")
		ch <- prometheus.MustNewConstMetric(c.hot, prometheus.GaugeValue, float64(st.Hot.Served), "served")
	}
}
