package tcp

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hecsys/hec/dpu/handoff"
	"github.com/hecsys/hec/shared/wire"
)

// upper is a Server whose one op upper-cases its span in place and
// names the span as its output; it counts sessions begun and ended.
type upper struct {
	token string
	mu    sync.Mutex
	begun []string
	ended int
	warns []string
}

func (u *upper) Begin(origin string) handoff.Session {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.begun = append(u.begun, origin)
	return handoff.Session(len(u.begun))
}

func (u *upper) End(handoff.Session) { u.mu.Lock(); u.ended++; u.mu.Unlock() }
func (u *upper) Token() string       { return u.token }
func (u *upper) MaxFrame() int       { return 1 << 20 }

func (u *upper) Warn(msg string, args ...any) {
	u.mu.Lock()
	u.warns = append(u.warns, msg)
	u.mu.Unlock()
}

func (u *upper) Serve(_ context.Context, transport string, _ handoff.Session, req *wire.Desc, mem []byte, resp *wire.Desc) {
	*resp = wire.Desc{Op: req.Op, Tag: req.Tag, Status: wire.StatusOK}
	if transport != "tcp" || req.Validate(uint64(len(mem))) != nil {
		resp.Status = wire.StatusBadSpan
		return
	}
	for _, sp := range req.SpanList() {
		copy(mem[sp.Off:sp.End()], bytes.ToUpper(mem[sp.Off:sp.End()]))
	}
	resp.NSpan, resp.Spans = req.NSpan, req.Spans
}

// start serves srv on a loopback port and returns the address; the
// transport closes at the test's end (and Run returns nil).
func start(t *testing.T, srv handoff.Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := New(ln, nil)
	ran := make(chan error, 1)
	go func() { ran <- tr.Run(context.Background(), srv) }()
	t.Cleanup(func() {
		tr.Close()
		if err := <-ran; err != nil {
			t.Errorf("Run after Close: %v", err)
		}
	})
	return tr.Addr()
}

func roundTrip(t *testing.T, c net.Conn, tag uint64, in []byte) (wire.Desc, []byte) {
	t.Helper()
	req := wire.Desc{Op: wire.OpPing, Tag: tag, NSpan: 1, Spans: [wire.MaxSpans]wire.Span{{Off: 0, Len: uint32(len(in))}}}
	if err := wire.WriteFrame(c, &req, in); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, out, err := wire.NewFrameReader(c, 1<<20).Next()
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

// A host's frames are served in its session, the outputs come back
// inline; a stream of junk ends that host's connection only; the token
// is wanted where the server has one.
func TestTransport(t *testing.T) {
	u := &upper{}
	addr := start(t, u)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, out := roundTrip(t, c, 7, []byte("hello"))
	if resp.Tag != 7 || resp.Status != wire.StatusOK || string(out) != "HELLO" {
		t.Fatalf("response %+v %q, want tag 7, ok, HELLO", resp, out)
	}

	junk, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	junk.Write([]byte{0xff, 0xff, 0xff, 0x7f, 1, 2, 3}) // a frame longer than MaxFrame
	junk.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := junk.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a junk stream got %d bytes back, want its connection closed", n)
	}
	junk.Close()
	if resp, out := roundTrip(t, c, 8, []byte("still")); resp.Status != wire.StatusOK || string(out) != "STILL" {
		t.Fatalf("after another host's junk: %+v %q", resp, out)
	}

	tok := &upper{token: "the operator's token"}
	taddr := start(t, tok)
	for _, proof := range []string{"", "wrong", tok.token} {
		c, err := net.Dial("tcp", taddr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(AuthTimeout + 5*time.Second))
		if proof != "" {
			err = wire.AuthHost(c, []byte(proof))
		} else {
			req := wire.Desc{Op: wire.OpPing, Tag: 1}
			wire.WriteFrame(c, &req)
			_, _, err = wire.NewFrameReader(c, 1<<20).Next()
		}
		if (err == nil) != (proof == tok.token) {
			t.Errorf("token %q: %v", proof, err)
		}
		if proof == tok.token {
			if resp, out := roundTrip(t, c, 9, []byte("in")); resp.Status != wire.StatusOK || string(out) != "IN" {
				t.Errorf("with the token: %+v %q", resp, out)
			}
		}
		c.Close()
	}
	tok.mu.Lock()
	if len(tok.begun) != 1 {
		t.Errorf("sessions begun on the token's transport: %q, want only the one that proved it", tok.begun)
	}
	tok.mu.Unlock()
}
