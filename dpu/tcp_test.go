package dpu

import (
	"context"
	"hash/crc32"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/wire"
)

func startTCPAgent(t *testing.T) *Agent {
	t.Helper()
	a, err := New(Config{Agent: AgentConfig{Shm: Off, TCP: "127.0.0.1:0", Mgmt: Off, StateDir: t.TempDir(), MaxFrame: 1 << 20},
		RESP: RESPConfig{Addr: Off}, UDP: UDPConfig{Addr: Off}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	<-a.Ready()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

func TestTCPServesAndSurvivesBadClients(t *testing.T) {
	a := startTCPAgent(t)
	addr := a.Addr("tcp")
	good, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	fr := wire.NewFrameReader(good, 0)
	roundTrip := func(d wire.Desc, payload []byte) wire.Desc {
		t.Helper()
		if err := wire.WriteFrame(good, &d, payload); err != nil {
			t.Fatal(err)
		}
		good.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, _, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	data := []byte("hello, dpu")
	if r := roundTrip(wire.Desc{Op: wire.OpChecksum, Tag: 1, NSpan: 1, Spans: [4]wire.Span{{Off: 0, Len: uint32(len(data))}}}, data); r.Status != wire.StatusOK || uint32(r.Arg0) != crc32.Checksum(data, castagnoli) || r.Tag != 1 {
		t.Fatalf("checksum: %+v", r)
	}
	// A span past the payload: an error response, the connection goes on.
	if r := roundTrip(wire.Desc{Op: wire.OpChecksum, Tag: 2, NSpan: 1, Spans: [4]wire.Span{{Off: 5, Len: 100}}}, data); r.Status != wire.StatusBadSpan {
		t.Fatalf("bad span: %+v", r)
	}
	if r := roundTrip(wire.Desc{Op: 0x7777, Tag: 3}, nil); r.Status != wire.StatusBadOp {
		t.Fatalf("bad op: %+v", r)
	}
	// Bad clients: garbage, a frame over the limit, a truncated frame.
	for _, junk := range [][]byte{
		{1, 2, 3, 4, 5, 6, 7, 8, 9},
		append([]byte{0xff, 0xff, 0xff, 0x7f}, make([]byte, 64)...),
		append([]byte{100, 0, 0, 0}, make([]byte, 30)...),
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(junk)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("agent did not close a bad connection: %v", err)
		}
		c.Close()
	}
	if r := roundTrip(wire.Desc{Op: wire.OpPing, Tag: 4, Arg0: 77}, nil); r.Status != wire.StatusOK || r.Arg0 != 77 {
		t.Fatalf("good client after bad ones: %+v", r)
	}
}

func TestGenerationGrowsAcrossRuns(t *testing.T) {
	dir := t.TempDir()
	var gens []uint32
	for i := 0; i < 3; i++ {
		a, err := New(Config{Agent: AgentConfig{Shm: Off, TCP: Off, Mgmt: Off, StateDir: dir},
			RESP: RESPConfig{Addr: Off}, UDP: UDPConfig{Addr: Off}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- a.Run(ctx) }()
		<-a.Ready()
		gens = append(gens, a.Generation())
		cancel()
		<-done
	}
	if gens[0] >= gens[1] || gens[1] >= gens[2] {
		t.Fatalf("generations %v do not grow", gens)
	}
}
