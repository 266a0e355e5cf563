"""Test helpers: fresh random data and relative errors."""
import torch


def case(B, N, M, D, dtype=torch.float64, device="cpu", seed=0, requires_grad=False):
    """Fresh random data for one shape: x (B, N, D), y (B, M, D)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=dtype).to(device)
    y = torch.randn(B, M, D, generator=g, dtype=dtype).to(device)
    if requires_grad:
        x.requires_grad_()
        y.requires_grad_()
    return x, y


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (relative to the scale of the reference b)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def capture_cuda_graph(step):
    """(graph, static outputs) of ``step()`` captured in a CUDA graph, after two warm-up calls on a side stream
    (kernels compiled and loaded before the capture, as torch.cuda.graphs asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out

