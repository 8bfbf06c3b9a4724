"""torch autograd for the norms and rope: ``torch.library`` ops for the forwards that save
statistics and for the backwards, and ``register_autograd`` on every norm and rope op.

* ``kaio::rms_norm_fwd`` -> (y, rstd), ``kaio::add_rms_norm_fwd`` -> (y, h, rstd),
  ``kaio::layer_norm_fwd`` -> (y, mean, rstd): the forwards with their per-row f32 statistics
  (shape ``x.shape[:-1]``), which are all the backward saves besides the inputs it reads
  (x, or h in the residual form, and the weight). ``rms_norm`` / ``layer_norm`` called with
  tensors that require grad run these.
* ``kaio::rms_norm_backward``, ``kaio::layer_norm_backward``, ``kaio::rope_backward``: the
  backward kernels, so a compiled graph's backward holds kaio ops too. A weight or bias
  gradient that is not wanted comes back as a ``(0,)`` tensor (a schema has no optional
  outputs).
* ``torch.ops.kaio.rms_norm`` / ``add_rms_norm`` / ``layer_norm`` called directly (their
  schemas return no statistics) recompute the statistics in the backward with the ``_fwd`` op:
  one more read of x. ``kaio::rope``'s backward is the rotation back; gradients of ``cos`` and
  ``sin`` (rarely trained) are computed with torch ops.

The backward ops have no backward of their own: a second derivative raises torch's error.
``register()`` defines them (after ``torch_ops``' forwards: ``torch_registration``'s order);
importing this module imports torch and registers nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from kaio.ops_library import norms_backward
from kaio.ops_library.autograd import define_op, op_device, register_autograd
from kaio.ops_library.norms import run_layer_norm, run_rms_norm
from kaio.ops_library.rope import run as run_rope
from kaio.ops_library.rope import take_operands as take_rope_operands
from kaio.ops_library.torch_checks import TensorMetadata, check_layer_norm, check_rms_norm


def register() -> None:
    define_op("kaio::rms_norm_fwd", _rms_norm_fwd, _rms_norm_fwd_fake)
    define_op("kaio::add_rms_norm_fwd", _add_rms_norm_fwd, _add_rms_norm_fwd_fake)
    define_op("kaio::layer_norm_fwd", _layer_norm_fwd, _layer_norm_fwd_fake)
    define_op("kaio::rms_norm_backward", _rms_norm_backward, _rms_norm_backward_fake)
    define_op("kaio::layer_norm_backward", _layer_norm_backward, _layer_norm_backward_fake)
    define_op("kaio::rope_backward", _rope_backward, _rope_backward_fake)
    register_autograd("kaio::rms_norm_fwd", _backward_rms_norm_fwd, _setup_rms_norm_fwd)
    register_autograd("kaio::add_rms_norm_fwd", _backward_add_rms_norm_fwd, _setup_add_rms_norm_fwd)
    register_autograd("kaio::layer_norm_fwd", _backward_layer_norm_fwd, _setup_layer_norm_fwd)
    register_autograd("kaio::rms_norm", _backward_rms_norm, _setup_rms_norm)
    register_autograd("kaio::add_rms_norm", _backward_add_rms_norm, _setup_add_rms_norm)
    register_autograd("kaio::layer_norm", _backward_layer_norm, _setup_layer_norm)
    register_autograd("kaio::rope", _backward_rope, _setup_rope)


def _stats(x: Tensor) -> Tensor:
    return x.new_empty(x.shape[:-1], dtype=torch.float32)


def _gradient(grad: Tensor | None, like: Tensor) -> Tensor:
    """An output's incoming gradient as the kernels take it: contiguous, zeros when absent."""
    return torch.zeros_like(like) if grad is None else grad.contiguous()


def _wanted(g: Tensor, param: Tensor | None) -> Tensor | None:
    return g if param is not None else None


# --------------------------------------------------------------------------- forwards with statistics


