"""hec.torch: PyTorch on HEC — a torch.distributed backend and DDP hooks.

    import torch.distributed as dist
    import hec.torch                      # registers the "hec" backend
    dist.init_process_group("hec")        # under torchrun: RANK, WORLD_SIZE, ...
    dist.all_reduce(t)                    # reduced by the ranks' agents (the DPU rail)

    model = DDP(model)                    # on any process group (gloo too):
    model.register_comm_hook(hec.torch.state(), hec.torch.allreduce_hook)

HEC_RAIL picks the rail: "dpu" (the default) or "host" (the ranks'
processes run the collectives among themselves over HEC's peer layer,
their peer addresses and a fresh key swapped through the store; the
agent is only dialled). Each rank talks to its own agent: HEC_AGENT names it (a target as
hec.Client takes it; a comma-separated list is indexed by LOCAL_RANK), the
default region otherwise. The ranks swap their agents' node ids through
torch's own store (the one init_process_group made), so no list of ids is
written by hand; the communicator's id is drawn by rank 0 and its epoch is
torchrun's restart count plus one, so a restarted job never meets its
predecessor's collectives.

Collectives run on CPU tensors of float32, float16, bfloat16, int32 and
int64 (float64 and uint8 too), contiguous. A tensor from hec.torch.empty
lies in the agent's shared window and is handed over without a copy; other
tensors are staged through the window by the library. Waiting releases the
GIL; one thread per process group completes the futures, in the order the
agents complete the collectives (the order they were issued in).
"""

import atexit
import functools
import os
import queue
import random
import socket
import sys
import threading

try:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import ProcessGroup as _ProcessGroup, _create_work_from_future
except ImportError as e:  # pragma: no cover - exercised where torch is absent
    raise ImportError("hec.torch needs PyTorch (torch with torch.distributed): %s" % e) from e

import hec

__all__ = ["ProcessGroupHEC", "rail", "allreduce_hook", "fp16_compress_hook", "bf16_compress_hook", "state", "empty",
           "agent_client", "BACKEND"]

BACKEND = "hec"

_DTYPES = {
    torch.float32: hec.FLOAT32, torch.float64: hec.FLOAT64, torch.float16: hec.FLOAT16,
    torch.bfloat16: hec.BFLOAT16, torch.int32: hec.INT32, torch.int64: hec.INT64, torch.uint8: hec.UINT8,
}
_OPS = {
    dist.ReduceOp.SUM: hec.SUM, dist.ReduceOp.PRODUCT: hec.PROD, dist.ReduceOp.MIN: hec.MIN,
    dist.ReduceOp.MAX: hec.MAX,
}
if hasattr(dist.ReduceOp, "AVG"):
    _OPS[dist.ReduceOp.AVG] = hec.AVG


def _dtype(t):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise TypeError("hec.torch: tensors of %s are not supported (float32, float16, bfloat16, int32, int64)"
                        % t.dtype) from None


def _op(op):
    try:
        return _OPS[op]
    except KeyError:
        raise ValueError("hec.torch: reduction %s is not supported" % op) from None


def _check_tensor(t):
    if t.device.type != "cpu":
        raise ValueError("hec.torch: tensor on %s: only CPU tensors are supported" % t.device)
    if not t.is_contiguous():
        raise ValueError("hec.torch: the tensor is not contiguous (call .contiguous())")


def _span(t):
    return t.data_ptr(), t.numel() * t.element_size()


_clients = {}
_clients_lock = threading.Lock()


def agent_client():
    """This process's hec.Client of its rank's agent (HEC_AGENT, indexed
    by LOCAL_RANK when a list), made once."""
    target = os.environ.get("HEC_AGENT") or None
    if target and "," in target:
        parts = target.split(",")
        target = parts[int(os.environ.get("LOCAL_RANK", "0")) % len(parts)]
    with _clients_lock:
        c = _clients.get(target)
        if c is None:
            c = _clients[target] = hec.Client(target)
        return c


