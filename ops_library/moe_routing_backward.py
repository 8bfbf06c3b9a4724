"""``kaio.ops_library.moe_topk_softmax_backward``: the router logits' gradient through the top-k.

    from kaio.ops_library import moe_topk_softmax_backward
    dlogits = moe_topk_softmax_backward(grad_weights, logits, ids, renormalize=True)

With ``p = softmax(logits)`` over the experts and ``g`` the weights' gradient scattered to the
chosen columns (0 elsewhere): with ``renormalize`` the weights are the softmax of the chosen
logits alone, ``q``, so ``dlogits = q * (g - sum(g * q))``, 0 at the experts not chosen;
without, the weights are ``p`` at the chosen columns and ``dlogits = p * (g - sum(g * p))``
(every expert's logit moves the denominator). The choice itself has no gradient. One program
holds ``R`` tokens' rows as the forward does (its tiling), recomputes ``p`` in f32 and stores
dlogits in the logits' type.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library import rows as rowops
from kaio.ops_library.moe_checks import check_ids, take_index
from kaio.ops_library.moe_routing import NEG_INF, check, launch
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, exp, f32, i32

OP = "moe_topk_softmax_backward"


@cache
def topk_softmax_backward_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4)
    def moe_topk_softmax_backward(logits: Array[T], ids: Array[i32], grad: Array[f32], dlogits: MutArray[T],
                                  tokens: i32, experts: i32, k: i32, R: kaio.constexpr = 1, EP: kaio.constexpr = 256,
                                  KP: kaio.constexpr = 8, RENORMALIZE: kaio.constexpr = True):  # fmt: skip
        r0 = i32(kt.program_id(0)) * R
        t = f32(kt.load(logits, (r0, 0), (R, EP), (tokens, experts), other=NEG_INF))
        e = exp(t - kt.expand_dims(kt.max(t, 1), 1))  # 0 past the last expert
        col = kt.expand_dims(kt.arange(EP), 0)
        rows = r0 + kt.arange(R)
        live = rows < tokens
        g = kt.zeros((R, EP), f32)  # the weights' gradient at the chosen columns
        chosen = kt.zeros((R, EP), f32)
        for j in range(k):
            hit = col == kt.expand_dims(kt.load(ids, rows * k + j, mask=live), 1)
            g = kt.where(hit, kt.expand_dims(kt.load(grad, rows * k + j, mask=live), 1), g)
            chosen = kt.where(hit, 1.0, chosen)
        if RENORMALIZE:
            w = e * chosen  # the chosen logits' own softmax
        else:
            w = e
        w = w * kt.expand_dims(1.0 / kt.sum(w, 1), 1)
        dl = w * (g - kt.expand_dims(kt.sum(g * w, 1), 1))
        kt.store(dlogits, (r0, 0), T(dl), (tokens, experts))

    return moe_topk_softmax_backward


def check_backward(ops: Any, grad_weights: Any, logits: Any, ids: Any, renormalize: Any,
                   read_values: bool = True) -> tuple[Operand, Operand, Operand]:  # fmt: skip
    """The operands, or a kaio error naming the argument (``ops``: an ``Operands``, or tensor
    metadata for a fake, which reads no values)."""
    ol, tokens, experts = check(ops, logits, 1, renormalize, OP)
    og, oi = ops.take("grad_weights", grad_weights), ops.take("ids", ids)
    take_index(OP, "ids", oi, (dtypes.i32,))
    if len(oi.shape) != 2 or oi.shape[0] != tokens or not 1 <= oi.shape[1] <= experts:
        raise KaioTypeError(f"{OP}: `ids` must be ({tokens}, k) with k in [1, {experts}], got shape {tuple(oi.shape)}")
    if og.dtype != dtypes.f32 or tuple(og.shape) != tuple(oi.shape):
        raise KaioTypeError(f"{OP}: `grad_weights` must be f32 of the shape of `ids` {tuple(oi.shape)}, got "
                            f"{og.dtype.name} {tuple(og.shape)}")  # fmt: skip
    if read_values:
        check_ids(OP, "ids", ids, experts)
    return og, ol, oi


def moe_topk_softmax_backward(grad_weights: Any, logits: Any, ids: Any, *, renormalize: bool = True,
                              device: Any = None) -> Any:  # fmt: skip
    """``dlogits`` (T, E) in the logits' type for ``grad_weights`` (f32 (T, k)), the forward's
    ``logits`` and its ``ids`` (see the module doc)."""
    if (ops := rowops.torch_op(grad_weights, logits, ids, device=device)) is not None:
        return ops.moe_topk_softmax_backward(grad_weights, logits, ids, renormalize)
    return run(grad_weights, logits, ids, renormalize, device)


def run(grad_weights: Any, logits: Any, ids: Any, renormalize: bool, device: Any) -> Any:
    """The op itself, without the torch custom-op routing."""
    ops = Operands(OP, grad_weights, logits, ids, device=device)
    og, ol, oi = check_backward(ops, grad_weights, logits, ids, renormalize)
    tokens, experts = ol.shape
    out = ops.output((tokens, experts), ol.dtype)
    if tokens:
        launch(ops.device, topk_softmax_backward_kernel(ol.dtype), tokens, experts, oi.shape[1], ol.value, oi.value,
               og.value, out.value, RENORMALIZE=renormalize)  # fmt: skip
    return ops.result(out)
