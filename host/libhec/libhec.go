package main

/*
#cgo CFLAGS: -I${SRCDIR}
#define HEC_NO_PROTOTYPES
#include "hec.h"
#include <stdlib.h>
const char *hec__version(const char *v, size_t n);
*/
import "C"

import (
	"context"
	"errors"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/wire"
)

// buildVersion is set at link time (make build: -X main.buildVersion=...).
var buildVersion string

// version is buildVersion, else the module's version or VCS revision.
var version = sync.OnceValue(func() string {
	if buildVersion != "" {
		return buildVersion
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && (v == "" || v == "(devel)") && len(s.Value) >= 12 {
			v = s.Value[:12]
		}
	}
	return v
})

//export hec_version
func hec_version() *C.char {
	v := version()
	return C.hec__version((*C.char)(unsafe.Pointer(unsafe.StringData(v))), C.size_t(len(v)))
}

//export hec_dial
func hec_dial(target, token *C.char, timeoutMS C.int, out **C.hec_client) C.int {
	return guard(func() error {
		if out == nil {
			return fail(C.HEC_EINVAL, "hec_dial: the client pointer is NULL")
		}
		*out = nil
		if timeoutMS < 0 {
			return fail(C.HEC_EINVAL, "hec_dial: a timeout of %d ms", timeoutMS)
		}
		cl := &client{timeout: defaultTimeout}
		if timeoutMS > 0 {
			cl.timeout = time.Duration(timeoutMS) * time.Millisecond
		}
		var opts []host.Option
		if token != nil {
			if t := strings.TrimSpace(C.GoString(token)); t != "" {
				opts = append(opts, host.WithToken(t))
			}
		}
		t := ""
		if target != nil {
			t = C.GoString(target)
		}
		ctx, cancel := cl.ctx()
		defer cancel()
		c, err := host.Dial(ctx, host.ParseTarget(t), opts...)
		if err != nil {
			return err
		}
		cl.c = c
		*out = (*C.hec_client)(handle(reg.add(cl)))
		return nil
	})
}

//export hec_close
func hec_close(h *C.hec_client) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		reg.remove(uintptr(unsafe.Pointer(h)))
		return cl.c.Close()
	})
}

//export hec_window_size
func hec_window_size(h *C.hec_client) C.size_t {
	cl, err := lookup[*client](unsafe.Pointer(h))
	if err != nil {
		answer(err)
		return 0
	}
	return C.size_t(cl.c.WindowSize())
}

//export hec_alloc
func hec_alloc(h *C.hec_client, n C.size_t, out *unsafe.Pointer) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		if out == nil {
			return fail(C.HEC_EINVAL, "hec_alloc: the buffer pointer is NULL")
		}
		*out = nil
		if n == 0 || uint64(n) > uint64(cl.c.WindowSize()) {
			return fail(C.HEC_ERANGE, "hec_alloc of %d bytes: the window holds %d", n, cl.c.WindowSize())
		}
		b, err := cl.c.Alloc(int(n))
		if err != nil {
			return err
		}
		if !cl.c.InWindow(b) {
			// Over TCP Alloc gives Go memory, which C may not keep.
			cl.c.Free(b) //nolint:errcheck // ordinary memory
			return fail(C.HEC_EINVAL, "hec_alloc: the client is not attached over shared memory (%s): pass your own memory", cl.c.Target())
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		cl.mu.Lock()
		i, _ := cl.find(p)
		cl.allocs = slices.Insert(cl.allocs, i, span{p, uintptr(n)})
		cl.mu.Unlock()
		*out = unsafe.Pointer(unsafe.SliceData(b))
		return nil
	})
}

//export hec_free
func hec_free(h *C.hec_client, p unsafe.Pointer) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		cl.mu.Lock()
		i, ok := cl.find(uintptr(p))
		var s span
		if ok {
			s = cl.allocs[i]
			cl.allocs = slices.Delete(cl.allocs, i, i+1)
		}
		cl.mu.Unlock()
		if !ok {
			return fail(C.HEC_EINVAL, "hec_free(%p): not a live buffer from hec_alloc on this client (freed already?)", p)
		}
		return cl.c.Free(unsafe.Slice((*byte)(p), int(s.n)))
	})
}

//export hec_ping
func hec_ping(h *C.hec_client) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		return ping(cl)
	})
}

