"""Compares the weights and losses torch_rank.py's ddp runs saved in DIR.

Float32 reductions in another order give other weights after 50 steps of
training, so the tolerance is measured, not assumed: "exact" trained with
the gradients summed in float64 (rounded once), and gloo's distance from
it is what gloo's own reduction order costs. The HEC runs (hec backend
on the DPU rail and on the host rail, hec hook) pass when their distance from exact is at most twice gloo's, or
within torch.allclose's rtol 1e-5 and atol 1e-6 of gloo; the bfloat16
hook when its losses are within 1 % of gloo's. The distance is allclose's
measure, max |a - b| / (1e-5 |b| + 1e-6) over every weight. Prints a
line per run and PASS or FAIL."""

import sys

import torch


def load(d, how):
    return torch.load("%s/%s.pt" % (d, how))


def distance(a, b):
    worst, where = 0.0, ""
    for k, w in b["state"].items():
        if w.is_floating_point():
            m = ((a["state"][k].double() - w.double()).abs() / (1e-5 * w.double().abs() + 1e-6)).max().item()
            if m > worst:
                worst, where = m, k
    return worst, where


d = sys.argv[1]
gloo, exact = load(d, "gloo"), load(d, "exact")
base, _ = distance(gloo, exact)
print("gloo  from exact %.3g (its own reduction order)" % base)
ok = True
for how in ["hec", "host", "hook", "bf16"]:
    got = load(d, how)
    loss = max(abs(a - b) / abs(b) for a, b in zip(got["losses"], gloo["losses"]))
    from_gloo, where = distance(got, gloo)
    from_exact, _ = distance(got, exact)
    if how == "bf16":
        good = loss <= 0.01
    else:
        good = from_gloo <= 1 or from_exact <= 2 * max(base, 1)
    ok = ok and good
    print("%-5s from gloo %.3g (%s), from exact %.3g, losses within %.2g of gloo's: %s"
          % (how, from_gloo, where, from_exact, loss, "ok" if good else "FAIL"))
print("PASS" if ok else "FAIL")