def empty(*size, dtype=torch.float32):
    """A CPU tensor in this rank's agent window: handed to collectives with
    zero copy. Keep the tensor (its storage holds the window buffer) for as
    long as it is used."""
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    n = 1
    for s in size:
        n *= s
    es = torch.empty((), dtype=dtype).element_size()
    buf = agent_client().alloc(max(n * es, 1))
    t = torch.frombuffer(buf.view, dtype=torch.uint8)[: n * es].view(dtype).view(size)
    t._hec_buffer = buf  # freed with the tensor's last Python reference
    return t


def _unwrap(src):
    """The value of a collective's source future, (error, value): raises
    the error. Run as src.then(_unwrap), so that the future torch is given
    fails as a C++ future does (torch 1.13's Future.set_exception only
    stores the exception as a value, which DDP's reducer then reads as
    tensors and crashes on)."""
    err, value = src.value()
    if err is not None:
        raise err
    return value


class _Pending:
    """A collective in flight and what completes its future: the progress
    thread alone calls finish, once."""

    def __init__(self, op, fut, done):
        self.op, self.fut, self._done = op, fut, done

    def finish(self):
        try:
            self.op.wait()  # in libhec, without the GIL
            err = None
        except Exception as e:  # noqa: BLE001 - handed to the future
            err = e
        self._done(err)


_live = set()  # the communicators not yet closed: closed at exit
_live_lock = threading.Lock()


@atexit.register
def _close_all():
    """Leaves every communicator still open and stops its thread before
    the interpreter (and torch's C++ statics) go away."""
    with _live_lock:
        comms = list(_live)
    for c in comms:
        try:
            c.close()
        except Exception:  # noqa: BLE001 - a broken communicator leaves as it can
            pass


class _Progress:
    """One thread that waits for a communicator's collectives, oldest
    first, and completes their futures."""

    def __init__(self, name):
        self._q = queue.Queue()
        self._t = threading.Thread(target=self._run, name=name, daemon=True)
        self._t.start()

    def add(self, pending):
        self._q.put(pending)

    def _run(self):
        while True:
            p = self._q.get()
            if p is None:
                return
            try:
                p.finish()
            except Exception as e:  # noqa: BLE001 - one collective's failure must not stop the thread
                print("hec.torch: completing a collective: %r" % e)

    def close(self):
        self._q.put(None)
        if threading.current_thread() is not self._t:
            self._t.join(timeout=10)


class _Comm:
    """A communicator of this process's agent and the thread completing its
    collectives."""

    def __init__(self, client, comm, rail):
        self.client, self.comm = client, comm
        self.rank, self.size = self.comm.rank, self.comm.size
        self.progress = _Progress("hec-coll-%s-%d" % (rail, self.rank))
        self.lock = threading.Lock()  # issue order is a promise: one issuer at a time
        self.failures, self.error = 0, None  # collectives failed so far, the first one's error
        with _live_lock:
            _live.add(self)

    def start(self, kind, send, recv, dtype, op=hec.SUM, root=0, then=None, result=None):
        """Starts a collective on tensors send and recv (either None) and
        returns its _Pending, whose torch Future completes with result()
        once then() (if any) ran."""
        src = torch.futures.Future()
        fut = src.then(_unwrap)
        sp, sn = _span(send) if send is not None else (0, 0)
        rp, rn = _span(recv) if recv is not None else (0, 0)
        keep = (send, recv)
        with self.lock:
            try:
                o = self.comm.run_raw_async(kind, sp, sn, rp, rn, dtype, op, root)
            except hec.HecError as e:
                # torch's callers expect RuntimeError, as from gloo or NCCL.
                raise RuntimeError("hec.torch: %s" % e) from e

        def done(err):
            nonlocal keep
            keep = None  # the tensors lived until the agent was done with them
            value = None
            if err is None:
                try:
                    if then is not None:
                        then()
                    value = result() if result is not None else None
                except Exception as e:  # noqa: BLE001
                    err = e
            if err is not None:
                # Before the future completes: a C++ waiter that returns
                # from wait finds it (see _raising).
                self.failures += 1
                self.error = self.error or err
            src.set_result((err, value))

        p = _Pending(o, fut, done)
        self.progress.add(p)
        return p

    def close(self):
        with _live_lock:
            if self not in _live:
                return
            _live.discard(self)
        try:
            self.comm.leave()
        finally:
            self.progress.close()


