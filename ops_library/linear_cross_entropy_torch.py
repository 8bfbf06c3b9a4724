"""``torch.ops.kaio.linear_cross_entropy`` and its backward op, registered for autograd.

The forward returns the per-token losses and log-sum-exps; autograd saves ``x``, ``weight``,
``targets``, ``bias`` and the log-sum-exps (no logits, no gradients: the backward recomputes a
chunk's logits), and the backward op takes both outputs' gradients. The fakes run the real
op's checks on the tensors' metadata (``torch_checks.TensorMetadata``). ``chunk`` 0 is the
default chunk (the schema has no optional int).
``register()`` defines the ops (``torch_registration`` runs it); importing this imports torch.
"""

from __future__ import annotations

from typing import Any

import torch
from kaio.ops_library.autograd import define_op, op_device, register_autograd
from kaio.ops_library.linear_cross_entropy import OP, backward, check, check_saved, forward
from kaio.ops_library.torch_checks import TensorMetadata
from torch import Tensor


def register() -> None:
    define_op("kaio::linear_cross_entropy", _linear_cross_entropy, _linear_cross_entropy_fake)
    define_op("kaio::linear_cross_entropy_backward", _linear_cross_entropy_backward, _linear_cross_entropy_backward_fake)
    register_autograd("kaio::linear_cross_entropy", _grad, _setup)


def _chunk(chunk: int) -> int | None:
    return chunk or None


def _linear_cross_entropy(x: Tensor, weight: Tensor, targets: Tensor, bias: Tensor | None, ignore_index: int,
                          chunk: int, *, device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    return forward(x, weight, targets, bias, ignore_index, _chunk(chunk), op_device(device))  # type: ignore[no-any-return]


def _linear_cross_entropy_fake(x: Tensor, weight: Tensor, targets: Tensor, bias: Tensor | None, ignore_index: int,
                               chunk: int, *, device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    check(TensorMetadata(OP), x, weight, targets, bias, ignore_index, _chunk(chunk))
    return x.new_empty(x.shape[:-1], dtype=torch.float32), x.new_empty(x.shape[:-1], dtype=torch.float32)


def _linear_cross_entropy_backward(x: Tensor, weight: Tensor, targets: Tensor, lse: Tensor, grad_loss: Tensor,
                                   grad_lse: Tensor | None, bias: Tensor | None, ignore_index: int,
                                   chunk: int, *, device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """``(dx, dweight, dbias)``; ``dbias`` is empty (0 elements) without a bias."""
    dx, dw, db = backward(x, weight, targets, lse, grad_loss, grad_lse, bias, ignore_index, _chunk(chunk),
                          op_device(device))  # fmt: skip
    return dx, dw, db if db is not None else x.new_empty((0,))


def _linear_cross_entropy_backward_fake(x: Tensor, weight: Tensor, targets: Tensor, lse: Tensor, grad_loss: Tensor, grad_lse: Tensor | None,
                                        bias: Tensor | None, ignore_index: int, chunk: int, *, device: str | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    meta = TensorMetadata(OP)
    inputs = check(meta, x, weight, targets, bias, ignore_index, _chunk(chunk))
    check_saved(meta, inputs, lse, grad_loss, grad_lse)
    db = torch.empty_like(bias) if bias is not None else x.new_empty((0,))
    return torch.empty_like(x), torch.empty_like(weight), db


def _setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    x, weight, targets, bias, ignore_index, chunk = inputs
    ctx.save_for_backward(x, weight, targets, bias, output[1])  # the log-sum-exps, not the logits
    ctx.ignore_index, ctx.chunk = ignore_index, chunk


def _grad(ctx: Any, grad_loss: Tensor, grad_lse: Tensor) -> tuple[Tensor | None, ...]:
    x, weight, targets, bias, lse = ctx.saved_tensors
    dx, dw, db = torch.ops.kaio.linear_cross_entropy_backward(
        x, weight, targets, lse, grad_loss.contiguous(), grad_lse.contiguous(), bias, ctx.ignore_index, ctx.chunk,
        device=ctx.kaio_device,
    )
    return dx, dw, None, db if bias is not None else None, None, None
