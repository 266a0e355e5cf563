"""torch.library custom ops — the sole home of ``softdtw::...``.

Four ops, each dispatching on a backend name (see ``softdtw/backends/__init__.py`` for the contract):

- ``softdtw::forward``        fused cost (x, y)      -> (value (B,), saved)
- ``softdtw::backward``       -> (dx, dy, dgamma (B,)); ``int needs=7`` (bits 1 dx, 2 dy, 4 dgamma) leaves the others
                              out as empty `(0,)` tensors (the autograd formula asks for what needs_input_grad says)
- ``softdtw::forward_cost``   precomputed C (B, N, M) -> (value (B,), saved)
- ``softdtw::backward_cost``  -> (dC, dgamma (B,))
- ``softdtw::hvp_cost``       precomputed C and a direction (Cdot, gamma_dot[, penalty_dot]) -> (E, vgamma, Edot,
                              vgamma_dot, vpen, vpen_dot)

Alignment variants (issue 25): the four DP ops end with ``bool open_begin=False, bool open_end=False,
Tensor? step_penalty=None`` (see softdtw/backends/reference.py), and the backward ops return d/dstep_penalty
per pair `(B,)` as their last output (an empty `(0,)` tensor without a penalty). With the defaults the
kernels call the backends exactly as before; eagerly, calls with an option set go through their own
autograd.Functions (_FusedVariant, _FromCostVariant), so the default path is unchanged. A backend whose
functions lack the options (none of the built-in ones) raises a NotImplementedError naming them
(:func:`variant_backend`), and so does a create_graph backward of a call with one on a backend whose hvp_cost
lacks them (``HVP_VARIANTS`` unset; the built-in ones all have it). ``softdtw::hvp_cost`` takes the same options and a penalty
direction ``penalty_dot`` `(B,)`, and returns vpen = d value / d step_penalty and its directional derivative
vpen_dot per pair (empty `(0,)` tensors without a penalty): the backward ops' double backward is differentiable
in the penalty too.

Second order: with create_graph=True the first-order backward calls the backward ops under autograd, and
they have their own autograd formulas (``register_autograd``), the Hessian-vector products of Mensch & Blondel
(2018) through ``softdtw::hvp_cost``: the double backward of soft-DTW works eagerly, through the custom ops and
under opcheck. The fused costs' double backward takes the backend's ``hvp_xy`` where it has one and it applies
(cuda: squared Euclidean or l1, D <= 16, no alignment variant; the cost and its derivative formed in the kernel, the
contractions reduced there), and otherwise materialises C and its derivative (each `(B, N, M)`) from x and y
with torch ops for ``softdtw::hvp_cost``; the first-order backward stays fused. A backend without ``hvp_cost`` raises a
NotImplementedError at the first backward with create_graph=True (never a gradient without its graph), and a
third derivative (a backward through ``softdtw::hvp_cost``) raises one too.

Fake implementations give torch.compile and opcheck the output metadata; autograd is registered
for both forwards, so the ops are first-class in compiled graphs, CUDA graphs and autograd.

The ops are defined with ``torch.library.Library`` (schema, one CompositeExplicitAutograd kernel per op,
``register_fake``, ``register_autograd``) rather than ``torch.library.custom_op``: the same registrations,
without custom_op's per-call Python wrapper, which checks every output against every input for aliasing
(105 µs of own time per call under cProfile with torch 2.11 on the H100 VMs; a compiled training step went from
2.88-3.15 to 2.58-2.83 times the MSE step: benchmarks/OPTIMIZATION_LOG.md, "Training step"). The kernels never
return an input or a view of one (opcheck in tests/test_ops.py and tests/test_cuda_integration.py checks the
schemas).

Changing a schema: torch's AOTAutograd and Inductor caches key a compiled graph by its forward graph, not by the
ops' autograd formulas, so a compiled backward cached by one softdtw version can run under another (an A/B
between two trees sharing one cache did: benchmarks/OPTIMIZATION_LOG.md, "The compiled step's backward asks
only..."). Add arguments with defaults that keep the old meaning, at the end, as ``needs`` was: a graph cached
before still calls the op correctly.
"""
from __future__ import annotations

import inspect
import math
import os
from typing import Optional

import torch
from torch import Tensor

from . import costs
from .backends import get_backend

_LIB = torch.library.Library("softdtw", "DEF")
_LIB.define("forward(Tensor x, Tensor y, Tensor gamma, str cost, Tensor x_lengths, Tensor y_lengths, "
            "Tensor? window, str memory, str backend, bool open_begin=False, bool open_end=False, Tensor? step_penalty=None) -> (Tensor, Tensor)")
_LIB.define("backward(Tensor grad, Tensor x, Tensor y, Tensor gamma, str cost, Tensor x_lengths, "
            "Tensor y_lengths, Tensor? window, Tensor value, Tensor saved, str memory, str backend, "
            "bool open_begin=False, bool open_end=False, Tensor? step_penalty=None, int needs=7) "
            "-> (Tensor, Tensor, Tensor, Tensor)")
_LIB.define("forward_cost(Tensor C, Tensor gamma, Tensor x_lengths, Tensor y_lengths, Tensor? window, "
            "str memory, str backend, bool open_begin=False, bool open_end=False, Tensor? step_penalty=None) -> (Tensor, Tensor)")
_LIB.define("backward_cost(Tensor grad, Tensor C, Tensor gamma, Tensor x_lengths, Tensor y_lengths, "
            "Tensor? window, Tensor value, Tensor saved, str memory, str backend, bool open_begin=False, bool open_end=False, Tensor? step_penalty=None) "
            "-> (Tensor, Tensor, Tensor)")
_LIB.define("hvp_cost(Tensor C, Tensor gamma, Tensor x_lengths, Tensor y_lengths, Tensor? window, Tensor Cdot, "
            "Tensor gamma_dot, str backend, bool open_begin=False, bool open_end=False, Tensor? step_penalty=None, "
            "Tensor? penalty_dot=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")


def _kernel(name: str):
    """Register the decorated function as the op's kernel for every device (the backend argument picks the
    implementation)."""
    def register(fn):
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
        return fn
    return register


def _fake(name: str):
    def register(fn):
        torch.library.register_fake(f"softdtw::{name}", fn, lib=_LIB)
        return fn
    return register


def _saved_like(ref: Tensor, backend: str, kind: str, B: int, N: int, M: int, D: int, memory: str,
                open_end: bool = False) -> Tensor:
    # open_end: a backend that saves more with it (cuda: the last row) says so through saved_spec's open_end.
    extra = {"open_end": True} if open_end and "open_end" in inspect.signature(
        get_backend(backend).saved_spec).parameters else {}
    shape, dtype = get_backend(backend).saved_spec(kind, B, N, M, D, ref.dtype, memory, **extra)
    if shape is None:  # a flat buffer whose length the backend plans at run time
        shape = (torch.library.get_ctx().new_dynamic_size(),)
    return ref.new_empty(shape, dtype=dtype)


# --- fused cost ------------------------------------------------------------------------------------

