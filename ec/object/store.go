package object

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/durable"
)

// Bounds on what writers can make a store hold.
const (
	maxPending     = 256             // shards being written at once
	pendingTimeout = 2 * time.Minute // a shard not written to for this long is dropped
	keepCommitted  = 2               // committed versions always kept of a name
	// An older committed version stays while the one that superseded it
	// is younger than supersededGrace (up to maxKept versions): a reader
	// that opened it just before finishes it even under a storm of Puts.
	supersededGrace = 10 * time.Second
	maxKept         = 8
	maxListed       = 100000 // names one List returns
)

// StoreConfig configures a Store.
type StoreConfig struct {
	Dir     string // where shard files live (made if missing)
	Node    uint32 // this agent's node id: a prepare must place its shard here
	MaxSize int64  // the largest object taken (0: no bound but the stripes')
	Log     *slog.Logger
}

// Store is one agent's shards. Its methods are safe for concurrent use.
type Store struct {
	cfg StoreConfig

	mu      sync.Mutex
	names   map[string]map[shardKey]*Shard // sealed shards, by name
	pending map[pendingKey]*pending
	// dataSyncs counts the background syncs of shards being written.
	dataSyncs atomic.Int64
}

type shardKey struct {
	v   Version
	idx int
}

type pendingKey struct {
	name string
	shardKey
}

type pending struct {
	sh   Shard
	f    *os.File
	got  []bool
	n    int
	last time.Time
	mu   sync.Mutex // orders the seal after the writes
	// Rebuilders of one shard (an agent's scrub and an operator's
	// repair) share its pending: writes share use, a seal, an abort or
	// an expiry hold it alone, and gone says the file is sealed or
	// dropped, so a late write or second seal is told the shard is no
	// longer being written here instead of failing on a closed file.
	use  sync.RWMutex
	gone bool
	// direct writes the whole aligned pieces of the shard past the page
	// cache (nil where the file system refuses O_DIRECT); f writes the
	// rest (a last stripe's shorter piece) and syncs the file.
	direct *os.File
	// unsynced counts the bytes written since the last background sync
	// began, and syncing says one runs (both under mu).
	unsynced int
	syncing  bool
	syncs    *atomic.Int64 // the store's count of them
}

// syncEvery is how many bytes of a shard are written between background
// syncs of its data. The seal's fsync then has at most this much left to
// make durable: with every agent of a Put sealing at once, a whole
// shard's sync was the largest part of a Put's tail, while the pieces
// stream in at the link's rate and leave the disk idle between them.
const syncEvery = 4 << 20

// syncData makes the shard's data written so far durable, unless it has
// been sealed or dropped meanwhile. It shares use with the writes, so a
// seal waits for it.
func (p *pending) syncData() {
	p.use.RLock()
	if !p.gone {
		syscall.Fdatasync(int(p.f.Fd())) // the seal's fsync reports what failed
		p.syncs.Add(1)
	}
	p.use.RUnlock()
	p.mu.Lock()
	p.syncing = false
	p.mu.Unlock()
}

// directAlign is what an O_DIRECT write keeps aligned (file offset,
// length and memory): the largest logical block size disks have.
const directAlign = 4096

// writeAt writes a piece of the shard at off. A piece is written once and
// read rarely (a Get reads k shards of the newest version), so whole
// aligned pieces bypass the page cache: through it each costs a copy into
// newly allocated cache pages (the largest single cost of an agent in an
// inline Put, in profiles) and waits for write-back until the seal's fsync.
// Direct, it costs a copy into an aligned pooled buffer, and the disk
// writes while the pieces stream in, so the seal has little to sync.
func (p *pending) writeAt(b []byte, off int64) error {
	if p.direct != nil && off%directAlign == 0 && len(b)%directAlign == 0 && len(b) > 0 {
		raw := getBuf(len(b) + directAlign)
		defer putBuf(raw)
		at := int(-uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & (directAlign - 1))
		buf := raw[at : at+len(b)]
		copy(buf, b)
		_, err := p.direct.WriteAt(buf, off)
		if !errors.Is(err, syscall.EINVAL) {
			return err
		}
		// Refused after all (a file system that takes the flag at
		// open but not these writes): the page cache's way.
	}
	_, err := p.f.WriteAt(b, off)
	return err
}

// close closes p's files.
func (p *pending) close() {
	p.f.Close()
	if p.direct != nil {
		p.direct.Close()
	}
}

// errDropped is a write or seal of a shard no longer being written here.
func errDropped(r *Request) error {
	return fmt.Errorf("%w: %s version %s shard %d was not prepared here (or was dropped)", ErrNotFound, r.Name, r.Version, r.Index)
}

