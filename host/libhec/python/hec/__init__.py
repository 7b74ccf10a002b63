"""hec: the HEC host library for Python, over libhec (ctypes, no compiler).

    import hec
    with hec.Client("/dev/shm/hec0") as c:      # or "tcp://127.0.0.1:7610"
        c.ping()
        with c.alloc(1 << 20) as buf:            # in the agent's shared window
            buf.view[:5] = b"hello"              # a memoryview: NumPy can wrap it
            crc = c.checksum(buf)                # handed over without a copy
        c.kv_put(b"k", b"v")
        assert c.kv_get(b"k") == b"v"

libhec.so is found from $HEC_LIB, then lib/libhec.so of the repository this
package lies in (make build), then the system's library path. Put
host/libhec/python on PYTHONPATH (or copy the hec directory) to import it.

Buffers from Client.alloc live in the shared window: pass them (or their
view) to calls and the agent reads and writes them in place. Any other
bytes-like object works too, at the cost of a copy. A buffer's view must not
be used after the buffer is freed or its client closed: the memory goes back
to the window, or is unmapped.

Errors raise HecError, or the subclass for its code (NotFound is also a
KeyError, Timeout also a TimeoutError).
"""

import ctypes
import ctypes.util
import os
import threading

__all__ = [
    "Client", "Buffer", "Comm", "Op", "HecError", "NotFound", "BadHandle", "Unreachable", "Timeout",
    "Closed", "TooSmall", "WindowFull", "Corrupt", "InvalidArgument", "library",
    "FLOAT32", "FLOAT64", "FLOAT16", "BFLOAT16", "INT32", "INT64", "UINT8",
    "SUM", "PROD", "MIN", "MAX", "AVG", "RAILS_AUTO", "RAILS_HOST", "RAILS_DPU",
    "ALLREDUCE", "REDUCESCATTER", "ALLGATHER", "BROADCAST", "REDUCE", "ALLTOALL", "BARRIER",
]

# Codes and enums of include/hec.h.
OK, EINVAL, EBADHANDLE, ENOTFOUND, ERANGE, ENOMEM, EUNREACHABLE, EDENIED, ETIMEDOUT, ECLOSED, EEXIST, EAGAIN, \
    ECORRUPT, EAGENT, EINTERNAL = 0, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13, -14
FLOAT32, FLOAT64, FLOAT16, BFLOAT16, INT32, INT64, UINT8 = range(1, 8)
SUM, PROD, MIN, MAX, AVG = range(1, 6)
ALLREDUCE, REDUCESCATTER, ALLGATHER, BROADCAST, REDUCE, ALLTOALL, BARRIER = range(1, 8)
RAILS_AUTO, RAILS_HOST, RAILS_DPU = 0, 1, 2
_DTYPE_SIZE = {FLOAT32: 4, FLOAT64: 8, FLOAT16: 2, BFLOAT16: 2, INT32: 4, INT64: 8, UINT8: 1}