forward = torch.ops.softdtw.forward.default
backward = torch.ops.softdtw.backward.default
forward_cost = torch.ops.softdtw.forward_cost.default
backward_cost = torch.ops.softdtw.backward_cost.default
hvp_cost = torch.ops.softdtw.hvp_cost.default


@_kernel("forward")
def _forward_kernel(x: Tensor, y: Tensor, gamma: Tensor, cost: str, x_lengths: Tensor, y_lengths: Tensor,
                    window: Optional[Tensor], memory: str, backend: str, open_begin: bool = False,
                    open_end: bool = False, step_penalty: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    if open_begin or open_end or step_penalty is not None:
        return variant_backend(backend, open_begin, open_end, step_penalty).forward(
            x, y, gamma, cost, x_lengths, y_lengths, window, memory, open_begin=open_begin, open_end=open_end,
            step_penalty=step_penalty)
    return get_backend(backend).forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory)


@_fake("forward")
def _(x, y, gamma, cost, x_lengths, y_lengths, window, memory, backend, open_begin=False, open_end=False,
      step_penalty=None):
    B, N, D = x.shape
    return x.new_empty((B,)), _saved_like(x, backend, "fused", B, N, y.shape[1], D, memory, open_end)


@_kernel("backward")
def _backward_kernel(grad: Tensor, x: Tensor, y: Tensor, gamma: Tensor, cost: str, x_lengths: Tensor,
                     y_lengths: Tensor, window: Optional[Tensor], value: Tensor, saved: Tensor, memory: str,
                     backend: str, open_begin: bool = False, open_end: bool = False,
                     step_penalty: Optional[Tensor] = None, needs: int = 7) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dx, dy, dgamma `(B,)`, dpenalty): dpenalty is grad_b d value_b / d step_penalty `(B,)`, or an empty `(0,)`
    tensor without a step penalty. needs: which of dx, dy, dgamma the caller uses (bits 1, 2, 4; the autograd formula
    sets them from needs_input_grad); one left out comes back as an empty `(0,)` tensor, and the backends skip its
    work where they can (past FUSED_D_MAX, its GEMMs)."""
    if open_begin or open_end or step_penalty is not None:
        out = tuple(variant_backend(backend, open_begin, open_end, step_penalty).backward(
            grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory, open_begin=open_begin,
            open_end=open_end, step_penalty=step_penalty))
        out = out if step_penalty is not None else out + (x.new_empty((0,)),)
    else:
        kw = _needs_kw(backend, _needs_flags(needs)) if needs != 7 else {}
        out = tuple(get_backend(backend).backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value,
                                                  saved, memory, **kw)) + (x.new_empty((0,)),)
    if needs == 7:
        return out
    return tuple(t if k == 3 or needs >> k & 1 else x.new_empty((0,)) for k, t in enumerate(out))


def _needs_kw(backend: str, flags) -> dict:
    """The backend backward's ``needs`` keyword for (dx, dy, dgamma) flags, where the backend takes one: the cuda
    backend writes gradients nobody asked for into scratch buffers (no allocations) and skips the GEMMs of large D;
    the cpu backend skips their work (dy's accumulation, dgamma's per-cell entropies)."""
    return {"needs": flags} if backend in ("cuda", "cpu") else {}


def _needs_flags(needs: int) -> tuple:
    """The backward op's needs bits (1 dx, 2 dy, 4 dgamma) as the backends' (dx, dy, dgamma) flags."""
    return bool(needs & 1), bool(needs & 2), bool(needs & 4)


def _needs_bits(need) -> int:
    """needs_input_grad's (x, y, gamma) entries as the backward op's needs bits."""
    return int(bool(need[0])) | int(bool(need[1])) << 1 | int(bool(need[2])) << 2


@_fake("backward")
def _(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory, backend, open_begin=False,
      open_end=False, step_penalty=None, needs=7):
    B = x.shape[0]
    return (torch.empty_like(x) if needs & 1 else x.new_empty((0,)),
            torch.empty_like(y) if needs & 2 else x.new_empty((0,)),
            x.new_empty((B,)) if needs & 4 else x.new_empty((0,)),
            x.new_empty((B,) if step_penalty is not None else (0,)))


def _forward_setup(ctx, inputs, output):
    x, y, gamma, cost, x_lengths, y_lengths, window, memory, backend, open_begin, open_end, step_penalty = inputs
    value, saved = output
    ctx.mark_non_differentiable(saved)
    # Otherwise autograd fills a zero gradient the size of the saved table on every backward.
    ctx.set_materialize_grads(False)
    ctx.cost, ctx.memory, ctx.backend = cost, memory, backend
    ctx.open_begin, ctx.open_end = open_begin, open_end
    ctx.save_for_backward(x, y, gamma, x_lengths, y_lengths, window, value, saved, step_penalty)


def _hvp_function(backend: str):
    """The backend's ``hvp_cost``, or a NotImplementedError naming the backend."""
    fn = getattr(get_backend(backend), "hvp_cost", None)
    if fn is None:
        raise NotImplementedError(
            f"second-order gradients of soft-DTW (a backward with create_graph=True: gradient penalties, "
            f"Hessian-vector products, DILATE, a differentiable soft_dtw_alignment) are not available on the "
            f"{backend} backend yet: it has no hvp_cost (softdtw::hvp_cost). Pass backend='reference' (exact, "
            f"slower) for the second order, or take first-order gradients only (create_graph=False)."
        )
    return fn


def _check_create_graph(backend: str, variant=None) -> None:
    """Called by every first-order backward: when it runs with create_graph=True (autograd enables grad mode
    for it then), the backend must have the second order, so that no gradient is returned without its graph.
    variant: (open_begin, open_end, step_penalty) of the call: its options set need a backend whose hvp_cost
    takes them (:func:`_hvp_variant_function`)."""
    if torch.is_grad_enabled():
        _hvp_function(backend)
        if variant is not None and variant_names(*variant):
            _hvp_variant_function(backend, *variant)


def variant_names(open_begin: bool, open_end: bool, step_penalty) -> list:
    """The alignment-variant options that are set, by name."""
    return [name for name, on in (("open_begin", open_begin), ("open_end", open_end),
                                  ("step_penalty", step_penalty is not None)) if on]


def _hvp_variant_function(backend: str, open_begin: bool, open_end: bool, step_penalty):
    """The backend's ``hvp_cost``, which must take the alignment-variant options that are set (a backend says
    so with ``HVP_VARIANTS = True``: reference, cpu and cuda), else a NotImplementedError naming the
    options and the backend (never a gradient without its graph)."""
    fn = _hvp_function(backend)
    if not getattr(get_backend(backend), "HVP_VARIANTS", False):
        names = variant_names(open_begin, open_end, step_penalty)
        raise NotImplementedError(
            f"second-order gradients of soft-DTW (a backward with create_graph=True, a differentiable "
            f"soft_dtw_alignment) with {' / '.join(names)} are not available on the {backend} backend yet: its "
            f"hvp_cost has no alignment variants. Move the inputs to the CPU with .cpu() (backend='cpu'), pass "
            f"backend='reference' (exact, slow), or take first-order gradients only (create_graph=False).")
    return fn


