//go:build linux && cgo

package verbs

/*
#include <errno.h>
#include <stdlib.h>
#include "cmshim.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The connection manager's events (enum rdma_cm_event_type: ABI).
const (
	cmAddrResolved   = 0
	cmRouteResolved  = 2
	cmConnectRequest = 4
	cmEstablished    = 9
	cmDisconnected   = 10
)

// The shim's room for private data is what MaxPrivateReply frames.
var _ [C.HEC_CM_PRIVATE_MAX - 1 - MaxPrivateReply]struct{}

// channel is an event channel of the connection manager, non-blocking.
type channel struct {
	ch *C.struct_rdma_event_channel
	fd int
}

func newChannel() (*channel, error) {
	if why := C.hecv_cm_load(); why != nil {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, C.GoString(why))
	}
	var fd C.int
	ch, err := C.hecv_cm_channel(&fd)
	if ch == nil {
		return nil, fmt.Errorf("verbs: connection manager: %w (no RDMA, or no rdma_ucm)", errnoOr(err, syscall.ENODEV))
	}
	return &channel{ch: ch, fd: int(fd)}, nil
}

func (c *channel) close() { C.hecv_cm_channel_close(c.ch) }

// event waits for the channel's next event, until ctx ends.
func (c *channel) event(ctx context.Context) (C.hecv_cm_event, error) {
	var e C.hecv_cm_event
	for {
		rc := C.hecv_cm_get_event(c.ch, &e)
		if rc == 0 {
			return e, nil
		}
		if rc != C.EAGAIN {
			return e, fmt.Errorf("verbs: connection manager event: %w", syscall.Errno(rc))
		}
		if err := ctx.Err(); err != nil {
			return e, err
		}
		fds := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
		unix.Poll(fds, 50)
	}
}

// expect waits for event want of id; any other event of it is an error
// naming it.
func (c *channel) expect(ctx context.Context, id *C.struct_rdma_cm_id, want int) (C.hecv_cm_event, error) {
	for {
		e, err := c.event(ctx)
		if err != nil {
			return e, err
		}
		if e.id != id {
			continue // another id's (an accept under way on the listener's channel)
		}
		if int(e.event) != want {
			return e, fmt.Errorf("verbs: connection manager: %s (status %d), waiting for %s",
				C.GoString(C.hecv_cm_event_str(e.event)), int(e.status), C.GoString(C.hecv_cm_event_str(C.int(want))))
		}
		return e, nil
	}
}

func ip4(addr netip.AddrPort) (C.uint32_t, C.uint16_t, error) {
	if !addr.Addr().Is4() {
		return 0, 0, fmt.Errorf("verbs: %v: an IPv4 address is wanted", addr)
	}
	a := addr.Addr().As4()
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], addr.Port())
	return C.uint32_t(binary.NativeEndian.Uint32(a[:])), C.uint16_t(binary.NativeEndian.Uint16(port[:])), nil
}

// Conn is a reliable connection the connection manager set up: its
// device (the one the peer's address routes through), its protection
// domain and queue pair.
type Conn struct {
	Device *Device
	QP     *QP
	id     *C.struct_rdma_cm_id
	ch     *channel
}

// connDevice is the device of a connection manager id, with a protection
// domain of its own.
func connDevice(id *C.struct_rdma_cm_id) (*Device, error) {
	ctx := C.hecv_cm_verbs(id)
	if ctx == nil {
		return nil, fmt.Errorf("verbs: the connection has no device")
	}
	d := &Device{Name: "rdma_cm", Port: int(C.hecv_cm_port(id)), ctx: ctx, borrowed: true}
	var err error
	if d.pd, err = C.hecv_alloc_pd(ctx); d.pd == nil {
		return nil, fmt.Errorf("verbs: protection domain: %w", errnoOr(err, syscall.ENOMEM))
	}
	return d, nil
}

// connQP makes the id's queue pair on d, with a completion queue.
func connQP(d *Device, id *C.struct_rdma_cm_id, depth int) (*QP, error) {
	q := &QP{d: d, depth: depth, cmID: id}
	var err error
	if q.cq, err = C.hecv_create_cq(d.ctx, C.int(2*depth), &q.fd); q.cq == nil {
		return nil, fmt.Errorf("verbs: completion queue of %d: %w", 2*depth, errnoOr(err, syscall.ENOMEM))
	}
	if rc := C.hecv_cm_create_qp(id, d.pd, q.cq, C.int(depth), 64); rc != 0 {
		C.hecv_destroy_cq(q.cq)
		return nil, fmt.Errorf("verbs: queue pair of %d: %w", depth, syscall.Errno(rc))
	}
	q.qp = C.hecv_cm_qp(id)
	return q, nil
}

func cBytes(b []byte) (unsafe.Pointer, C.int) {
	if len(b) == 0 {
		return nil, 0
	}
	return C.CBytes(b), C.int(len(b))
}

// Dial connects to a listener at addr (IPv4 and port, as RDMA CM
// addresses it: the device is the one that address routes through),
// sending private (at most MaxPrivate bytes) with the request, and
// returns the connection and the listener's private reply.
func Dial(ctx context.Context, addr netip.AddrPort, private []byte, depth int) (*Conn, []byte, error) {
	if len(private) > MaxPrivate {
		return nil, nil, fmt.Errorf("verbs: %d bytes of private data, at most %d", len(private), MaxPrivate)
	}
	ip, port, err := ip4(addr)
	if err != nil {
		return nil, nil, err
	}
	ch, err := newChannel()
	if err != nil {
		return nil, nil, err
	}
	c := &Conn{ch: ch}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	if c.id, err = C.hecv_cm_id(ch.ch); c.id == nil {
		return nil, nil, fmt.Errorf("verbs: connection manager id: %w", errnoOr(err, syscall.ENOMEM))
	}
	const resolveMS = 2000
	if rc := C.hecv_cm_resolve_addr(c.id, ip, port, resolveMS); rc != 0 {
		return nil, nil, fmt.Errorf("verbs: resolve %v: %w", addr, syscall.Errno(rc))
	}
	if _, err := ch.expect(ctx, c.id, cmAddrResolved); err != nil {
		return nil, nil, fmt.Errorf("verbs: resolve %v: %w", addr, err)
	}
	if rc := C.hecv_cm_resolve_route(c.id, resolveMS); rc != 0 {
		return nil, nil, fmt.Errorf("verbs: route to %v: %w", addr, syscall.Errno(rc))
	}
	if _, err := ch.expect(ctx, c.id, cmRouteResolved); err != nil {
		return nil, nil, fmt.Errorf("verbs: route to %v: %w", addr, err)
	}
	if c.Device, err = connDevice(c.id); err != nil {
		return nil, nil, err
	}
	if c.QP, err = connQP(c.Device, c.id, depth); err != nil {
		return nil, nil, err
	}
	p, n := cBytes(framed(private))
	defer C.free(p)
	if rc := C.hecv_cm_connect(c.id, p, n); rc != 0 {
		return nil, nil, fmt.Errorf("verbs: connect to %v: %w", addr, syscall.Errno(rc))
	}
	e, err := ch.expect(ctx, c.id, cmEstablished)
	if err != nil {
		return nil, nil, fmt.Errorf("verbs: connect to %v: %w", addr, err)
	}
	reply, framedOK := unframed(C.GoBytes(unsafe.Pointer(&e.private_data[0]), e.private_len))
	if !framedOK {
		return nil, nil, fmt.Errorf("verbs: connect to %v: the listener's reply is not framed (not a listener of this package)", addr)
	}
	ok = true
	return c, reply, nil
}

// WaitDisconnected returns nil when the connection ends: the peer
// disconnected (or its process died and its kernel said so), or the
// device went away; ctx's error when ctx ends first. Close the
// connection only after it returned.
func (c *Conn) WaitDisconnected(ctx context.Context) error {
	for {
		e, err := c.ch.event(ctx)
		if err != nil {
			return err
		}
		if e.id == c.id && int(e.event) != cmEstablished {
			return nil
		}
	}
}

// Close disconnects and releases the connection.
func (c *Conn) Close() error {
	if c.id != nil && c.QP != nil {
		C.hecv_cm_disconnect(c.id)
	}
	if c.QP != nil {
		c.QP.Close()
		c.QP = nil
	}
	if c.Device != nil {
		c.Device.Close()
		c.Device = nil
	}
	if c.id != nil {
		C.hecv_cm_destroy_id(c.id)
		c.id = nil
	}
	if c.ch != nil {
		c.ch.close()
		c.ch = nil
	}
	return nil
}

// Listener takes connection requests at an address.
type Listener struct {
	id *C.struct_rdma_cm_id
	ch *channel
}

// Listen listens at addr (an address of an RDMA device's network
// interface, or 0.0.0.0, and a port).
func Listen(addr netip.AddrPort) (*Listener, error) {
	ip, port, err := ip4(addr)
	if err != nil {
		return nil, err
	}
	ch, err := newChannel()
	if err != nil {
		return nil, err
	}
	l := &Listener{ch: ch}
	if l.id, err = C.hecv_cm_id(ch.ch); l.id == nil {
		ch.close()
		return nil, fmt.Errorf("verbs: connection manager id: %w", errnoOr(err, syscall.ENOMEM))
	}
	if rc := C.hecv_cm_listen(l.id, ip, port, 16); rc != 0 {
		l.Close()
		return nil, fmt.Errorf("verbs: listen at %v: %w", addr, syscall.Errno(rc))
	}
	return l, nil
}

// Accept takes the next connection request: check reads its private data
// and returns the reply (at most MaxPrivateReply bytes), or an error that rejects it
// (Accept then returns that error: call it again for the next request).
func (l *Listener) Accept(ctx context.Context, depth int, check func(private []byte) ([]byte, error)) (*Conn, error) {
	var e C.hecv_cm_event
	for {
		var err error
		if e, err = l.ch.event(ctx); err != nil {
			return nil, err
		}
		if int(e.event) == cmConnectRequest {
			break
		}
	}
	c := &Conn{id: e.id}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	private, framedOK := unframed(C.GoBytes(unsafe.Pointer(&e.private_data[0]), e.private_len))
	if !framedOK {
		C.hecv_cm_reject(c.id)
		return nil, fmt.Errorf("verbs: connection request refused: its private data is not framed (not a client of this package)")
	}
	reply, err := check(private)
	if err != nil {
		C.hecv_cm_reject(c.id)
		return nil, fmt.Errorf("verbs: connection request refused: %w", err)
	}
	if len(reply) > MaxPrivateReply {
		C.hecv_cm_reject(c.id)
		return nil, fmt.Errorf("verbs: a reply of %d bytes, at most %d", len(reply), MaxPrivateReply)
	}
	if c.Device, err = connDevice(c.id); err != nil {
		C.hecv_cm_reject(c.id)
		return nil, err
	}
	if c.QP, err = connQP(c.Device, c.id, depth); err != nil {
		C.hecv_cm_reject(c.id)
		return nil, err
	}
	p, n := cBytes(framed(reply))
	defer C.free(p)
	if rc := C.hecv_cm_accept(c.id, p, n); rc != 0 {
		return nil, fmt.Errorf("verbs: accept: %w", syscall.Errno(rc))
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := l.ch.expect(actx, c.id, cmEstablished); err != nil {
		return nil, fmt.Errorf("verbs: accept: %w", err)
	}
	// Its events (the disconnection) on a channel of its own.
	if c.ch, err = newChannel(); err != nil {
		return nil, err
	}
	if rc := C.hecv_cm_migrate(c.id, c.ch.ch); rc != 0 {
		return nil, fmt.Errorf("verbs: migrate the connection: %w", syscall.Errno(rc))
	}
	ok = true
	return c, nil
}

// Close stops listening.
func (l *Listener) Close() error {
	if l.id != nil {
		C.hecv_cm_destroy_id(l.id)
		l.id = nil
	}
	if l.ch != nil {
		l.ch.close()
		l.ch = nil
	}
	return nil
}
