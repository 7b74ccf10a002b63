package tcp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/hecsys/hec/dpu/handoff"
	"github.com/hecsys/hec/shared/accept"
	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// AuthTimeout bounds a connection's proof of the token, so a host that
// sends nothing does not hold a goroutine.
const AuthTimeout = 5 * time.Second

// Transport serves the handoff on a TCP listener.
type Transport struct {
	loop *accept.Loop
	ctx  context.Context
	srv  handoff.Server
}

var _ handoff.Transport = (*Transport)(nil)

// New serves hosts on ln (the caller listened, and named its flag in any
// error); log takes the accept loop's lines.
func New(ln net.Listener, log *slog.Logger) *Transport {
	t := &Transport{}
	t.loop = accept.New("tcp", ln, func(c net.Conn) { serve(t.ctx, t.srv, c) }, log)
	return t
}

// Loop is the accept loop (its retries are the agent's metrics').
func (t *Transport) Loop() *accept.Loop { return t.loop }

// Addr is the listener's address.
func (t *Transport) Addr() string { return t.loop.Addr().String() }

// Run accepts until Close: each connection is served on a goroutine of
// its own (a panic while serving one closes it alone). It runs once.
func (t *Transport) Run(ctx context.Context, srv handoff.Server) error {
	t.ctx, t.srv = ctx, srv
	return t.loop.Run()
}

// Close closes the listener and every connection, and waits for them.
func (t *Transport) Close() { t.loop.Close() }

// serve serves one connection. It returns when the connection ends or
// sends a frame that cannot be decoded (a stream cannot be
// resynchronised); a request that decodes but fails validation gets an
// error response and the connection goes on.
func serve(ctx context.Context, srv handoff.Server, c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if token := srv.Token(); token != "" {
		c.SetDeadline(time.Now().Add(AuthTimeout))
		if err := wire.AuthAgent(c, []byte(token)); err != nil {
			srv.Warn("tcp: connection refused: no proof of the token", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		c.SetDeadline(time.Time{})
	}
	fr := wire.NewFrameReader(c, srv.MaxFrame())
	sess := srv.Begin(trace.TCPOrigin(c.RemoteAddr().String()))
	defer srv.End(sess)
	for {
		req, payload, err := fr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				srv.Warn("tcp: closing connection", "remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		var resp wire.Desc
		srv.Serve(ctx, "tcp", sess, &req, payload, &resp)
		// Output spans (if a handler set any) keep the offsets of the
		// request's memory; their bytes follow one another in the payload.
		var out [wire.MaxSpans][]byte
		n := 0
		for i, sp := range resp.SpanList() {
			if !sp.Within(uint64(len(payload))) {
				resp.Status, resp.NSpan = wire.StatusInternal, 0
				n = 0
				break
			}
			out[i] = payload[sp.Off:sp.End()]
			n++
		}
		if err := wire.WriteFrame(c, &resp, out[:n]...); err != nil {
			return
		}
	}
}