#: Per backend name: whether its four DP functions take the alignment-variant options.
_HAS_VARIANTS: dict = {}


def variant_backend(backend: str, open_begin: bool, open_end: bool, step_penalty):
    """The backend module, which must take the alignment-variant options that are set: a backend without them
    raises a NotImplementedError naming the options, never a value without them."""
    module = get_backend(backend)
    has = _HAS_VARIANTS.get(backend)
    if has is None:
        has = _HAS_VARIANTS[backend] = all(
            "open_begin" in inspect.signature(getattr(module, fn)).parameters
            for fn in ("forward", "backward", "forward_cost", "backward_cost"))
    if not has:
        names = " / ".join(variant_names(open_begin, open_end, step_penalty))
        raise NotImplementedError(
            f"{names} is not available on the {backend} backend yet (the reference, cpu and cuda backends have the "
            f"alignment variants). Move the inputs to the CPU with .cpu() (backend='cpu'), or pass "
            f"backend='reference' (exact, slow, runs on the inputs' device).")
    return module


def _third_order_error() -> NotImplementedError:
    return NotImplementedError(
        "third derivatives of soft-DTW are not supported: the double backward of softdtw::backward / "
        "softdtw::backward_cost is softdtw::hvp_cost, which has no derivative of its own. Take the second "
        "backward with create_graph=False. torch.autograd.functional.hvp asks for one (it differentiates the "
        "double backward again, with respect to the direction): use torch.autograd.functional.vhp, which is the "
        "same product here (the Hessian is symmetric), or torch.autograd.grad twice."
    )


def _no_saved_error():
    return RuntimeError(
        "soft-DTW was computed in value-only mode (no input required grad at the time), so nothing "
        "was kept for the backward. Make x, y or gamma require grad before calling soft_dtw."
    )


def _forward_backward(ctx, grad_value, _grad_saved):
    x, y, gamma, x_lengths, y_lengths, window, value, saved, step_penalty = ctx.saved_tensors
    if grad_value is None:
        return (None,) * 12
    variant = (ctx.open_begin, ctx.open_end, step_penalty)
    _check_create_graph(ctx.backend, variant)
    if ctx.memory == "none":
        raise _no_saved_error()
    need = ctx.needs_input_grad
    # Only gradients someone uses (a target y, a constant gamma: no GEMMs for them past FUSED_D_MAX); with
    # create_graph=True all three, as the backward op's own autograd (the HVP) reads them.
    needs = 7 if torch.is_grad_enabled() else _needs_bits(need)
    dx, dy, dgamma, dpen = backward(grad_value.contiguous(), x, y, gamma, ctx.cost, x_lengths, y_lengths,
                                    window, value, saved, ctx.memory, ctx.backend, *variant, needs)
    dpen = None if step_penalty is None else dpen.sum().reshape(step_penalty.shape)
    return (dx if needs & 1 else None, dy if needs & 2 else None,
            dgamma.sum().reshape(gamma.shape) if needs & 4 else None, None, None, None, None, None, None, None, None,
            dpen)


torch.library.register_autograd("softdtw::forward", _forward_backward, setup_context=_forward_setup, lib=_LIB)


# --- precomputed cost ------------------------------------------------------------------------------

