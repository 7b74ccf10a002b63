package tcp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/host/handoff/tcp"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/handofftest"
)

// lyingAgent accepts connections on loopback and answers each request
// frame with lie (given the request and the connection); honest answers
// the connections after the first lie's connection ends.
func lyingAgent(t *testing.T, lie func(c net.Conn, req wire.Desc)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn, lying bool) {
				defer c.Close()
				fr := wire.NewFrameReader(c, 0)
				for {
					req, _, err := fr.Next()
					if err != nil {
						return
					}
					if lying {
						lie(c, req)
						continue
					}
					resp := wire.Desc{Op: req.Op, Tag: req.Tag, Status: wire.StatusOK, Arg0: 7}
					if wire.WriteFrame(c, &resp) != nil {
						return
					}
				}
			}(c, first)
		}
	}()
	return ln.Addr().String()
}

// TestALyingAgent: the host library takes what an agent sends over TCP
// (which may cross a network) as untrusted. A completion for a tag it
// did not send, a second one for a call already done, output spans
// outside the call's Out buffer or past the payload: ignored, the call
// completes with its own answer and nothing outside its Out buffer is
// written. A stream that is no frames, or a frame over the limit: the
// calls in flight fail with a retryable status and the next op connects
// again. Never a panic, never a hang.
func TestALyingAgent(t *testing.T) {
	// The request: 8 input bytes, an Out buffer of 16: its span is
	// [8, 24) of the request's memory.
	const outOff = 8
	answer := func(c net.Conn, d wire.Desc, payload ...[]byte) {
		wire.WriteFrame(c, &d, payload...) //nolint:errcheck // the host may have gone
	}
	for _, tc := range []struct {
		name string
		lie  func(c net.Conn, req wire.Desc)
		// placed: the output the call must end with (nil: none);
		// broken: the call fails, retryably.
		placed []byte
		broken bool
	}{
		{"a completion for a tag never sent, then the call's", func(c net.Conn, req wire.Desc) {
			answer(c, wire.Desc{Tag: req.Tag + 1000, Arg0: 99})
			answer(c, wire.Desc{Tag: req.Tag, Arg0: 7})
		}, nil, false},
		{"the call's completion twice", func(c net.Conn, req wire.Desc) {
			answer(c, wire.Desc{Tag: req.Tag, Arg0: 7})
			answer(c, wire.Desc{Tag: req.Tag, Arg0: 99, NSpan: 1, Spans: [wire.MaxSpans]wire.Span{{Off: outOff, Len: 4}}}, []byte("XXXX"))
		}, nil, false},
		{"an output span over the input", func(c net.Conn, req wire.Desc) {
			answer(c, wire.Desc{Tag: req.Tag, Arg0: 7, NSpan: 1, Spans: [wire.MaxSpans]wire.Span{{Off: 0, Len: 8}}}, []byte("XXXXXXXX"))
		}, nil, false},
		{"an output span past the Out buffer's end", func(c net.Conn, req wire.Desc) {
			answer(c, wire.Desc{Tag: req.Tag, Arg0: 7, NSpan: 1, Spans: [wire.MaxSpans]wire.Span{{Off: outOff + 12, Len: 8}}}, []byte("XXXXXXXX"))
		}, nil, false},
		{"an output span longer than the payload", func(c net.Conn, req wire.Desc) {
			answer(c, wire.Desc{Tag: req.Tag, Arg0: 7, NSpan: 1, Spans: [wire.MaxSpans]wire.Span{{Off: outOff, Len: 16}}}, []byte("XXXX"))
		}, nil, false},
		{"an honest output beside a lying one", func(c net.Conn, req wire.Desc) {
			answer(c, wire.Desc{Tag: req.Tag, Arg0: 7, NSpan: 2, Spans: [wire.MaxSpans]wire.Span{{Off: outOff + 4, Len: 4}, {Off: 1 << 31, Len: 1 << 20}}}, []byte("good"))
		}, []byte("good"), false},
		{"a frame over the host's limit", func(c net.Conn, req wire.Desc) {
			hdr := wire.AppendFrameHeader(nil, &wire.Desc{Tag: req.Tag}, 0, 0)
			binary.LittleEndian.PutUint32(hdr, 1<<31) // its length: 2 GiB
			c.Write(hdr)
		}, nil, true},
		{"a descriptor that does not decode", func(c net.Conn, req wire.Desc) {
			answer(c, wire.Desc{Tag: req.Tag, NSpan: wire.MaxSpans + 1})
		}, nil, true},
		{"bytes that are no frame, then the end", func(c net.Conn, req wire.Desc) {
			c.Write(bytes.Repeat([]byte{0xff}, 100))
			c.Close()
		}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tr, err := tcp.Dial(ctx, lyingAgent(t, tc.lie), handoff.Options{}.Defaults())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			handofftest.AskALiar(t, tr, tc.placed, tc.broken)
		})
	}
}
