"""Float32 gradient error of a short x against a long y on cuda (the K=2, W=4 chained xfail of
tests/backends/test_cuda_variants.py): relative dx / dy error against the float64 reference for x of N rows,
N around the frames' 32-step rebase period, closed and open ends, with and without a step penalty, several
forced layouts. Prints one line per case; writes $OUT/short_x_precision.json."""
from __future__ import annotations

import json
import os
import sys


sys.path.insert(0, os.getcwd())  # tests/ of the tree it runs in (PYTHONPATH picks the src)
from tests.backends.test_cuda_variants import _data, _fused, _layout, _ref_fused, cuda_backend  # noqa: E402
from tests._helpers import rel_err  # noqa: E402

rows = []
be = cuda_backend()
_wanted = {}


def _want(N, M, variant):
    if (N, M, variant) not in _wanted:
        x, y, xl, yl, grad = _data(1, N, M, 1, seed=5)
        _wanted[N, M, variant] = (x, y, xl, yl, grad), _ref_fused(x, y, 0.2, "sqeuclidean", xl, yl, grad, variant)
    return _wanted[N, M, variant]


for N in [int(v) for v in os.environ.get("PROBE_N", "8,24,40,100").split(",")]:
    for variant in ((False, False, None), (False, False, 0.2)):
        for M, K, W, chain in ((4000, 2, 4, True), (4000, 4, 1, False), (4000, None, None, None)):
            (x, y, xl, yl, grad), want = _want(N, M, variant)
            args = (x.cuda().float(), y.cuda().float(), 0.2, "sqeuclidean", xl.cuda(), yl.cuda(), grad.cuda().float())
            for memory in ("store", "checkpoint"):
                if K is None:
                    got = _fused(be, *args, memory, variant)
                else:
                    with _layout(K, W, chain):
                        got = _fused(be, *args, memory, variant)
                e = dict(N=N, M=M, variant=str(variant), layout=str((K, W, chain)), memory=memory,
                         value=float(want[0]), value_err=rel_err(got[0], want[0]), dx=rel_err(got[1], want[1]),
                         dy=rel_err(got[2], want[2]))
                rows.append(e)
                flag = "  <-- over 1e-4" if max(e["dx"], e["dy"]) > 1e-4 else ""
                print(f"N={N:4d} M={M} {variant} layout={(K, W, chain)} {memory:10s} |v|={e['value']:.4g} "
                      f"value={e['value_err']:.1e} dx={e['dx']:.1e} dy={e['dy']:.1e}{flag}", flush=True)
out = os.environ.get("OUT", ".")
with open(os.path.join(out, os.environ.get("PROBE_JSON", "short_x_precision.json")), "w") as f:
    json.dump(rows, f, indent=1)