// drop removes p's file (p.use held).
func (p *pending) drop() {
	if !p.gone {
		p.gone = true
		p.close()
		os.Remove(p.f.Name())
	}
}

// OpenStore opens (or makes) the store in cfg.Dir and loads its index.
// Shards a crash left half written are removed: their Put failed.
func OpenStore(cfg StoreConfig) (*Store, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Node == 0 {
		return nil, errors.New("object: store of node 0")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("object store: %w", err)
	}
	s := &Store{cfg: cfg, names: map[string]map[shardKey]*Shard{}, pending: map[pendingKey]*pending{}}
	dirs, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("object store: %w", err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(cfg.Dir, d.Name()))
		for _, f := range files {
			p := filepath.Join(cfg.Dir, d.Name(), f.Name())
			switch {
			case strings.HasSuffix(f.Name(), ".part"):
				os.Remove(p)
			case strings.HasSuffix(f.Name(), ".json"):
				b, err := os.ReadFile(p)
				var sh Shard
				if err == nil {
					err = json.Unmarshal(b, &sh)
				}
				if err == nil {
					err = sh.Header.Check(0)
				}
				if err == nil && !sh.Tomb() && (len(sh.CRC) != sh.Stripes() || len(sh.DataCRC) != sh.Stripes()) {
					err = fmt.Errorf("%w: %d and %d stripe CRCs for %d stripes", ErrBadMeta, len(sh.CRC), len(sh.DataCRC), sh.Stripes())
				}
				if err != nil || sh.Index < 0 || sh.Index >= len(sh.Place) || s.dirOf(sh.Name) != filepath.Dir(p) {
					cfg.Log.Warn("object store: unreadable shard record: ignored", "file", p, "err", err)
					continue
				}
				sh.Corrupt = nil
				s.add(&sh)
			}
		}
	}
	return s, nil
}

func (s *Store) dirOf(name string) string {
	h := sha256.Sum256([]byte(name))
	return filepath.Join(s.cfg.Dir, hex.EncodeToString(h[:20]))
}

func (s *Store) path(name string, v Version, idx int, ext string) string {
	return filepath.Join(s.dirOf(name), string(v)+"-"+strconv.Itoa(idx)+ext)
}

func (s *Store) add(sh *Shard) {
	m := s.names[sh.Name]
	if m == nil {
		m = map[shardKey]*Shard{}
		s.names[sh.Name] = m
	}
	m[shardKey{sh.Version, sh.Index}] = sh
}

// Serve answers one message.
func (s *Store) Serve(ctx context.Context, b []byte) []byte { return s.ServeAppend(ctx, b, nil) }

// ServeAppend answers one message, its reply appended to dst (a buffer
// from Buffer, say, given back with Release once the reply is sent).
func (s *Store) ServeAppend(ctx context.Context, b, dst []byte) []byte {
	r, err := ParseRequest(b)
	if err != nil {
		rep := replyFor(err)
		return rep.Append(dst)
	}
	rep := s.serve(ctx, &r)
	out := rep.Append(dst)
	if r.Kind == KindRead && rep.Status == StatusOK {
		putBuf(rep.Body)
	}
	return out
}

func (s *Store) serve(_ context.Context, r *Request) Reply {
	var err error
	switch r.Kind {
	case KindPrepare, KindReplace:
		err = s.prepare(r)
	case KindWrite:
		err = s.write(r)
	case KindSeal:
		err = s.seal(r)
	case KindCommit:
		err = s.commit(r.Name, r.Version)
	case KindAbort:
		s.abort(r.Name, r.Version)
	case KindRead:
		return s.read(r)
	case KindStat:
		b, _ := json.Marshal(s.Stat(r.Name))
		return Reply{Body: b}
	case KindList:
		b, _ := json.Marshal(s.List(r.Name))
		return Reply{Body: b}
	case KindDelete:
		err = s.tombstone(r)
	case KindPurge:
		err = s.purge(r.Name, r.Version)
	case KindPlace:
		err = s.place(r)
	}
	if err != nil {
		return replyFor(err)
	}
	return Reply{}
}

