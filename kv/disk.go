package kv

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A full disk is a state of the store, not a crash. Badger writes its
// memtables, value logs and tables through memory-mapped files it creates
// at their full size, sparse: when the file system has no block left for
// a page Badger writes, the kernel answers with SIGBUS and the agent dies
// — on a DPU, as process 1, with the guest. So the store never lets the
// file system come near full: the committer checks the free space before
// each round that writes (statfs, at most every 100 ms or sooner when the
// rounds since the last check may have used much of the margin) and
// refuses the round's writes with ErrDiskFull while less than the reserve
// would be left — what Badger may still write into its sparse files and
// its compactions, sized from its options. Reads go on; writes resume by
// themselves once the free space is back above the reserve and a margin.
//
// The sizes follow the disk: a 64 MiB DPU partition gets small memtables,
// value-log files and log checkpoints (and so a small reserve), a large
// NVMe disk Badger's usual ones.

// diskPlan is the store's sizing for a file system of total bytes.
type diskPlan struct {
	memtable   int64 // Badger's memtable size
	vlogFile   int64 // Badger's value-log file size
	checkpoint int64 // the log's size past which the committer checkpoints
	ahead      int64 // zeros written ahead of the log's end
	reserve    int64 // free bytes below which writes are refused
	resume     int64 // free bytes from which they resume
	maxValue   int   // the largest value (Badger refuses values over a value-log file)
}

// planDisk sizes the store for a file system of total bytes (0: unknown,
// the defaults) with memtables of at most memtable bytes.
func planDisk(total, memtable int64, memtables int) diskPlan {
	p := diskPlan{memtable: memtable, vlogFile: 64 << 20, checkpoint: 512 << 20}
	if total > 0 {
		p.memtable = min(memtable, max(1<<20, total/32))
		p.vlogFile = min(p.vlogFile, max(1<<20, pow2Floor(total/32)))
		p.checkpoint = min(p.checkpoint, max(1<<20, total/8))
	}
	p.ahead = min(16<<20, p.checkpoint/4)
	p.maxValue = int(min(MaxValueSize, p.vlogFile))
	// Badger's sparse files: the active value-log file (created at twice
	// its size), each memtable's log (written up to the memtable's size),
	// the tables a flush and a compaction write before they delete what
	// they replace — an eighth of the disk, but no more than maxCompaction
	// (those tables follow Badger's table sizes, not the disk's: a 258 GB
	// disk kept 33 GiB free).
	p.reserve = 2*p.vlogFile + int64(memtables+1)*p.memtable + max(8*p.memtable, min(total/8, maxCompaction)) + 1<<20
	p.resume = p.reserve + max(p.reserve/4, 1<<20)
	return p
}

// maxCompaction bounds what the reserve keeps for the tables Badger's
// flushes and compactions (two at a time) write before they delete what
// they replace.
const maxCompaction = 4 << 30

func pow2Floor(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return 1 << (63 - bits.LeadingZeros64(uint64(n)))
}

// fsSpace returns the size of dir's file system and the bytes free to an
// unprivileged writer.
func fsSpace(dir string) (total, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("kv: statfs %s: %w", dir, err)
	}
	return int64(st.Blocks) * int64(st.Bsize), int64(st.Bavail) * int64(st.Bsize), nil
}

// diskGuard watches the free space of the store's file system.
type diskGuard struct {
	dir             string
	reserve, resume int64
	checkEvery      time.Duration
	space           func() (free int64, err error) // the file system's free bytes (fsSpace)
	mu              sync.Mutex
	checked         time.Time // last statfs
	since           int64     // bytes the rounds may have written since
	free            atomic.Int64
	full            atomic.Bool
	next            atomic.Int64 // Unix nanoseconds of the next check due
	refusals        atomic.Uint64
}

func newDiskGuard(dir string, p diskPlan) *diskGuard {
	g := &diskGuard{dir: dir, reserve: p.reserve, resume: p.resume, checkEvery: 100 * time.Millisecond,
		space: func() (int64, error) { _, free, err := fsSpace(dir); return free, err }}
	g.recheck()
	return g
}

// room reports whether a round that writes about n bytes may go ahead:
// ErrDiskFull if it would leave less than the reserve.
func (g *diskGuard) room(n int64) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	free := g.free.Load()
	// Near the reserve, read the free space for every round (a statfs is
	// a microsecond or two; a synced round, a hundred or more): Badger's
	// flushes, compactions and the log's zeros written ahead use space the
	// rounds' estimates do not see.
	if time.Since(g.checked) >= g.checkEvery || free-g.reserve < g.reserve || g.since+n > (free-g.reserve)/4 {
		g.recheck()
		free = g.free.Load()
	}
	if g.full.Load() || free-g.since-n < g.reserve {
		g.full.Store(true)
		g.refusals.Add(1)
		return g.fullErr()
	}
	g.since += n
	return nil
}

// err is ErrDiskFull while the disk is full (checked again at most every
// checkEvery), for writers that do not go through the committer.
func (g *diskGuard) err() error {
	if g == nil || !g.full.Load() && time.Now().UnixNano() < g.next.Load() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.checked) >= g.checkEvery {
		g.recheck()
	}
	if g.full.Load() {
		g.refusals.Add(1)
		return g.fullErr()
	}
	return nil
}

// recheck reads the free space (g.mu held). Full stays set until the free
// space reaches resume.
func (g *diskGuard) recheck() {
	g.checked, g.since = time.Now(), 0
	g.next.Store(g.checked.Add(g.checkEvery).UnixNano())
	free, err := g.space()
	if err != nil {
		free = 0 // cannot tell: refuse
	}
	g.free.Store(free)
	if g.full.Load() {
		g.full.Store(free < g.resume)
	} else {
		g.full.Store(free < g.reserve)
	}
}

// markFull records a write that found no space.
func (g *diskGuard) markFull() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.full.Store(true)
	g.checked = time.Time{} // read the free space at the next check
	g.next.Store(0)
}

func (g *diskGuard) fullErr() error {
	return fmt.Errorf("%w (%s free on %s; the store keeps %s free and writes again from %s)", ErrDiskFull,
		mib(g.free.Load()), g.dir, mib(g.reserve), mib(g.resume))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// noSpace wraps an ENOSPC or EDQUOT from a write as ErrDiskFull.
func noSpace(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

// syncBadgerFiles makes every file Badger may hold unsynced writes in
// durable: each memtable's log (*.mem) and value-log file (*.vlog), and
// the directory. Badger's own DB.Sync covers only the active memtable
// and value-log file; a full memtable waiting to be flushed, or a
// value-log file rotated out, would otherwise be durable only in the
// store's log — which a checkpoint is about to start over. A file Badger
// removes meanwhile was flushed into a table, which Badger syncs.
func syncBadgerFiles(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("kv: sync Badger's files: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".mem") && !strings.HasSuffix(name, ".vlog") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("kv: sync Badger's files: %w", err)
		}
		err = fdatasync(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("kv: sync %s: %w", name, err)
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("kv: sync Badger's files: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("kv: sync %s: %w", dir, err)
	}
	return nil
}