func ping(cl *client) error {
	ctx, cancel := cl.ctx()
	defer cancel()
	return cl.c.Ping(ctx)
}

//export hec_ping_async
func hec_ping_async(h *C.hec_client, out **C.hec_op) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		return start(out, func() error { return ping(cl) })
	})
}

//export hec_checksum
func hec_checksum(h *C.hec_client, buf unsafe.Pointer, n C.size_t, crc *C.uint32_t) C.int {
	return guard(func() error { return now(checksum(h, buf, n, crc)) })
}

//export hec_checksum_async
func hec_checksum_async(h *C.hec_client, buf unsafe.Pointer, n C.size_t, crc *C.uint32_t, out **C.hec_op) C.int {
	return guard(func() error { return later(out)(checksum(h, buf, n, crc)) })
}

// checksum checks a checksum call's arguments and returns the call.
func checksum(h *C.hec_client, buf unsafe.Pointer, n C.size_t, crc *C.uint32_t) (func() error, error) {
	cl, err := lookup[*client](unsafe.Pointer(h))
	if err != nil {
		return nil, err
	}
	b, err := cl.buffer(buf, n, "hec_checksum's buffer")
	if err != nil {
		return nil, err
	}
	if crc == nil {
		return nil, fail(C.HEC_EINVAL, "hec_checksum: the result pointer is NULL")
	}
	return func() error {
		ctx, cancel := cl.ctx()
		defer cancel()
		v, err := cl.c.Checksum(ctx, b)
		if err == nil {
			*crc = C.uint32_t(v)
		}
		return err
	}, nil
}

//export hec_kv_put
func hec_kv_put(h *C.hec_client, key unsafe.Pointer, klen C.size_t, val unsafe.Pointer, vlen C.size_t, ttlMS C.int64_t) C.int {
	return guard(func() error { return now(kvPut(h, key, klen, val, vlen, ttlMS)) })
}

//export hec_kv_put_async
func hec_kv_put_async(h *C.hec_client, key unsafe.Pointer, klen C.size_t, val unsafe.Pointer, vlen C.size_t, ttlMS C.int64_t,
	out **C.hec_op) C.int {
	return guard(func() error { return later(out)(kvPut(h, key, klen, val, vlen, ttlMS)) })
}

func kvPut(h *C.hec_client, key unsafe.Pointer, klen C.size_t, val unsafe.Pointer, vlen C.size_t, ttlMS C.int64_t) (func() error, error) {
	cl, err := lookup[*client](unsafe.Pointer(h))
	if err != nil {
		return nil, err
	}
	k, err := cl.key(key, klen)
	if err != nil {
		return nil, err
	}
	v, err := cl.buffer(val, vlen, "the value")
	if err != nil {
		return nil, err
	}
	if ttlMS < 0 {
		return nil, fail(C.HEC_EINVAL, "a TTL of %d ms", ttlMS)
	}
	return func() error {
		ctx, cancel := cl.ctx()
		defer cancel()
		return cl.c.KV().Put(ctx, k, v, host.PutOptions{TTL: time.Duration(ttlMS) * time.Millisecond})
	}, nil
}

// key checks a key: not empty.
func (cl *client) key(p unsafe.Pointer, n C.size_t) ([]byte, error) {
	if n == 0 {
		return nil, fail(C.HEC_EINVAL, "an empty key")
	}
	return cl.buffer(p, n, "the key")
}

//export hec_kv_get
func hec_kv_get(h *C.hec_client, key unsafe.Pointer, klen C.size_t, buf unsafe.Pointer, capacity C.size_t, n *C.size_t) C.int {
	return guard(func() error { return now(kvGet(h, key, klen, buf, capacity, n)) })
}

//export hec_kv_get_async
func hec_kv_get_async(h *C.hec_client, key unsafe.Pointer, klen C.size_t, buf unsafe.Pointer, capacity C.size_t, n *C.size_t,
	out **C.hec_op) C.int {
	return guard(func() error { return later(out)(kvGet(h, key, klen, buf, capacity, n)) })
}

func kvGet(h *C.hec_client, key unsafe.Pointer, klen C.size_t, buf unsafe.Pointer, capacity C.size_t, n *C.size_t) (func() error, error) {
	cl, err := lookup[*client](unsafe.Pointer(h))
	if err != nil {
		return nil, err
	}
	k, err := cl.key(key, klen)
	if err != nil {
		return nil, err
	}
	b, err := cl.buffer(buf, capacity, "the value's buffer")
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fail(C.HEC_EINVAL, "hec_kv_get: the length pointer is NULL")
	}
	return func() error {
		ctx, cancel := cl.ctx()
		defer cancel()
		v, _, err := cl.c.KV().Get(ctx, k, b)
		if err != nil {
			return err
		}
		return fill(b, v, n)
	}, nil
}