// header parses and checks a request's header and this store's place in it.
func (s *Store) header(r *Request) (Header, error) {
	var h Header
	if err := json.Unmarshal(r.Meta, &h); err != nil {
		return h, fmt.Errorf("%w: %v", ErrBadMeta, err)
	}
	if err := h.Check(s.cfg.MaxSize); err != nil {
		return h, err
	}
	if h.Name != r.Name {
		return h, fmt.Errorf("%w: a request for %q carries the header of %q", ErrBadMeta, r.Name, h.Name)
	}
	if r.Index < 0 || r.Index >= len(h.Place) || h.Place[r.Index] != s.cfg.Node {
		return h, fmt.Errorf("%w: shard %d of %s is placed on %v, and this is node %d", ErrBadMeta, r.Index, h.Name, h.Place, s.cfg.Node)
	}
	return h, nil
}

func (s *Store) prepare(r *Request) error {
	h, err := s.header(r)
	if err != nil {
		return err
	}
	if h.Tomb() {
		return fmt.Errorf("%w: prepare of a tombstone", ErrBadMeta)
	}
	k := pendingKey{h.Name, shardKey{h.Version, r.Index}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	if p, ok := s.pending[k]; ok {
		if !p.sh.Header.Same(&h) {
			return fmt.Errorf("%w: %s version %s prepared with another header", ErrShard, h.Name, h.Version)
		}
		return nil // a retry
	}
	if _, ok := s.names[h.Name][k.shardKey]; ok && r.Kind != KindReplace {
		return fmt.Errorf("%w: %s version %s shard %d is sealed already", ErrShard, h.Name, h.Version, r.Index)
	}
	if len(s.pending) >= maxPending {
		return fmt.Errorf("%w: %d shards are being written here: try later", ErrShard, len(s.pending))
	}
	if err := os.MkdirAll(s.dirOf(h.Name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path(h.Name, h.Version, r.Index, ".part"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	n := h.Stripes()
	p := &pending{sh: Shard{Header: h, Index: r.Index, CRC: make([]uint32, n), DataCRC: make([]uint32, n)},
		f: f, got: make([]bool, n), last: time.Now(), syncs: &s.dataSyncs}
	if d, err := os.OpenFile(f.Name(), os.O_WRONLY|syscall.O_DIRECT, 0); err == nil {
		p.direct = d
	}
	s.pending[k] = p
	return nil
}

// expire drops shards nobody has written to for pendingTimeout (under mu).
func (s *Store) expire() {
	for k, p := range s.pending {
		if time.Since(p.last) > pendingTimeout && p.use.TryLock() { // in use: not idle after all
			p.drop()
			p.use.Unlock()
			delete(s.pending, k)
		}
	}
}

func (s *Store) pendingOf(r *Request) (*pending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[pendingKey{r.Name, shardKey{r.Version, r.Index}}]
	if p == nil {
		return nil, errDropped(r)
	}
	p.last = time.Now()
	return p, nil
}

func (s *Store) write(r *Request) error {
	p, err := s.pendingOf(r)
	if err != nil {
		return err
	}
	p.use.RLock()
	defer p.use.RUnlock()
	if p.gone {
		return errDropped(r)
	}
	h := &p.sh.Header
	if r.Stripe < 0 || r.Stripe >= h.Stripes() {
		return fmt.Errorf("%w: stripe %d of %d", ErrShard, r.Stripe, h.Stripes())
	}
	if want := h.ShardBytes(r.Stripe); len(r.Data) != want {
		return fmt.Errorf("%w: stripe %d's piece has %d bytes, want %d", ErrShard, r.Stripe, len(r.Data), want)
	}
	if crc32c.Checksum(r.Data) != r.CRC {
		return fmt.Errorf("%w: stripe %d's piece fails its CRC", ErrShard, r.Stripe)
	}
	if err := p.writeAt(r.Data, int64(r.Stripe)*int64(h.Chunk)); err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	p.mu.Lock()
	if !p.got[r.Stripe] {
		p.got[r.Stripe] = true
		p.n++
	}
	p.sh.CRC[r.Stripe], p.sh.DataCRC[r.Stripe] = r.CRC, r.DataCRC
	// Once syncEvery bytes are unsynced, and none runs, a background
	// sync of the data.
	p.unsynced += len(r.Data)
	startSync := p.unsynced >= syncEvery && !p.syncing
	if startSync {
		p.unsynced, p.syncing = 0, true
	}
	p.mu.Unlock()
	if startSync {
		go p.syncData()
	}
	return nil
}

func (s *Store) seal(r *Request) error {
	p, err := s.pendingOf(r)
	if err != nil {
		return err
	}
	p.use.Lock()
	defer p.use.Unlock()
	if p.gone {
		return errDropped(r) // sealed by the other rebuilder, or dropped
	}
	p.mu.Lock()
	n, total := p.n, len(p.got)
	sh := p.sh
	sh.CRC, sh.DataCRC = slices.Clone(sh.CRC), slices.Clone(sh.DataCRC)
	p.mu.Unlock()
	if n != total {
		return fmt.Errorf("%w: %d of %d stripes written", ErrShard, n, total)
	}
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("object store: sync: %w", err)
	}
	if err := s.record(&sh); err != nil {
		return err
	}
	if err := os.Rename(p.f.Name(), s.path(sh.Name, sh.Version, sh.Index, ".shard")); err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	if err := durable.SyncDir(s.dirOf(sh.Name)); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.pending, pendingKey{r.Name, shardKey{r.Version, r.Index}})
	s.add(&sh)
	s.mu.Unlock()
	p.gone = true
	p.close()
	return nil
}

// record writes a shard's metadata durably.
func (s *Store) record(sh *Shard) error {
	b, err := json.Marshal(sh)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(s.path(sh.Name, sh.Version, sh.Index, ".json"), b, 0o644); err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	return nil
}

func (s *Store) commit(name string, v Version) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	found := false
	for k, sh := range s.names[name] {
		if k.v != v {
			continue
		}
		found = true
		if !sh.Committed {
			c := *sh
			c.Committed = true
			if err := s.record(&c); err != nil {
				return err
			}
			sh.Committed, sh.committedAt = true, time.Now()
		}
	}
	if !found {
		newer := 0
		for k, sh := range s.names[name] {
			if sh.Committed && k.v > v {
				newer++
			}
		}
		if newer >= keepCommitted {
			return nil // superseded twice over and collected: committed as far as any reader can tell
		}
		return fmt.Errorf("%w: %s version %s is not sealed here", ErrNotFound, name, v)
	}
	s.collect(name)
	return nil
}

// collect removes what readers can no longer want (under mu): versions
// older than the keepCommitted newest committed ones — but for those
// superseded less than supersededGrace ago — and everything older than a
// newest committed tombstone.
func (s *Store) collect(name string) {
	m := s.names[name]
	var committed []Version
	tomb := map[Version]bool{}
	at := map[Version]time.Time{}
	for k, sh := range m {
		if sh.Committed && !slices.Contains(committed, k.v) {
			committed = append(committed, k.v)
			tomb[k.v], at[k.v] = sh.Tomb(), sh.committedAt
		}
	}
	slices.Sort(committed)
	slices.Reverse(committed)
	if len(committed) == 0 {
		return
	}
	keep := min(len(committed), keepCommitted)
	for keep < min(len(committed), maxKept) && time.Since(at[committed[keep-1]]) < supersededGrace {
		keep++
	}
	oldest := committed[keep-1]
	if tomb[committed[0]] {
		oldest = committed[0]
	}
	for k, sh := range m {
		if k.v < oldest {
			s.remove(sh)
		}
	}
}

func (s *Store) remove(sh *Shard) {
	os.Remove(s.path(sh.Name, sh.Version, sh.Index, ".shard"))
	os.Remove(s.path(sh.Name, sh.Version, sh.Index, ".json"))
	m := s.names[sh.Name]
	delete(m, shardKey{sh.Version, sh.Index})
	if len(m) == 0 {
		delete(s.names, sh.Name)
		os.Remove(s.dirOf(sh.Name)) // when empty
	}
}

func (s *Store) abort(name string, v Version) {
	s.mu.Lock()
	var dropped []*pending
	for k, p := range s.pending {
		if k.name == name && k.v == v {
			dropped = append(dropped, p)
			delete(s.pending, k)
		}
	}
	s.mu.Unlock()
	for _, p := range dropped { // once the writes under way are done
		p.use.Lock()
		p.drop()
		p.use.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, sh := range s.names[name] {
		if k.v == v && !sh.Committed {
			s.remove(sh)
		}
	}
}

func (s *Store) read(r *Request) Reply {
	s.mu.Lock()
	sh := s.names[r.Name][shardKey{r.Version, r.Index}]
	var c Shard
	if sh != nil {
		c = *sh
	}
	s.mu.Unlock()
	if sh == nil || c.Tomb() {
		return replyFor(fmt.Errorf("%w: %s version %s shard %d is not here", ErrNotFound, r.Name, r.Version, r.Index))
	}
	if r.Stripe < 0 || r.Stripe >= c.Stripes() {
		return replyFor(fmt.Errorf("%w: stripe %d of %d", ErrShard, r.Stripe, c.Stripes()))
	}
	f, err := os.Open(s.path(c.Name, c.Version, c.Index, ".shard"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("%w: shard file gone: %v", ErrCorrupt, err)
			s.markCorrupt(sh, r.Stripe)
		}
		return replyFor(err)
	}
	defer f.Close()
	buf := getBuf(c.ShardBytes(r.Stripe))
	if _, err := f.ReadAt(buf, int64(r.Stripe)*int64(c.Chunk)); err != nil || crc32c.Checksum(buf) != c.CRC[r.Stripe] {
		putBuf(buf)
		s.markCorrupt(sh, r.Stripe)
		return replyFor(fmt.Errorf("%w: %s version %s shard %d stripe %d on node %d (read: %v)", ErrCorrupt, c.Name, c.Version, c.Index, r.Stripe, s.cfg.Node, err))
	}
	return Reply{CRC: c.CRC[r.Stripe], DataCRC: c.DataCRC[r.Stripe], Body: buf}
}

func (s *Store) markCorrupt(sh *Shard, stripe int) {
	s.mu.Lock()
	if !slices.Contains(sh.Corrupt, stripe) {
		sh.Corrupt = append(sh.Corrupt, stripe)
	}
	s.mu.Unlock()
}

// Stat returns every sealed shard held of name, newest version first.
func (s *Store) Stat(name string) []Shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Shard{}
	for _, sh := range s.names[name] {
		c := *sh
		c.Holder = s.cfg.Node
		c.Corrupt = slices.Clone(sh.Corrupt)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Shard) int {
		if a.Version != b.Version {
			return strings.Compare(string(b.Version), string(a.Version))
		}
		return a.Index - b.Index
	})
	return out
}

