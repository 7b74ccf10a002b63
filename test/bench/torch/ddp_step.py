"""One rank of make bench's torch scenario (test/bench/torch.go), started
by torchrun: DDP step time and the host CPU a step spends communicating,
on one backend ("gloo" or "hec": the agents reduce, the DPU rail), and
all_to_all_single by size.

    torchrun --nproc_per_node N ddp_step.py --backend hec --out DIR --dim 512 --layers 3

Each rank writes OUT/rank-R.json (a file each: lines of several ranks on
one pipe would interleave): the step's wall and process
CPU times (each a list, one per timed step), the same for steps under
no_sync (the same work without any gradient reduction: the compute's
own CPU, which the caller subtracts), and all_to_all_single's times.
"""

import argparse
import json
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "..", "host", "libhec", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "..", "host", "libhec", "python", "examples"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hec.torch  # noqa: E402,F401 - registers the backend
from train_ddp import TinyLM  # noqa: E402


def timed(f):
    w, c = time.perf_counter(), time.process_time()
    f()
    return time.perf_counter() - w, time.process_time() - c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    ap.add_argument("--out", required=True, help="directory for rank-R.json")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=8, help="tokens in a step's one sequence")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--nosync", type=int, default=10)
    ap.add_argument("--a2a", default="1048576,16777216", help="all_to_all_single sizes in bytes ('' for none)")
    ap.add_argument("--a2a-iters", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = TinyLM(dim=a.dim, layers=a.layers, heads=a.dim // 64, ctx=a.tokens)
    params = sum(p.numel() for p in model.parameters())
    m = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    batch = torch.randint(0, 256, (1, a.tokens + 1), generator=g)

    def step():
        loss = torch.nn.functional.cross_entropy(m(batch[:, :-1]).reshape(-1, 256), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    def local_step():
        with m.no_sync():
            step()

    for _ in range(a.warmup):
        step()
    res = {"rank": rank, "world": world, "backend": a.backend, "params": params, "step": [], "nosync": [], "a2a": {}}
    for _ in range(a.steps):
        res["step"].append(timed(step))
    dist.barrier()
    for i in range(a.nosync + 2):
        t = timed(local_step)
        if i >= 2:
            res["nosync"].append(t)
    dist.barrier()
    for size in [int(s) for s in a.a2a.split(",") if s]:
        n = size // 4 // world * world
        x, y = torch.randn(n), torch.empty(n)
        times = []
        for i in range(a.a2a_iters + 3):
            dist.barrier()
            t = timed(lambda: dist.all_to_all_single(y, x))
            if i >= 3:
                times.append(t)
        res["a2a"][str(size)] = times
    with open(os.path.join(a.out, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