@_kernel("forward_cost")
def _forward_cost_kernel(C: Tensor, gamma: Tensor, x_lengths: Tensor, y_lengths: Tensor, window: Optional[Tensor],
                         memory: str, backend: str, open_begin: bool = False, open_end: bool = False,
                         step_penalty: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    if open_begin or open_end or step_penalty is not None:
        return variant_backend(backend, open_begin, open_end, step_penalty).forward_cost(
            C, gamma, x_lengths, y_lengths, window, memory, open_begin=open_begin, open_end=open_end,
            step_penalty=step_penalty)
    return get_backend(backend).forward_cost(C, gamma, x_lengths, y_lengths, window, memory)


@_fake("forward_cost")
def _(C, gamma, x_lengths, y_lengths, window, memory, backend, open_begin=False, open_end=False, step_penalty=None):
    B, N, M = C.shape
    return C.new_empty((B,)), _saved_like(C, backend, "cost", B, N, M, 0, memory, open_end)


@_kernel("backward_cost")
def _backward_cost_kernel(grad: Tensor, C: Tensor, gamma: Tensor, x_lengths: Tensor, y_lengths: Tensor,
                          window: Optional[Tensor], value: Tensor, saved: Tensor, memory: str,
                          backend: str, open_begin: bool = False, open_end: bool = False,
                          step_penalty: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    """(dC, dgamma `(B,)`, dpenalty): dpenalty as in the backward op."""
    if open_begin or open_end or step_penalty is not None:
        out = variant_backend(backend, open_begin, open_end, step_penalty).backward_cost(
            grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory, open_begin=open_begin,
            open_end=open_end, step_penalty=step_penalty)
        return tuple(out) if step_penalty is not None else tuple(out) + (C.new_empty((0,)),)
    dC, dgamma = get_backend(backend).backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved,
                                                    memory)
    return dC, dgamma, C.new_empty((0,))


@_fake("backward_cost")
def _(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory, backend, open_begin=False,
      open_end=False, step_penalty=None):
    B = C.shape[0]
    return torch.empty_like(C), C.new_empty((B,)), C.new_empty((B,) if step_penalty is not None else (0,))


def _cost_setup(ctx, inputs, output):
    C, gamma, x_lengths, y_lengths, window, memory, backend, open_begin, open_end, step_penalty = inputs
    value, saved = output
    ctx.mark_non_differentiable(saved)
    ctx.set_materialize_grads(False)
    ctx.memory, ctx.backend = memory, backend
    ctx.open_begin, ctx.open_end = open_begin, open_end
    ctx.save_for_backward(C, gamma, x_lengths, y_lengths, window, value, saved, step_penalty)


def _cost_backward(ctx, grad_value, _grad_saved):
    C, gamma, x_lengths, y_lengths, window, value, saved, step_penalty = ctx.saved_tensors
    if grad_value is None:
        return (None,) * 10
    variant = (ctx.open_begin, ctx.open_end, step_penalty)
    _check_create_graph(ctx.backend, variant)
    if ctx.memory == "none":
        raise _no_saved_error()
    dC, dgamma, dpen = backward_cost(grad_value.contiguous(), C, gamma, x_lengths, y_lengths, window, value,
                                     saved, ctx.memory, ctx.backend, *variant)
    dpen = None if step_penalty is None else dpen.sum().reshape(step_penalty.shape)
    return dC, dgamma.sum().reshape(gamma.shape), None, None, None, None, None, None, None, dpen


torch.library.register_autograd("softdtw::forward_cost", _cost_backward, setup_context=_cost_setup, lib=_LIB)


# --- second order ----------------------------------------------------------------------------------

@_kernel("hvp_cost")
def _hvp_cost_kernel(C: Tensor, gamma: Tensor, x_lengths: Tensor, y_lengths: Tensor, window: Optional[Tensor],
                     Cdot: Tensor, gamma_dot: Tensor, backend: str, open_begin: bool = False, open_end: bool = False,
                     step_penalty: Optional[Tensor] = None, penalty_dot: Optional[Tensor] = None
                     ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(E, vgamma, Edot, vgamma_dot, vpen, vpen_dot): vpen = d value_b / d step_penalty and vpen_dot its
    derivative along (Cdot, gamma_dot, penalty_dot), `(B,)` each, or empty `(0,)` tensors without a step
    penalty (SECOND_ORDER.md, "Variants")."""
    if open_begin or open_end or step_penalty is not None:
        out = _hvp_variant_function(backend, open_begin, open_end, step_penalty)(
            C, gamma, x_lengths, y_lengths, window, Cdot.contiguous(), gamma_dot.contiguous(), open_begin=open_begin,
            open_end=open_end, step_penalty=step_penalty, penalty_dot=penalty_dot)
        if step_penalty is not None:
            return tuple(out)
        return tuple(out) + (C.new_empty((0,)), C.new_empty((0,)))
    out = _hvp_function(backend)(C, gamma, x_lengths, y_lengths, window, Cdot.contiguous(), gamma_dot.contiguous())
    return tuple(out) + (C.new_empty((0,)), C.new_empty((0,)))


@_fake("hvp_cost")
def _(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, backend, open_begin=False, open_end=False,
      step_penalty=None, penalty_dot=None):
    B = C.shape[0]
    P = (B,) if step_penalty is not None else (0,)
    return (torch.empty_like(C), C.new_empty((B,)), torch.empty_like(C), C.new_empty((B,)), C.new_empty(P),
            C.new_empty(P))


def _hvp_setup(ctx, inputs, output):
    pass


def _hvp_backward(ctx, *grads):
    raise _third_order_error()


torch.library.register_autograd("softdtw::hvp_cost", _hvp_backward, setup_context=_hvp_setup, lib=_LIB)


def _backward_cost_setup(ctx, inputs, output):
    grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory, backend, open_begin, open_end, pen = inputs
    ctx.backend = backend
    ctx.open_begin, ctx.open_end = open_begin, open_end
    ctx.save_for_backward(grad, C, gamma, x_lengths, y_lengths, window, value, pen)


def _variant_hvp(ctx, C, gamma, x_lengths, y_lengths, window, Cdot, h, gp, pen):
    """hvp_cost of a backward op's double backward along (Cdot, h) and, with a step penalty, gp (the upstream
    of the per-pair dpenalty output): (E, vgamma, Edot, vgamma_dot, vpen, vpen_dot) (the last two None without
    a penalty)."""
    if pen is None:
        out = hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, h.contiguous(), ctx.backend, ctx.open_begin,
                       ctx.open_end)
        return out[:4] + (None, None)
    gp = torch.zeros_like(h) if gp is None or gp.numel() == 0 else gp.to(h.dtype).contiguous()
    return hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, h.contiguous(), ctx.backend, ctx.open_begin,
                    ctx.open_end, pen.detach(), gp)


def _penalty_grad(gk, vpen_dot, pen):
    """d/dpenalty of a backward op's outputs: sum_b gk_b vpen_dot_b, shaped as the penalty (per pair for a
    `(B,)` penalty)."""
    if pen.dim() == 0:
        return (gk * vpen_dot).sum().reshape(pen.shape)
    return (gk * vpen_dot).reshape(pen.shape)


def _backward_cost_backward(ctx, G, h, gp):
    """VJP of (dC, dgamma, dpen) = (g E, g vgamma, g vpen) for the upstream (G `(B, N, M)`, h `(B,)`, gp `(B,)`
    with a step penalty), per pair b, along the direction (G, h, gp): dg = <G, E> + h vgamma + gp vpen,
    dC = g Edot, dgamma = sum_b g vgamma_dot (gamma is shared), dpenalty = sum_b g vpen_dot (a shared penalty)."""
    if torch.is_grad_enabled():
        raise _third_order_error()
    grad, C, gamma, x_lengths, y_lengths, window, value, pen = ctx.saved_tensors
    E, vgamma, Edot, vgamma_dot, vpen, vpen_dot = _variant_hvp(ctx, C, gamma, x_lengths, y_lengths, window,
                                                               G.contiguous(), h, gp, pen)
    keep = torch.isfinite(value).to(C.dtype)  # as backward_cost: a pair whose value overflowed has no gradient
    gk = grad * keep
    need = ctx.needs_input_grad
    dgrad = None
    if need[0]:
        dgrad = (G * E).sum((1, 2)) + h * vgamma
        if pen is not None and gp is not None and gp.numel():
            dgrad = dgrad + gp * vpen
        dgrad = dgrad * keep
    dC = gk.view(-1, 1, 1) * Edot if need[1] else None
    dgamma = (gk * vgamma_dot).sum().reshape(gamma.shape) if need[2] else None
    dpen = _penalty_grad(gk, vpen_dot, pen) if pen is not None and need[12] else None
    return dgrad, dC, dgamma, None, None, None, None, None, None, None, None, None, dpen


torch.library.register_autograd("softdtw::backward_cost", _backward_cost_backward, setup_context=_backward_cost_setup,
                                lib=_LIB)


def _backward_setup(ctx, inputs, output):
    (grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory, backend, open_begin, open_end,
     pen) = inputs[:15]
    ctx.cost, ctx.backend = cost, backend
    ctx.open_begin, ctx.open_end = open_begin, open_end
    ctx.save_for_backward(grad, x, y, gamma, x_lengths, y_lengths, window, value, pen)


def _backward_backward(ctx, Gx, Gy, h, gp):
    """VJP of (dx, dy, dgamma, dpen) = (J^T (g E), g vgamma, g vpen) for the upstream (Gx, Gy, h, gp), J the
    cost's Jacobian.

    With Cdot = J (Gx, Gy) (the cost's derivative along the upstream), per pair along (Cdot, h, gp):
    dg = <Cdot, E> + h vgamma + gp vpen, (dx, dy) = J^T (g Edot) + the cost's own second derivative along
    (Gx, Gy) weighted by g E, dgamma = sum_b g vgamma_dot, dpenalty = sum_b g vpen_dot. The backend's hvp_xy
    gives all of it without a (B, N, M) tensor where it applies (:func:`_hvp_xy`); otherwise C and Cdot `(B, N, M)`
    are materialised with torch ops (the first-order backward does not: it stays fused).
    """
    need, saved = ctx.needs_input_grad, ctx.saved_tensors
    # need[14] (the step penalty) only with one: under opcheck's AOT dispatch the tuple has 12 entries (the
    # defaulted arguments left out).
    dgrad, dx, dy, dgamma, dpen = _double_backward(ctx, saved, Gx, Gy, h, gp, (
        need[0], need[1], need[2], need[3], saved[8] is not None and need[14]))
    return dgrad, dx, dy, dgamma, None, None, None, None, None, None, None, None, None, None, dpen, None


def _double_backward(ctx, saved, Gx, Gy, h, gp, need):
    """_backward_backward's (dgrad, dx, dy, dgamma, dpen) from the saved (grad, x, y, gamma, x_lengths, y_lengths,
    window, value, pen); need: whether each of those five is wanted. ctx: cost, backend, open_begin, open_end."""
    if torch.is_grad_enabled():
        raise _third_order_error()
    grad, x, y, gamma, x_lengths, y_lengths, window, value, pen = saved
    cost = ctx.cost
    fused = _hvp_xy(ctx, grad, value, cost, x, y, gamma, x_lengths, y_lengths, window, Gx, Gy, h, pen, need)
    if fused is not None:
        return fused
    C = costs.pairwise_cost(cost, x, y).contiguous()
    Cdot = costs.cost_jvp(cost, x, y, Gx, Gy).contiguous()
    E, vgamma, Edot, vgamma_dot, vpen, vpen_dot = _variant_hvp(ctx, C, gamma, x_lengths, y_lengths, window, Cdot,
                                                               h, gp, pen)
    keep = torch.isfinite(value).to(C.dtype)
    gk = (grad * keep).view(-1, 1, 1)
    dgrad = None
    if need[0]:
        dgrad = (Cdot * E).sum((1, 2)) + h * vgamma
        if pen is not None and gp is not None and gp.numel():
            dgrad = dgrad + gp * vpen
        dgrad = dgrad * keep
    dx = dy = None
    if need[1] or need[2]:
        dx, dy = costs.cost_vjp(cost, x, y, gk * Edot)
        hx, hy = costs.cost_vjp_jvp(cost, x, y, gk * E, Gx, Gy)
        dx, dy = dx + hx, dy + hy
    dgamma = (gk.view(-1) * vgamma_dot).sum().reshape(gamma.shape) if need[3] else None
    dpen = _penalty_grad(gk.view(-1), vpen_dot, pen) if pen is not None and need[4] else None
    return dgrad, dx, dy, dgamma, dpen


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _hvp_xy(ctx, grad, value, cost, x, y, gamma, x_lengths, y_lengths, window, Gx, Gy, h, pen, need):
    """_backward_backward's outputs from the backend's ``hvp_xy`` (the cost and its direction formed in the kernel,
    the contractions with E and E-dot reduced there: no (B, N, M) tensor), or None where it does not apply (no
    hvp_xy, an alignment variant, or the backend declines); the same values as the general path up to rounding."""
    fn = getattr(get_backend(ctx.backend), "hvp_xy", None)
    if fn is None or pen is not None or ctx.open_begin or ctx.open_end:
        return None
    # It launches on the tensors' memory: not while a graph is traced (fake or functional tensors under
    # torch.compile's AOT autograd, opcheck) nor under functorch transforms (wrapped tensors); the general path
    # runs there, through the hvp_cost op.
    if _transforms_active() or any(type(t) not in _PLAIN_TENSORS for t in (x, y, Gx, Gy, h, grad, value)
                                   if t is not None):
        return None
    # A gamma outside the graph (a float, or a tensor without requires_grad) has no gradient, and the upstream h
    # of its first-order gradient is 0 (that output has no consumer): the kernel then skips vgamma and its
    # derivative (15 % fewer instructions per cell; 2-7 % of its time on an H100, OPTIMIZATION_LOG.md).
    gamma_terms = bool(need[3] or getattr(gamma, "requires_grad", False))
    out = fn(cost, x, y, gamma, x_lengths, y_lengths, window, torch.zeros_like(x) if Gx is None else Gx,
             torch.zeros_like(y) if Gy is None else Gy, h, gamma_terms=gamma_terms)
    if out is None:
        return None
    s1, vgamma, vgamma_dot, dxp, dyp = out
    keep = torch.isfinite(value).to(x.dtype)
    gk = grad * keep
    if need[0]:
        dgrad = (s1 + h * vgamma) * keep if gamma_terms else s1 * keep
    else:
        dgrad = None
    dx = dxp * gk.view(-1, 1, 1) if need[1] else None
    dy = dyp * gk.view(-1, 1, 1) if need[2] else None
    dgamma = (gk * vgamma_dot).sum().reshape(gamma.shape) if need[3] else None
    return dgrad, dx, dy, dgamma, None


torch.library.register_autograd("softdtw::backward", _backward_backward, setup_context=_backward_setup, lib=_LIB)


# --- entry points used by functional.py ------------------------------------------------------------
# Eagerly, the ops' Python dispatch (schema parsing, default filling, the generated autograd wrapper)
# costs more than a tiny problem's kernels, so eager calls go through plain autograd.Functions that
# call the same backend functions. Under torch.compile the custom ops above are used, so the graph
# holds first-class ops. Both paths run identical backend code (tests compare them).
#
# The Functions take the differentiable tensors as arguments and the rest as one tuple (autograd inspects
# every argument of apply), and are applied through autograd's C++ apply directly when no functorch transform
# is active: Function.apply's Python layer (default binding, dead-wrapper unwrapping over every argument)
# cost as much as the rest of a tiny call's autograd bookkeeping (issue 27).

class _Fused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, gamma, meta):
        cost, x_lengths, y_lengths, window, memory, backend = meta
        value, saved = get_backend(backend).forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory)
        ctx.cost, ctx.memory, ctx.backend = cost, memory, backend
        ctx.save_for_backward(x, y, gamma, x_lengths, y_lengths, window, value, saved)
        return value

    @staticmethod
    def backward(ctx, grad_value):
        x, y, gamma, x_lengths, y_lengths, window, value, saved = ctx.saved_tensors
        if ctx.memory == "none":
            raise _no_saved_error()
        if torch.is_grad_enabled():  # create_graph=True: a backward whose own autograd is the HVP
            _check_create_graph(ctx.backend)
            if _transforms_active():  # functorch transforms: the backward op (its autograd is registered)
                dx, dy, dgamma, _ = backward(grad_value.contiguous(), x, y, gamma, ctx.cost, x_lengths, y_lengths,
                                             window, value, saved, ctx.memory, ctx.backend)
            else:
                dx, dy, dgamma = _fused_grad_apply(grad_value.contiguous(), x, y, gamma, (
                    ctx.cost, x_lengths, y_lengths, window, value, saved, ctx.memory, ctx.backend))
            return dx, dy, dgamma.sum().reshape(gamma.shape), None
        if not grad_value.is_contiguous():
            grad_value = grad_value.contiguous()
        need = ctx.needs_input_grad
        dx, dy, dgamma = get_backend(ctx.backend).backward(
            grad_value, x, y, gamma, ctx.cost, x_lengths, y_lengths, window, value, saved, ctx.memory,
            **_needs_kw(ctx.backend, need[:3]))
        return (dx if need[0] else None, dy if need[1] else None,
                dgamma.sum().reshape(gamma.shape) if need[2] else None, None)


class _FusedGrad(torch.autograd.Function):
    """_Fused's first-order backward as a function of (grad, x, y, gamma) with its own backward (the HVP:
    :func:`_double_backward`), for create_graph=True eagerly. The same kernels and formulas as the backward op
    and its registered autograd, without the op's Python dispatch and generated autograd wrapper (~0.3 ms of host
    time each per gradient-penalty step on an H100 VM, benchmarks/probes/penalty_profile.py)."""

    @staticmethod
    def forward(ctx, grad, x, y, gamma, meta):
        cost, x_lengths, y_lengths, window, value, saved, memory, backend = meta
        dx, dy, dgamma = get_backend(backend).backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window,
                                                       value, saved, memory)
        ctx.cost, ctx.backend, ctx.open_begin, ctx.open_end = cost, backend, False, False
        ctx.save_for_backward(grad, x, y, gamma, x_lengths, y_lengths, window, value)
        return dx, dy, dgamma

    @staticmethod
    def backward(ctx, Gx, Gy, h):
        need = ctx.needs_input_grad
        dgrad, dx, dy, dgamma, _ = _double_backward(ctx, ctx.saved_tensors + (None,), Gx, Gy, h, None,
                                                    (need[0], need[1], need[2], need[3], False))
        return dgrad, dx, dy, dgamma, None


class _FromCost(torch.autograd.Function):
    @staticmethod
    def forward(ctx, C, gamma, meta):
        x_lengths, y_lengths, window, memory, backend = meta
        value, saved = get_backend(backend).forward_cost(C, gamma, x_lengths, y_lengths, window, memory)
        ctx.memory, ctx.backend = memory, backend
        ctx.save_for_backward(C, gamma, x_lengths, y_lengths, window, value, saved)
        return value

    @staticmethod
    def backward(ctx, grad_value):
        C, gamma, x_lengths, y_lengths, window, value, saved = ctx.saved_tensors
        if ctx.memory == "none":
            raise _no_saved_error()
        if torch.is_grad_enabled():  # create_graph=True: the backward op, whose own autograd is the HVP
            _check_create_graph(ctx.backend)
            dC, dgamma, _ = backward_cost(grad_value.contiguous(), C, gamma, x_lengths, y_lengths, window, value,
                                          saved, ctx.memory, ctx.backend)
            return dC, dgamma.sum().reshape(gamma.shape), None
        if not grad_value.is_contiguous():
            grad_value = grad_value.contiguous()
        dC, dgamma = get_backend(ctx.backend).backward_cost(
            grad_value, C, gamma, x_lengths, y_lengths, window, value, saved, ctx.memory)
        need = ctx.needs_input_grad
        return (dC if need[0] else None, dgamma.sum().reshape(gamma.shape) if need[1] else None, None)


class _FusedVariant(torch.autograd.Function):
    """_Fused with alignment-variant options (open_begin, open_end, step_penalty), differentiable in the step
    penalty too. A separate Function so that calls without the options keep _Fused's path unchanged."""

    @staticmethod
    def forward(ctx, x, y, gamma, step_penalty, meta):
        cost, x_lengths, y_lengths, window, memory, backend, open_begin, open_end = meta
        value, saved = variant_backend(backend, open_begin, open_end, step_penalty).forward(
            x, y, gamma, cost, x_lengths, y_lengths, window, memory, open_begin=open_begin, open_end=open_end,
            step_penalty=step_penalty)
        ctx.cost, ctx.memory, ctx.backend = cost, memory, backend
        ctx.open_begin, ctx.open_end = open_begin, open_end
        ctx.save_for_backward(x, y, gamma, x_lengths, y_lengths, window, value, saved, step_penalty)
        return value

    @staticmethod
    def backward(ctx, grad_value):
        x, y, gamma, x_lengths, y_lengths, window, value, saved, step_penalty = ctx.saved_tensors
        if ctx.memory == "none":
            raise _no_saved_error()
        _check_create_graph(ctx.backend, (ctx.open_begin, ctx.open_end, step_penalty))
        if torch.is_grad_enabled():  # create_graph=True: the backward op, whose own autograd is the HVP
            out = backward(grad_value.contiguous(), x, y, gamma, ctx.cost, x_lengths, y_lengths, window, value, saved,
                           ctx.memory, ctx.backend, ctx.open_begin, ctx.open_end, step_penalty)
        else:
            out = get_backend(ctx.backend).backward(
                grad_value.contiguous(), x, y, gamma, ctx.cost, x_lengths, y_lengths, window, value, saved,
                ctx.memory, open_begin=ctx.open_begin, open_end=ctx.open_end, step_penalty=step_penalty)
        need = ctx.needs_input_grad
        dpen = out[3].sum().reshape(step_penalty.shape) if step_penalty is not None and need[3] else None
        return (out[0] if need[0] else None, out[1] if need[1] else None,
                out[2].sum().reshape(gamma.shape) if need[2] else None, dpen, None)


