package kv

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/shared/crc32c"
)

// The store's own write-ahead log. In Sync mode each round is synced
// before anyone is acknowledged; in Async mode it is written (not synced)
// within walWriteEvery, so a crashed agent loses at most that much of what
// it acknowledged, and Badger may take the written-back writes rarely. Badger syncs a commit
// by msync-ing its whole memory-mapped WAL and value-log files — about
// 0.2 ms each here, whatever the commit's size — and lets no transaction
// start while one syncs. This log instead appends each round's records
// with one write and one fdatasync, as Redis' appendfsync always does, and
// Badger runs without syncing: what a crash takes from Badger, the log
// gives back when the store opens.
//
// A record is one write's effect — the key's new value and expiry, or its
// deletion — so replaying the log in order onto Badger in any later state
// of it yields the state the log ends in. A checkpoint (Badger has every
// logged effect and syncs it) starts the log over from offset 0 in a new
// generation, reusing the file's blocks: appending into blocks already
// written leaves fdatasync no metadata to sync.
//
// Record: u32 CRC-32C of length and body | u32 length of the body | u64
// generation | body. Body: u8 op | uvarint key length | key | uvarint value
// length | value | uvarint expiry (Badger's ExpiresAt: Unix milliseconds,
// or seconds from an earlier store; 0: never). Each round —
// what one commit writes — ends with a commit record: u8 walCommit |
// uvarint records in the round | u32 CRC-32C of the round's bytes before
// it. The replay takes the generation of the first record and stops at the
// first record that is torn or corrupt (cut by a power loss), zeros, or of
// another generation (left from an earlier round of the file), and applies
// whole committed rounds only: a power cut inside MSET a 1 b 2 brings back
// both or neither. Generations are start times in nanoseconds with the top
// bit set; a log written before rounds had commit records (top bit clear)
// replays record by record, as it was written.
//
// A failed write leaves the log's end where it was (the next round
// overwrites what it left, and without a commit record it never replays).
// A failed fdatasync breaks the log for good: the kernel may have dropped
// the pages it could not write, so nothing after them is known to be on
// disk, and every later commit fails with ErrWritesRefused until the store
// is opened again.

const (
	walSet    = 1
	walDelete = 2
	walCommit = 3 // ends a round
	// walSetKind|k sets a value of Kind k (1 to maxKind); walSet is a
	// string's. A log from before kinds has none.
	walSetKind = 0x10

	walRounds = 1 << 63 // generations of logs whose rounds end with a commit record

	walName    = "hec-kv.wal"
	walMaxBody = MaxKeySize + MaxValueSize + 32
	// walWriteEvery bounds how long an Async write's record waits to be
	// written; walMaxShared bounds writers' records waiting (past it they
	// take the committer's path).
	walWriteEvery = 10 * time.Millisecond
	walWriteSoon  = 256 << 10
	walMaxShared  = 4 << 20
)

type wal struct {
	f     *os.File
	gen   uint64 // the generation records are written in
	buf   []byte // the committer's records of the round being built
	size  int64  // bytes of records in the file (the committer's)
	ready int64  // bytes of the file written (zeros past size), so an append needs no metadata sync
	ahead int64  // zeros written ahead of the log's end at a time (diskSizing)
	// broken is why the log takes no more rounds (a failed fdatasync).
	broken atomic.Pointer[error]
	sync   func(*os.File) error // fdatasync; tests fail it
	syncer *logSyncer           // what sync is, unless a test replaced it

	mu      sync.Mutex
	shared  []byte    // records appended by writers (Async cached Puts)
	since   time.Time // when the first of them was appended
	spare   []byte
	pending atomic.Int64 // len(shared)
}

type walRecord struct {
	op         byte
	kind       Kind // walSetKind records
	key, value []byte
	expires    uint64
	count      uint64 // walCommit: records in the round
	sum        uint32 // walCommit: their bytes' checksum
}

func openWAL(path string) (*wal, error) { return openWALSyncer(path, newLogSyncer()) }

