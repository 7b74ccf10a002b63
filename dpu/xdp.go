package dpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"syscall"
	"time"

	"github.com/hecsys/hec/bpf"
	"github.com/hecsys/hec/kv"
	"github.com/hecsys/hec/kv/udp"
)

// xdp is the agent's XDP fast path: the program on its interface, the
// hot-GET admission, and the management API over both.
type xdp struct {
	a      *Agent
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
func (a *Agent) startXDP(ctx context.Context, wg *sync.WaitGroup) (*xdp, error) {
	mode, err := bpf.ParseMode(a.cfg.XDPMode)
	if err != nil {
		return nil, err
	}
	pin := a.cfg.XDPPinDir
	if pin == "" {
		pin = filepath.Join(bpf.DefaultPinRoot, netnsID()+"-"+a.cfg.XDP)
	}
	if pin == Off {
		pin = ""
	}
	cfg := bpf.Config{
		Ports: bpf.Ports{RESP: portOf(a.cfg.RESP), UDPGet: portOf(a.cfg.UDP), Peer: portOf(a.cfg.Peer),
			Mgmt: portOf(a.cfg.Mgmt)},
		DefaultDeny: a.cfg.ACLDefault == "deny",
		HotGET:      *a.cfg.HotKeys > 0 && a.cfg.UDP != Off,
		PinDir:      pin,
	}
	prog, err := bpf.Load(cfg)
	if err != nil {
		return nil, err
	}
	x := &xdp{a: a, prog: prog, ifname: a.cfg.XDP, seen: map[string]uint32{}, idle: map[string]int{}}
	if x.mode, err = prog.Attach(a.cfg.XDP, mode, a.cfg.XDPReplace); err != nil {
		prog.Close()
		return nil, err
	}
	if cfg.HotGET {
		x.hot = prog.Hot()
		a.hot.Store(x.hot)
		wg.Add(1)
		go func() { defer wg.Done(); x.admitLoop(ctx) }()
	}
	return x, nil
}

func (x *xdp) close() {
	if x.hot != nil {
		x.a.hot.Store(nil)
	}
	if err := x.prog.Close(); err != nil {
		x.a.log.Warn("xdp close", "err", err)
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
		x.a.log.Warn("hot keys", "err", err)
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
	min := uint32(x.a.cfg.HotMinRate * hotRound.Seconds())
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
		if err == nil && x.hot.Len() > *x.a.cfg.HotKeys {
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
				x.a.log.Debug("hot admit", "key", c.key, "err", err)
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
		e, err := x.a.store.Get(k, nil)
		if err != nil {
			return bpf.HotValue{}, err
		}
		if len(e.Value) > x.a.cfg.HotMaxValue {
			return bpf.HotValue{}, fmt.Errorf("%w: %d bytes", bpf.ErrHotValue, len(e.Value))
		}
		reply := udp.AppendReply(nil, 0, k, &e, false)
		return bpf.HotValue{Body: reply[udp.HeaderSize:], Version: e.Version, Expires: e.ExpiresAt}, nil
	})
}

// XDPStatus is the body of GET /v1/xdp.
type XDPStatus struct {
	Interface   string            `json:"interface"`
	Mode        string            `json:"mode"`
	Arch        string            `json:"arch"`
	JITedBytes  uint32            `json:"jited_bytes"` // machine code of the program; 0: interpreted
	DefaultDeny bool              `json:"acl_default_deny"`
	Classes     []XDPClass        `json:"classes"`
	Talkers     []XDPTalker       `json:"top_talkers"`
	Hot         *XDPHot           `json:"hot,omitempty"`
	Drops       map[string]uint64 `json:"drops"`
}

// XDPClass is one class's counters.
type XDPClass struct {
	Class    string            `json:"class"`
	Packets  uint64            `json:"packets"`
	Bytes    uint64            `json:"bytes"`
	Passed   uint64            `json:"passed"`
	Answered uint64            `json:"answered"`
	Dropped  map[string]uint64 `json:"dropped"`
	HotMiss  uint64            `json:"hot_miss,omitempty"`
	HotTorn  uint64            `json:"hot_torn,omitempty"`
}

// XDPTalker is one source's traffic.
type XDPTalker struct {
	Addr    string `json:"addr"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// XDPHot is the hot-GET map's state.
type XDPHot struct {
	Held          int    `json:"held"`
	Served        int    `json:"served"`
	Invalidations uint64 `json:"invalidations"`
}

// status reads the counters, the hot map's state and (talkers > 0) the
// top talkers.
func (x *xdp) status(talkers int) (XDPStatus, error) {
	st := XDPStatus{Interface: x.ifname, Mode: x.mode.String(), Arch: runtime.GOARCH, DefaultDeny: x.prog.Config().DefaultDeny,
		Drops: map[string]uint64{}}
	st.JITedBytes, _ = x.prog.JITedBytes()
	cs, err := x.prog.Stats()
	if err != nil {
		return st, err
	}
	for _, c := range cs {
		xc := XDPClass{Class: c.Class.String(), Packets: c.Packets, Bytes: c.Bytes, Passed: c.Passed, Answered: c.Answered,
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
			st.Talkers = append(st.Talkers, XDPTalker{Addr: t.Addr.String(), Packets: t.Packets, Bytes: t.Bytes})
		}
	}
	if x.hot != nil {
		h := &XDPHot{Invalidations: x.hot.Invalidations()}
		h.Held, h.Served = x.hot.Counts()
		st.Hot = h
	}
	return st, nil
}

// XDPSample is one sampled packet, as GET /v1/xdp/samples streams them
// (one JSON object a line).
type XDPSample struct {
	Time    time.Time `json:"time"`
	TimeNS  int64     `json:"t_ns"` // CLOCK_MONOTONIC
	Len     int       `json:"len"`
	Class   string    `json:"class"`
	Verdict string    `json:"verdict"`
	Data    []byte    `json:"data"`
}

// ACLRule is an allow-list rule in the management API.
type ACLRule struct {
	Prefix string `json:"prefix"`
	Allow  bool   `json:"allow"`
}

func (a *Agent) serveXDP(mux *http.ServeMux) {
	off := func(w http.ResponseWriter) *xdp {
		x := a.xdp
		if x == nil {
			http.Error(w, "xdp is not served by this agent: "+a.xdpNote, http.StatusNotFound)
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
			if enc.Encode(XDPSample{Time: wall.Add(s.Time), TimeNS: int64(s.Time), Len: s.Len, Class: s.Class.String(), Verdict: s.Verdict, Data: s.Data}) != nil {
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
		out := []ACLRule{}
		for _, r := range rules {
			out = append(out, ACLRule{Prefix: r.Prefix.String(), Allow: r.Allow})
		}
		writeJSON(w, map[string]any{"default_deny": x.prog.Config().DefaultDeny, "rules": out})
	})
	mux.HandleFunc("POST /v1/acl", func(w http.ResponseWriter, r *http.Request) {
		x := off(w)
		if x == nil {
			return
		}
		var rule ACLRule
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