class _FromCostVariant(torch.autograd.Function):
    """_FromCost with alignment-variant options, as :class:`_FusedVariant`."""

    @staticmethod
    def forward(ctx, C, gamma, step_penalty, meta):
        x_lengths, y_lengths, window, memory, backend, open_begin, open_end = meta
        value, saved = variant_backend(backend, open_begin, open_end, step_penalty).forward_cost(
            C, gamma, x_lengths, y_lengths, window, memory, open_begin=open_begin, open_end=open_end,
            step_penalty=step_penalty)
        ctx.memory, ctx.backend = memory, backend
        ctx.open_begin, ctx.open_end = open_begin, open_end
        ctx.save_for_backward(C, gamma, x_lengths, y_lengths, window, value, saved, step_penalty)
        return value

    @staticmethod
    def backward(ctx, grad_value):
        C, gamma, x_lengths, y_lengths, window, value, saved, step_penalty = ctx.saved_tensors
        if ctx.memory == "none":
            raise _no_saved_error()
        _check_create_graph(ctx.backend, (ctx.open_begin, ctx.open_end, step_penalty))
        if torch.is_grad_enabled():  # create_graph=True: the backward op, whose own autograd is the HVP
            out = backward_cost(grad_value.contiguous(), C, gamma, x_lengths, y_lengths, window, value, saved,
                                ctx.memory, ctx.backend, ctx.open_begin, ctx.open_end, step_penalty)
        else:
            out = get_backend(ctx.backend).backward_cost(
                grad_value.contiguous(), C, gamma, x_lengths, y_lengths, window, value, saved, ctx.memory,
                open_begin=ctx.open_begin, open_end=ctx.open_end, step_penalty=step_penalty)
        need = ctx.needs_input_grad
        dpen = out[2].sum().reshape(step_penalty.shape) if step_penalty is not None and need[2] else None
        return (out[0] if need[0] else None, out[1].sum().reshape(gamma.shape) if need[1] else None, dpen, None)


