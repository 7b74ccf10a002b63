package verbs

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// rdmaDevice opens the machine's first RDMA device, or skips saying why
// there is none; HEC_REQUIRE_RDMA=1 (the VM tests, where soft-RoCE runs)
// makes its absence a failure.
func rdmaDevice(t *testing.T) *Device {
	t.Helper()
	d, err := Open("")
	if err != nil {
		if os.Getenv("HEC_REQUIRE_RDMA") == "1" {
			t.Fatalf("HEC_REQUIRE_RDMA=1: %v", err)
		}
		t.Skipf("no RDMA here: %v (test/vm runs this in a VM with soft-RoCE)", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// await polls q until a completion of id arrives.
func await(t *testing.T, q *QP, id uint64) Completion {
	t.Helper()
	var cs []Completion
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		var err error
		if cs, err = q.Poll(cs[:0]); err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.ID == id {
				return c
			}
			t.Fatalf("completion %+v while waiting for %d", c, id)
		}
	}
	t.Fatalf("no completion of %d within 10 s", id)
	return Completion{}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

// TestRDMALoopback: two queue pairs of one device, connected to each
// other, move bytes every way the transport will: a send into a posted
// receive, an RDMA write into the peer's region, an RDMA read from it,
// a write with immediate that completes the peer's receive. A write
// beyond the peer's region fails on the NIC (the key covers the region
// and no more), and the queue pair that tried is in error after.
func TestRDMALoopback(t *testing.T) {
	d := rdmaDevice(t)
	gid, idx := d.GID()
	t.Logf("device %s port %d, GID %x (index %d), MTU %d", d.Name, d.Port, gid, idx, d.MTU())
	const size = 1 << 20
	ra, err := d.Register(size)
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	rb, err := d.Register(size)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	qa, err := d.NewQP(16)
	if err != nil {
		t.Fatal(err)
	}
	defer qa.Close()
	qb, err := d.NewQP(16)
	if err != nil {
		t.Fatal(err)
	}
	defer qb.Close()
	// The ends as they would cross a connection.
	ea, err := ParseEndpoint(qa.Local().Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	eb, err := ParseEndpoint(qb.Local().Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.Connect(eb); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(ea); err != nil {
		t.Fatal(err)
	}

	// Send into a posted receive.
	fill(ra.Buf[:3000], 1)
	if err := qb.PostRecv(rb, 4096, 8192, 1); err != nil {
		t.Fatal(err)
	}
	if err := qa.Post(Work{Op: Send, ID: 2, Region: ra, Len: 3000, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := await(t, qa, 2); c.Err != nil {
		t.Fatal(c.Err)
	}
	if c := await(t, qb, 1); c.Err != nil || c.Bytes != 3000 || !bytes.Equal(rb.Buf[4096:4096+3000], ra.Buf[:3000]) {
		t.Fatalf("received %+v: want 3000 bytes as sent", c)
	}

	// An RDMA write of the whole region, then a read of it back.
	fill(ra.Buf, 3)
	if err := qa.Post(Work{Op: Write, ID: 3, Region: ra, Len: size, Remote: rb.Key(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := await(t, qa, 3); c.Err != nil || !bytes.Equal(rb.Buf, ra.Buf) {
		t.Fatalf("write: %v; the peer's region equals: %v", c.Err, bytes.Equal(rb.Buf, ra.Buf))
	}
	fill(rb.Buf[:65536], 9)
	key := rb.Key()
	key.Addr += 1000 // from an offset
	if err := qa.Post(Work{Op: Read, ID: 4, Region: ra, Off: 7, Len: 60000, Remote: key, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := await(t, qa, 4); c.Err != nil || !bytes.Equal(ra.Buf[7:60007], rb.Buf[1000:61000]) {
		t.Fatalf("read: %v", c.Err)
	}

	// Write with immediate: the data lands, then the receive completes.
	if err := qb.PostRecv(rb, 0, 0, 5); err != nil {
		t.Fatal(err)
	}
	fill(ra.Buf[:512], 11)
	key = rb.Key()
	key.Addr += 200000
	if err := qa.Post(Work{Op: WriteWithImm, ID: 6, Region: ra, Len: 512, Remote: key, Imm: 0xc0ffee, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := await(t, qa, 6); c.Err != nil {
		t.Fatal(c.Err)
	}
	if c := await(t, qb, 5); c.Err != nil || !c.HasImm || c.Imm != 0xc0ffee || !bytes.Equal(rb.Buf[200000:200512], ra.Buf[:512]) {
		t.Fatalf("write with immediate: %+v", c)
	}

	// Bounds: locally refused, remotely failed by the NIC.
	if err := qa.Post(Work{Op: Send, ID: 7, Region: ra, Off: size - 10, Len: 11}); err == nil {
		t.Fatal("a send past the region's end was posted")
	}
	key = rb.Key()
	key.Addr += size - 100
	if err := qa.Post(Work{Op: Write, ID: 8, Region: ra, Len: 4096, Remote: key, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := await(t, qa, 8); c.Err == nil {
		t.Fatal("a write past the peer's region succeeded")
	} else {
		t.Logf("a write past the peer's region: %v", c.Err)
	}
}

func TestRemoteKeyEncoding(t *testing.T) {
	k := RemoteKey{Addr: 0x7f00_1234_5000, Len: 1 << 20, RKey: 0xabcd}
	got, err := ParseRemoteKey(k.Append(nil))
	if err != nil || got != k {
		t.Fatalf("%+v, %v", got, err)
	}
	if _, err := ParseRemoteKey(k.Append(nil)[:RemoteKeySize-1]); err == nil {
		t.Fatal("a short remote key parsed")
	}
}

func TestEndpointEncoding(t *testing.T) {
	e := Endpoint{QPN: 0x11, PSN: 0xabcdef, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 9, 15: 1}}
	got, err := ParseEndpoint(e.Append(nil))
	if err != nil || got != e {
		t.Fatalf("%+v, %v", got, err)
	}
	for _, b := range [][]byte{nil, make([]byte, 23), Endpoint{QPN: 1 << 24}.Append(nil), Endpoint{QPN: 1}.Append(nil)} {
		if _, err := ParseEndpoint(b); err == nil {
			t.Errorf("%x parsed", b)
		}
	}
}

func TestUnavailableSaysWhy(t *testing.T) {
	err := Available()
	if err == nil {
		return
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "libibverbs") && !strings.Contains(err.Error(), "cgo") {
		t.Fatalf("%v: want ErrUnavailable with why", err)
	}
}
