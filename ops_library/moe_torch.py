"""``torch.ops.kaio.moe_topk_softmax`` / ``grouped_matmul`` / ``fused_moe`` and their backwards
as custom ops, with autograd: the router logits' gradient through the top-k's weights,
``grouped_matmul``'s for x and w, ``fused_moe``'s for x, both weight tensors and the routing
weights (``ids`` and the offsets are integers: no gradient). The fakes
run the real ops' checks on the tensors' metadata; what only the values can tell (ids in range,
offsets that add up) is checked when the op runs, before any launch.
``register()`` defines the ops (``torch_registration`` runs it); importing this imports torch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from kaio.ops_library.grouped_matmul import check as check_grouped
from kaio.ops_library.grouped_matmul import run as run_grouped
from kaio.ops_library.grouped_matmul_backward import OP as GROUPED_BACKWARD
from kaio.ops_library.grouped_matmul_backward import check as check_grouped_backward
from kaio.ops_library.grouped_matmul_backward import run as run_grouped_backward
from kaio.ops_library.moe_fused import OP as FUSED
from kaio.ops_library.moe_fused import check as check_fused
from kaio.ops_library.moe_fused import run as run_fused
from kaio.ops_library.moe_fused_backward import OP as FUSED_BACKWARD
from kaio.ops_library.moe_fused_backward import check as check_fused_backward
from kaio.ops_library.moe_fused_backward import run as run_fused_backward
from kaio.ops_library.autograd import define_op, op_device, register_autograd
from kaio.ops_library.moe_routing import OP as TOPK
from kaio.ops_library.moe_routing import check as check_topk
from kaio.ops_library.moe_routing import run as run_topk
from kaio.ops_library.moe_routing_backward import OP as TOPK_BACKWARD
from kaio.ops_library.moe_routing_backward import check_backward as check_topk_backward
from kaio.ops_library.moe_routing_backward import run as run_topk_backward
from kaio.ops_library.torch_checks import TensorMetadata
from kaio.runtime import tensors


def register() -> None:
    define_op("kaio::moe_topk_softmax", _topk, _topk_fake)
    define_op("kaio::moe_topk_softmax_backward", _topk_backward, _topk_backward_fake)
    register_autograd("kaio::moe_topk_softmax", _topk_grad, _topk_setup)
    define_op("kaio::grouped_matmul", _grouped_matmul, _grouped_matmul_fake)
    define_op("kaio::grouped_matmul_backward", _grouped_matmul_backward, _grouped_matmul_backward_fake)
    register_autograd("kaio::grouped_matmul", _grouped_matmul_grad, _grouped_matmul_setup)
    define_op("kaio::fused_moe", _fused_moe, _fused_moe_fake)
    define_op("kaio::fused_moe_backward", _fused_moe_backward, _fused_moe_backward_fake)
    register_autograd("kaio::fused_moe", _fused_moe_grad, _fused_moe_setup)


def _topk(logits: Tensor, k: int, renormalize: bool, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    return run_topk(logits, k, renormalize, op_device(device))  # type: ignore[no-any-return]


def _topk_fake(logits: Tensor, k: int, renormalize: bool, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    check_topk(TensorMetadata(TOPK), logits, k, renormalize)
    shape = (logits.shape[0], k)
    return logits.new_empty(shape, dtype=torch.float32), logits.new_empty(shape, dtype=torch.int32)


def _topk_backward(grad_weights: Tensor, logits: Tensor, ids: Tensor, renormalize: bool, *,
                   device: str | None = None) -> Tensor:  # fmt: skip
    return run_topk_backward(grad_weights, logits, ids, renormalize, op_device(device))  # type: ignore[no-any-return]


def _topk_backward_fake(grad_weights: Tensor, logits: Tensor, ids: Tensor, renormalize: bool, *,
                        device: str | None = None) -> Tensor:  # fmt: skip
    check_topk_backward(TensorMetadata(TOPK_BACKWARD), grad_weights, logits, ids, renormalize, read_values=False)
    return torch.empty_like(logits)


def _topk_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    logits, _, renormalize = inputs
    ctx.save_for_backward(logits, output[1])  # the probabilities are recomputed
    ctx.renormalize = renormalize
    ctx.mark_non_differentiable(output[1])


def _topk_grad(ctx: Any, grad_weights: Tensor, _grad_ids: Tensor | None) -> tuple[Tensor | None, ...]:
    logits, ids = ctx.saved_tensors
    dlogits = _kaio().moe_topk_softmax_backward(grad_weights.contiguous(), logits, ids, ctx.renormalize,
                                                device=ctx.kaio_device)  # fmt: skip
    return dlogits, None, None


def _grouped_matmul(x: Tensor, w: Tensor, expert_offsets: Tensor, out_dtype: str, programs: int | None, *,
                    device: str | None = None) -> Tensor:  # fmt: skip
    return run_grouped(x, w, expert_offsets, out_dtype, programs, op_device(device))  # type: ignore[no-any-return]


def _grouped_matmul_fake(x: Tensor, w: Tensor, expert_offsets: Tensor, out_dtype: str, programs: int | None, *,
                         device: str | None = None) -> Tensor:  # fmt: skip
    *_, out = check_grouped(TensorMetadata("grouped_matmul"), x, w, expert_offsets, out_dtype, read_values=False)
    return x.new_empty((x.shape[0], w.shape[2]), dtype=tensors.torch_dtype(out))


def _grouped_matmul_backward(grad_out: Tensor, x: Tensor, w: Tensor, expert_offsets: Tensor, w_nk: bool, *,
                             device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    return run_grouped_backward(grad_out, x, w, expert_offsets, w_nk, op_device(device))  # type: ignore[no-any-return]


def _grouped_matmul_backward_fake(grad_out: Tensor, x: Tensor, w: Tensor, expert_offsets: Tensor, w_nk: bool, *,
                                  device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    check_grouped_backward(TensorMetadata(GROUPED_BACKWARD), grad_out, x, w, expert_offsets, w_nk, read_values=False)
    return x.new_empty(x.shape), w.new_empty(w.shape)


def _grouped_matmul_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, w, expert_offsets, *_ = inputs
    ctx.save_for_backward(x, w, expert_offsets)


def _grouped_matmul_grad(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
    x, w, expert_offsets = ctx.saved_tensors
    dx, dw = _kaio().grouped_matmul_backward(grad_out.contiguous(), x, w, expert_offsets, False, device=ctx.kaio_device)
    return dx, dw, None, None, None


def _fused_moe(x: Tensor, w_gate_up: Tensor, w_down: Tensor, weights: Tensor, ids: Tensor, activation: str, *,
               device: str | None = None) -> Tensor:  # fmt: skip
    return run_fused(x, w_gate_up, w_down, weights, ids, activation, op_device(device))  # type: ignore[no-any-return]


def _fused_moe_fake(x: Tensor, w_gate_up: Tensor, w_down: Tensor, weights: Tensor, ids: Tensor, activation: str, *,
                    device: str | None = None) -> Tensor:  # fmt: skip
    check_fused(FUSED, TensorMetadata(FUSED), x, w_gate_up, w_down, weights, ids, activation,
                    read_values=False)  # fmt: skip
    return x.new_empty(x.shape)


def _fused_moe_backward(grad_out: Tensor, x: Tensor, w_gate_up: Tensor, w_down: Tensor, weights: Tensor, ids: Tensor,
                        activation: str, *, device: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    return run_fused_backward(grad_out, x, w_gate_up, w_down, weights, ids, activation, op_device(device))  # type: ignore[no-any-return]


def _fused_moe_backward_fake(grad_out: Tensor, x: Tensor, w_gate_up: Tensor, w_down: Tensor, weights: Tensor,
                             ids: Tensor, activation: str, *,
                             device: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    check_fused_backward(TensorMetadata(FUSED_BACKWARD), grad_out, x, w_gate_up, w_down, weights, ids,
                             activation, read_values=False)  # fmt: skip
    return x.new_empty(x.shape), w_gate_up.new_empty(w_gate_up.shape), w_down.new_empty(w_down.shape), weights.new_empty(weights.shape)


def _fused_moe_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, w_gate_up, w_down, weights, ids, activation = inputs
    ctx.save_for_backward(x, w_gate_up, w_down, weights, ids)  # the backward recomputes the rest
    ctx.activation = activation


def _fused_moe_grad(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
    x, w_gate_up, w_down, weights, ids = ctx.saved_tensors
    dx, dwgu, dwd, dweights = _kaio().fused_moe_backward(grad_out.contiguous(), x, w_gate_up, w_down, weights, ids,
                                                         ctx.activation, device=ctx.kaio_device)  # fmt: skip
    return dx, dwgu, dwd, dweights, None, None


def _kaio() -> Any:
    return torch.ops.kaio
