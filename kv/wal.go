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
// length | value | uvarint expiry (Unix seconds, 0: never). The replay
// takes the generation of the first record and stops at the first record
// that is torn or corrupt (cut by a power loss), zeros, or of another
// generation (left from an earlier round of the file). Generations are
// start times in nanoseconds, so an old record never passes for a new one.

const (
	walSet    = 1
	walDelete = 2

	walName = "hec-kv.wal"
	// walCheckpoint is the log size past which the committer checkpoints
	// (the file keeps about this size: its blocks are reused).
	walCheckpoint = 512 << 20
	walMaxBody    = MaxKeySize + MaxValueSize + 32
	// walWriteEvery bounds how long an Async write's record waits to be
	// written; walMaxShared bounds writers' records waiting (past it they
	// take the committer's path).
	walWriteEvery = 10 * time.Millisecond
	walWriteSoon  = 256 << 10
	walAhead      = 16 << 20 // zeros written ahead of the log's end
	walMaxShared  = 4 << 20
)

type wal struct {
	f     *os.File
	gen   uint64 // the generation records are written in
	buf   []byte // the committer's records of the round being built
	size  int64  // bytes of records in the file (the committer's)
	ready int64  // bytes of the file written (zeros past size), so an append needs no metadata sync

	mu      sync.Mutex
	shared  []byte // records appended by writers (Async cached Puts)
	spare   []byte
	pending atomic.Int64 // len(shared)
}

type walRecord struct {
	op         byte
	key, value []byte
	expires    uint64
}

func openWAL(path string) (*wal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kv: open log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("kv: open log: %w", err)
	}
	return &wal{f: f, ready: fi.Size(), gen: uint64(time.Now().UnixNano())}, nil
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
	l.shared = appendRecord(l.shared, op, key, value, expires)
	after := len(l.shared)
	l.pending.Store(int64(after))
	l.mu.Unlock()
	return before == 0 || before < walWriteSoon && after >= walWriteSoon
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
	if sync {
		if err := l.prepare(int64(len(out))); err != nil {
			return err
		}
	}
	for off := 0; off < len(out); off += walHeader + int(binary.LittleEndian.Uint32(out[off+4:])) {
		binary.LittleEndian.PutUint64(out[off+8:], l.gen)
	}
	n, err := l.f.WriteAt(out, l.size)
	l.size += int64(n)
	l.ready = max(l.ready, l.size)
	if err != nil {
		return fmt.Errorf("kv: append to log: %w", err)
	}
	if !sync {
		return nil
	}
	if err := fdatasync(l.f); err != nil {
		return fmt.Errorf("kv: sync log: %w", err)
	}
	return nil
}

// prepare makes sure n more bytes fit in the written part of the file,
// writing zeros ahead in walAhead steps (until the file has grown to its
// working size): fdatasync after appending into blocks already written has
// no metadata (size, extents) to sync, which halves its cost here. A
// replay stops at the zeros (no record has a zero checksum and length).
func (l *wal) prepare(n int64) error {
	if l.size+n <= l.ready {
		return nil
	}
	grow := max(walAhead, l.size+n-l.ready)
	if _, err := l.f.WriteAt(make([]byte, grow), l.ready); err != nil {
		return fmt.Errorf("kv: extend log: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("kv: sync log: %w", err)
	}
	l.ready += grow
	return nil
}

// reset starts the log over, in a new generation, once Badger holds,
// synced, every effect in it: the first record's header is zeroed, so
// nothing replays (the file's blocks stay, for reuse).
func (l *wal) reset() error {
	l.size = 0
	l.gen = max(l.gen+1, uint64(time.Now().UnixNano()))
	if l.ready == 0 {
		return nil
	}
	if _, err := l.f.WriteAt(make([]byte, walHeader), 0); err != nil {
		return fmt.Errorf("kv: start the log over: %w", err)
	}
	if err := fdatasync(l.f); err != nil {
		return fmt.Errorf("kv: start the log over: %w", err)
	}
	return nil
}

func (l *wal) close() error { return l.f.Close() }

// replay calls apply for each whole record of the log's generation in
// order and returns how many there were.
func (l *wal) replay(apply func(walRecord) error) (int, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(l.f, 0, 1<<62), 1<<20)
	var off int64
	var hdr [walHeader]byte
	var body []byte
	var gen uint64
	n := 0
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			break
		}
		size := binary.LittleEndian.Uint32(hdr[4:])
		if size > walMaxBody {
			break
		}
		if g := binary.LittleEndian.Uint64(hdr[8:]); n == 0 {
			gen = g
		} else if g != gen {
			break
		}
		body = append(body[:0], make([]byte, size)...)
		if _, err := io.ReadFull(r, body); err != nil {
			break
		}
		if crc32c.Update(crc32c.Checksum(hdr[4:8]), body) != binary.LittleEndian.Uint32(hdr[:4]) {
			break
		}
		rec, err := decodeWALBody(body)
		if err != nil {
			break
		}
		if err := apply(rec); err != nil {
			return n, err
		}
		off += walHeader + int64(size)
		n++
	}
	l.size = off
	l.gen = max(gen+1, uint64(time.Now().UnixNano()))
	return n, nil
}

var errWALRecord = errors.New("kv: malformed log record")

// decodeWALBody decodes a record's body; key and value alias it.
func decodeWALBody(b []byte) (walRecord, error) {
	var rec walRecord
	if len(b) < 1 {
		return rec, errWALRecord
	}
	rec.op, b = b[0], b[1:]
	if rec.op != walSet && rec.op != walDelete {
		return rec, errWALRecord
	}
	field := func(max int) ([]byte, error) {
		n, k := binary.Uvarint(b)
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
	exp, k := binary.Uvarint(b)
	if k <= 0 || k != len(b) {
		return rec, errWALRecord
	}
	rec.expires = exp
	return rec, nil
}