// fill hands v to C in b (where it was not read in place), *n its length:
// HEC_ERANGE when b is too small.
func fill(b, v []byte, n *C.size_t) error {
	*n = C.size_t(len(v))
	if len(v) > len(b) {
		return fail(C.HEC_ERANGE, "a value of %d bytes into a buffer of %d", len(v), len(b))
	}
	if len(v) > 0 && unsafe.SliceData(v) != unsafe.SliceData(b) {
		copy(b, v)
	}
	return nil
}

//export hec_kv_del
func hec_kv_del(h *C.hec_client, key unsafe.Pointer, klen C.size_t, existed *C.int) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		k, err := cl.key(key, klen)
		if err != nil {
			return err
		}
		ctx, cancel := cl.ctx()
		defer cancel()
		was, err := cl.c.KV().Delete(ctx, k)
		if err == nil && existed != nil {
			*existed = 0
			if was {
				*existed = 1
			}
		}
		return err
	})
}

// shards reads C's array of k+m shard pointers.
func (cl *client) shards(k, m C.int, ptrs *unsafe.Pointer, n C.size_t) ([][]byte, error) {
	if k < 1 || m < 1 || k+m > 256 {
		return nil, fail(C.HEC_EINVAL, "%d data + %d parity shards (at least 1 of each, at most 256 in all)", k, m)
	}
	if ptrs == nil {
		return nil, fail(C.HEC_EINVAL, "the shard array is NULL")
	}
	if n == 0 {
		return nil, fail(C.HEC_EINVAL, "shards of 0 bytes")
	}
	out := make([][]byte, k+m)
	for i, p := range unsafe.Slice(ptrs, int(k+m)) {
		b, err := cl.buffer(p, n, "a shard")
		if err != nil {
			return nil, err
		}
		if p == nil {
			return nil, fail(C.HEC_EINVAL, "shard %d is NULL", i)
		}
		out[i] = b
	}
	return out, nil
}

//export hec_ec_encode
func hec_ec_encode(h *C.hec_client, k, m C.int, ptrs *unsafe.Pointer, n C.size_t, rails C.int) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		shards, err := cl.shards(k, m, ptrs, n)
		if err != nil {
			return err
		}
		e, err := cl.ec(int(k), int(m), int(rails))
		if err != nil {
			return err
		}
		ctx, cancel := cl.ctx()
		defer cancel()
		_, err = e.Encode(ctx, shards)
		return err
	})
}

//export hec_ec_reconstruct
func hec_ec_reconstruct(h *C.hec_client, k, m C.int, ptrs *unsafe.Pointer, n C.size_t, present *C.uint8_t, dataOnly, rails C.int) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		shards, err := cl.shards(k, m, ptrs, n)
		if err != nil {
			return err
		}
		if present == nil {
			return fail(C.HEC_EINVAL, "the present array is NULL")
		}
		for i, p := range unsafe.Slice(present, int(k+m)) {
			if p == 0 {
				shards[i] = shards[i][:0] // rebuilt in place: its room is the caller's
			}
		}
		e, err := cl.ec(int(k), int(m), int(rails))
		if err != nil {
			return err
		}
		ctx, cancel := cl.ctx()
		defer cancel()
		_, err = e.Reconstruct(ctx, shards, dataOnly != 0)
		return err
	})
}

// object returns the EC client and name of an object call.
func object(h *C.hec_client, k, m C.int, name *C.char) (*client, *host.EC, string, error) {
	cl, err := lookup[*client](unsafe.Pointer(h))
	if err != nil {
		return nil, nil, "", err
	}
	if name == nil {
		return nil, nil, "", fail(C.HEC_EINVAL, "the object's name is NULL")
	}
	e, err := cl.ec(int(k), int(m), C.HEC_RAILS_DPU)
	if err != nil {
		return nil, nil, "", err
	}
	return cl, e, C.GoString(name), nil
}

