//go:build linux && cgo

package verbs

/*
#cgo LDFLAGS: -ldl
#include <errno.h>
#include <stdlib.h>
#include "cmshim.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	loadOnce sync.Once
	loadErr  error
)

// Available says whether verbs can be used here: nil, or why not (the
// library missing, built without cgo or headers).
func Available() error {
	loadOnce.Do(func() {
		if why := C.hecv_load(); why != nil {
			loadErr = fmt.Errorf("%w: %s", ErrUnavailable, C.GoString(why))
		}
	})
	return loadErr
}

// Device is an open RDMA device and its protection domain.
type Device struct {
	Name string
	Port int
	ctx  *C.struct_ibv_context
	pd   *C.struct_ibv_pd
	gidx int // the GID index this package addresses the port by
	gid  [16]byte
	mtu  int // the port's active MTU (enum ibv_mtu)
	// borrowed: the context is a connection manager id's, not closed here.
	borrowed bool
}

// Open opens the RDMA device name ("" for the first) on port 1.
func Open(name string) (*Device, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var got [64]C.char
	ctx, err := C.hecv_open(cname, &got[0], C.size_t(len(got)))
	if ctx == nil {
		if name == "" {
			return nil, fmt.Errorf("verbs: no RDMA device: %w", errnoOr(err, syscall.ENODEV))
		}
		return nil, fmt.Errorf("verbs: device %s: %w", name, errnoOr(err, syscall.ENODEV))
	}
	d := &Device{Name: C.GoString(&got[0]), Port: 1, ctx: ctx}
	if d.pd, err = C.hecv_alloc_pd(ctx); d.pd == nil {
		C.hecv_close(ctx)
		return nil, fmt.Errorf("verbs: %s: protection domain: %w", d.Name, errnoOr(err, syscall.ENOMEM))
	}
	if d.mtu = int(C.hecv_port_active_mtu(ctx, C.int(d.Port))); d.mtu < 1 {
		d.Close()
		return nil, fmt.Errorf("verbs: %s port %d: cannot query it", d.Name, d.Port)
	}
	if err := d.pickGID(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// pickGID finds the port's GID to address it by: RoCE v2 over IPv4 where
// the port is Ethernet (sysfs names each GID's type), else index 0.
func (d *Device) pickGID() error {
	base := filepath.Join("/sys/class/infiniband", d.Name, "ports", strconv.Itoa(d.Port))
	best := -1
	for i := range 128 {
		var g [16]byte
		if C.hecv_query_gid(d.ctx, C.int(d.Port), C.int(i), (*C.uint8_t)(&g[0])) != 0 {
			break
		}
		if g == [16]byte{} {
			continue
		}
		typ, _ := os.ReadFile(filepath.Join(base, "gid_attrs", "types", strconv.Itoa(i)))
		v4 := g[10] == 0xff && g[11] == 0xff && binary.BigEndian.Uint64(g[:8]) == 0 && binary.BigEndian.Uint16(g[8:10]) == 0
		if strings.TrimSpace(string(typ)) == "RoCE v2" && v4 {
			best = i
			break
		}
		if best < 0 {
			best = i
		}
	}
	if best < 0 {
		return fmt.Errorf("verbs: %s port %d: no GID (an Ethernet port without an address?)", d.Name, d.Port)
	}
	d.gidx = best
	C.hecv_query_gid(d.ctx, C.int(d.Port), C.int(best), (*C.uint8_t)(&d.gid[0]))
	return nil
}

// GID is the address the device's port is reached by, and its index.
func (d *Device) GID() ([16]byte, int) { return d.gid, d.gidx }

// MTU is the port's active MTU in bytes.
func (d *Device) MTU() int { return 128 << d.mtu }

// Close releases the device. Close its queue pairs and regions first.
func (d *Device) Close() error {
	if d.pd != nil {
		C.hecv_dealloc_pd(d.pd)
		d.pd = nil
	}
	if d.ctx != nil && !d.borrowed {
		C.hecv_close(d.ctx)
	}
	d.ctx = nil
	return nil
}

// Region is memory registered with a device: local sends and receives
// name it by offset, and a peer holding Key reads and writes it with RDMA
// READ and WRITE.
type Region struct {
	Buf []byte
	mr  *C.struct_ibv_mr
}

// Register maps size bytes (rounded up to pages) and registers them for
// local writes and remote reads and writes.
func (d *Device) Register(size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("verbs: a region of %d bytes", size)
	}
	size = (size + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("verbs: map %d bytes: %w", size, err)
	}
	mr, err := C.hecv_reg_mr(d.pd, unsafe.Pointer(&buf[0]), C.size_t(size),
		C.IBV_ACCESS_LOCAL_WRITE|C.IBV_ACCESS_REMOTE_WRITE|C.IBV_ACCESS_REMOTE_READ)
	if mr == nil {
		unix.Munmap(buf)
		return nil, fmt.Errorf("verbs: register %d bytes: %w", size, errnoOr(err, syscall.ENOMEM))
	}
	return &Region{Buf: buf, mr: mr}, nil
}

// Key is what a peer needs to reach the region: its address and remote
// key.
func (r *Region) Key() RemoteKey {
	return RemoteKey{Addr: uint64(uintptr(unsafe.Pointer(&r.Buf[0]))), Len: uint64(len(r.Buf)), RKey: uint32(C.hecv_mr_rkey(r.mr))}
}

// Close deregisters and unmaps the region.
func (r *Region) Close() error {
	if r.mr != nil {
		C.hecv_dereg_mr(r.mr)
		r.mr = nil
	}
	if r.Buf != nil {
		unix.Munmap(r.Buf)
		r.Buf = nil
	}
	return nil
}

// QP is a reliable-connected queue pair with its completion queue.
type QP struct {
	d     *Device
	cq    *C.struct_ibv_cq
	qp    *C.struct_ibv_qp
	psn   uint32
	depth int
	wcs   [16]C.hecv_wc
	cmID  *C.struct_rdma_cm_id // a connection manager's queue pair (rdma_destroy_qp closes it)
	fd    C.int                // the completion channel's (non-blocking)
}

// NewQP makes a queue pair of depth work requests each way, ready to
// connect (INIT).
func (d *Device) NewQP(depth int) (*QP, error) {
	q := &QP{d: d, depth: depth, psn: rand.Uint32() & 0xffffff}
	var err error
	if q.cq, err = C.hecv_create_cq(d.ctx, C.int(2*depth), &q.fd); q.cq == nil {
		return nil, fmt.Errorf("verbs: %s: completion queue of %d: %w", d.Name, 2*depth, errnoOr(err, syscall.ENOMEM))
	}
	if q.qp, err = C.hecv_create_qp(d.pd, q.cq, C.int(depth), 64); q.qp == nil {
		C.hecv_destroy_cq(q.cq)
		return nil, fmt.Errorf("verbs: %s: queue pair of %d: %w", d.Name, depth, errnoOr(err, syscall.ENOMEM))
	}
	if rc := C.hecv_qp_init(q.qp, C.int(d.Port)); rc != 0 {
		q.Close()
		return nil, fmt.Errorf("verbs: %s: queue pair to INIT: %w", d.Name, syscall.Errno(rc))
	}
	return q, nil
}

// Local is this queue pair's end, for the peer's Connect.
func (q *QP) Local() Endpoint {
	return Endpoint{QPN: uint32(C.hecv_qp_num(q.qp)), PSN: q.psn, GID: q.d.gid}
}

// Connect connects the queue pair to the peer's end (to RTR, then RTS).
func (q *QP) Connect(remote Endpoint) error {
	g := remote.GID
	if rc := C.hecv_qp_rtr(q.qp, C.int(q.d.Port), C.int(q.d.mtu), C.uint32_t(remote.QPN), C.uint32_t(remote.PSN),
		(*C.uint8_t)(&g[0]), C.int(q.d.gidx)); rc != 0 {
		return fmt.Errorf("verbs: queue pair to RTR (peer QPN %#x): %w", remote.QPN, syscall.Errno(rc))
	}
	if rc := C.hecv_qp_rts(q.qp, C.uint32_t(q.psn)); rc != 0 {
		return fmt.Errorf("verbs: queue pair to RTS: %w", syscall.Errno(rc))
	}
	return nil
}

// Close destroys the queue pair and its completion queue.
func (q *QP) Close() error {
	if q.qp != nil {
		if q.cmID != nil {
			C.hecv_cm_destroy_qp(q.cmID)
		} else {
			C.hecv_destroy_qp(q.qp)
		}
		q.qp = nil
	}
	if q.cq != nil {
		C.hecv_destroy_cq(q.cq)
		q.cq = nil
	}
	return nil
}

// span checks that [off, off+n) lies in r.
func span(r *Region, off, n int) (unsafe.Pointer, error) {
	if off < 0 || n < 0 || off+n > len(r.Buf) || n > 1<<31 {
		return nil, fmt.Errorf("verbs: bytes [%d, %d) of a region of %d", off, off+n, len(r.Buf))
	}
	return unsafe.Pointer(unsafe.SliceData(r.Buf[off:])), nil
}

// PostRecv posts a receive into r's bytes [off, off+n), completed with id.
func (q *QP) PostRecv(r *Region, off, n int, id uint64) error {
	p, err := span(r, off, n)
	if err != nil {
		return err
	}
	if rc := C.hecv_post_recv(q.qp, C.uint64_t(id), p, C.uint32_t(n), C.hecv_mr_lkey(r.mr)); rc != 0 {
		return fmt.Errorf("verbs: post receive: %w", syscall.Errno(rc))
	}
	return nil
}

// Post posts w.
func (q *QP) Post(w Work) error {
	var p unsafe.Pointer
	var lkey C.uint32_t
	if w.Len > 0 {
		var err error
		if p, err = span(w.Region, w.Off, w.Len); err != nil {
			return err
		}
		lkey = C.hecv_mr_lkey(w.Region.mr)
	}
	inline := 0
	if w.Op != Read && w.Len <= 64 {
		inline = 1
	}
	if rc := C.hecv_post_send(q.qp, C.int(w.Op), C.uint64_t(w.ID), p, C.uint32_t(w.Len), lkey,
		C.uint64_t(w.Remote.Addr), C.uint32_t(w.Remote.RKey), C.uint32_t(w.Imm), b2i(w.Signaled), C.int(inline)); rc != 0 {
		return fmt.Errorf("verbs: post %v: %w", w.Op, syscall.Errno(rc))
	}
	return nil
}

func b2i(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Poll appends the completions ready now (at most 16) to out.
func (q *QP) Poll(out []Completion) ([]Completion, error) {
	n := int(C.hecv_poll_cq(q.cq, &q.wcs[0], C.int(len(q.wcs))))
	if n < 0 {
		return out, fmt.Errorf("verbs: poll: %w", syscall.Errno(-n))
	}
	for _, w := range q.wcs[:n] {
		c := Completion{ID: uint64(w.id), Bytes: int(w.bytes), Opcode: int(w.opcode)}
		if w.flags&C.IBV_WC_WITH_IMM != 0 {
			c.Imm, c.HasImm = uint32(w.imm), true
		}
		if w.status != C.IBV_WC_SUCCESS {
			c.Err = fmt.Errorf("verbs: work request %d: %s", c.ID, C.GoString(C.hecv_wc_status_str(w.status)))
		}
		out = append(out, c)
	}
	return out, nil
}

// Arm asks for an event at the queue's next completion (WaitEvent). A
// completion already queued makes none: poll once more after arming,
// before waiting.
func (q *QP) Arm() error {
	if rc := C.hecv_cq_arm(q.cq); rc != 0 {
		return fmt.Errorf("verbs: arm the completion queue: %w", syscall.Errno(rc))
	}
	return nil
}

// WaitEvent sleeps until the event Arm asked for comes, or d passes, and
// takes the events that came; it reports whether one did. The sleep is
// the kernel's (poll(2)): a poller sleeping so costs no CPU, which
// soft-RoCE, whose NIC is that CPU, needs.
func (q *QP) WaitEvent(d time.Duration) (bool, error) {
	ms := int(d.Milliseconds())
	if ms == 0 && d > 0 {
		ms = 1
	}
	fds := []unix.PollFd{{Fd: int32(q.fd), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, ms); err != nil && err != unix.EINTR {
		return false, fmt.Errorf("verbs: wait for a completion: %w", err)
	}
	return C.hecv_cq_events(q.cq) > 0, nil
}

func errnoOr(err error, or syscall.Errno) error {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return or
}