# autograd's C++ apply of each Function (what Function.apply ends in), bound once.
_fused_apply = super(torch.autograd.Function, _Fused).apply
_from_cost_apply = super(torch.autograd.Function, _FromCost).apply
_fused_grad_apply = super(torch.autograd.Function, _FusedGrad).apply
_transforms_active = torch._C._are_functorch_transforms_active


def fused_grad_for_launcher(grad, x, y, gamma, cost, x_lengths, y_lengths, value, saved, memory="store",
                            need_x=True, need_y=True):
    """The Python backward of the cuda C++ launcher's node (fastpath.cpp, set_grad_fn), for its calls (no window):
    with create_graph=True what _Fused's takes (differentiable, the HVP behind it); otherwise the backend's backward,
    as _Fused.backward runs it (an unused gradient None, its work skipped): a checkpointed call's (memory
    "checkpoint"), or a stored one whose backward ran out of memory in C++ (it raises the MemoryError naming the
    sizes, or fits now)."""
    if torch.is_grad_enabled():
        return _fused_grad_apply(grad, x, y, gamma, (cost, x_lengths, y_lengths, None, value, saved, memory, "cuda"))
    dx, dy, _ = get_backend("cuda").backward(grad, x, y, gamma, cost, x_lengths, y_lengths, None, value, saved,
                                             memory, needs=(need_x, need_y, False))
    return (dx if need_x else None), (dy if need_y else None)


