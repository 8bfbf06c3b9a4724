"""``kaio.ops_library.moe_topk_softmax``: a mixture-of-experts router's top-k.

    from kaio.ops_library import moe_topk_softmax
    weights, ids = moe_topk_softmax(logits, k)    # logits (T, E) f16/bf16/f32
    # weights: f32 (T, k), ids: int32 (T, k); row t's experts by falling probability

Per token: the softmax over the E experts (in f32), then the k largest probabilities and their
expert ids, largest first; with ``renormalize`` (the default, as in Mixtral and Qwen-MoE) the k
weights are divided by their sum, so they add up to 1. Equal probabilities are taken in
increasing expert id (the lower id first): the order of a stable descending sort
(``torch.sort(p, descending=True, stable=True)``, ``numpy.argsort(-p, kind="stable")``).
``torch.topk`` leaves the order of ties unspecified (on the CPU, torch 2.13, the top 3 of
``[1, 3, 3, 0, 3, 1, ...]`` come back as ids 1, 4, 2), so where ties occur its ids may come in
another order (and a tie at the k-th place may take another of the tied experts); the weights
are the same.

The kernel keeps ``R`` tokens' rows (one ``(R, EP)`` tile, ``EP`` = E rounded up to a power of
two, at most :data:`MAX_EXPERTS`) in registers and selects k times: the row's max, the lowest
column holding it, then that column is masked to -inf. The k picks build ``(R, KP)`` tiles in
registers, stored once. Its cost is k row reductions per token: routers have E <= 256 and
k <= 8 in the models that ship.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, exp, f32, i32

OP = "moe_topk_softmax"
MAX_EXPERTS = 4096  # one tile per row: E rounded up to a power of two, at most this
TILE_ELEMENTS = 4096  # elements of a program's (R, EP) tile
NEG_INF = float("-inf")


@cache
def topk_softmax_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    """The tile kernel for one logits type."""

    @kaio.tile_kernel(num_warps=4)
    def moe_topk_softmax(logits: Array[T], weights: MutArray[f32], ids: MutArray[i32], tokens: i32,
                         experts: i32, k: i32, R: kaio.constexpr = 1, EP: kaio.constexpr = 256,
                         KP: kaio.constexpr = 8, RENORMALIZE: kaio.constexpr = True):  # fmt: skip
        r0 = i32(kt.program_id(0)) * R
        t = f32(kt.load(logits, (r0, 0), (R, EP), (tokens, experts), other=NEG_INF))
        m = kt.expand_dims(kt.max(t, 1), 1)
        e = exp(t - m)  # 0 past the last expert
        scale = 1.0 / kt.expand_dims(kt.sum(e, 1), 1)
        col = kt.expand_dims(kt.arange(EP), 0)  # (1, EP)
        slot = kt.expand_dims(kt.arange(KP), 0)  # (1, KP)
        w = kt.zeros((R, KP), f32)
        idx = kt.zeros((R, KP), i32)
        picked = kt.zeros((R,), f32)
        for j in range(k):
            top = kt.max(e, 1)
            best = kt.expand_dims(top, 1)
            # the lowest column holding the max: equal values go in increasing expert id
            at = kt.expand_dims(kt.min(kt.where(e == best, col, EP), 1), 1)
            w = kt.where(slot == j, kt.broadcast_to(best, (R, KP)), w)
            idx = kt.where(slot == j, kt.broadcast_to(at, (R, KP)), idx)
            picked = picked + top
            e = kt.where(col == at, -1.0, e)  # below every probability: never picked again
        if RENORMALIZE:
            w = w * kt.expand_dims(1.0 / picked, 1)
        else:
            w = w * scale
        kt.store(weights, (r0, 0), w, (tokens, k))
        kt.store(ids, (r0, 0), idx, (tokens, k))

    return moe_topk_softmax


def tiling(experts: int, k: int) -> tuple[int, int, int]:
    """(R, EP, KP): tokens per program, experts and picks rounded up to powers of two."""
    ep = rowops.next_pow2(experts)
    kp = rowops.next_pow2(k)
    r = max(1, min(16, TILE_ELEMENTS // ep))
    return r, ep, kp


def check(ops: Any, logits: Any, k: Any, renormalize: Any, op: str = OP) -> tuple[Operand, int, int]:
    """The logits operand, tokens and experts, or a kaio error naming the argument (``ops``: an
    ``Operands``, or ``torch_checks.TensorMetadata`` for a fake)."""
    ol = rowops.take_float(ops, op, "logits", logits)
    if len(ol.shape) != 2:
        raise KaioTypeError(f"{op}: `logits` must be (tokens, experts), got shape {tuple(ol.shape)}")
    tokens, experts = ol.shape
    if not 1 <= experts <= MAX_EXPERTS:
        raise KaioValueError(f"{op}: `logits` must have 1 to {MAX_EXPERTS} experts (columns), got {experts}")
    if isinstance(k, bool) or not isinstance(k, int):
        raise KaioTypeError(f"{op}: `k` must be an int, got {type(k).__name__}")
    if not 1 <= k <= experts:
        raise KaioValueError(f"{op}: `k` must be in [1, {experts}] (the number of experts), got {k}")
    if not isinstance(renormalize, bool):
        raise KaioTypeError(f"{op}: `renormalize` must be a bool, got {renormalize!r}")
    rowops.rows_cols(ol.shape, OP)
    return ol, tokens, experts


def moe_topk_softmax(logits: Any, k: int, *, renormalize: bool = True, device: Any = None) -> Any:
    """``(weights, ids)``: each token's k most probable experts under ``softmax(logits)`` (f32
    ``(T, k)``, largest first; divided by their sum when ``renormalize``) and their ids (int32
    ``(T, k)``). ``logits``: ``(T, E)`` f16, bf16 or f32. Torch tensors go through
    ``torch.ops.kaio.moe_topk_softmax`` (autograd records the weights' gradient:
    ``moe_topk_softmax_backward``)."""
    if (ops := rowops.torch_op(logits, device=device)) is not None:
        return ops.moe_topk_softmax(logits, k, renormalize)
    return run(logits, k, renormalize, device)


def launch(device: Any, kernel: Any, tokens: int, experts: int, k: int, *args: Any, **constexprs: Any) -> None:
    """A routing kernel (the top-k or its backward) over ``tokens`` rows of ``experts`` logits."""
    r, ep, kp = tiling(experts, k)
    if r * ep >= 2048:
        kernel = rowops.with_warps(kernel, min(8, r * ep // 512))
    kernel.launch(device, *args, tokens, experts, k, grid=(math.ceil(tokens / r),), R=r, EP=ep, KP=kp, **constexprs)


def run(logits: Any, k: int, renormalize: bool, device: Any) -> Any:
    """The op itself, without the torch custom-op routing."""
    ops = Operands(OP, logits, device=device)
    ol, tokens, experts = check(ops, logits, k, renormalize)
    ow = ops.output((tokens, k), dtypes.f32)
    oi = ops.output((tokens, k), dtypes.i32)
    if tokens:
        launch(ops.device, topk_softmax_kernel(ol.dtype), tokens, experts, k, ol.value, ow.value, oi.value,
               RENORMALIZE=renormalize)  # fmt: skip
    return ops.result(ow), ops.result(oi)
