package dpu

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/hecsys/hec/shared/wire"
)

// tcpServer serves the handoff over a stream: the same descriptors, with the
// payload inline (the fallback transport, and the way to reach an agent on
// real hardware over the host–DPU network).
type tcpServer struct {
	a  *Agent
	ln net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func (s *tcpServer) serve(ctx context.Context) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.a.log.Error("tcp accept", "err", err)
			}
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(ctx, c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// handle serves one connection until it ends or sends a frame that cannot
// be decoded (a stream cannot be resynchronised). A request that decodes
// but fails validation gets an error response and the connection goes on.
func (s *tcpServer) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	fr := wire.NewFrameReader(c, s.a.cfg.MaxFrame)
	for {
		req, payload, err := fr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.a.log.Warn("tcp: closing connection", "remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		var resp wire.Desc
		s.a.disp.ServeFrame(ctx, &req, payload, &resp)
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

func (s *tcpServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
