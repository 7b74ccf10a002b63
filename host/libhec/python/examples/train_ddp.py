"""Train a small transformer language model with DDP on HEC.

    HEC_AGENT=shm:///dev/shm/hec-1,shm:///dev/shm/hec-2 PYTHONPATH=host/libhec/python \\
      python3 -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 2 --tee 2 \\
      host/libhec/python/examples/train_ddp.py [--steps 100] [--hook bf16] [--checkpoint ckpt.pt]

Each rank's gradients are reduced by the ranks' agents (the DPU rail):
through the "hec" backend (the default), or, with --hook, on a gloo
process group with HEC's DDP hook doing the reduction (float32 or bf16).
The text is random bytes, so the loss falls only while the model learns
their distribution (towards ln 256 = 5.55): the point is the plumbing.

With --checkpoint, rank 0 saves the model and the optimizer every
--save-every steps, and every rank resumes from the file when it exists:
if a rank or its agent dies, the others' next collective raises (naming
the rank), and `torchrun --max-restarts 1` starts the job again, which
goes on from the last checkpoint (on a new communicator epoch).
"""

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import hec.torch


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=256, dim=128, layers=2, heads=4, ctx=64):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.zeros(ctx, dim))
        layer = torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers)
        self.out = torch.nn.Linear(dim, vocab)
        self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1))

    def forward(self, x):
        n = x.shape[1]
        return self.out(self.enc(self.emb(x) + self.pos[:n], mask=self.mask[:n, :n]))


def load(path, model, opt):
    """The step a checkpoint at path was saved after (0 without one),
    its state loaded into model and opt."""
    if not path or not os.path.exists(path):
        return 0
    ck = torch.load(path)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    return ck["step"]


def save(path, model, opt, step):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)  # a rank killed while saving leaves the old one whole


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--hook", choices=["fp32", "bf16"], help="gloo process group, HEC's DDP hook")
    ap.add_argument("--checkpoint", help="save to and resume from this file")
    ap.add_argument("--save-every", type=int, default=10)
    a = ap.parse_args()
    dist.init_process_group("gloo" if a.hook else "hec")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    start = load(a.checkpoint, model, opt)
    if start and rank == 0:
        print("resumed from step %d (restart %s)" % (start, os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), flush=True)
    model = DDP(model)
    if a.hook:
        model.register_comm_hook(hec.torch.state(),
                                 hec.torch.allreduce_hook if a.hook == "fp32" else hec.torch.bf16_compress_hook)
    t0 = time.monotonic()
    for step in range(start + 1, a.steps + 1):
        gen = torch.Generator().manual_seed(step * world + rank)
        batch = torch.randint(0, 256, (a.batch, 65), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(batch[:, :-1]).reshape(-1, 256), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            t = loss.detach().clone()
            dist.all_reduce(t)
            if rank == 0:
                print("step %4d  loss %.4f (ln 256 = %.4f)  %.1f ms/step"
                      % (step, t.item() / world, math.log(256), 1000 * (time.monotonic() - t0) / (step - start)),
                      flush=True)
        if a.checkpoint and rank == 0 and step % a.save_every == 0:
            save(a.checkpoint, model.module, opt, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
