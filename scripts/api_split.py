"""Split the public API's per-call time for a tiny pair (B = 1, N = M = 16) on the GPU into forward, backward,
checks and PyTorch's own autograd floor: host wall time per call, µs (the benchmark's timing loop)."""
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_api import PREPARE_KW as kw, Neg, tiny_pair, us  # noqa: E402  (also puts src/ and benchmarks/ on the path)

import softdtw  # noqa: E402
from softdtw import _checks  # noqa: E402
from softdtw.backends.cuda import checks  # noqa: E402

x, y = tiny_pair()
xd = x.detach()


def prep_finish():
    p = _checks.prepare(x, y, 1.0, defer=True, **kw)
    _checks.finish_check(p)


v_sdtw = softdtw.soft_dtw(x, y, 1.0).sum()
v_neg = Neg.apply(x).sum()
v_cpp = (x * 2).sum()
res = {}
for check in ("1", "0"):
    os.environ["SOFTDTW_CHECK_VALUES"] = check
    probes = {
        "soft_dtw fwd+bwd (autograd.grad)": lambda: torch.autograd.grad(softdtw.soft_dtw(x, y, 1.0).sum(), x),
        "soft_dtw fwd, x requires grad": lambda: softdtw.soft_dtw(x, y, 1.0),
        "soft_dtw fwd, no grad": lambda: softdtw.soft_dtw(xd, y, 1.0),
        "prepare(defer) + finish_check": prep_finish,
    }
    for k, f in probes.items():
        res[f"{k} [check={check}]"] = us(f, 3000)
os.environ["SOFTDTW_CHECK_VALUES"] = "1"
more = {
    "checks.start + ok": lambda: checks.start(xd, y).ok(),
    "backward only: soft_dtw (retain_graph)": lambda: torch.autograd.grad(v_sdtw, x, retain_graph=True),
    "backward only: _Neg (retain_graph)": lambda: torch.autograd.grad(v_neg, x, retain_graph=True),
    "backward only: x * 2 (retain_graph)": lambda: torch.autograd.grad(v_cpp, x, retain_graph=True),
    "floor: autograd.grad((x * 2).sum(), x)": lambda: torch.autograd.grad((x * 2).sum(), x),
    "floor: autograd.grad(_Neg(x).sum(), x)": lambda: torch.autograd.grad(Neg.apply(x).sum(), x),
    "(x * 2).sum()": lambda: (x * 2).sum(),
    "torch.cuda.synchronize()": torch.cuda.synchronize,
}
for k, f in more.items():
    res[k] = us(f, 3000)
print(json.dumps(res, indent=1))
out = os.environ.get("OUT")
if out:
    Path(out, "api_split.json").write_text(json.dumps(res, indent=1) + "\n")
