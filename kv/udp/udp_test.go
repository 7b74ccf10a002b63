package udp

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/kv"
)

func TestUDPGet(t *testing.T) {
	st, err := kv.Open(t.TempDir(), kv.WithDurability(kv.Async))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Put([]byte("hot"), []byte("value!"), kv.PutOptions{})
	st.Put([]byte("big"), bytes.Repeat([]byte("x"), 2000), kv.PutOptions{})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Store: st}
	go s.Serve(context.Background(), pc)
	defer pc.Close()
	cl, _ := net.ListenPacket("udp", "127.0.0.1:0")
	defer cl.Close()
	ask := func(id uint16, line string) string {
		t.Helper()
		req := binary.BigEndian.AppendUint16(nil, id)
		req = append(req, 0, 0, 0, 1, 0, 0)
		req = append(req, line...)
		cl.WriteTo(req, pc.LocalAddr())
		cl.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 2048)
		n, _, err := cl.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.BigEndian.Uint16(buf); got != id {
			t.Fatalf("reply id %d, want %d", got, id)
		}
		return string(buf[HeaderSize:n])
	}
	tests := []struct {
		line, want string
	}{
		{"get hot\r\n", "VALUE hot 0 6\r\nvalue!\r\nEND\r\n"},
		{"get cold\r\n", "END\r\n"},
		{"get big\r\n", "SERVER_ERROR object too large for UDP\r\n"},
		{"set x 0 0 1\r\n", "CLIENT_ERROR bad command line format\r\n"},
		{"get \r\n", "CLIENT_ERROR bad command line format\r\n"},
	}
	for i, tt := range tests {
		if got := ask(uint16(100+i), tt.line); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.line, got, tt.want)
		}
	}
	if got := ask(7, "gets hot\r\n"); !strings.HasPrefix(got, "VALUE hot 0 6 ") {
		t.Errorf("gets: %q", got)
	}
}

// TestPanicDropsOneDatagram: a panic while answering one GET (here in the
// Seen hook) drops that datagram alone; the next is answered.
func TestPanicDropsOneDatagram(t *testing.T) {
	st, err := kv.Open(t.TempDir(), kv.WithDurability(kv.Async))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Put([]byte("hot"), []byte("v"), kv.PutOptions{})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Store: st, Seen: func(key []byte) {
		if string(key) == "boom" {
			panic("a bug in the hook")
		}
	}}
	go s.Serve(context.Background(), pc)
	defer pc.Close()
	cl, _ := net.ListenPacket("udp", "127.0.0.1:0")
	defer cl.Close()
	send := func(id uint16, line string) {
		req := binary.BigEndian.AppendUint16(nil, id)
		req = append(req, 0, 0, 0, 1, 0, 0)
		cl.WriteTo(append(req, line...), pc.LocalAddr())
	}
	send(1, "get boom\r\n")
	send(2, "get hot\r\n")
	cl.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	n, _, err := cl.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no answer after the datagram that panicked: %v", err)
	}
	if id := binary.BigEndian.Uint16(buf); id != 2 || string(buf[HeaderSize:n]) != "VALUE hot 0 1\r\nv\r\nEND\r\n" {
		t.Fatalf("answer %d %q, want 2's VALUE", id, buf[HeaderSize:n])
	}
	if s.Errors.Load() != 1 {
		t.Errorf("errors %d, want 1", s.Errors.Load())
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte("\x00\x01\x00\x00\x00\x01\x00\x00get k\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err == nil && (len(r.Key) == 0 || len(r.Key) > 250) {
			t.Fatalf("accepted key of %d bytes", len(r.Key))
		}
	})
}
