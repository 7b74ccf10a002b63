package verbs

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestRDMAConnectionManager: a listener and a client connected by the
// RDMA connection manager at the device's IPv4 address (its RoCE v2
// GID): the request's private data is checked (a wrong key is rejected,
// and both sides say so), the accept's reply carries the listener's
// region key, and the client RDMA-writes 1 MiB into that region, then
// sends a message after it: the listener, receiving the message, finds
// the region written (a reliable connection keeps the order).
func TestRDMAConnectionManager(t *testing.T) {
	d := rdmaDevice(t)
	gid, _ := d.GID()
	ip, ok := netip.AddrFromSlice(gid[:])
	if !ok || !ip.Unmap().Is4() {
		t.Skipf("device %s: GID %x is not an IPv4 address's (RoCE v2 over IPv4 is what the transport uses)", d.Name, gid)
	}
	addr := netip.AddrPortFrom(ip.Unmap(), 7471)
	l, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const size = 1 << 20
	key := []byte("the cluster's key")

	type served struct {
		got []byte
		err error
	}
	done := make(chan served, 2)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		check := func(private []byte) ([]byte, error) {
			if !bytes.Equal(private, key) {
				return nil, errors.New("wrong key")
			}
			return nil, nil
		}
		// The first request carries a wrong key.
		if _, err := l.Accept(ctx, 16, check); err == nil {
			done <- served{err: errors.New("a request with a wrong key was accepted")}
			return
		}
		c, err := l.Accept(ctx, 16, check)
		if err != nil {
			done <- served{err: err}
			return
		}
		defer c.Close()
		region, err := c.Device.Register(size)
		if err != nil {
			done <- served{err: err}
			return
		}
		defer region.Close()
		// The region's key goes by a send: the client posted its receive.
		k := region.Key()
		msg := k.Append(nil)
		copy(region.Buf[size-64:], msg)
		if err := c.QP.PostRecv(region, size-128, 64, 1); err != nil {
			done <- served{err: err}
			return
		}
		if err := c.QP.Post(Work{Op: Send, ID: 2, Region: region, Off: size - 64, Len: len(msg), Signaled: true}); err != nil {
			done <- served{err: err}
			return
		}
		var cs []Completion
		got := 0
		for got < 2 && ctx.Err() == nil {
			cs, _ = c.QP.Poll(cs[:0])
			for _, x := range cs {
				if x.Err != nil {
					done <- served{err: x.Err}
					return
				}
				got++
			}
		}
		done <- served{got: append([]byte(nil), region.Buf[:size-128]...), err: ctx.Err()}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, _, err := Dial(ctx, addr, []byte("not the key"), 16); err == nil {
		c.Close()
		t.Fatal("a connection with a wrong key was accepted")
	} else {
		t.Logf("wrong key: %v", err)
	}
	c, _, err := Dial(ctx, addr, key, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Device.Register(size)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := c.QP.PostRecv(r, 0, 64, 10); err != nil {
		t.Fatal(err)
	}
	kc := await(t, c.QP, 10)
	if kc.Err != nil || kc.Bytes != RemoteKeySize {
		t.Fatalf("the listener's key: %+v", kc)
	}
	remote, err := ParseRemoteKey(r.Buf)
	if err != nil {
		t.Fatal(err)
	}
	fill(r.Buf, 5)
	want := append([]byte(nil), r.Buf[:size-128]...)
	if err := c.QP.Post(Work{Op: Write, ID: 11, Region: r, Len: size - 128, Remote: remote}); err != nil {
		t.Fatal(err)
	}
	if err := c.QP.Post(Work{Op: Send, ID: 12, Region: r, Len: 8, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if x := await(t, c.QP, 12); x.Err != nil {
		t.Fatal(x.Err)
	}
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if !bytes.Equal(s.got, want) {
		t.Fatal("the listener's region is not what the client wrote")
	}
}

// FuzzUnframed: a peer's private data, whatever it is, gives a frame
// within it or none.
func FuzzUnframed(f *testing.F) {
	f.Add(framed([]byte("key")))
	f.Add(append(framed([]byte("key")), make([]byte, 50)...))
	f.Add([]byte{})
	f.Add([]byte{200, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := unframed(b)
		if ok && (len(got) != int(b[0]) || !bytes.Equal(got, b[1:1+len(got)])) {
			t.Fatalf("%x: %x", b, got)
		}
		if ok && !bytes.Equal(framed(got), b[:1+len(got)]) {
			t.Fatalf("%x does not frame back", got)
		}
	})
}
