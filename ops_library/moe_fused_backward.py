"""``kaio.ops_library.fused_moe_backward``: the gradients of ``fused_moe``.

    from kaio.ops_library import fused_moe_backward
    dx, dw_gate_up, dw_down, dweights = fused_moe_backward(dy, x, w_gate_up, w_down, weights, ids)

The forward's first stages are recomputed, not kept (``moe_fused.routed``: the (token, choice)
pairs sorted by expert, x's rows gathered, ``h = xs @ w_gate_up[e]^T``, ``a = act(gate) * up``),
then, over the sorted rows (pair ``p = t * k + j`` at row ``r``):

* ``o = a @ w_down[e]^T`` (f32) and ``dweights[t, j] = dy[t] . o[r]`` (:func:`pair_dot_kernel`);
* ``do[r] = weights[t, j] * dy[t]`` (the forward's gather, scaled, rounded to x's type);
* ``da = do @ w_down[e]`` and ``dw_down[e] = do[g]^T @ a[g]`` (the grouped products of
  ``grouped_matmul_backward``, ``w_down`` (E, D, F) read as it is);
* ``dh`` from the gated activation's backward (``silu_and_mul_backward``'s kernel);
* ``dxs = dh @ w_gate_up[e]`` (f32) and ``dw_gate_up[e] = dh[g]^T @ xs[g]``;
* ``dx[t] = sum_j dxs[row of (t, j)]``: the forward's combine, unweighted.

Eleven grouped or row launches after the five recomputed ones; ``dy`` (T, D) in x's type or f32
(rounded to x's type for the tensor cores). The results have the inputs' types: dx and both
weight gradients x's, dweights the weights'. ``ids`` get no gradient (integers), nor do
experts no token chose (their weight gradients are 0).
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library import rows as rowops
from kaio.ops_library.activations_backward import gated_backward_kernel
from kaio.ops_library.grouped_matmul import launch as grouped_launch
from kaio.ops_library.grouped_matmul_backward import as_input_type, wgrad_launch
from kaio.ops_library.moe_fused import COLS, ROWS, Moe, combine_launch, gather_kernel, routed
from kaio.ops_library.moe_fused import check as check_forward
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, f32, i32

OP = "fused_moe_backward"


@cache
def pair_dot_kernel(T: dtypes.ScalarType, W: dtypes.ScalarType) -> Any:  # noqa: N803
    """``dweights[p] = W(sum_c dy[p // k, c] * o[inverse[p], c])`` for each pair ``p``, in f32."""

    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def moe_pair_dot(dy: Array[T], o: Array[f32], inverse: Array[i32], dweights: MutArray[W], n: i32, k: i32,
                     d: i32, R: kaio.constexpr = ROWS, C: kaio.constexpr = COLS):  # fmt: skip
        pairs = i32(kt.program_id(0)) * R + kt.arange(R)
        live = pairs < n
        src = kt.expand_dims(pairs // k, 1) * d
        row = kt.expand_dims(kt.load(inverse, pairs, mask=live), 1) * d
        acc = kt.zeros((R,), f32)
        for c0 in range(0, d, C):
            cols = kt.expand_dims(c0 + kt.arange(C), 0)
            mask = kt.expand_dims(live, 1) & (cols < d)
            acc = acc + kt.sum(f32(kt.load(dy, src + cols, mask=mask)) * kt.load(o, row + cols, mask=mask), 1)
        kt.store(dweights, pairs, W(acc), mask=live)

    return moe_pair_dot


def fused_moe_backward(grad_out: Any, x: Any, w_gate_up: Any, w_down: Any, weights: Any, ids: Any, *,
                       activation: str = "silu", device: Any = None) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """``(dx, dw_gate_up, dw_down, dweights)`` of ``fused_moe`` for ``grad_out`` = dy (T, D)
    (see the module doc); torch tensors go through ``torch.ops.kaio.fused_moe_backward``."""
    if (tops := rowops.torch_op(grad_out, x, w_gate_up, w_down, weights, ids, device=device)) is not None:
        return tuple(tops.fused_moe_backward(grad_out, x, w_gate_up, w_down, weights, ids, activation))  # type: ignore[return-value]
    return run(grad_out, x, w_gate_up, w_down, weights, ids, activation, device)


def check(ops: Any, grad_out: Any, x: Any, w_gate_up: Any, w_down: Any, weights: Any, ids: Any, activation: Any,
          read_values: bool = True) -> tuple[Moe, Operand]:  # fmt: skip
    """``fused_moe``'s checks, and dy's (``ops``: an ``Operands``, or tensor metadata for a fake)."""
    m = check_forward(OP, ops, x, w_gate_up, w_down, weights, ids, activation, read_values)
    if m.w_gate_up.dtype != m.x.dtype or m.w_down.dtype != m.x.dtype:
        raise KaioTypeError(f"{OP}: the gradients are of 16-bit experts (x's type {m.x.dtype.name}); quantised (fp8, "
                            f"GPTQ) experts are frozen, got {m.w_gate_up.dtype.name} and {m.w_down.dtype.name}")  # fmt: skip
    og = ops.take("grad_out", grad_out)
    if tuple(og.shape) != (m.tokens, m.d):
        raise KaioTypeError(f"{OP}: `grad_out` must have shape {(m.tokens, m.d)} (y's), got {tuple(og.shape)}")
    if og.dtype not in (dtypes.f32, m.x.dtype):
        raise KaioTypeError(f"{OP}: `grad_out` must be f32 or {m.x.dtype.name} (x's type), got {og.dtype.name}")
    return m, og


def run(grad_out: Any, x: Any, w_gate_up: Any, w_down: Any, weights: Any, ids: Any, activation: str,
        device: Any) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """The op itself, without the torch custom-op routing."""
    ops = Operands(OP, grad_out, x, w_gate_up, w_down, weights, ids, device=device)
    m, og = check(ops, grad_out, x, w_gate_up, w_down, weights, ids, activation)
    t, n, d, f, e = m.x.dtype, m.n, m.d, m.f, m.experts
    dx, dwgu = ops.output((m.tokens, d), t), ops.output(tuple(m.w_gate_up.shape), t)
    dwd, dweights = ops.output(tuple(m.w_down.shape), t), ops.output(tuple(m.weights.shape), m.weights.dtype)
    dev = ops.device
    dy = as_input_type(ops, og, t)
    if n == 0 or d == 0:  # nothing flows back: every gradient is zeros (the kernels' empty sums)
        with (ops.workspace((e + 1,), dtypes.i32, zero=True) as no_rows, ops.workspace((1,), dtypes.f32) as unread,
              ops.workspace((max(n, 1),), dtypes.i32, zero=True) as row0):  # fmt: skip
            for dw in (dwgu, dwd):
                wgrad_launch(dev, m.x, m.x, no_rows, dw, e)
            if n:  # D == 0: dweights are dot products of no elements
                pair_dot_kernel(t, m.weights.dtype).launch(dev, dy.value, unread.value, row0.value, dweights.value,
                                                           n, m.k, d, grid=(math.ceil(n / ROWS),))  # fmt: skip
        return ops.result(dx), ops.result(dwgu), ops.result(dwd), ops.result(dweights)
    with (routed(ops, m) as r, ops.workspace((n, d), dtypes.f32) as o, ops.workspace((n, d), t) as do,
          ops.workspace((n, f), t) as da, ops.workspace((n, 2 * f), t) as dh,
          ops.workspace((n, d), dtypes.f32) as dxs):  # fmt: skip
        rows = (math.ceil(n / ROWS),)
        grouped_launch(dev, r.a, m.w_down, r.offsets, o, e, d, f, w_nk=True)
        pair_dot_kernel(t, m.weights.dtype).launch(dev, dy.value, o.value, r.inverse.value, dweights.value, n, m.k,
                                                   d, grid=rows)  # fmt: skip
        # do: dy's rows in the sorted order, each times its pair's weight (the inverse is not rewritten)
        gather_kernel(t, m.weights.dtype).launch(dev, dy.value, r.sorted_ids.value, m.weights.value, do.value,
                                                 r.inverse.value, n, m.k, d, grid=rows, INVERSE=False, SCALED=True)  # fmt: skip
        grouped_launch(dev, do, m.w_down, r.offsets, da, e, f, d)  # da = do @ w_down[e]: (D, F) as (K, N)
        wgrad_launch(dev, do, r.a, r.offsets, dwd, e)  # dw_down[e] (D, F) = do[g]^T @ a[g]
        b = rowops.blocks(n, f)
        rowops.launch(gated_backward_kernel(t), b, (b.grid(n), math.ceil(f / b.cols)),
                      (da.value, r.h.value, dh.value, n, f), dev, ACT=m.act,
                      BASE_DY=rowops.base_alignment(da.ptr), BASE_X=rowops.base_alignment(r.h.ptr),
                      BASE_DX=rowops.base_alignment(dh.ptr))  # fmt: skip
        grouped_launch(dev, dh, m.w_gate_up, r.offsets, dxs, e, d, 2 * f)  # dxs = dh @ w_gate_up[e]: (2F, D)
        wgrad_launch(dev, dh, r.xs, r.offsets, dwgu, e)  # dw_gate_up[e] (2F, D) = dh[g]^T @ xs[g]
        combine_launch(dev, dxs, r.inverse, None, dx, m.tokens, m.k, d)
    return ops.result(dx), ops.result(dwgu), ops.result(dwd), ops.result(dweights)
