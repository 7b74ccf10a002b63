package dpu

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/hecsys/hec/shared/trace"
	"github.com/hecsys/hec/shared/wire"
)

// authTimeout bounds a TCP connection's handshake, so a client that
// sends nothing does not hold a goroutine.
const authTimeout = 5 * time.Second

// serveTCP serves the handoff over one stream connection: the same
// descriptors as the region's rings, with the payload inline (the fallback
// transport, and the way to reach an agent on real hardware over the
// host–DPU network). It returns when the connection ends or sends a frame
// that cannot be decoded (a stream cannot be resynchronised); a request
// that decodes but fails validation gets an error response and the
// connection goes on.
func serveTCP(ctx context.Context, a *Agent, c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if token := a.shared.Token; token != "" {
		c.SetDeadline(time.Now().Add(authTimeout))
		if err := wire.AuthAgent(c, []byte(token)); err != nil {
			a.disp.limited.Log(slog.LevelWarn, "tcp: connection refused: no proof of the token", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		c.SetDeadline(time.Time{})
	}
	fr := wire.NewFrameReader(c, a.cfg.Agent.MaxFrame)
	sess := a.disp.sessions.begin(trace.TCPOrigin(c.RemoteAddr().String()))
	defer a.disp.sessions.end(sess)
	for {
		req, payload, err := fr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				a.disp.limited.Log(slog.LevelWarn, "tcp: closing connection", "remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		var resp wire.Desc
		a.disp.ServeFrame(ctx, sess, &req, payload, &resp)
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
