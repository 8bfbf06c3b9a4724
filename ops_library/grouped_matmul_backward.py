"""``kaio.ops_library.grouped_matmul_backward``: the gradients of ``grouped_matmul``.

    from kaio.ops_library import grouped_matmul_backward
    dx, dw = grouped_matmul_backward(dy, x, w, expert_offsets)   # y = grouped_matmul(x, w, offsets)

For each expert ``e`` with rows ``g = expert_offsets[e] : expert_offsets[e + 1]``:
``dx[g] = dy[g] @ w[e]^T`` and ``dw[e] = x[g]^T @ dy[g]`` (0 for an expert with no rows).
``dx`` is ``grouped_matmul`` itself, reading ``w[e]`` (K, N) as the (N', K') = (K, N) weight of
its ``nn.Linear`` layout (``W_NK``): no transpose is written. ``dw`` is
:func:`grouped_wgrad_kernel`: one program per (expert, K tile, N tile) walks the expert's rows
in ``BM`` steps, ``kt.dot`` of the transposed x tile and the dy tile; rows past the group's end
are loaded as zeros (they belong to the next expert, and here they would join the sum).
``dy`` (f32, the forward's default output type, or x's type) is rounded to x's type for the
tensor-core products, as ``matmul_backward`` does; ``dx`` and ``dw`` have x's type.
``w_nk=True``: ``w`` is (E, N, K), as ``fused_moe`` keeps its weights; ``dw`` then has that layout.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library.grouped_matmul import INPUT_TYPES, STAGES, WARPS, check_offsets
from kaio.ops_library.grouped_matmul import launch as grouped_launch
from kaio.ops_library.matmul_backward import relayout
from kaio.ops_library.matmul_kernel import base_alignment
from kaio.ops_library.operands import Operand, Operands
from kaio.ops_library.rows import torch_op
from kaio.prelude import Array, MutArray, f32, i32

OP = "grouped_matmul_backward"
BLOCK = (32, 64, 64)  # BM (rows per step), BP, BQ (the dw tile)


@cache
def grouped_wgrad_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType) -> Any:  # noqa: N803
    """``dw[e] = a[g]^T @ b[g]`` (P, Q) for every expert's rows g of a (M, P) and b (M, Q)."""

    @kaio.tile_kernel(num_warps=WARPS, num_stages=STAGES)
    def grouped_wgrad(a: Array[IN], b: Array[IN], offsets: Array[i32], dw: MutArray[OUT], experts: i32, p: i32,
                      q: i32, BM: kaio.constexpr = 32, BP: kaio.constexpr = 64, BQ: kaio.constexpr = 64,
                      BASE_A: kaio.constexpr = 16, BASE_B: kaio.constexpr = 16, BASE_W: kaio.constexpr = 16):  # fmt: skip
        a, b, dw = kt.multiple_of(a, BASE_A), kt.multiple_of(b, BASE_B), kt.multiple_of(dw, BASE_W)
        q0, p0, e = i32(kt.program_id(0)) * BQ, i32(kt.program_id(1)) * BP, i32(kt.program_id(2))
        pair = kt.load(offsets, (e,), (2,), (experts + 1,))
        lo, hi = kt.min(pair, 0), kt.max(pair, 0)
        acc = kt.zeros((BP, BQ), f32)
        for r0 in range(lo, hi, BM):
            at = kt.load(a, (r0, p0), (BM, BP), (hi, p))  # the group's end bounds the rows
            bt = kt.load(b, (r0, q0), (BM, BQ), (hi, q))
            acc = kt.dot(kt.trans(at), bt, acc)
        kt.store(dw, (e * p + p0, q0), OUT(acc), (e * p + p, q))

    return grouped_wgrad


def wgrad_launch(device: Any, a: Operand, b: Operand, offsets: Operand, dw: Operand, experts: int) -> None:
    """``dw`` (E, P, Q) from a (M, P) and b (M, Q) on checked operands (an expert with no rows
    gets zeros: with offsets all 0, a and b are never read)."""
    p, q = dw.shape[1], dw.shape[2]
    if not (p and q):
        return
    bm, bp, bq = BLOCK
    grouped_wgrad_kernel(a.dtype, dw.dtype).launch(
        device, a.value, b.value, offsets.value, dw.value, experts, p, q,
        grid=(math.ceil(q / bq), math.ceil(p / bp), experts), BM=bm, BP=bp, BQ=bq,
        BASE_A=base_alignment(a.ptr), BASE_B=base_alignment(b.ptr), BASE_W=base_alignment(dw.ptr))  # fmt: skip


def as_input_type(ops: Operands, o: Operand, t: dtypes.ScalarType) -> Operand:
    """``o`` (2-D) in the tensor cores' input type ``t`` (a rounded copy when it is not)."""
    return o if o.dtype == t else relayout(ops, o, t, transpose=False)