class HecError(Exception):
    """A failed libhec call: code is its HEC_E* code."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class InvalidArgument(HecError, ValueError):
    pass


class BadHandle(HecError):
    pass


class NotFound(HecError, KeyError):
    def __str__(self):
        return Exception.__str__(self)


class TooSmall(HecError):
    """A buffer too small, or a length past its end: needed is the size the
    result needs, where the call says (kv_get into a buffer), else 0."""
    needed = 0


class WindowFull(HecError, MemoryError):
    pass


class Unreachable(HecError, ConnectionError):
    pass


class Timeout(HecError, TimeoutError):
    pass


class Closed(HecError):
    pass


class Corrupt(HecError):
    pass


_ERRORS = {EINVAL: InvalidArgument, EBADHANDLE: BadHandle, ENOTFOUND: NotFound, ERANGE: TooSmall, ENOMEM: WindowFull,
           EUNREACHABLE: Unreachable, ETIMEDOUT: Timeout, ECLOSED: Closed, ECORRUPT: Corrupt}


def _find_library():
    env = os.environ.get("HEC_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.join(here, "..", "..", "..", "..", "lib", "libhec.so")
    if os.path.exists(repo):
        return repo
    found = ctypes.util.find_library("hec")
    if found:
        return found
    raise OSError("libhec.so not found: set HEC_LIB, or run make build in the repository")


_lib = None
_lib_lock = threading.Lock()


def library():
    """The loaded libhec (ctypes.CDLL), loaded on first use."""
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _load(_find_library())
        return _lib


def _load(path):
    lib = ctypes.CDLL(path)
    P, S, I, U32, U64, I64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64, \
        ctypes.c_int64
    PP = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "hec_strerror": (ctypes.c_char_p, [I]),
        "hec_last_error": (ctypes.c_char_p, []),
        "hec_version": (ctypes.c_char_p, []),
        "hec_dial": (I, [ctypes.c_char_p, ctypes.c_char_p, I, PP]),
        "hec_close": (I, [P]),
        "hec_window_size": (S, [P]),
        "hec_alloc": (I, [P, S, PP]),
        "hec_free": (I, [P, P]),
        "hec_ping": (I, [P]),
        "hec_checksum": (I, [P, P, S, ctypes.POINTER(U32)]),
        "hec_kv_put": (I, [P, P, S, P, S, I64]),
        "hec_kv_get": (I, [P, P, S, P, S, ctypes.POINTER(S)]),
        "hec_kv_del": (I, [P, P, S, ctypes.POINTER(I)]),
        "hec_ec_encode": (I, [P, I, I, PP, S, I]),
        "hec_ec_reconstruct": (I, [P, I, I, PP, S, ctypes.POINTER(ctypes.c_uint8), I, I]),
        "hec_object_put": (I, [P, I, I, ctypes.c_char_p, P, S]),
        "hec_object_get": (I, [P, I, I, ctypes.c_char_p, P, S, ctypes.POINTER(S)]),
        "hec_object_delete": (I, [P, I, I, ctypes.c_char_p]),
        "hec_coll_join": (I, [P, U64, U64, ctypes.POINTER(U32), I, PP]),
        "hec_coll_node": (I, [P, ctypes.POINTER(U32)]),
        "hec_coll_rank": (I, [P]),
        "hec_coll_size": (I, [P]),
        "hec_coll_allreduce": (I, [P, P, P, S, I, I]),
        "hec_coll_run": (I, [P, I, P, S, P, S, I, I, I]),
        "hec_coll_leave": (I, [P]),
        "hec_coll_host_listen": (I, [P, I, I, P, S, ctypes.c_char_p, S, PP]),
        "hec_coll_host_join": (I, [P, U64, ctypes.POINTER(ctypes.c_char_p), I]),
        "hec_ping_async": (I, [P, PP]),
        "hec_checksum_async": (I, [P, P, S, ctypes.POINTER(U32), PP]),
        "hec_kv_put_async": (I, [P, P, S, P, S, I64, PP]),
        "hec_coll_allreduce_async": (I, [P, P, P, S, I, I, PP]),
        "hec_coll_run_async": (I, [P, I, P, S, P, S, I, I, I, PP]),
        "hec_test": (I, [P]),
        "hec_wait": (I, [P, I]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def _check(rc, needed=None):
    """Raises the error for rc; needed, for HEC_ERANGE, holds the size the
    call needed (TooSmall.needed)."""
    if rc == OK:
        return
    lib = library()
    msg = (lib.hec_last_error() or lib.hec_strerror(rc) or b"").decode(errors="replace")
    err = _ERRORS.get(rc, HecError)(rc, msg)
    if rc == ERANGE and needed is not None:
        err.needed = needed.value
    raise err


def _ptr(obj, writable=False):
    """A pointer to obj's bytes, its length, and what keeps it alive."""
    if isinstance(obj, Buffer):
        return obj._address(), obj.size, obj
    if obj is None:
        return None, 0, None
    if isinstance(obj, bytes) and not writable:
        return ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value, len(obj), obj
    mv = memoryview(obj).cast("B")
    if mv.readonly:
        if writable:
            raise InvalidArgument(EINVAL, "a read-only buffer where the call writes")
        copy = bytes(mv)
        return ctypes.cast(ctypes.c_char_p(copy), ctypes.c_void_p).value, len(copy), copy
    arr = (ctypes.c_char * len(mv)).from_buffer(mv)
    return ctypes.addressof(arr), len(mv), (arr, mv)


def _grown(cap, call):
    """The bytes call(buf, cap, n) returns in buf, with buf grown to the size
    a first try asked for (HEC_ERANGE with *n set)."""
    n = ctypes.c_size_t()
    while True:
        buf = ctypes.create_string_buffer(cap)
        rc = call(buf, cap, ctypes.byref(n))
        if rc == ERANGE and n.value > cap:
            cap = n.value
            continue
        _check(rc, n)
        return buf.raw[:n.value]


