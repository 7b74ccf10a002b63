package object

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestShardPiecesBypassThePageCache: a shard's whole pieces go to the
// disk past the page cache (O_DIRECT), where the file system takes it,
// and the object reads back whole, its shorter last stripe included.
func TestShardPiecesBypassThePageCache(t *testing.T) {
	c := newMemCluster(t, 6)
	probe := filepath.Join(c.dir, "probe")
	f, err := os.OpenFile(probe, os.O_CREATE|os.O_WRONLY|syscall.O_DIRECT, 0o644)
	if err != nil {
		t.Skipf("the file system of %s refuses O_DIRECT (%v): pieces go through the page cache there", c.dir, err)
	}
	f.Close()
	const chunk = 64 << 10
	co := newCoord(t, c, chunk)
	ctx := context.Background()
	data := payload(5*4*chunk+4*chunk/2+100, 7) // 5 whole stripes and a short one
	if _, err := co.Put(ctx, "direct", data); err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	for _, node := range c.Members() {
		path := shardFile(t, c, node, "direct")
		resident, whole := residentPages(t, path), 5*chunk/page
		// The whole stripes' pages (the first 5 chunks) are not cached;
		// the short last piece went through the page cache.
		for i := 0; i < whole; i++ {
			if resident[i] {
				t.Fatalf("node %d: page %d of the shard's whole pieces is in the page cache", node, i)
			}
		}
	}
	got, _, _, err := co.Get(ctx, "direct")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(data) {
		t.Fatal("the object read back differs")
	}
}

// residentPages reports, page by page, whether path's pages are in the
// page cache (mincore over a mapping of the file).
func residentPages(t *testing.T, path string) []bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	out := make([]bool, len(vec))
	for i, v := range vec {
		out[i] = v&1 != 0
	}
	return out
}

// TestShardDataIsSyncedAsItStreams: a store syncs a shard's data in the
// background every syncEvery bytes written, so the seal, where every
// agent of a Put syncs at once, has little left; the object reads back
// whole, also where a seal came while a sync ran.
func TestShardDataIsSyncedAsItStreams(t *testing.T) {
	c := newMemCluster(t, 6)
	const chunk = 1 << 20
	co := newCoord(t, c, chunk)
	ctx := context.Background()
	// Shards of 2.5 syncEvery: two background syncs each, the last of
	// which may still run when the seal comes (the seal waits for it).
	n := 4 * (5 * syncEvery / 2)
	data := bytes.Repeat(payload(1<<20+3, 9), n/(1<<20)+1)[:n]
	for i := range 3 {
		name := fmt.Sprintf("streamed-%d", i)
		if _, err := co.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
		got, _, _, err := co.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s read back differs", name)
		}
	}
	for _, node := range c.Members() {
		if n := c.stores[node].dataSyncs.Load(); n < 3 {
			t.Errorf("node %d synced shard data in the background %d times in three Puts of %d MiB shards, want at least 3", node, n, 5*syncEvery/2>>20)
		}
	}
}
