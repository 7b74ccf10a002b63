package udp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"

	"github.com/hecsys/hec/kv"
	"github.com/hecsys/hec/shared/panics"
)

// HeaderSize is the memcached UDP frame header.
const HeaderSize = 8

// MaxDatagram bounds a reply: the value must fit with its header lines.
const MaxDatagram = 1400

// Server answers GETs.
type Server struct {
	Store *kv.Store
	Log   *slog.Logger
	// Seen, when set, is called with the key of every well-formed GET
	// (the agent counts them to pick the keys XDP answers); it must not
	// keep the slice.
	Seen func(key []byte)

	Requests, Hits, Misses, Errors atomic.Uint64
}

// Request is a parsed GET datagram.
type Request struct {
	ID   uint16
	Key  []byte
	Gets bool
}

// ErrRequest wraps every malformed datagram.
var ErrRequest = errors.New("udp: bad request")

// ParseRequest parses one datagram. It accepts a single key (what the fast
// path answers); multi-key GETs are refused.
func ParseRequest(b []byte) (Request, error) {
	var r Request
	if len(b) < HeaderSize+6 {
		return r, fmt.Errorf("%w: %d bytes", ErrRequest, len(b))
	}
	r.ID = binary.BigEndian.Uint16(b[0:])
	if seq, n := binary.BigEndian.Uint16(b[2:]), binary.BigEndian.Uint16(b[4:]); seq != 0 || n != 1 {
		return r, fmt.Errorf("%w: multi-datagram request", ErrRequest)
	}
	line, ok := bytes.CutSuffix(b[HeaderSize:], []byte("\r\n"))
	if !ok {
		return r, fmt.Errorf("%w: no CRLF", ErrRequest)
	}
	cmd, key, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(key) == 0 || len(key) > 250 || bytes.ContainsAny(key, " \r\n\t\x00") {
		return r, fmt.Errorf("%w: want get <key>", ErrRequest)
	}
	switch string(cmd) {
	case "get":
	case "gets":
		r.Gets = true
	default:
		return r, fmt.Errorf("%w: command %q", ErrRequest, cmd)
	}
	r.Key = key
	return r, nil
}

// AppendReply appends a reply datagram (header included) for key: hit with
// value (and the version as the CAS unique for gets), or a miss.
func AppendReply(dst []byte, id uint16, key []byte, e *kv.Entry, gets bool) []byte {
	dst = binary.BigEndian.AppendUint16(dst, id)
	dst = append(dst, 0, 0, 0, 1, 0, 0)
	if e == nil {
		return append(dst, "END\r\n"...)
	}
	body := len("VALUE   \r\n\r\nEND\r\n") + len(key) + 1 + len(strconv.Itoa(len(e.Value))) + len(e.Value)
	if gets {
		body += 1 + len(strconv.FormatUint(e.Version, 10))
	}
	if HeaderSize+body > MaxDatagram {
		return append(dst, "SERVER_ERROR object too large for UDP\r\n"...)
	}
	dst = append(dst, "VALUE "...)
	dst = append(dst, key...)
	dst = append(dst, " 0 "...)
	dst = strconv.AppendInt(dst, int64(len(e.Value)), 10)
	if gets {
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, e.Version, 10)
	}
	dst = append(dst, "\r\n"...)
	dst = append(dst, e.Value...)
	return append(dst, "\r\nEND\r\n"...)
}

// Serve answers datagrams on pc until it is closed.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn) error {
	buf := make([]byte, 2048)
	out := make([]byte, 0, MaxDatagram)
	var val []byte
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("udp read: %w", err)
		}
		out, val = s.answer(pc, buf[:n], from, out, val)
	}
}

// get reads key holding the store's gate shared (not between an EXEC's
// commands), let go however Get returns.
func (s *Server) get(key, dst []byte) (kv.Entry, error) {
	g := s.Store.Gate()
	g.RLock()
	defer g.RUnlock()
	return s.Store.Get(key, dst)
}

// answer answers one datagram (out and val: buffers it reuses). A panic
// while serving it drops that datagram alone, counted and logged
// (shared/panics).
func (s *Server) answer(pc net.PacketConn, buf []byte, from net.Addr, out, val []byte) (_, _ []byte) {
	defer func() {
		if v := recover(); v != nil {
			s.Errors.Add(1)
			panics.Recovered(s.Log, "udp/get", v) //nolint:errcheck // the datagram is dropped
		}
	}()
	s.Requests.Add(1)
	req, err := ParseRequest(buf)
	if err != nil {
		s.Errors.Add(1)
		if len(buf) >= 2 {
			out = binary.BigEndian.AppendUint16(out[:0], binary.BigEndian.Uint16(buf))
			out = append(out, 0, 0, 0, 1, 0, 0)
			out = append(out, "CLIENT_ERROR bad command line format\r\n"...)
			pc.WriteTo(out, from)
		}
		return out, val
	}
	if s.Seen != nil {
		s.Seen(req.Key)
	}
	e, err := s.get(req.Key, val)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		s.Misses.Add(1)
		out = AppendReply(out[:0], req.ID, req.Key, nil, req.Gets)
	case err != nil:
		s.Errors.Add(1)
		out = binary.BigEndian.AppendUint16(out[:0], req.ID)
		out = append(out, 0, 0, 0, 1, 0, 0)
		out = append(out, "SERVER_ERROR "+err.Error()+"\r\n"...)
	default:
		s.Hits.Add(1)
		val = e.Value
		out = AppendReply(out[:0], req.ID, req.Key, &e, req.Gets)
	}
	pc.WriteTo(out, from)
	return out, val
}