class Buffer:
    """A buffer in the client's shared window (Client.alloc): its view is a
    writable memoryview the agent reads and writes in place."""

    def __init__(self, client, address, size):
        self._client, self._addr, self.size = client, address, size
        self._array = (ctypes.c_char * size).from_address(address)
        self.view = memoryview(self._array).cast("B")

    def _address(self):
        if self._addr is None:
            raise InvalidArgument(EINVAL, "the buffer was freed")
        return self._addr

    def free(self):
        if self._addr is not None:
            addr, self._addr = self._addr, None
            self.view.release()
            self._client._free(addr)

    def __len__(self):
        return self.size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


class Op:
    """An asynchronous call: test() says whether it finished (raising its
    error), wait() waits for it; result holds what it returned."""

    def __init__(self, handle, keep, result=None):
        self._h, self._keep, self._result, self.done = handle, keep, result, False
        self._lock, self._err = threading.Lock(), None  # threads may wait at once

    def _end(self, rc):
        self.done = True
        self._keep = None
        try:
            _check(rc)
        except HecError as e:
            self._err = e

    def test(self):
        with self._lock:
            if not self.done:
                rc = library().hec_test(self._h)
                if rc == EAGAIN:
                    return False
                self._end(rc)
        if self._err is not None:
            raise self._err
        return True

    def wait(self, timeout=None):
        with self._lock:  # the handle is spent by the first wait that ends
            if not self.done:
                rc = library().hec_wait(self._h, -1 if timeout is None else int(timeout * 1000))
                if rc == ETIMEDOUT:
                    _check(rc)
                self._end(rc)
        if self._err is not None:
            raise self._err
        return self.result

    @property
    def result(self):
        return self._result() if callable(self._result) else self._result