//export hec_object_put
func hec_object_put(h *C.hec_client, k, m C.int, name *C.char, data unsafe.Pointer, n C.size_t) C.int {
	return guard(func() error {
		cl, e, s, err := object(h, k, m, name)
		if err != nil {
			return err
		}
		b, err := cl.buffer(data, n, "the object's data")
		if err != nil {
			return err
		}
		ctx, cancel := cl.ctx()
		defer cancel()
		_, err = e.Put(ctx, s, b)
		return err
	})
}

//export hec_object_get
func hec_object_get(h *C.hec_client, k, m C.int, name *C.char, buf unsafe.Pointer, capacity C.size_t, n *C.size_t) C.int {
	return guard(func() error {
		cl, e, s, err := object(h, k, m, name)
		if err != nil {
			return err
		}
		b, err := cl.buffer(buf, capacity, "the object's buffer")
		if err != nil {
			return err
		}
		if n == nil {
			return fail(C.HEC_EINVAL, "hec_object_get: the length pointer is NULL")
		}
		ctx, cancel := cl.ctx()
		defer cancel()
		v, _, err := e.Get(ctx, s)
		if err != nil {
			return err
		}
		return fill(b, v, n)
	})
}

//export hec_object_delete
func hec_object_delete(h *C.hec_client, k, m C.int, name *C.char) C.int {
	return guard(func() error {
		cl, e, s, err := object(h, k, m, name)
		if err != nil {
			return err
		}
		ctx, cancel := cl.ctx()
		defer cancel()
		return e.Delete(ctx, s)
	})
}

//export hec_coll_join
func hec_coll_join(h *C.hec_client, commID, epoch C.uint64_t, nodes *C.uint32_t, n C.int, out **C.hec_coll) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		if out == nil {
			return fail(C.HEC_EINVAL, "hec_coll_join: the communicator pointer is NULL")
		}
		*out = nil
		if nodes == nil || n < 1 || n > 4096 {
			return fail(C.HEC_EINVAL, "hec_coll_join: %d nodes", n)
		}
		spec := wire.CollSpec{Comm: uint64(commID), Epoch: uint64(epoch)}
		for _, id := range unsafe.Slice(nodes, int(n)) {
			spec.Nodes = append(spec.Nodes, uint32(id))
		}
		ctx, cancel := cl.ctx()
		defer cancel()
		d, err := cl.c.JoinColl(ctx, spec)
		if err != nil {
			return err
		}
		*out = (*C.hec_coll)(handle(reg.add(&comm{cl: cl, d: d, rank: d.Rank(), size: d.Size()})))
		return nil
	})
}

//export hec_coll_host_listen
func hec_coll_host_listen(h *C.hec_client, rank, size C.int, key unsafe.Pointer, keyLen C.size_t, addr *C.char, addrCap C.size_t,
	out **C.hec_coll) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		if out == nil || addr == nil {
			return fail(C.HEC_EINVAL, "hec_coll_host_listen: the communicator or address pointer is NULL")
		}
		*out = nil
		if size < 1 || size > 4096 || rank < 0 || rank >= size {
			return fail(C.HEC_EINVAL, "hec_coll_host_listen: rank %d of %d", rank, size)
		}
		if key == nil || keyLen < 16 || keyLen > 1024 {
			return fail(C.HEC_EINVAL, "hec_coll_host_listen: a key of %d bytes (16 to 1024)", keyLen)
		}
		// The peer address to take: the host's, where ranks span hosts.
		// libc's environment, as the caller set it before this call (Go's
		// os.Getenv sees only what it held when the library was loaded).
		var listen string
		if v := C.getenv(envHostListen); v != nil {
			listen = C.GoString(v)
		}
		g, err := coll.Listen(coll.GroupConfig{Rank: int(rank), Size: int(size), Listen: listen,
			Key: slices.Clone(unsafe.Slice((*byte)(key), int(keyLen)))})
		if err != nil {
			return err
		}
		if uint64(addrCap) < uint64(len(g.Addr()))+1 {
			g.Close()
			return fail(C.HEC_ERANGE, "hec_coll_host_listen: the address %q needs %d bytes", g.Addr(), len(g.Addr())+1)
		}
		a := unsafe.Slice((*byte)(unsafe.Pointer(addr)), int(addrCap))
		a[copy(a, g.Addr())] = 0
		*out = (*C.hec_coll)(handle(reg.add(&comm{cl: cl, g: g, rank: int(rank), size: int(size)})))
		return nil
	})
}