// openWALSyncer is openWAL with the syncer given.
func openWALSyncer(path string, s *logSyncer) (*wal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("kv: open log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		s.close()
		return nil, fmt.Errorf("kv: open log: %w", err)
	}
	return &wal{f: f, ready: fi.Size(), gen: newGeneration(0), ahead: 16 << 20, sync: s.sync, syncer: s}, nil
}

// newGeneration is a generation later than after: the time in
// nanoseconds, with walRounds set.
func newGeneration(after uint64) uint64 {
	return max(after+1, walRounds|uint64(time.Now().UnixNano()))
}

const walHeader = 16

// appendRecord encodes a record onto dst.
func appendRecord(dst []byte, op byte, key, value []byte, expires uint64) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, walHeader)...)
	dst = append(dst, op)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	dst = append(dst, value...)
	dst = binary.AppendUvarint(dst, expires)
	body := dst[start+walHeader:]
	binary.LittleEndian.PutUint32(dst[start+4:], uint32(len(body)))
	binary.LittleEndian.PutUint32(dst[start:], crc32c.Update(crc32c.Checksum(dst[start+4:start+8]), body))
	return dst // the generation is stamped when written
}

// add appends a record to the committer's round.
func (l *wal) add(op byte, key, value []byte, expires uint64) {
	l.buf = appendRecord(l.buf, op, key, value, expires)
}

// addShared appends a writer's record, to be written with the
// committer's next round, ahead of that round's own records; tell says
// the committer should be told: the shared buffer was empty (start the
// timer) or just passed walWriteSoon (write now).
func (l *wal) addShared(op byte, key, value []byte, expires uint64) (tell bool) {
	l.mu.Lock()
	before := len(l.shared)
	if before == 0 {
		l.since = time.Now()
	}
	l.shared = appendRecord(l.shared, op, key, value, expires)
	after := len(l.shared)
	l.pending.Store(int64(after))
	l.mu.Unlock()
	return before == 0 || before < walWriteSoon && after >= walWriteSoon
}

// due reports whether the writers' records should be written now: they
// pile up past walWriteSoon, or the first has waited walWriteEvery.
func (l *wal) due(now time.Time) bool {
	switch n := l.pending.Load(); {
	case n >= walWriteSoon:
		return true
	case n == 0:
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.shared) > 0 && now.Sub(l.since) >= walWriteEvery
}

// mark and cut drop the records added since mark (a discarded transaction).
func (l *wal) mark() int  { return len(l.buf) }
func (l *wal) cut(at int) { l.buf = l.buf[:at] }

// commit writes the writers' records (with shared), then the round's, and
// with sync syncs them.
func (l *wal) commit(sync, shared bool) error {
	var out []byte
	l.mu.Lock()
	if shared || len(l.buf) > 0 { // the round's records never pass older writers' ones
		out = l.shared
		l.shared, l.spare = l.spare[:0], nil
		l.pending.Store(0)
	} else {
		out, l.spare = l.spare[:0], nil
	}
	l.mu.Unlock()
	out = append(out, l.buf...)
	l.buf = l.buf[:0]
	defer func() {
		l.mu.Lock()
		if cap(out) <= 8<<20 {
			l.spare = out[:0]
		}
		l.mu.Unlock()
	}()
	if len(out) == 0 {
		return nil
	}
	if err := l.failed(); err != nil {
		return err
	}
	count := uint64(0)
	for off := 0; off < len(out); off += walHeader + int(binary.LittleEndian.Uint32(out[off+4:])) {
		binary.LittleEndian.PutUint64(out[off+8:], l.gen)
		count++
	}
	out = appendCommit(out, count, crc32c.Checksum(out), l.gen)
	if sync {
		if err := l.prepare(int64(len(out))); err != nil {
			return err
		}
	}
	n, err := l.writeAt(out, l.size, sync)
	l.ready = max(l.ready, l.size+int64(n))
	if err != nil {
		// The end stays: the next round overwrites what this one left.
		return noSpace(fmt.Errorf("kv: append to log: %w", err))
	}
	if sync {
		if err := l.sync(l.f); err != nil {
			return l.fail("sync log", err)
		}
	}
	l.size += int64(n)
	return nil
}

