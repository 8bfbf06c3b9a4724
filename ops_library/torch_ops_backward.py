"""Autograd for ``torch.ops.kaio.softmax``, ``gated_activation`` and ``cross_entropy``: their
backward kernels as custom ops (``softmax_backward``, ``gated_activation_backward``,
``cross_entropy_backward``), the fused ``cross_entropy_with_grad`` (losses and their gradient
from one row sweep, Liger-Kernel's way) and each op's ``torch.library.register_autograd``.

What is saved for the backward: softmax its output ``y``; the gated activations their input
``x``; ``cross_entropy`` the logits and targets (the backward reads the logits again);
``cross_entropy_with_grad`` only the ``dlogits`` it computed (a logits-sized buffer instead of
a second read). The backward ops themselves have no backward (no second derivatives): calling
them with tensors that require grad is refused by ``kaio.ops_library.autograd``.

``register()`` defines them (after ``torch_ops``' forwards: ``torch_registration``'s order);
importing this module imports torch and registers nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from kaio.ops_library.activations import SILU
from kaio.ops_library.activations_backward import check as check_gated_backward
from kaio.ops_library.activations_backward import run as run_gated_backward
from kaio.ops_library.cross_entropy import check as check_cross_entropy
from kaio.ops_library.cross_entropy import run as run_cross_entropy
from kaio.ops_library.softmax_backward import check as check_softmax_backward
from kaio.ops_library.softmax_backward import run as run_softmax_backward
from kaio.ops_library.autograd import define_op, op_device, register_autograd
from kaio.ops_library.torch_checks import TensorMetadata


def register() -> None:
    define_op("kaio::softmax_backward", _softmax_backward, _softmax_backward_fake)
    register_autograd("kaio::softmax", _softmax_grad, _softmax_setup)
    define_op("kaio::gated_activation_backward", _gated_backward, _gated_backward_fake)
    register_autograd("kaio::gated_activation", _gated_grad, _gated_setup)
    define_op("kaio::cross_entropy_backward", _cross_entropy_backward, _cross_entropy_backward_fake)
    register_autograd("kaio::cross_entropy", _cross_entropy_grad, _cross_entropy_setup)
    define_op("kaio::cross_entropy_with_grad", _cross_entropy_with_grad, _cross_entropy_with_grad_fake)
    register_autograd("kaio::cross_entropy_with_grad", _with_grad_grad, _with_grad_setup)


# --- softmax ------------------------------------------------------------------------------------


def _softmax_name(log: bool) -> str:
    return "log_softmax_backward" if log else "softmax_backward"


def _softmax_backward(grad_y: Tensor, y: Tensor, log: bool, *, device: str | None = None) -> Tensor:
    return run_softmax_backward(_softmax_name(log), grad_y, y, log, op_device(device))  # type: ignore[no-any-return]


def _softmax_backward_fake(grad_y: Tensor, y: Tensor, log: bool, *, device: str | None = None) -> Tensor:
    op = _softmax_name(log)
    check_softmax_backward(TensorMetadata(op), op, grad_y, y)
    return torch.empty_like(y)


def _softmax_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.log = inputs[1] if len(inputs) > 1 else False
    ctx.save_for_backward(output)


def _softmax_grad(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
    (y,) = ctx.saved_tensors
    return torch.ops.kaio.softmax_backward(grad.contiguous(), y, ctx.log, device=ctx.kaio_device), None


# --- silu_and_mul, gelu_and_mul -----------------------------------------------------------------


def _gated_name(act: int) -> str:
    return "silu_and_mul_backward" if act == SILU else "gelu_and_mul_backward"


def _gated_backward(grad_out: Tensor, x: Tensor, act: int, *, device: str | None = None) -> Tensor:
    return run_gated_backward(_gated_name(act), grad_out, x, act, op_device(device))  # type: ignore[no-any-return]


def _gated_backward_fake(grad_out: Tensor, x: Tensor, act: int, *, device: str | None = None) -> Tensor:
    op = _gated_name(act)
    check_gated_backward(TensorMetadata(op), op, grad_out, x)
    return torch.empty_like(x)


def _gated_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, ctx.act = inputs
    ctx.save_for_backward(x)


def _gated_grad(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
    (x,) = ctx.saved_tensors
    return torch.ops.kaio.gated_activation_backward(grad.contiguous(), x, ctx.act, device=ctx.kaio_device), None


# --- cross_entropy ------------------------------------------------------------------------------


def _cross_entropy_backward(logits: Tensor, targets: Tensor, grad_loss: Tensor, ignore_index: int, *, device: str | None = None) -> Tensor:
    return run_cross_entropy(logits, targets, ignore_index, op_device(device), grad_loss=grad_loss)  # type: ignore[no-any-return]


def _cross_entropy_backward_fake(logits: Tensor, targets: Tensor, grad_loss: Tensor, ignore_index: int, *, device: str | None = None) -> Tensor:
    op = "cross_entropy_backward"
    check_cross_entropy(TensorMetadata(op), op, logits, targets, grad_loss)
    return torch.empty_like(logits)


def _cross_entropy_with_grad(logits: Tensor, targets: Tensor, ignore_index: int, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    return run_cross_entropy(logits, targets, ignore_index, op_device(device), grad=True)  # type: ignore[no-any-return]


def _cross_entropy_with_grad_fake(logits: Tensor, targets: Tensor, ignore_index: int, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    check_cross_entropy(TensorMetadata("cross_entropy"), "cross_entropy", logits, targets)
    return logits.new_empty(logits.shape[:-1], dtype=torch.float32), torch.empty_like(logits)


def _cross_entropy_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    logits, targets, ctx.ignore_index = inputs
    ctx.save_for_backward(logits, targets)


def _cross_entropy_grad(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
    logits, targets = ctx.saved_tensors
    grad_loss = grad.to(torch.float32).contiguous()
    return torch.ops.kaio.cross_entropy_backward(logits, targets, grad_loss, ctx.ignore_index,
                                                 device=ctx.kaio_device), None, None


def _with_grad_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    dlogits = output[1]
    ctx.mark_non_differentiable(dlogits)  # a result, not a function of the logits to differentiate
    ctx.save_for_backward(dlogits)


def _with_grad_grad(ctx: Any, grad_loss: Tensor, _grad_dlogits: Any) -> tuple[Tensor, None, None]:
    (dlogits,) = ctx.saved_tensors
    # the saved gradient is that of losses.sum(): each row scaled by its loss's incoming gradient
    return dlogits * grad_loss.unsqueeze(-1).to(dlogits.dtype), None, None