def rail():
    """The rail HEC_RAIL names: "dpu" (the default: the ranks' agents run
    the collectives) or "host" (the ranks' processes run them among
    themselves, over HEC's peer layer)."""
    r = os.environ.get("HEC_RAIL", "dpu")
    if r not in ("dpu", "host"):
        raise ValueError("hec.torch: HEC_RAIL=%r: dpu or host" % r)
    return r


def _host_listen():
    """The address a host-rail rank listens on: HEC_HOST_LISTEN, else this
    host's address on the route to torchrun's MASTER_ADDR (the ranks span
    hosts or namespaces when it is not loopback), else loopback."""
    if os.environ.get("HEC_HOST_LISTEN"):
        return os.environ["HEC_HOST_LISTEN"]
    master = os.environ.get("MASTER_ADDR", "")
    try:
        info = socket.getaddrinfo(master, int(os.environ.get("MASTER_PORT", "1")), type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as s:
            s.connect(info[4])  # a route lookup: a UDP connect sends nothing
            ip = s.getsockname()[0]
    except (OSError, ValueError, IndexError):
        return "127.0.0.1:0"
    return ("[%s]:0" if ":" in ip else "%s:0") % ip


def _join(store, rank, size, prefix="hec"):
    """Joins a communicator of the ranks on rail(), swapping what the ranks
    must know of each other through store: the agents' node ids (the DPU
    rail) or the ranks' peer addresses and a key (the host rail), and the
    communicator id rank 0 draws."""
    client = agent_client()
    if rank == 0:
        store.set("%s/comm" % prefix, str(random.SystemRandom().getrandbits(63) | 1))
    comm_id = int(store.get("%s/comm" % prefix))
    if rail() == "host":
        if rank == 0:
            store.set("%s/key" % prefix, os.urandom(32).hex())
        os.environ["HEC_HOST_LISTEN"] = _host_listen()  # libhec reads it
        me = client.coll_host_listen(rank, size, bytes.fromhex(store.get("%s/key" % prefix).decode()))
        store.set("%s/addr/%d" % (prefix, rank), me.addr)
        addrs = [store.get("%s/addr/%d" % (prefix, r)).decode() for r in range(size)]
        comm = me.join(comm_id, addrs)
        # Every rank knows every address before any sends.
        store.set("%s/joined/%d" % (prefix, rank), "1")
        store.wait(["%s/joined/%d" % (prefix, r) for r in range(size)])
        return _Comm(client, comm, "host")
    node = client.coll_node()
    store.set("%s/node/%d" % (prefix, rank), str(node))
    nodes = [int(store.get("%s/node/%d" % (prefix, r))) for r in range(size)]
    if len(set(nodes)) != len(nodes):
        raise RuntimeError("hec.torch: ranks share an agent (node ids %s): give each rank its own (HEC_AGENT)" % nodes)
    epoch = 1 + int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    return _Comm(client, client.coll_join(comm_id, nodes, epoch=epoch), "dpu")


class ProcessGroupHEC(_ProcessGroup):
    """torch.distributed's process group over HEC: the collectives run on
    the ranks' agents (the DPU rail), or with HEC_RAIL=host in the ranks'
    processes over HEC's peer layer (the host rail)."""

    def __init__(self, store, rank, size, timeout=None):
        super().__init__(rank, size)
        self._c = _join(store, rank, size)

    def getBackendName(self):
        return BACKEND

    def _work(self, pending):
        """The Work torch gets for a collective. Called from
        torch.distributed's Python functions (dist.all_reduce, ...), whose
        callers wait in Python: a Python Work, whose wait raises the
        collective's error. Called from torch's C++ (DDP's reducer, its
        checks): a C++ Work of the future, since C++ holds the Work alone
        and a Python subclass would lose its Python half (and its wait)
        once Python drops it; those callers read the future's value,
        which raises. (torch 1.13's C++ future Work returns from wait
        without raising.)"""
        f = sys._getframe(1)
        while f is not None and f.f_globals.get("__name__") == __name__:
            f = f.f_back
        if f is not None and f.f_globals.get("__name__") == dist.distributed_c10d.__name__:
            return _Work(pending.fut)
        return _create_work_from_future(pending.fut)

    # -- collectives --------------------------------------------------
    def allreduce(self, tensors, opts=None):
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        pendings = []
        for t in tensors:
            _check_tensor(t)
            pendings.append(self._c.start(hec.ALLREDUCE, t, t, _dtype(t), op, result=lambda: tensors))
        return self._work(pendings[-1] if pendings else _done(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        p = _done(tensors)
        for t in tensors:
            _check_tensor(t)
            p = self._c.start(hec.BROADCAST, t, t, _dtype(t), hec.SUM, root, result=lambda: tensors)
        return self._work(p)

    def reduce(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        p = _done(tensors)
        for t in tensors:
            _check_tensor(t)
            p = self._c.start(hec.REDUCE, t, t, _dtype(t), op, root, result=lambda: tensors)
        return self._work(p)

    def _allgather_base(self, output, input, opts=None):
        _check_tensor(output)
        _check_tensor(input)
        if output.dtype != input.dtype or output.numel() != input.numel() * self.size():
            raise ValueError("hec.torch: all_gather_into_tensor of %d elements into %d" % (input.numel(), output.numel()))
        return self._work(self._c.start(hec.ALLGATHER, input, output, _dtype(input), result=lambda: [output]))

    def allgather(self, output_lists, inputs, opts=None):
        if len(inputs) != 1 or len(output_lists) != 1 or len(output_lists[0]) != self.size():
            raise ValueError("hec.torch: all_gather takes one tensor and one list of world_size tensors")
        inp, outs = inputs[0], output_lists[0]
        _check_tensor(inp)
        flat = torch.empty((self.size(), inp.numel()), dtype=inp.dtype)

        def scatter():
            for i, o in enumerate(outs):
                o.copy_(flat[i].view_as(o))

        return self._work(self._c.start(hec.ALLGATHER, inp, flat, _dtype(inp), then=scatter, result=lambda: [outs]))

    def _reduce_scatter_base(self, output, input, opts=None):
        _check_tensor(output)
        _check_tensor(input)
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        if output.dtype != input.dtype or input.numel() != output.numel() * self.size():
            raise ValueError("hec.torch: reduce_scatter of %d elements into %d" % (input.numel(), output.numel()))
        return self._work(self._c.start(hec.REDUCESCATTER, input, output, _dtype(input), op, result=lambda: [output]))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        if len(outputs) != 1 or len(input_lists) != 1 or len(input_lists[0]) != self.size():
            raise ValueError("hec.torch: reduce_scatter takes one tensor and one list of world_size tensors")
        out = outputs[0]
        flat = torch.cat([t.reshape(-1) for t in input_lists[0]])
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._work(self._c.start(hec.REDUCESCATTER, flat, out, _dtype(out), op, result=lambda: [out]))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _check_tensor(output)
        _check_tensor(input)
        if output_split_sizes or input_split_sizes:
            if list(output_split_sizes) != list(input_split_sizes) or len(set(output_split_sizes)) > 1:
                raise ValueError("hec.torch: all_to_all_single with uneven splits is not supported (even splits only)")
        if output.numel() != input.numel() or input.numel() % self.size():
            raise ValueError("hec.torch: all_to_all_single of %d elements into %d among %d ranks"
                             % (input.numel(), output.numel(), self.size()))
        return self._work(self._c.start(hec.ALLTOALL, input, output, _dtype(input), result=lambda: [output]))

    def barrier(self, opts=None):
        return self._work(self._c.start(hec.BARRIER, None, None, hec.UINT8))

    def close(self):
        self._c.close()


def _done(value):
    """A _Pending already finished with value (a collective of no tensors)."""
    f = torch.futures.Future()
    f.set_result(value)
    return _Pending(None, f, None)  # never queued: nothing to finish


class _Work(dist.Work):
    """A collective's Work for Python callers: wait raises its error."""

    def __init__(self, fut):
        super().__init__()
        self._fut = fut

    def wait(self, timeout=None):
        self._fut.wait()  # raises the collective's error
        return True

    def get_future(self):
        return self._fut

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        if not self._fut.done():
            return False
        try:
            self._fut.value()
        except Exception:  # noqa: BLE001
            return False
        return True

    def result(self):
        return self._fut.value()


def _create(store, rank, size, timeout):
    return ProcessGroupHEC(store, rank, size, timeout)


def _raising(fn):
    """fn, a torch.distributed helper that runs collectives from C++ and
    waits on their Works (DDP's parameter checks and its broadcasts of
    parameters and buffers), made to raise when one of its collectives on
    a hec process group failed: torch 1.13's future Work returns from a
    C++ wait without raising, which would leave the caller reading
    whatever the outputs held."""

    @functools.wraps(fn)
    def call(process_group, *args, **kwargs):
        c = getattr(process_group, "_c", None) if isinstance(process_group, ProcessGroupHEC) else None
        if c is None:
            return fn(process_group, *args, **kwargs)
        before = c.failures
        out = fn(process_group, *args, **kwargs)
        if c.failures != before:
            raise RuntimeError("hec.torch: %s: %s" % (fn.__name__, c.error))
        return out

    call.hec_raising = True
    return call


for _name in ("_broadcast_coalesced", "_verify_params_across_processes"):
    if not getattr(getattr(dist, _name), "hec_raising", False):
        setattr(dist, _name, _raising(getattr(dist, _name)))

try:
    dist.Backend.register_backend(BACKEND, _create)
except Exception:  # noqa: BLE001 - registered already (a second import under another name)
    pass


# -- DDP communication hooks ----------------------------------------------

class _HookState:
    """What a hook needs: the communicator (this process group's when the
    process group is HEC's, else one of its own, joined through the
    default group's store)."""

    def __init__(self, process_group=None):
        pg = process_group or dist.distributed_c10d._get_default_group()
        self.world = pg.size()
        if isinstance(pg, ProcessGroupHEC):
            self.comm = pg._c
        else:
            store = dist.distributed_c10d._get_default_store()
            self.comm = _join(dist.PrefixStore("hec-hook", store), pg.rank(), pg.size())


def state(process_group=None):
    """The state object to register a hook with:
    model.register_comm_hook(hec.torch.state(), hec.torch.allreduce_hook)."""
    return _HookState(process_group)


def allreduce_hook(state, bucket):
    """DDP's allreduce of a gradient bucket on HEC, averaged: returns at
    once with a Future that the bucket's completion fills."""
    if not isinstance(state, _HookState):
        raise TypeError("hec.torch.allreduce_hook: register it with hec.torch.state(), not %r" % (state,))
    t = bucket.buffer()
    _check_tensor(t)
    t.div_(state.world)
    return state.comm.start(hec.ALLREDUCE, t, t, _dtype(t), hec.SUM, result=lambda: t).fut


def _compress_hook(dtype):
    def hook(state, bucket):
        if not isinstance(state, _HookState):
            raise TypeError("hec.torch: register the hook with hec.torch.state(), not %r" % (state,))
        t = bucket.buffer()
        _check_tensor(t)
        c = t.div(state.world).to(dtype)

        def back():
            t.copy_(c)

        return state.comm.start(hec.ALLREDUCE, c, c, _dtype(c), hec.SUM, then=back, result=lambda: t).fut

    return hook


fp16_compress_hook = _compress_hook(torch.float16)
fp16_compress_hook.__doc__ = """allreduce_hook in float16: half the bytes (torch's fp16_compress_hook)."""
bf16_compress_hook = _compress_hook(torch.bfloat16)
bf16_compress_hook.__doc__ = """allreduce_hook in bfloat16: half the bytes (torch's bf16_compress_hook)."""