def check(ops: Any, grad_out: Any, x: Any, w: Any, expert_offsets: Any, w_nk: bool,
          read_values: bool = True) -> tuple[Operand, Operand, Operand, Operand]:  # fmt: skip
    """The operands, or a kaio error naming the argument (``grouped_matmul``'s rules, and dy's;
    ``ops``: an ``Operands``, or tensor metadata for a fake, which reads no values)."""
    ox, ow, oo, og = (ops.take(n, v) for n, v in (("x", x), ("w", w), ("expert_offsets", expert_offsets), ("grad_out", grad_out)))
    if ox.dtype not in INPUT_TYPES:
        raise KaioTypeError(f"{OP}: `x` must be f16 or bf16, got {ox.dtype.name}")
    if ow.dtype != ox.dtype:
        raise KaioTypeError(f"{OP}: `w` is {ow.dtype.name} but `x` is {ox.dtype.name}: pass one type")
    layout = "(experts, N, K)" if w_nk else "(experts, K, N)"
    if len(ox.shape) != 2 or len(ow.shape) != 3:
        raise KaioTypeError(f"{OP}: `x` must be (tokens, K) and `w` {layout}, got shapes {tuple(ox.shape)} and {tuple(ow.shape)}")
    (tokens, k), experts = ox.shape, ow.shape[0]
    wk, n = (ow.shape[2], ow.shape[1]) if w_nk else (ow.shape[1], ow.shape[2])
    if wk != k or experts == 0:
        raise KaioTypeError(f"{OP}: `w` must be {layout} with K = {k} (x's columns) and some experts, got {tuple(ow.shape)}")
    if any(s >= 2**31 for s in (tokens * k, experts * k * n, tokens * n)):
        raise KaioTypeError(f"{OP}: arrays of 2**31 elements or more are too large")
    if tuple(og.shape) != (tokens, n):
        raise KaioTypeError(f"{OP}: `grad_out` must have shape {(tokens, n)} (y's), got {tuple(og.shape)}")
    if og.dtype not in (dtypes.f32, ox.dtype):
        raise KaioTypeError(f"{OP}: `grad_out` must be f32 or {ox.dtype.name} (x's type), got {og.dtype.name}")
    check_offsets(OP, "expert_offsets", oo, expert_offsets if read_values else None, experts, tokens)
    return ox, ow, oo, og


def grouped_matmul_backward(grad_out: Any, x: Any, w: Any, expert_offsets: Any, *, w_nk: bool = False,
                            device: Any = None) -> tuple[Any, Any]:  # fmt: skip
    """``(dx, dw)`` of ``y = grouped_matmul(x, w, expert_offsets)`` for ``grad_out`` = dy (T, N)
    (see the module doc); ``w_nk``: ``w`` is (E, N, K). Torch tensors go through
    ``torch.ops.kaio.grouped_matmul_backward``."""
    if not isinstance(w_nk, bool):
        raise KaioTypeError(f"{OP}: `w_nk` must be a bool, got {w_nk!r}")
    if (tops := torch_op(grad_out, x, w, expert_offsets, device=device)) is not None:
        return tuple(tops.grouped_matmul_backward(grad_out, x, w, expert_offsets, w_nk))  # type: ignore[return-value]
    return run(grad_out, x, w, expert_offsets, w_nk, device)


def run(grad_out: Any, x: Any, w: Any, expert_offsets: Any, w_nk: bool, device: Any) -> tuple[Any, Any]:
    """The op itself, without the torch custom-op routing."""
    ops = Operands(OP, grad_out, x, w, expert_offsets, device=device)
    ox, ow, oo, og = check(ops, grad_out, x, w, expert_offsets, w_nk)
    (tokens, k), experts = ox.shape, ow.shape[0]
    n = ow.shape[1] if w_nk else ow.shape[2]
    odx, odw = ops.output((tokens, k), ox.dtype), ops.output(tuple(ow.shape), ox.dtype)
    dy = as_input_type(ops, og, ox.dtype)
    # dx = dy @ w[e]^T: w[e] (K, N) read as an (out, in) weight; with w_nk, w[e] (N, K) as it is
    grouped_launch(ops.device, dy, ow, oo, odx, experts, k, n, w_nk=not w_nk)
    if w_nk:
        wgrad_launch(ops.device, dy, ox, oo, odw, experts)  # dw[e] (N, K) = dy[g]^T @ x[g]
    else:
        wgrad_launch(ops.device, ox, dy, oo, odw, experts)  # dw[e] (K, N) = x[g]^T @ dy[g]
    return ops.result(odx), ops.result(odw)
