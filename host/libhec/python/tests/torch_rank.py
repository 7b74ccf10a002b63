"""One rank of hec.torch's tests, started by torchrun (test_torch.py runs it).

    python3 -m torch.distributed.run --standalone --nproc_per_node 2 torch_rank.py collectives
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 torch_rank.py ddp OUT.pt hec|host|gloo|hook|bf16|exact

Under HEC_RAIL=host the "hec" backend runs on the host rail; ddp's "host"
trains on it.

collectives: every collective of the "hec" backend, blocking and async, on
every supported dtype and several sizes (odd ones among them), checked
against gloo's results for the same inputs, in the same run.
ddp: trains a small transformer language model 50 steps with DDP (seed
and data fixed) on the backend or hook named (exact: gloo summing in
float64), and rank 0 saves the weights and the losses to OUT.pt for the
caller to compare.
"""

import gc
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, os.path.join(here, "..", "examples"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hec.torch  # noqa: E402,F401 - registers the backend
from train_ddp import TinyLM  # noqa: E402 - the example's model

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]
SIZES = [1, 7, 1000, 65537, 300001]


def inputs(rank, n, dtype, salt):
    g = torch.Generator().manual_seed(1000 * salt + rank)
    return torch.randint(-4, 5, (n,), generator=g).to(dtype)


def same(a, b, what):
    if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
        diff = (a.double() - b.double()).abs().max().item() if a.shape == b.shape else "shape"
        raise AssertionError("%s: hec and gloo differ (%s %s vs %s %s, max diff %s)"
                             % (what, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape), diff))


def gl(t):
    """t as gloo reduces it: Debian's gloo has no bfloat16, so bfloat16
    references are computed in float32 (the inputs are small integers,
    exact in both) and converted back with back()."""
    return t.float() if t.dtype == torch.bfloat16 else t.clone()


def collectives():
    dist.init_process_group("hec")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    salt = 0
    for dtype in DTYPES:
        for n in SIZES:
            salt += 1
            x = inputs(rank, n * world, dtype, salt)
            for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX]:
                a, b = x.clone(), gl(x)
                dist.all_reduce(a, op=op)
                dist.all_reduce(b, op=op, group=gloo)
                same(a, b.to(dtype), "all_reduce %s %s n=%d" % (op, dtype, n))
            a, b = x.clone(), gl(x)
            w = dist.all_reduce(a, async_op=True)
            f = w.get_future()
            dist.all_reduce(b, group=gloo)
            w.wait()
            same(f.value()[0], b.to(dtype), "async all_reduce %s n=%d" % (dtype, n))
            a, b = x.clone(), gl(x)
            dist.broadcast(a, src=world - 1)
            dist.broadcast(b, src=world - 1, group=gloo)
            same(a, b.to(dtype), "broadcast %s n=%d" % (dtype, n))
            a, b = x.clone(), gl(x)
            dist.reduce(a, dst=0)
            dist.reduce(b, dst=0, group=gloo)
            if rank == 0:
                same(a, b.to(dtype), "reduce %s n=%d" % (dtype, n))
            part = x[:n].clone()
            outs_a = [torch.empty_like(part) for _ in range(world)]
            outs_b = [torch.empty_like(gl(part)) for _ in range(world)]
            dist.all_gather(outs_a, part)
            dist.all_gather(outs_b, gl(part), group=gloo)
            want = torch.cat(outs_b).to(dtype)
            same(torch.cat(outs_a), want, "all_gather %s n=%d" % (dtype, n))
            flat = torch.empty(n * world, dtype=dtype)
            if hasattr(dist, "all_gather_into_tensor"):
                dist.all_gather_into_tensor(flat, part)
            else:
                dist._all_gather_base(flat, part)
            same(flat, want, "all_gather_into_tensor %s n=%d" % (dtype, n))
            out = torch.empty(n, dtype=dtype)
            ref = gl(x)
            dist.all_reduce(ref, group=gloo)
            dist.reduce_scatter(out, list(x.chunk(world)))
            same(out, ref.chunk(world)[rank].to(dtype), "reduce_scatter %s n=%d" % (dtype, n))
            a, b = torch.empty_like(x), torch.empty_like(gl(x))
            dist.all_to_all_single(a, x)
            dist.all_to_all_single(b, gl(x), group=gloo)
            same(a, b.to(dtype), "all_to_all_single %s n=%d" % (dtype, n))
    # Several in flight at once, as DDP's buckets are.
    xs = [inputs(rank, 100003 + 7 * i, torch.float32, 99 + i) for i in range(8)]
    refs = [x.clone() for x in xs]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for r in refs:
        dist.all_reduce(r, group=gloo)
    for w in works:
        w.wait()
    for i, (x, r) in enumerate(zip(xs, refs)):
        same(x, r, "in flight #%d" % i)
    # A tensor in the agent's window: handed over in place.
    z = hec.torch.empty(4096, dtype=torch.float32)
    z.fill_(rank + 1)
    dist.all_reduce(z)
    assert torch.all(z == world * (world + 1) / 2), z[:4]
    # The broadcast after this barrier fails (below), and the rank that
    # finds it aborts the communicator: a rank still finishing the barrier
    # when the abort comes (its last message not in yet, while the others
    # have left it) fails the barrier with that reason, as a communicator
    # aborted fails every collective in flight (seen once in four ranks).
    try:
        dist.barrier()
        aborted = False
    except RuntimeError as e:
        assert "aborted" in str(e) and "disagree" in str(e), e
        aborted = True
    # DDP's checks and its buffer sync wait on their Works from C++, whose
    # wait (torch 1.13's future Work) returns without raising: a failed
    # collective must still raise there, not leave whatever the outputs
    # held. The ranks disagree on the count; the root, whose data went
    # out, may return (its next collective raises).
    try:
        dist._broadcast_coalesced(dist.group.WORLD, [torch.zeros(1000 + rank)], 1 << 20, 0)
    except RuntimeError as e:
        assert "disagree" in str(e) or (aborted and "unusable" in str(e)), e
    else:
        if rank != 0:
            raise AssertionError("a _broadcast_coalesced whose ranks disagree on the count returned")
    # A failed collective raises from a blocking call (torch 1.13's own
    # future Work would return as if it had succeeded): the ranks disagree
    # on the count, and the communicator is unusable after.
    try:
        dist.all_reduce(torch.ones(1000 + rank))
    except RuntimeError as e:
        assert "disagree" in str(e) or "unusable" in str(e), e
    else:
        raise AssertionError("an all_reduce whose ranks disagree on the count returned")
    print("rank %d: collectives OK" % rank, flush=True)
    dist.destroy_process_group()