def _rms_norm_fwd(x: Tensor, weight: Tensor | None, eps: float, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    check_rms_norm(x, weight, eps)
    return run_rms_norm(x, weight, eps, None, op_device(device), save=True)  # type: ignore[no-any-return]


def _rms_norm_fwd_fake(x: Tensor, weight: Tensor | None, eps: float, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    check_rms_norm(x, weight, eps)
    return torch.empty_like(x), _stats(x)


def _add_rms_norm_fwd(x: Tensor, residual: Tensor, weight: Tensor | None,
                      eps: float, *, device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    check_rms_norm(x, weight, eps, residual)
    return run_rms_norm(x, weight, eps, residual, op_device(device), save=True)  # type: ignore[no-any-return]


def _add_rms_norm_fwd_fake(x: Tensor, residual: Tensor, weight: Tensor | None, eps: float, *, device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    check_rms_norm(x, weight, eps, residual)
    return torch.empty_like(x), torch.empty_like(x), _stats(x)


def _layer_norm_fwd(x: Tensor, weight: Tensor | None, bias: Tensor | None,
                    eps: float, *, device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    check_layer_norm(x, weight, bias, eps)
    return run_layer_norm(x, weight, bias, eps, op_device(device), save=True)  # type: ignore[no-any-return]


def _layer_norm_fwd_fake(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, *, device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    check_layer_norm(x, weight, bias, eps)
    return torch.empty_like(x), _stats(x), _stats(x)


# --------------------------------------------------------------------------- backwards


def _check_norm_backward(op: str, grad_y: Tensor, x: Tensor, weight: Tensor | None, bias: Tensor | None,
                         mean: Tensor | None, rstd: Tensor, grad_h: Tensor | None) -> None:  # fmt: skip
    norms_backward.take_operands(TensorMetadata(op), op, grad_y, x, weight, bias, mean, rstd, grad_h)


def _param_grad(g: Any, x: Tensor) -> Tensor:
    return g if g is not None else x.new_empty((0,))


def _rms_norm_backward(grad_y: Tensor, x: Tensor, weight: Tensor | None, rstd: Tensor,
                       grad_h: Tensor | None, *, device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    dx, dw, _ = norms_backward.run_backward("rms_norm_backward", grad_y, x, weight, None, None, rstd, grad_h,
                                            op_device(device))  # fmt: skip
    return dx, _param_grad(dw, x)


def _rms_norm_backward_fake(grad_y: Tensor, x: Tensor, weight: Tensor | None, rstd: Tensor, grad_h: Tensor | None, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    _check_norm_backward("rms_norm_backward", grad_y, x, weight, None, None, rstd, grad_h)
    return torch.empty_like(x), torch.empty_like(weight) if weight is not None else x.new_empty((0,))


def _layer_norm_backward(grad_y: Tensor, x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor,
                         rstd: Tensor, *, device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    dx, dw, db = norms_backward.run_backward("layer_norm_backward", grad_y, x, weight, bias, mean, rstd, None,
                                             op_device(device))  # fmt: skip
    return dx, _param_grad(dw, x), _param_grad(db, x)


def _layer_norm_backward_fake(grad_y: Tensor, x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor,
                              rstd: Tensor, *, device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    _check_norm_backward("layer_norm_backward", grad_y, x, weight, bias, mean, rstd, None)
    vector = (x.shape[-1],)
    return (torch.empty_like(x), x.new_empty(vector if weight is not None else (0,)),
            x.new_empty(vector if bias is not None else (0,)))  # fmt: skip


def _rope_backward(grad_out: Tensor, cos: Tensor, sin: Tensor, interleaved: bool, layout: str | None, *, device: str | None = None) -> Tensor:
    return run_rope(grad_out, cos, sin, interleaved, layout, op_device(device), inverse=True)  # type: ignore[no-any-return]


def _rope_backward_fake(grad_out: Tensor, cos: Tensor, sin: Tensor, interleaved: bool, layout: str | None, *, device: str | None = None) -> Tensor:
    op = "rope_backward"
    take_rope_operands(TensorMetadata(op), op, "grad_out", grad_out, cos, sin, layout)
    return torch.empty_like(grad_out)


# --------------------------------------------------------------------------- autograd: rms_norm


def _rms_backward(ctx: Any, grad_y: Tensor | None, h: Tensor, weight: Tensor | None, rstd: Tensor,
                  grad_h: Tensor | None, weight_index: int) -> tuple[Any, Any]:  # fmt: skip
    """(d h, d weight) of ``y = rms_norm(h) * weight``, ``grad_h`` (the residual form) added."""
    gh = None if grad_h is None else grad_h.contiguous()
    dh, dw = torch.ops.kaio.rms_norm_backward(_gradient(grad_y, h), h, weight, rstd, gh, device=ctx.kaio_device)
    return dh, _wanted(dw, weight) if ctx.needs_input_grad[weight_index] else None


def _setup_rms_norm_fwd(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, weight, _ = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(x, weight, output[1])


def _backward_rms_norm_fwd(ctx: Any, grad_y: Tensor | None, _grad_rstd: Tensor | None) -> tuple[Any, ...]:
    x, weight, rstd = ctx.saved_tensors
    return *_rms_backward(ctx, grad_y, x, weight, rstd, None, 1), None


def _setup_add_rms_norm_fwd(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _, _, weight, _ = inputs
    _, h, rstd = output
    ctx.mark_non_differentiable(rstd)
    ctx.save_for_backward(h, weight, rstd)


def _backward_add_rms_norm_fwd(ctx: Any, grad_y: Tensor | None, grad_h: Tensor | None,
                               _grad_rstd: Tensor | None) -> tuple[Any, ...]:  # fmt: skip
    h, weight, rstd = ctx.saved_tensors
    dh, dw = _rms_backward(ctx, grad_y, h, weight, rstd, grad_h, 2)
    return dh, dh, dw, None  # h = x + residual: both get dh


def _setup_rms_norm(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _backward_rms_norm(ctx: Any, grad_y: Tensor | None) -> tuple[Any, ...]:
    x, weight = ctx.saved_tensors
    _, rstd = torch.ops.kaio.rms_norm_fwd(x, weight, ctx.eps, device=ctx.kaio_device)  # the schema saved none
    return *_rms_backward(ctx, grad_y, x, weight, rstd, None, 1), None


def _setup_add_rms_norm(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _, _, weight, eps = inputs
    ctx.save_for_backward(output[1], weight)
    ctx.eps = eps


def _backward_add_rms_norm(ctx: Any, grad_y: Tensor | None, grad_h: Tensor | None) -> tuple[Any, ...]:
    h, weight = ctx.saved_tensors
    _, rstd = torch.ops.kaio.rms_norm_fwd(h, weight, ctx.eps, device=ctx.kaio_device)  # of h as stored
    dh, dw = _rms_backward(ctx, grad_y, h, weight, rstd, grad_h, 2)
    return dh, dh, dw, None


# --------------------------------------------------------------------------- autograd: layer_norm


def _ln_backward(ctx: Any, grad_y: Tensor | None, x: Tensor, weight: Tensor | None, bias: Tensor | None,
                 mean: Tensor, rstd: Tensor) -> tuple[Any, ...]:  # fmt: skip
    dx, dw, db = torch.ops.kaio.layer_norm_backward(_gradient(grad_y, x), x, weight, bias, mean, rstd,
                                                    device=ctx.kaio_device)
    want = ctx.needs_input_grad
    return dx, _wanted(dw, weight) if want[1] else None, _wanted(db, bias) if want[2] else None, None


def _setup_layer_norm_fwd(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, weight, bias, _ = inputs
    _, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)
    ctx.save_for_backward(x, weight, bias, mean, rstd)


def _backward_layer_norm_fwd(ctx: Any, grad_y: Tensor | None, _gm: Tensor | None, _gr: Tensor | None) -> tuple[Any, ...]:
    return _ln_backward(ctx, grad_y, *ctx.saved_tensors)


def _setup_layer_norm(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.eps = eps


def _backward_layer_norm(ctx: Any, grad_y: Tensor | None) -> tuple[Any, ...]:
    x, weight, bias = ctx.saved_tensors
    # the schema saved no statistics: recompute them
    _, mean, rstd = torch.ops.kaio.layer_norm_fwd(x, weight, bias, ctx.eps, device=ctx.kaio_device)
    return _ln_backward(ctx, grad_y, x, weight, bias, mean, rstd)


# --------------------------------------------------------------------------- autograd: rope


def _setup_rope(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, cos, sin, interleaved, layout = inputs
    tables = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
    ctx.save_for_backward(x if tables else None, cos, sin)
    ctx.interleaved, ctx.layout = interleaved, layout


def _backward_rope(ctx: Any, grad: Tensor | None) -> tuple[Any, ...]:
    x, cos, sin = ctx.saved_tensors
    if grad is None:
        return None, None, None, None, None
    g = grad.contiguous()
    dx = None
    if ctx.needs_input_grad[0]:
        dx = torch.ops.kaio.rope_backward(g, cos, sin, ctx.interleaved, ctx.layout, device=ctx.kaio_device)
    dcos = dsin = None
    if x is not None:
        dcos, dsin = _rope_table_grads(g, x, cos, ctx.interleaved, ctx.layout)
    return dx, dcos, dsin, None, None


def _rope_table_grads(g: Tensor, x: Tensor, cos: Tensor, interleaved: bool,
                      layout: str | None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """d cos and d sin (S, D/2): each pair's ``(ga a + gb b, gb a - ga b)`` summed over the
    batch and the heads (torch ops: tables are rarely trained)."""
    from kaio.ops_library.rope import _layout

    lay = _layout(tuple(x.shape), cos.shape[0], layout)
    g, x = g.float(), x.float()
    half = x.shape[-1] // 2
    a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :half], x[..., half:])
    ga, gb = (g[..., 0::2], g[..., 1::2]) if interleaved else (g[..., :half], g[..., half:])
    over = (0, 2) if lay == "bshd" else (0, 1)  # batch and heads
    dcos = (ga * a + gb * b).sum(over)
    dsin = (gb * a - ga * b).sum(over)
    return dcos.to(cos.dtype), dsin.to(cos.dtype)