// writeAt writes b at off. A Sync round's records (a few kilobytes, into
// blocks written and synced ahead: a copy into the page cache) go out
// without telling Go's scheduler, as the loops' socket writes do (see
// pwriteShort); larger writes, and Async ones, which may wait for
// writeback, in the usual way.
func (l *wal) writeAt(b []byte, off int64, sync bool) (int, error) {
	if sync && len(b) <= shortWrite { // prepare wrote the blocks ahead
		return pwriteShort(l.f, b, off)
	}
	return l.f.WriteAt(b, off)
}

// shortWrite is the largest log write pwriteShort makes.
const shortWrite = 256 << 10

// fail breaks the log for good (a failed sync): see the type's comment.
func (l *wal) fail(what string, err error) error {
	e := fmt.Errorf("%w: %s: %w", ErrWritesRefused, what, err)
	l.broken.CompareAndSwap(nil, &e)
	return *l.broken.Load()
}

// failed is why the log takes no more rounds, or nil.
func (l *wal) failed() error {
	if e := l.broken.Load(); e != nil {
		return *e
	}
	return nil
}

// appendCommit appends the commit record of a round of count records
// whose bytes have checksum sum.
func appendCommit(dst []byte, count uint64, sum uint32, gen uint64) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, walHeader)...)
	dst = append(dst, walCommit)
	dst = binary.AppendUvarint(dst, count)
	dst = binary.LittleEndian.AppendUint32(dst, sum)
	body := dst[start+walHeader:]
	binary.LittleEndian.PutUint32(dst[start+4:], uint32(len(body)))
	binary.LittleEndian.PutUint64(dst[start+8:], gen)
	binary.LittleEndian.PutUint32(dst[start:], crc32c.Update(crc32c.Checksum(dst[start+4:start+8]), body))
	return dst
}

// zeros is what prepare writes ahead, a piece at a time: not a fresh
// buffer of the whole step (16 MiB) to fault in and clear each time.
var zeros [1 << 20]byte // in BSS: nothing to allocate at start-up

// prepare makes sure n more bytes fit in the written part of the file,
// writing zeros ahead in walAhead steps (until the file has grown to its
// working size): fdatasync after appending into blocks already written has
// no metadata (size, extents) to sync, which halves its cost here. A
// replay stops at the zeros (no record has a zero checksum and length).
func (l *wal) prepare(n int64) error {
	if l.size+n <= l.ready {
		return nil
	}
	grow := max(l.ahead, l.size+n-l.ready)
	for off := int64(0); off < grow; off += int64(len(zeros)) {
		if _, err := l.f.WriteAt(zeros[:min(int64(len(zeros)), grow-off)], l.ready+off); err != nil {
			return noSpace(fmt.Errorf("kv: extend log: %w", err))
		}
	}
	if err := l.f.Sync(); err != nil {
		return l.fail("sync log", err)
	}
	l.ready += grow
	return nil
}

// reset starts the log over, in a new generation, once Badger holds,
// synced, every effect in it: the first record's header is zeroed, so
// nothing replays (the file's blocks stay, for reuse).
func (l *wal) reset() error {
	if err := l.failed(); err != nil {
		return err
	}
	if l.ready == 0 {
		l.size, l.gen = 0, newGeneration(l.gen)
		return nil
	}
	if _, err := l.f.WriteAt(make([]byte, walHeader), 0); err != nil {
		return fmt.Errorf("kv: start the log over: %w", err)
	}
	if err := l.sync(l.f); err != nil {
		return l.fail("start the log over", err)
	}
	l.size, l.gen = 0, newGeneration(l.gen)
	return nil
}

func (l *wal) close() error {
	l.syncer.close()
	return l.f.Close()
}

