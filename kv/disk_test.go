package kv

import (
	"testing"
	"time"
)

// The store's sizing follows the disk it is on: a DPU's small partition
// and a large NVMe disk both keep what Badger may write into its sparse
// files, the reserve leaves room to write, and on a large disk it stops
// growing with the disk.
func TestPlanDiskFollowsTheDisk(t *testing.T) {
	const mem, memtables = 64 << 20, 5
	for _, tc := range []struct {
		name  string
		total int64
	}{
		{"64 MiB DPU partition", 64 << 20},
		{"1 GiB", 1 << 30},
		{"32 GiB eMMC", 32 << 30},
		{"258 GB root disk", 258 << 30},
		{"1 TB NVMe", 1 << 40},
		{"unknown", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planDisk(tc.total, mem, memtables)
			t.Logf("memtable %s, vlog file %s, checkpoint %s, reserve %s, resume %s", mib(p.memtable), mib(p.vlogFile),
				mib(p.checkpoint), mib(p.reserve), mib(p.resume))
			// What Badger writes into sparse files it made before: the
			// active value-log file (at twice its size) and each
			// memtable's log.
			if sparse := 2*p.vlogFile + (memtables+1)*p.memtable; p.reserve < sparse {
				t.Errorf("reserve %s is below what Badger's sparse files may take (%s)", mib(p.reserve), mib(sparse))
			}
			if p.resume <= p.reserve {
				t.Errorf("resume %s is not above the reserve %s", mib(p.resume), mib(p.reserve))
			}
			if tc.total == 0 {
				return
			}
			if p.reserve >= tc.total {
				t.Errorf("reserve %s leaves nothing of the %s disk", mib(p.reserve), mib(tc.total))
			}
			if tc.total >= 32<<30 && p.reserve > 8<<30 {
				t.Errorf("a %s disk keeps %s free: the reserve should not grow with the disk past Badger's needs", mib(tc.total), mib(p.reserve))
			}
			if p.checkpoint > tc.total/4 || p.ahead > p.checkpoint {
				t.Errorf("the log (checkpoint %s, ahead %s) does not fit the disk", mib(p.checkpoint), mib(p.ahead))
			}
		})
	}
}

// A disk with plenty free is far from the reserve, and a write there does
// not read the free space: it is read every checkEvery (or when the
// rounds' writes near a quarter of the margin). The reserve of a large
// disk once grew with the disk (33 GiB of a 258 GB one, which had 64 GB
// free): every write was "near the reserve" and read the free space — a
// statfs per Async SET, 8% of such a run's samples.
func TestDiskGuardStatfsRate(t *testing.T) {
	const total, free = 258 << 30, 64 << 30 // the bench machine's root file system
	p := planDisk(total, 64<<20, 5)
	statfs := 0
	g := &diskGuard{reserve: p.reserve, resume: p.resume, checkEvery: 100 * time.Millisecond,
		space: func() (int64, error) { statfs++; return free, nil }}
	g.recheck()
	statfs = 0
	start := time.Now()
	const writes = 100_000
	for range writes {
		if err := g.room(1 << 10); err != nil {
			t.Fatalf("room: %v", err)
		}
	}
	took := time.Since(start)
	if bound := int(took/g.checkEvery) + 2; statfs > bound {
		t.Errorf("%d statfs for %d writes in %v with %s free and a reserve of %s (at most %d)", statfs, writes, took,
			mib(free), mib(p.reserve), bound)
	}
}