class Comm:
    """A communicator whose collectives the agents run (the DPU rail,
    Client.coll_join) or this process with the other ranks' (the host
    rail, Client.coll_host_listen, then HostRank.join)."""

    def __init__(self, client, handle):
        self._client, self._h = client, handle
        self.rank = library().hec_coll_rank(handle)
        self.size = library().hec_coll_size(handle)

    @staticmethod
    def _operands(send, recv, dtype):
        """send's and recv's pointers, the element count, and what keeps
        them alive."""
        sp, sn, k1 = _ptr(send)
        rp, rn, k2 = _ptr(recv, writable=True)
        size = _DTYPE_SIZE.get(dtype)
        if size is None or sn != rn or sn % size:
            raise InvalidArgument(EINVAL, "send of %d bytes, recv of %d, element type %r" % (sn, rn, dtype))
        return sp, rp, sn // size, (k1, k2)

    def allreduce(self, send, recv, dtype=FLOAT32, op=SUM):
        sp, rp, count, keep = self._operands(send, recv, dtype)
        _check(library().hec_coll_allreduce(self._h, sp, rp, count, dtype, op))

    def allreduce_async(self, send, recv, dtype=FLOAT32, op=SUM):
        sp, rp, count, keep = self._operands(send, recv, dtype)
        h = ctypes.c_void_p()
        _check(library().hec_coll_allreduce_async(self._h, sp, rp, count, dtype, op, ctypes.byref(h)))
        return Op(h, keep)

    def _args(self, send, recv):
        sp, sn, k1 = _ptr(send)
        rp, rn, k2 = _ptr(recv, writable=True)
        return sp, sn, rp, rn, (k1, k2)

    def run(self, kind, send, recv, dtype=FLOAT32, op=SUM, root=0):
        """Any collective (ALLREDUCE, REDUCESCATTER, ALLGATHER, BROADCAST,
        REDUCE, ALLTOALL, BARRIER) on bytes-like send and recv, as
        hec_coll_run takes them: any length of whole elements, in place
        (send is recv) or not. Blocks without holding the GIL."""
        sp, sn, rp, rn, keep = self._args(send, recv)
        _check(library().hec_coll_run(self._h, kind, sp, sn, rp, rn, dtype, op, root))

    def run_async(self, kind, send, recv, dtype=FLOAT32, op=SUM, root=0):
        """run, returning an Op at once. Collectives are numbered in the
        order of these calls (and run in that order by every rank's agent):
        start them in the same order on every rank. The buffers must stay
        untouched until the Op is done."""
        sp, sn, rp, rn, keep = self._args(send, recv)
        h = ctypes.c_void_p()
        _check(library().hec_coll_run_async(self._h, kind, sp, sn, rp, rn, dtype, op, root, ctypes.byref(h)))
        return Op(h, keep)

    def run_raw_async(self, kind, send, send_len, recv, recv_len, dtype=FLOAT32, op=SUM, root=0):
        """run_async on raw addresses (a tensor's data_ptr()): the caller
        keeps the memory alive and untouched until the Op is done."""
        h = ctypes.c_void_p()
        _check(library().hec_coll_run_async(self._h, kind, send or None, send_len, recv or None, recv_len, dtype, op,
                                            root, ctypes.byref(h)))
        return Op(h, None)

    def broadcast(self, buf, root=0, dtype=UINT8):
        self.run(BROADCAST, buf, buf, dtype, SUM, root)

    def allgather(self, send, recv, dtype=UINT8):
        self.run(ALLGATHER, send, recv, dtype)

    def reduce_scatter(self, send, recv, dtype=FLOAT32, op=SUM):
        self.run(REDUCESCATTER, send, recv, dtype, op)

    def reduce(self, send, recv, root=0, dtype=FLOAT32, op=SUM):
        self.run(REDUCE, send, recv, dtype, op, root)

    def alltoall(self, send, recv, dtype=UINT8):
        self.run(ALLTOALL, send, recv, dtype)

    def barrier(self):
        self.run(BARRIER, None, None)

    def leave(self):
        if self._h is not None:
            h, self._h = self._h, None
            _check(library().hec_coll_leave(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.leave()


class HostRank:
    """A host-rail rank that listens (Client.coll_host_listen): addr is
    its peer address; join makes it a Comm."""

    def __init__(self, client, handle, addr):
        self._client, self._h, self.addr = client, handle, addr

    def join(self, comm, addrs):
        """Joins communicator comm (an integer every rank uses) among the
        ranks at addrs (every rank's addr, in rank order)."""
        arr = (ctypes.c_char_p * len(addrs))(*[a.encode() for a in addrs])
        _check(library().hec_coll_host_join(self._h, comm, arr, len(addrs)))
        h, self._h = self._h, None
        return Comm(self._client, h)


class Client:
    """A connection to an agent: target is "shm://PATH" (the default region
    when None), a path, or "tcp://HOST:PORT". Safe for use by many threads."""

    def __init__(self, target=None, token=None, timeout=None):
        lib = library()
        h = ctypes.c_void_p()
        t = target.encode() if isinstance(target, str) else target
        k = token.encode() if isinstance(token, str) else token
        _check(lib.hec_dial(t, k, 0 if timeout is None else max(1, int(timeout * 1000)), ctypes.byref(h)))
        self._h = h
        self._buffers = {}
        self._mu = threading.Lock()

    def close(self):
        if self._h is not None:
            h, self._h = self._h, None
            with self._mu:
                for b in list(self._buffers.values()):
                    b._addr = None
                    b.view.release()
                self._buffers.clear()
            _check(library().hec_close(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if self._h is None:
            raise Closed(ECLOSED, "the client was closed")
        return self._h

    @property
    def window_size(self):
        return library().hec_window_size(self._handle())

    def alloc(self, n):
        p = ctypes.c_void_p()
        _check(library().hec_alloc(self._handle(), n, ctypes.byref(p)))
        b = Buffer(self, p.value, n)
        with self._mu:
            self._buffers[p.value] = b
        return b

    def _free(self, addr):
        with self._mu:
            self._buffers.pop(addr, None)
        _check(library().hec_free(self._handle(), addr))

    def ping(self):
        _check(library().hec_ping(self._handle()))

    def ping_async(self):
        h = ctypes.c_void_p()
        _check(library().hec_ping_async(self._handle(), ctypes.byref(h)))
        return Op(h, None)

    def checksum(self, data):
        """The CRC-32C of data, computed by the agent."""
        p, n, keep = _ptr(data)
        crc = ctypes.c_uint32()
        _check(library().hec_checksum(self._handle(), p, n, ctypes.byref(crc)))
        return crc.value

    def checksum_async(self, data):
        p, n, keep = _ptr(data)
        crc = ctypes.c_uint32()
        h = ctypes.c_void_p()
        _check(library().hec_checksum_async(self._handle(), p, n, ctypes.byref(crc), ctypes.byref(h)))
        return Op(h, (keep, crc), lambda: crc.value)

    def kv_put(self, key, value, ttl=None):
        kp, kn, k1 = _ptr(key)
        vp, vn, k2 = _ptr(value)
        _check(library().hec_kv_put(self._handle(), kp, kn, vp, vn, 0 if ttl is None else int(ttl * 1000)))

    def kv_get(self, key, into=None):
        """key's value as bytes; into (a Buffer or writable buffer) receives
        it in place instead, and the length is returned."""
        kp, kn, k1 = _ptr(key)
        n = ctypes.c_size_t()
        if into is not None:
            bp, bn, k2 = _ptr(into, writable=True)
            _check(library().hec_kv_get(self._handle(), kp, kn, bp, bn, ctypes.byref(n)), n)
            return n.value
        return _grown(4096, lambda buf, cap, n: library().hec_kv_get(self._handle(), kp, kn, buf, cap, n))

    def kv_delete(self, key):
        """Deletes key; True when it existed."""
        kp, kn, k1 = _ptr(key)
        existed = ctypes.c_int()
        _check(library().hec_kv_del(self._handle(), kp, kn, ctypes.byref(existed)))
        return existed.value == 1

    def _shards(self, shards):
        ptrs = (ctypes.c_void_p * len(shards))()
        keep, size = [], None
        for i, s in enumerate(shards):
            p, n, k = _ptr(s, writable=True)
            if size is not None and n != size:
                raise InvalidArgument(EINVAL, "shards of %d and %d bytes" % (size, n))
            size = n
            ptrs[i] = p
            keep.append(k)
        return ptrs, size or 0, keep

    def ec_encode(self, k, m, shards, rails=RAILS_AUTO):
        """Writes the parity of shards[:k] into shards[k:] (k+m buffers of one
        length, a multiple of 64)."""
        if len(shards) != k + m:
            raise InvalidArgument(EINVAL, "%d shards for %d+%d" % (len(shards), k, m))
        ptrs, n, keep = self._shards(shards)
        _check(library().hec_ec_encode(self._handle(), k, m, ptrs, n, rails))

    def ec_reconstruct(self, k, m, shards, present, data_only=False, rails=RAILS_AUTO):
        """Rebuilds, in place, the shards whose present[i] is false."""
        if len(shards) != k + m or len(present) != k + m:
            raise InvalidArgument(EINVAL, "%d shards and %d flags for %d+%d" % (len(shards), len(present), k, m))
        ptrs, n, keep = self._shards(shards)
        flags = (ctypes.c_uint8 * (k + m))(*[1 if p else 0 for p in present])
        _check(library().hec_ec_reconstruct(self._handle(), k, m, ptrs, n, flags, int(data_only), rails))

    def object_put(self, name, data, k=4, m=2):
        p, n, keep = _ptr(data)
        _check(library().hec_object_put(self._handle(), k, m, name.encode(), p, n))

    def object_get(self, name, k=4, m=2):
        return _grown(1 << 20, lambda buf, cap, n: library().hec_object_get(self._handle(), k, m, name.encode(), buf,
                                                                            cap, n))

    def object_delete(self, name, k=4, m=2):
        _check(library().hec_object_delete(self._handle(), k, m, name.encode()))

    def coll_node(self):
        """The peer-layer node id of this client's agent (what this rank
        contributes to coll_join's nodes)."""
        n = ctypes.c_uint32()
        _check(library().hec_coll_node(self._handle(), ctypes.byref(n)))
        return n.value

    def coll_join(self, comm, nodes, epoch=1):
        """Joins communicator comm (an integer every rank uses) whose agents
        are nodes (their peer ids, in rank order)."""
        arr = (ctypes.c_uint32 * len(nodes))(*nodes)
        h = ctypes.c_void_p()
        _check(library().hec_coll_join(self._handle(), comm, epoch, arr, len(nodes), ctypes.byref(h)))
        return Comm(self, h)

    def coll_host_listen(self, rank, size, key):
        """The first half of a host-rail communicator: this rank listens
        for its peers. Swap the returned HostRank's addr with the other
        ranks (a store of your own), then call its join. key: 16 to 1024
        bytes, the same on every rank."""
        h = ctypes.c_void_p()
        addr = ctypes.create_string_buffer(256)
        key = bytes(key)
        _check(library().hec_coll_host_listen(self._handle(), rank, size, key, len(key), addr, len(addr),
                                              ctypes.byref(h)))
        return HostRank(self, h, addr.value.decode())