def exact_hook(kept, bucket):
    """gloo's allreduce in float64, rounded to float32 once: the gradients'
    sums as good as float32 holds them, the reference that measures what
    reduction order alone changes. The float64 copies given to gloo are
    kept (gloo_teardown says why)."""
    t = bucket.buffer()
    d = t.double().div_(dist.get_world_size())
    kept.append(d)
    del kept[:-16]
    dist.all_reduce(d)
    t.copy_(d)
    fut = torch.futures.Future()
    fut.set_result(t)
    return fut


def gloo_teardown(model, kept):
    """Ends the process group and drops the DDP model before the tensors
    given to gloo (kept).

    torch 1.13's ProcessGroupGloo destructor joins its worker threads
    holding the GIL (pytorch/pytorch#56297), and it runs when the DDP
    model's reducer, which holds the group's last reference, goes. A
    worker that drops the last reference to a tensor made in Python (the
    float64 copy the exact hook gave it) frees it, which takes the GIL:
    when that came after the main thread began the join, the rank hung at
    exit after printing its result (seen under load, 1 run in 2, 4 ranks;
    the gdb stacks: the main thread in ~ProcessGroupGloo's join, the
    worker in ~TensorImpl waiting for the GIL, and, before the hook waited
    for its allreduce, in finishWorkGloo running the hook's callback).
    Dropped here in that order, no worker frees a Python tensor, and none
    runs a Python callback (the hook waits and returns a done future)."""
    dist.destroy_process_group()
    del model[:]
    gc.collect()
    kept.clear()


def ddp(out, how, steps=50):
    if how == "host":
        os.environ["HEC_RAIL"] = "host"
    backend = "hec" if how in ("hec", "host") else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyLM(dim=64, ctx=32)
    m = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    if how in ("hook", "bf16"):
        m.register_comm_hook(hec.torch.state(), hec.torch.allreduce_hook if how == "hook" else hec.torch.bf16_compress_hook)
    kept = []
    if how == "exact":
        m.register_comm_hook(kept, exact_hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1234)
    text = torch.randint(0, 256, (steps * world * 8, 33), generator=g)
    losses = []
    for step in range(steps):
        batch = text[(step * world + rank) * 8:(step * world + rank + 1) * 8]
        x, y = batch[:, :-1], batch[:, 1:]
        loss = torch.nn.functional.cross_entropy(m(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(t.item() / world)
    if rank == 0:
        torch.save({"state": model.state_dict(), "losses": losses}, out)
    print("rank %d: ddp %s OK, loss %.4f -> %.4f" % (rank, how, losses[0], losses[-1]), flush=True)
    held = [m, model, opt, loss]
    del m, model, opt, loss
    gloo_teardown(held, kept)


if __name__ == "__main__":
    if sys.argv[1] == "collectives":
        collectives()
    else:
        ddp(sys.argv[2], sys.argv[3])
