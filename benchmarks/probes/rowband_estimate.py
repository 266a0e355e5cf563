# Historical: written for the column bands (launch.band_plan, COST_BANDS), which the row bands replaced
# (OPTIMIZATION_LOG.md, "Row bands"); runs at ccb444d and before, not on later trees.
# Row bands for the large-D checkpoint: what would they cost? An estimate from today's kernels on sub-shapes
# (benchmarks/OPTIMIZATION_LOG.md, "Row bands for the large-D checkpoint"). Usage: rowband_estimate.py OUT.json
# band forward ~ value-only forward of (B, h, M); band backward ~ store forward + backward of (B, h, M) (a chained
# recompute), or with the recompute replaced by a store forward of (B * M/128, h, 128) (every chunk at once).
import sys, json, torch
sys.path.insert(0, "benchmarks")  # run from the repository root with PYTHONPATH=src
from gpu import median_ms
from softdtw.backends import cuda as be
B, N, M, D = 32, 2048, 2048, 64
dev = "cuda"
gam = torch.tensor(1.0, device=dev)
def inputs(b, n, m):
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(b, n, D, device=dev, generator=g); y = torch.randn(b, m, D, device=dev, generator=g)
    return x, y, torch.full((b,), n, device=dev), torch.full((b,), m, device=dev), torch.ones(b, device=dev)
out = {}
def rec(k, v):
    out[k] = round(v, 4); print(k, round(v, 4), flush=True)
x, y, xl, yl, gr = inputs(B, N, M)
need = (True, True, False)
def fb(mem):
    v, s = be.forward(x, y, gam, "sqeuclidean", xl, yl, None, mem)
    be.backward(gr, x, y, gam, "sqeuclidean", xl, yl, None, v, s, mem, need)
rec("store fwd+bwd", median_ms(lambda: fb("store"), 10))
rec("store fwd", median_ms(lambda: be.forward(x, y, gam, "sqeuclidean", xl, yl, None, "store"), 10))
rec("none fwd", median_ms(lambda: be.forward(x, y, gam, "sqeuclidean", xl, yl, None, "none"), 10))
rec("gemm full", median_ms(lambda: torch.bmm(x, y.transpose(1, 2)), 10))
for nb in (8, 4):
    be.COST_BANDS = nb
    rec(f"checkpoint colbands={nb} fwd+bwd", median_ms(lambda: fb("checkpoint"), 5))
be.COST_BANDS = 8
for h in (256, 512, 1024):
    xs, ys, xls, yls, grs = inputs(B, h, M)
    def bfb():
        v, s = be.forward(xs, ys, gam, "sqeuclidean", xls, yls, None, "store")
        be.backward(grs, xs, ys, gam, "sqeuclidean", xls, yls, None, v, s, "store", need)
    t_none = median_ms(lambda: be.forward(xs, ys, gam, "sqeuclidean", xls, yls, None, "none"), 10)
    t_sfb = median_ms(bfb, 10)
    t_sf = median_ms(lambda: be.forward(xs, ys, gam, "sqeuclidean", xls, yls, None, "store"), 10)
    xp, yp, xlp, ylp, _ = inputs(B * (M // 128), h, 128)
    t_par = median_ms(lambda: be.forward(xp, yp, gam, "sqeuclidean", xlp, ylp, None, "store"), 10)
    nb = N // h
    rec(f"h={h} band none fwd", t_none); rec(f"h={h} band store fwd", t_sf); rec(f"h={h} band store fwd+bwd", t_sfb)
    rec(f"h={h} parallel recompute (B*16, h, 128) store fwd", t_par)
    rec(f"h={h} estimate chained recompute", nb * (t_none + t_sfb))
    rec(f"h={h} estimate parallel recompute", nb * (t_none + t_sfb - t_sf + t_par))
json.dump(out, open(sys.argv[1], "w"), indent=1)