// replay calls apply for each record of the log's committed rounds in
// order and returns how many there were. It reads the log twice: once to
// find where the last whole round ends, once to apply up to there.
func (l *wal) replay(apply func(walRecord) error) (int, error) {
	var gen uint64
	end := int64(0) // past the last committed round
	var count uint64
	var sum uint32
	l.scan(func(off int64, g uint64, rec []byte, r walRecord) bool {
		if gen == 0 {
			gen = g
		}
		if g&walRounds == 0 { // written before rounds had commit records
			end = off
			return true
		}
		if r.op != walCommit {
			sum = crc32c.Update(sum, rec)
			count++
			return true
		}
		if r.count != count || r.sum != sum {
			return false
		}
		end, count, sum = off, 0, 0
		return true
	})
	n := 0
	var err error
	l.scan(func(off int64, g uint64, rec []byte, r walRecord) bool {
		if off > end || err != nil {
			return false
		}
		if r.op == walCommit {
			return true
		}
		if err = apply(r); err == nil {
			n++
		}
		return err == nil
	})
	l.size = end
	l.gen = newGeneration(gen)
	return n, err
}

// scan calls f for each whole record of the first record's generation,
// with the offset past it and its bytes, until f says stop or a record is
// torn, corrupt, zeros or of another generation.
func (l *wal) scan(f func(off int64, gen uint64, rec []byte, r walRecord) bool) {
	r := bufio.NewReaderSize(io.NewSectionReader(l.f, 0, 1<<62), 1<<20)
	var off int64
	var rec []byte
	var gen uint64
	for first := true; ; first = false {
		rec = append(rec[:0], make([]byte, walHeader)...)
		if _, err := io.ReadFull(r, rec); err != nil {
			return
		}
		size := binary.LittleEndian.Uint32(rec[4:])
		if size > walMaxBody {
			return
		}
		if g := binary.LittleEndian.Uint64(rec[8:]); first {
			gen = g
		} else if g != gen {
			return
		}
		rec = append(rec, make([]byte, size)...)
		if _, err := io.ReadFull(r, rec[walHeader:]); err != nil {
			return
		}
		if crc32c.Update(crc32c.Checksum(rec[4:8]), rec[walHeader:]) != binary.LittleEndian.Uint32(rec[:4]) {
			return
		}
		dec, err := decodeWALBody(rec[walHeader:])
		if err != nil {
			return
		}
		off += int64(len(rec))
		if !f(off, gen, rec, dec) {
			return
		}
	}
}

var errWALRecord = errors.New("kv: malformed log record")

// uvarint is binary.Uvarint for the one encoding binary.AppendUvarint
// writes: a value in more bytes than it needs (0x80 0x00 for 0) is
// refused (k 0), so that each record has one encoding, the one its
// checksum was taken over.
func uvarint(b []byte) (uint64, int) {
	n, k := binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, 0 // a last byte of 0: the bytes before it said it all
	}
	return n, k
}

// decodeWALBody decodes a record's body; key and value alias it.
func decodeWALBody(b []byte) (walRecord, error) {
	var rec walRecord
	if len(b) < 1 {
		return rec, errWALRecord
	}
	rec.op, b = b[0], b[1:]
	if rec.op == walCommit {
		n, k := uvarint(b)
		if k <= 0 || len(b)-k != 4 {
			return rec, errWALRecord
		}
		rec.count, rec.sum = n, binary.LittleEndian.Uint32(b[k:])
		return rec, nil
	}
	switch {
	case rec.op == walSet || rec.op == walDelete:
	case rec.op > walSetKind && rec.op <= walSetKind|byte(maxKind):
		rec.kind = Kind(rec.op &^ walSetKind)
	default:
		return rec, errWALRecord
	}
	field := func(max int) ([]byte, error) {
		n, k := uvarint(b)
		if k <= 0 || n > uint64(max) || n > uint64(len(b)-k) {
			return nil, errWALRecord
		}
		f := b[k : k+int(n) : k+int(n)]
		b = b[k+int(n):]
		return f, nil
	}
	var err error
	if rec.key, err = field(MaxKeySize); err != nil || len(rec.key) == 0 {
		return rec, errWALRecord
	}
	if rec.value, err = field(MaxValueSize); err != nil {
		return rec, err
	}
	exp, k := uvarint(b)
	if k <= 0 || k != len(b) {
		return rec, errWALRecord
	}
	rec.expires = exp
	return rec, nil
}