class _FusedTwoEnded(torch.autograd.Function):
    """_Fused for the cuda backend's calls with a gradient run from both ends (backends/cuda/two_ended.py: a float
    gamma > 0, no band or variant, pairs long enough; memory "store" or "checkpoint"; the C++ launcher's two-ended
    plans launch the same kernels as a storing call here, so the two paths agree bitwise). A create_graph=True backward
    takes _Fused's differentiable one (one-ended, its forward run again in the call's memory mode)."""

    @staticmethod
    def forward(ctx, x, y, gamma, meta):
        from .backends.cuda import two_ended

        cost, x_lengths, y_lengths, memory = meta
        value, kept = two_ended.forward_saving(x, y, gamma, cost, x_lengths, y_lengths, memory)
        ctx.cost, ctx.memory = cost, memory
        ctx.save_for_backward(x, y, gamma, x_lengths, y_lengths, value, *kept)
        return value

    @staticmethod
    def backward(ctx, grad_value):
        from .backends.cuda import two_ended

        x, y, gamma, x_lengths, y_lengths, value, *kept = ctx.saved_tensors
        grad_value = grad_value.contiguous()
        need = ctx.needs_input_grad
        if torch.is_grad_enabled():  # create_graph=True
            _check_create_graph("cuda")
            # the one-ended forward's saved buffer: none for "store" (the backward stores again), its own checkpoints
            # for "checkpoint" (a stored table is what checkpointing avoids)
            saved = x.new_empty((0,)) if ctx.memory == "store" else get_backend("cuda").forward(
                x, y, gamma, ctx.cost, x_lengths, y_lengths, None, ctx.memory)[1]
            dx, dy, _ = _fused_grad_apply(grad_value, x, y, gamma, (ctx.cost, x_lengths, y_lengths, None, value,
                                                                    saved, ctx.memory, "cuda"))
        else:
            dx, dy = two_ended.backward(grad_value, x, y, gamma, ctx.cost, x_lengths, y_lengths, tuple(kept),
                                        ctx.memory)
        return (dx if need[0] else None), (dy if need[1] else None), None, None


def two_ended_applies(x, y, cost, backend, memory: str = "store") -> bool:
    """Whether a call with a gradient (memory "store" or "checkpoint"), a float gamma > 0, no band and no alignment
    variant runs from both ends (the cuda backend's two_ended.applies_grad; not under torch.compile or a functorch
    transform, whose graphs hold the ops)."""
    if backend != "cuda" or not x.is_cuda or x.dim() != 3 or torch.compiler.is_compiling() or _transforms_active():
        return False
    from .backends.cuda import FUSED_D_MAX, two_ended

    B, N, D = x.shape
    if D > FUSED_D_MAX or x.dtype not in (torch.float32, torch.float64) or y.dtype != x.dtype:
        return False
    return two_ended.applies_grad(B, N, y.shape[1], D, x.dtype, x.get_device(), memory)


def fused_two_ended(x, y, gamma, cost, x_lengths, y_lengths, memory: str = "store") -> Tensor:
    """Soft-DTW values `(B,)` from both ends, differentiable in x and y (:class:`_FusedTwoEnded`). Where the halves'
    table (or checkpoints) does not fit, the one-ended call runs instead: it fits, or raises the MemoryError naming
    the call's own sizes (the halves' would name 2B pairs of half the rows)."""
    try:
        return _FusedTwoEnded.apply(x.contiguous(), y.contiguous(), gamma, (cost, x_lengths, y_lengths, memory))
    except MemoryError:
        return fused_value(x, y, gamma, cost, x_lengths, y_lengths, None, memory, "cuda")


def fused_value(x, y, gamma, cost, x_lengths, y_lengths, window, memory, backend, variant=None) -> Tensor:
    """Soft-DTW values `(B,)` with a fused cost, differentiable in x, y, gamma (and the step penalty).

    variant: None (the plain DP), or (open_begin, open_end, step_penalty: a 0-d tensor of x's dtype and device
    or None), with at least one option set (see softdtw/backends/reference.py)."""
    if variant is not None:
        if torch.compiler.is_compiling():
            return forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory, backend, *variant)[0]
        meta = (cost, x_lengths, y_lengths, window, memory, backend, variant[0], variant[1])
        return _FusedVariant.apply(x, y, gamma, variant[2], meta)
    if torch.compiler.is_compiling():
        return forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory, backend)[0]
    meta = (cost, x_lengths, y_lengths, window, memory, backend)
    if _transforms_active():  # vmap, grad, ...: the Python apply handles them
        return _Fused.apply(x, y, gamma, meta)
    return _fused_apply(x, y, gamma, meta)


def cost_value(C, gamma, x_lengths, y_lengths, window, memory, backend, variant=None) -> Tensor:
    """Soft-DTW values `(B,)` of a precomputed cost, differentiable in C and gamma (and the step penalty);
    variant as in :func:`fused_value`."""
    if variant is not None:
        if torch.compiler.is_compiling():
            return forward_cost(C, gamma, x_lengths, y_lengths, window, memory, backend, *variant)[0]
        meta = (x_lengths, y_lengths, window, memory, backend, variant[0], variant[1])
        return _FromCostVariant.apply(C, gamma, variant[2], meta)
    if torch.compiler.is_compiling():
        return forward_cost(C, gamma, x_lengths, y_lengths, window, memory, backend)[0]
    meta = (x_lengths, y_lengths, window, memory, backend)
    if _transforms_active():
        return _FromCost.apply(C, gamma, meta)
    return _from_cost_apply(C, gamma, meta)


# --- memory mode -----------------------------------------------------------------------------------

# Tables below this size are stored without asking how much memory is free (a driver call per step).
_SMALL_TABLE = 64 << 20


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return _host_free_bytes()


def _host_free_bytes() -> int:
    """Bytes a large host allocation can get: Linux's MemAvailable (free pages plus reclaimable
    page cache: free pages alone, SC_AVPHYS_PAGES, are near zero on a machine that has read a
    lot of files), capped by the memory cgroup's limit less its usage (containers)."""
    free = _meminfo("MemAvailable:", "SC_AVPHYS_PAGES")
    if free is None:
        return 1 << 62
    room = _cgroup_room()
    return free if room is None else min(free, room)


def _meminfo(key: str, pages: str) -> Optional[int]:
    """Bytes of a /proc/meminfo field ("MemAvailable:", "MemTotal:"), else os.sysconf(pages) pages, else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room() -> Optional[int]:
    """Limit less usage of this process's memory cgroup (v2 or v1), or None without a limit."""
    found = _cgroup_memory()
    return None if found is None else max(found[0] - found[1], 0)


