"""``torch.ops.kaio.dropout``: dropout (and dropout + residual) as a custom op with autograd.
The backward regenerates the mask from the seed (``dropout(grad, p, seed)``; the residual's
gradient is ``grad``), so nothing but p and the seed is saved. The seed travels as int64 (its
two's-complement bits; the kernel reads them as u64).
``register()`` defines the ops (``torch_registration`` runs it); importing this imports torch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from kaio.ops_library.autograd import define_op, op_device, register_autograd
from kaio.ops_library.dropout import check, run
from kaio.ops_library.torch_checks import TensorMetadata


def register() -> None:
    define_op("kaio::dropout", _dropout, _dropout_fake)
    register_autograd("kaio::dropout", _grad, _setup)


def _name(residual: Tensor | None) -> str:
    return "dropout" if residual is None else "dropout_add"


def _dropout(x: Tensor, residual: Tensor | None, p: float, seed: int, *, device: str | None = None) -> Tensor:
    return run(_name(residual), x, residual, p, seed % (1 << 64), op_device(device))  # type: ignore[no-any-return]


def _dropout_fake(x: Tensor, residual: Tensor | None, p: float, seed: int, *, device: str | None = None) -> Tensor:
    check(TensorMetadata(_name(residual)), _name(residual), x, residual)
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    _, residual, ctx.p, ctx.seed = inputs
    ctx.has_residual = residual is not None


def _grad(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    grad = grad.contiguous()
    dx = torch.ops.kaio.dropout(grad, None, ctx.p, ctx.seed, device=ctx.kaio_device) if ctx.p > 0 else grad
    return dx, grad if ctx.has_residual else None, None, None
