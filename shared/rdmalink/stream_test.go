package rdmalink

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/hecsys/hec/shared/verbs/verbstest"
)

// TestRDMAStreamIsAConn runs x/net's conformance suite for net.Conn
// (nettest.TestConn: basic and ping-pong I/O, racing reads and writes,
// deadlines in the past, present and future, Close unblocking reads and
// writes, every method at once) against a pair of streams.
func TestRDMAStreamIsAConn(t *testing.T) {
	addr := netip.AddrPortFrom(verbstest.Addr(t), 7490).String()
	ln, err := ListenStream(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		type accepted struct {
			c   net.Conn
			err error
		}
		ch := make(chan accepted, 1)
		go func() { c, err := ln.Accept(); ch <- accepted{c, err} }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c1, err = DialStream(ctx, addr); err != nil {
			return nil, nil, nil, err
		}
		a := <-ch
		if a.err != nil {
			c1.Close()
			return nil, nil, nil, a.err
		}
		return c1, a.c, func() { c1.Close(); a.c.Close() }, nil
	})
}

// TestRDMAStreamCarriesBytes: 16 MiB each way at once, in writes of
// sizes that straddle the messages, arrive whole and in order; the
// reader that stops reading holds the writer back (its write times out)
// and nothing is lost when it reads again; Close is seen as io.EOF.
func TestRDMAStreamCarriesBytes(t *testing.T) {
	addr := netip.AddrPortFrom(verbstest.Addr(t), 7491).String()
	ln, err := ListenStream(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); ch <- c }()
	a, err := DialStream(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b == nil {
		t.Fatal("no stream accepted")
	}
	data := make([]byte, 16<<20)
	rand.Read(data)
	errs := make(chan error, 4)
	for _, pair := range [][2]net.Conn{{a, b}, {b, a}} {
		w, r := pair[0], pair[1]
		go func() {
			for off, i := 0, 0; off < len(data); i++ {
				n := min(len(data)-off, []int{1, 100, 64 << 10, 64<<10 + 1, 1 << 20}[i%5])
				if _, err := w.Write(data[off : off+n]); err != nil {
					errs <- err
					return
				}
				off += n
			}
			errs <- nil
		}()
		go func() {
			got := make([]byte, len(data))
			if _, err := io.ReadFull(r, got); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, data) {
				errs <- errors.New("the bytes read are not those written")
				return
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// b reads nothing: a's writes fill b's receive slots and stall.
	a.SetWriteDeadline(time.Now().Add(2 * time.Second))
	sent := 0
	for {
		n, err := a.Write(data[:1<<20])
		sent += n
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a write to a reader that reads nothing: %v", err)
			}
			break
		}
		if sent > 64<<20 {
			t.Fatalf("%d bytes written to a reader that reads nothing", sent)
		}
	}
	t.Logf("held back after %d bytes", sent)
	a.SetWriteDeadline(time.Time{})
	go func() { errs <- func() error { defer a.Close(); _, err := a.Write(data[:1<<20]); return err }() }()
	got, err := io.ReadAll(b)
	if err != nil {
		t.Fatalf("reading to the end: %v", err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// What was sent before the deadline (it may have been part of a
	// write) and the last write: every byte, in order.
	if len(got) != sent+1<<20 || !bytes.Equal(got[len(got)-1<<20:], data[:1<<20]) {
		t.Fatalf("read %d bytes after the stall, %d written: the last write's not at the end, or bytes lost", len(got), sent+1<<20)
	}
	b.Close()
}