def _total_bytes(device: torch.device) -> int:
    """All the memory a call could ever get on ``device``: the GPU's total, or the host's RAM capped by
    the memory cgroup's limit. A mode whose buffers exceed it raises at once (no attempt to allocate)."""
    if device.type == "cuda":  # the device's properties, cached by PyTorch: mem_get_info is a driver call (~0.1 ms)
        return torch.cuda.get_device_properties(device).total_memory
    total = _meminfo("MemTotal:", "SC_PHYS_PAGES")
    if total is None:
        return 1 << 62
    found = _cgroup_memory()
    return total if found is None else min(total, found[0])


def _cgroup_memory() -> Optional[tuple[int, int]]:
    """(limit, usage) of this process's memory cgroup (v2 or v1), or None without a limit."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # v2
            names, root = ("memory.max", "memory.current"), "/sys/fs/cgroup"
        elif "memory" in controllers.split(","):  # v1
            names, root = ("memory.limit_in_bytes", "memory.usage_in_bytes"), "/sys/fs/cgroup/memory"
        else:
            continue
        # The process's own group, or the mount root when a cgroup namespace hides the path.
        for folder in (root + path, root):
            try:
                with open(os.path.join(folder, names[0])) as f:
                    limit = f.read().strip()
                with open(os.path.join(folder, names[1])) as f:
                    usage = int(f.read().strip())
            except (OSError, ValueError):
                continue
            if limit == "max" or int(limit) >= 1 << 60:  # no limit
                break
            return int(limit), usage
    return None


def _mode_bytes(module, mode: str, kind: str, B: int, N: int, M: int, D: int, dtype: torch.dtype) -> int:
    """What running with ``mode`` allocates for the backward: the saved buffer, plus the backend's
    optional ``working_bytes`` (e.g. cuda's whole large-D cost when storing, the cpu's recomputed band
    when checkpointing)."""
    shape, sdtype = module.saved_spec(kind, B, N, M, D, dtype, mode)
    need = math.prod(shape) * sdtype.itemsize
    working = getattr(module, "working_bytes", None)
    if working is not None:
        need += working(kind, B, N, M, D, dtype, mode)
    return need


def _too_big(mode: str, need: int, backend: str, device: torch.device, B: int, N: int, M: int,
             modes, store_need: Optional[int] = None) -> MemoryError:
    """The MemoryError for a mode whose buffers can never fit: the sizes, the need, the ways around."""
    total = _total_bytes(device)
    where = "the GPU has" if device.type == "cuda" else "this machine has"
    what = {"store": "storing the backward table", "checkpoint": "checkpointing the backward (the "
            "checkpoint rows and one recomputed band)"}[mode]
    ways = ["a smaller batch or shorter series", "values only under torch.no_grad() (no table at all)"]
    if mode == "store" and "checkpoint" in modes:
        ways.insert(0, "memory='checkpoint' (it keeps about sqrt(N) rows)")
    before = "" if store_need is None else (
        f"storing would need {store_need / 2**30:.1f} GiB, so memory='auto' checkpoints, and ")
    return MemoryError(
        f"soft-DTW with gradients for B={B} pair(s) of lengths N={N}, M={M} on the {backend} backend: "
        f"{before}{what} needs {need / 2**30:.1f} GiB, but {where} {total / 2**30:.1f} GiB in all. "
        f"Use {', or '.join(ways)}."
    )


def resolve_memory(memory: str, needs_grad: bool, backend: str, kind: str, B: int, N: int, M: int, D: int,
                   dtype: torch.dtype, device: torch.device) -> str:
    """The memory mode the ops run with: "none" when no gradient is needed, else store or checkpoint.

    "auto" stores the backward table (with what storing needs besides it, the backend's optional
    ``working_bytes``) when it takes at most half of the free memory (device memory
    on a GPU, available host memory on the CPU: see _host_free_bytes), else checkpoints. A backend
    that cannot checkpoint yet turns a table that does not fit into an error naming the sizes. Any
    mode whose buffers exceed all the device's memory (:func:`_total_bytes`) raises a MemoryError
    naming the sizes before anything is allocated.
    """
    if not needs_grad:
        return "none"
    if torch.compiler.is_compiling():
        # No free-memory query inside a traced graph (sizes may be symbolic); "auto" stores.
        return "store" if memory == "auto" else memory
    key = (memory, backend, kind, B, N, M, D, dtype)
    known = _RESOLVED.get(key)
    if known is not None and known[1] <= _SMALL_TABLE:
        return known[0]
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return "store" if memory == "auto" else memory  # no free-memory query inside a CUDA-graph capture
    mode = _resolve(memory, backend, kind, B, N, M, D, dtype, device)
    asked = "store" if memory == "auto" else memory
    need = _mode_bytes(get_backend(backend), asked, kind, B, N, M, D, dtype)
    if need <= _SMALL_TABLE:
        # Decided without asking how much memory is free or there is: a pure function of the key, kept (a
        # training step asks with the same sizes every time).
        if len(_RESOLVED) >= 1024:
            _RESOLVED.clear()
        _RESOLVED[key] = (mode, need)
    return mode


#: resolve_memory's answers (mode, bytes asked) for tables below _SMALL_TABLE, per (memory, backend, kind, sizes,
#: dtype).
_RESOLVED: dict = {}


def _resolve(memory: str, backend: str, kind: str, B: int, N: int, M: int, D: int, dtype: torch.dtype,
             device: torch.device) -> str:
    module = get_backend(backend)
    modes = getattr(module, "MEMORY_MODES", ("none", "store"))
    if memory == "auto":
        need = _mode_bytes(module, "store", kind, B, N, M, D, dtype)
        if need <= _SMALL_TABLE:
            return "store"
        free = _free_bytes(device)
        if need <= free // 2:
            return "store"
        if "checkpoint" in modes:
            ckpt = _mode_bytes(module, "checkpoint", kind, B, N, M, D, dtype)
            if ckpt > _SMALL_TABLE and ckpt > _total_bytes(device):
                raise _too_big("checkpoint", ckpt, backend, device, B, N, M, modes, need)
            return "checkpoint"
        raise MemoryError(
            f"storing the backward table for B={B}, N={N}, M={M} needs {need / 2**30:.1f} GiB but "
            f"{free / 2**30:.1f} GiB are free, and the {backend} backend cannot checkpoint yet. Use a "
            f"smaller batch (or shorter series), or compute values only under torch.no_grad()."
        )
    if memory not in modes:
        routed = (" Inputs too large for the cpu or cuda kernels to hold exactly run on the reference backend "
                  "(softdtw._checks.REACH_LIMIT)." if backend == "reference" else "")
        raise NotImplementedError(
            f"memory={memory!r} is not available on the {backend} backend yet (it supports "
            f"{tuple(m for m in modes if m != 'none')}); use memory='auto'.{routed}"
        )
    need = _mode_bytes(module, memory, kind, B, N, M, D, dtype)
    if need > _SMALL_TABLE and need > _total_bytes(device):
        raise _too_big(memory, need, backend, device, B, N, M, modes)
    return memory