// envHostListen is the variable hec_coll_host_listen reads, as a C string.
var envHostListen = C.CString("HEC_HOST_LISTEN")

//export hec_coll_host_join
func hec_coll_host_join(h *C.hec_coll, commID C.uint64_t, addrs **C.char, n C.int) C.int {
	return guard(func() error {
		g, err := lookup[*comm](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		if g.g == nil {
			return fail(C.HEC_EINVAL, "hec_coll_host_join: the communicator is joined already, or not of the host rail")
		}
		if addrs == nil || int(n) != g.size {
			return fail(C.HEC_EINVAL, "hec_coll_host_join: %d addresses for %d ranks", n, g.size)
		}
		var as []string
		for i, a := range unsafe.Slice(addrs, int(n)) {
			if a == nil {
				return fail(C.HEC_EINVAL, "hec_coll_host_join: address %d is NULL", i)
			}
			as = append(as, C.GoString(a))
		}
		g.g.SetPeers(as)
		if err := g.g.Join(uint64(commID)); err != nil {
			return err
		}
		g.d, g.g = host.NewHostComm(g.g), nil
		return nil
	})
}

//export hec_coll_node
func hec_coll_node(h *C.hec_client, id *C.uint32_t) C.int {
	return guard(func() error {
		cl, err := lookup[*client](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		if id == nil {
			return fail(C.HEC_EINVAL, "hec_coll_node: the id pointer is NULL")
		}
		ctx, cancel := cl.ctx()
		defer cancel()
		n, err := cl.c.CollNode(ctx)
		if err != nil {
			return err
		}
		*id = C.uint32_t(n)
		return nil
	})
}

//export hec_coll_rank
func hec_coll_rank(h *C.hec_coll) C.int {
	g, err := lookup[*comm](unsafe.Pointer(h))
	if err != nil {
		return answer(err)
	}
	return C.int(g.rank)
}

//export hec_coll_size
func hec_coll_size(h *C.hec_coll) C.int {
	g, err := lookup[*comm](unsafe.Pointer(h))
	if err != nil {
		return answer(err)
	}
	return C.int(g.size)
}

//export hec_coll_leave
func hec_coll_leave(h *C.hec_coll) C.int {
	return guard(func() error {
		g, err := lookup[*comm](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		reg.remove(uintptr(unsafe.Pointer(h)))
		if g.d == nil { // a host-rail rank that never joined
			g.g.Close()
			return nil
		}
		ctx, cancel := g.cl.ctx()
		defer cancel()
		return g.d.Leave(ctx)
	})
}

// collStart checks a collective's arguments and starts it, in the
// calling thread: collectives are numbered in the order of these calls,
// which is the order every rank's agent runs them in.
func collStart(h *C.hec_coll, kind C.int, send unsafe.Pointer, sendLen C.size_t, recv unsafe.Pointer, recvLen C.size_t,
	dtype, redop, root C.int) (*comm, *host.CollOp, error) {
	g, err := lookup[*comm](unsafe.Pointer(h))
	if err != nil {
		return nil, nil, err
	}
	if g.d == nil {
		return nil, nil, fail(C.HEC_EINVAL, "the host-rail communicator has not joined (hec_coll_host_join)")
	}
	k, dt, op := coll.Kind(kind), coll.DType(dtype), coll.Op(redop)
	switch {
	case !k.Valid():
		return nil, nil, fail(C.HEC_EINVAL, "collective %d", kind)
	case !dt.Valid():
		return nil, nil, fail(C.HEC_EINVAL, "element type %d", dtype)
	case k.Reduces() && !op.Valid():
		return nil, nil, fail(C.HEC_EINVAL, "reduction %d", redop)
	case root < 0 || int(root) >= g.d.Size():
		return nil, nil, fail(C.HEC_EINVAL, "root %d of %d ranks", root, g.d.Size())
	}
	s, err := g.cl.buffer(send, sendLen, "the send buffer")
	if err != nil {
		return nil, nil, err
	}
	r, err := g.cl.buffer(recv, recvLen, "the receive buffer")
	if err != nil {
		return nil, nil, err
	}
	o, err := g.d.Start(context.Background(), k, s, r, dt, op, int(root))
	if errors.Is(err, host.ErrCommBroken) {
		return nil, nil, err // answered with its cause's code: a rank gone is no bad argument
	}
	if err != nil {
		return nil, nil, fail(C.HEC_EINVAL, "%v", err)
	}
	return g, o, nil
}

// collWait waits for a collective for up to the client's timeout. One
// that runs past it is given up (the communicator breaks off, which ends
// it on every rank soon) and still waited for: the caller's buffers are
// not written after this returns.
func collWait(g *comm, o *host.CollOp) error {
	ctx, cancel := g.cl.ctx()
	defer cancel()
	if err := o.Wait(ctx); err != nil && ctx.Err() != nil {
		g.d.Abort(err)
		<-o.Done()
		return err
	}
	return o.Err()
}

// collNow starts a collective and waits for it.
func collNow(g *comm, o *host.CollOp, err error) error {
	if err != nil {
		return err
	}
	return collWait(g, o)
}

// collLater starts a collective as a hec_op.
func collLater(out **C.hec_op, g *comm, o *host.CollOp, err error) error {
	if err != nil {
		return err
	}
	*out = (*C.hec_op)(handle(reg.add(&op{done: o.Done(), coll: o})))
	return nil
}

// allreduce is hec_coll_allreduce's arguments as a collStart.
func allreduce(h *C.hec_coll, send, recv unsafe.Pointer, count C.size_t, dtype, redop C.int) (*comm, *host.CollOp, error) {
	dt := coll.DType(dtype)
	if !dt.Valid() {
		return nil, nil, fail(C.HEC_EINVAL, "element type %d", dtype)
	}
	if uint64(count) > 1<<40 {
		return nil, nil, fail(C.HEC_ERANGE, "%d elements", count)
	}
	n := count * C.size_t(dt.Size())
	return collStart(h, C.HEC_ALLREDUCE, send, n, recv, n, dtype, redop, 0)
}

//export hec_coll_allreduce
func hec_coll_allreduce(h *C.hec_coll, send, recv unsafe.Pointer, count C.size_t, dtype, redop C.int) C.int {
	return guard(func() error { return collNow(allreduce(h, send, recv, count, dtype, redop)) })
}

//export hec_coll_allreduce_async
func hec_coll_allreduce_async(h *C.hec_coll, send, recv unsafe.Pointer, count C.size_t, dtype, redop C.int, out **C.hec_op) C.int {
	return guard(func() error {
		if out == nil {
			return fail(C.HEC_EINVAL, "the op pointer is NULL")
		}
		g, o, err := allreduce(h, send, recv, count, dtype, redop)
		return collLater(out, g, o, err)
	})
}

//export hec_coll_run
func hec_coll_run(h *C.hec_coll, kind C.int, send unsafe.Pointer, sendLen C.size_t, recv unsafe.Pointer, recvLen C.size_t,
	dtype, redop, root C.int) C.int {
	return guard(func() error { return collNow(collStart(h, kind, send, sendLen, recv, recvLen, dtype, redop, root)) })
}

//export hec_coll_run_async
func hec_coll_run_async(h *C.hec_coll, kind C.int, send unsafe.Pointer, sendLen C.size_t, recv unsafe.Pointer, recvLen C.size_t,
	dtype, redop, root C.int, out **C.hec_op) C.int {
	return guard(func() error {
		if out == nil {
			return fail(C.HEC_EINVAL, "the op pointer is NULL")
		}
		g, o, err := collStart(h, kind, send, sendLen, recv, recvLen, dtype, redop, root)
		return collLater(out, g, o, err)
	})
}

//export hec_test
func hec_test(h *C.hec_op) C.int {
	return guard(func() error {
		o, err := lookup[*op](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		select {
		case <-o.done:
			reg.remove(uintptr(unsafe.Pointer(h)))
			return o.result()
		default:
			return errAgain
		}
	})
}

var errAgain = fail(C.HEC_EAGAIN, "the op has not finished")

//export hec_wait
func hec_wait(h *C.hec_op, timeoutMS C.int) C.int {
	return guard(func() error {
		o, err := lookup[*op](unsafe.Pointer(h))
		if err != nil {
			return err
		}
		if timeoutMS < 0 {
			<-o.done // the call is bounded by its client's timeout
			reg.remove(uintptr(unsafe.Pointer(h)))
			return o.result()
		}
		d := time.Duration(timeoutMS) * time.Millisecond
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-o.done:
			reg.remove(uintptr(unsafe.Pointer(h)))
			return o.result()
		case <-t.C:
			return fail(C.HEC_ETIMEDOUT, "the op has not finished within %v", d)
		}
	})
}