// List returns the newest committed header of every name starting with
// prefix held here, tombstones included (the caller merges).
func (s *Store) List(prefix string) []Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Header{}
	for name, m := range s.names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		var best *Shard
		for _, sh := range m {
			if sh.Committed && (best == nil || sh.Version > best.Version) {
				best = sh
			}
		}
		if best != nil {
			out = append(out, best.Header)
		}
		if len(out) >= maxListed {
			break
		}
	}
	slices.SortFunc(out, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Names returns the names of which this store holds shards.
func (s *Store) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.names))
	for n := range s.names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (s *Store) tombstone(r *Request) error {
	h, err := s.header(r)
	if err != nil {
		return err
	}
	if !h.Tomb() {
		return fmt.Errorf("%w: delete with a size", ErrBadMeta)
	}
	sh := &Shard{Header: h, Index: r.Index, Committed: true}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(s.dirOf(h.Name), 0o755); err != nil {
		return err
	}
	if err := s.record(sh); err != nil {
		return err
	}
	s.add(sh)
	s.collect(h.Name)
	return nil
}

// place records a new placement for a shard held here: the same version,
// only other nodes at other indices (a repair moved the shards of an agent
// that left the members).
func (s *Store) place(r *Request) error {
	h, err := s.header(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.names[h.Name][shardKey{h.Version, r.Index}]
	if sh == nil {
		return fmt.Errorf("%w: %s version %s shard %d is not here", ErrNotFound, h.Name, h.Version, r.Index)
	}
	moved := sh.Header
	moved.Place = h.Place
	if !moved.Same(&h) {
		return fmt.Errorf("%w: a new placement for %s version %s changes more than the placement", ErrBadMeta, h.Name, h.Version)
	}
	c := *sh
	c.Header = h
	if err := s.record(&c); err != nil {
		return err
	}
	sh.Header = h
	return nil
}

func (s *Store) purge(name string, v Version) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, sh := range s.names[name] {
		if k.v > v {
			return nil // a newer version came: it decides
		}
		if k.v == v && !sh.Tomb() {
			return fmt.Errorf("%w: %s version %s is not a tombstone", ErrShard, name, v)
		}
	}
	for _, sh := range s.names[name] {
		s.remove(sh)
	}
	return nil
}

// Verify reads every sealed shard, checks each stripe's CRC and marks the
// corrupt ones (which Stat then reports and a repair rebuilds). It
// returns the shards found corrupted.
func (s *Store) Verify(ctx context.Context) []Shard {
	var bad []Shard
	for _, name := range s.Names() {
		for _, sh := range s.Stat(name) {
			if ctx.Err() != nil {
				return bad
			}
			if sh.Tomb() {
				continue
			}
			for st := 0; st < sh.Stripes(); st++ {
				rep := s.read(&Request{Kind: KindRead, Name: sh.Name, Version: sh.Version, Index: sh.Index, Stripe: st})
				if rep.Status == StatusCorrupt {
					bad = append(bad, sh)
					break
				}
			}
		}
	}
	return bad
}
