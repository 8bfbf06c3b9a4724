"""``torch.ops.kaio.matmul`` (f32 result), ``matmul_out`` (writes ``out``) and
``matmul_backward`` (dA, dB and dbias in one op), with matmul's autograd: the backward
recomputes the pre-activation of a fused epilogue rather than saving it. The fakes run the real
op's checks on the tensors' metadata (``torch_checks.check_matmul``). Registered by
``torch_registration``; importing it imports torch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from kaio.ops_library.autograd import define_op, op_device, register_autograd
from kaio.ops_library.torch_checks import check_matmul


def register() -> None:
    matmul = define_op("kaio::matmul", _matmul, _matmul_fake)
    define_op("kaio::matmul_backward", _matmul_backward, _matmul_backward_fake)
    register_autograd(matmul, _matmul_grad, _matmul_setup)
    define_op("kaio::matmul_out", _matmul_out, _matmul_out_fake, mutates_args=("out",))


def _matmul(
    a: Tensor, b: Tensor, alpha: float = 1.0, beta: float = 0.0, config: str | None = None,
    bias: Tensor | None = None, activation: str | None = None, *, device: str | None = None,
) -> Tensor:  # fmt: skip
    from kaio.ops_library import matmul

    check_matmul(a, b, bias, activation)
    return matmul.run(a, b, alpha=alpha, beta=beta, config=config, bias=bias, activation=activation,  # type: ignore[no-any-return]
                      device=op_device(device))  # fmt: skip


def _matmul_fake(a: Tensor, b: Tensor, alpha: float = 1.0, beta: float = 0.0, config: str | None = None,
                 bias: Tensor | None = None, activation: str | None = None, *, device: str | None = None,
                 ) -> Tensor:  # fmt: skip
    check_matmul(a, b, bias, activation)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.float32)


def _matmul_backward(grad: Tensor, a: Tensor, b: Tensor, alpha: float, bias_dtype: torch.dtype | None, *,
                     device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """dA, dB and dbias (an empty tensor without a bias) of ``alpha * A @ B + bias``."""
    from kaio.ops_library.matmul_backward import matmul_backward
    from kaio.runtime import tensors

    bias = None if bias_dtype is None else tensors.kaio_type(bias_dtype)
    da, db, dbias = matmul_backward(grad, a, b, alpha=alpha, bias=bias, device=op_device(device))
    return da, db, dbias if dbias is not None else grad.new_empty((0,))


def _matmul_backward_fake(grad: Tensor, a: Tensor, b: Tensor, alpha: float, bias_dtype: torch.dtype | None, *,
                          device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    check_matmul(a, b, None, None)
    n = b.shape[1] if bias_dtype is not None else 0
    return torch.empty_like(a), torch.empty_like(b), grad.new_empty((n,), dtype=bias_dtype or grad.dtype)


def _activation_slope(pre: Tensor, activation: str) -> Tensor:
    """d act / d pre for the fused epilogue's activations (gelu in tanh form, as the kernel)."""
    if activation == "relu":
        return (pre > 0).to(pre.dtype)
    if activation == "silu":
        s = torch.sigmoid(pre)
        return s * (1 + pre * (1 - s))
    k = 0.7978845608028654
    t = torch.tanh(k * (pre + 0.044715 * pre**3))
    return 0.5 * (1 + t) + 0.5 * pre * (1 - t * t) * k * (1 + 3 * 0.044715 * pre * pre)


def _matmul_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    a, b, alpha, _beta, config, bias, activation = inputs  # beta scales a C that is zero here
    ctx.alpha, ctx.config, ctx.activation = alpha, config, activation
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.save_for_backward(a, b, bias)


def _matmul_grad(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    a, b, bias = ctx.saved_tensors
    grad = grad.contiguous()
    if ctx.activation is not None:  # the pre-activation, recomputed rather than saved
        pre = torch.ops.kaio.matmul(a, b, ctx.alpha, 0.0, ctx.config, bias, None, device=ctx.kaio_device)
        grad = grad * _activation_slope(pre, ctx.activation)
    da, db, dbias = torch.ops.kaio.matmul_backward(grad, a, b, ctx.alpha, ctx.bias_dtype, device=ctx.kaio_device)
    return da, db, None, None, None, (dbias if bias is not None else None), None


def _matmul_out(
    a: Tensor,
    b: Tensor,
    out: Tensor,
    alpha: float = 1.0,
    beta: float = 0.0,
    config: str | None = None,
    bias: Tensor | None = None,
    activation: str | None = None,
    *,
    device: str | None = None,
) -> None:
    from kaio.ops_library import matmul

    check_matmul(a, b, bias, activation)
    matmul.run(a, b, out, alpha=alpha, beta=beta, config=config, bias=bias, activation=activation,
               device=op_device(device))  # fmt: skip


def _matmul_out_fake(a: Tensor, b: Tensor, out: Tensor, alpha: float = 1.0, beta: float = 0.0,
                     config: str | None = None, bias: Tensor | None = None, activation: str | None = None, *,
                     device: str | None = None) -> None:  # fmt: skip
    check_matmul(a, b, bias, activation)  # out's shape, type and overlap: the real op only
    return None
