//go:build !linux

package resp

import (
	"context"
	"errors"
	"fmt"
	"net"
)

type loop struct{ stats []cmdStats }

// commandStats is INFO commandstats: none where nothing serves.
func (s *Server) commandStats() string { return "" }

// Serve reports that the RESP front end needs Linux: it is an epoll loop.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return fmt.Errorf("resp: the front end needs Linux epoll: %w", errors.ErrUnsupported)
}

// Start reports that the RESP front end needs Linux.
func (s *Server) Start(ctx context.Context) error {
	return fmt.Errorf("resp: the front end needs Linux epoll: %w", errors.ErrUnsupported)
}

// ServeConn closes conn: nothing serves it.
func (s *Server) ServeConn(conn net.Conn) { conn.Close() }

// Close does nothing where Serve cannot run.
func (s *Server) Close() {}
