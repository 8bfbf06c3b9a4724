"""``kaio.ops_library.matmul_backward``: the gradients of ``C = alpha * A @ B + bias``.

    from kaio.ops_library import matmul_backward
    da, db, dbias = matmul_backward(dc, a, b, alpha=1.0, bias=True)   # dbias None without bias=True

The gradients are matmuls through kaio's own matmul, with transposed operands:
``dA = alpha * dC @ B^T`` and ``dB = alpha * A^T @ dC``; ``dbias`` is ``dC`` summed over
rows (f32 partial sums per column block, one program per block of columns). The matmul kernel
reads row-major operands, so ``B^T`` and ``A^T`` are written by :func:`relayout_kernel` (a tile
transpose, ``kt.trans`` of a loaded tile) first; ``dC`` (f32, the forward's output type) is
rounded to A's type for the tensor-core products, as mixed-precision training does. ``da`` and
``db`` have A's type, ``dbias`` the bias type (``bias``: a dtype, or True for A's type).
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library.autograd import refuse_grad
from kaio.ops_library.matmul import matmul
from kaio.ops_library.matmul_kernel import INPUT_TYPES
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, f32, i32

TRANSPOSE_TILE = 64  # a (64, 64) tile per program: 16 elements per thread of 4 warps
COLUMN_SUM_TILE = (32, 128)  # rows x columns per step of the bias gradient's column sums


@cache
def relayout_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType) -> Any:  # noqa: N803
    """``y = OUT(x^T)`` (``TRANS``) or ``OUT(x)`` for a row-major (m, n) ``x``."""

    @kaio.tile_kernel(num_warps=4)
    def relayout(x: Array[IN], y: MutArray[OUT], m: i32, n: i32, B: kaio.constexpr = 64,
                 TRANS: kaio.constexpr = True):  # fmt: skip
        m0, n0 = i32(kt.program_id(0)) * B, i32(kt.program_id(1)) * B
        t = kt.load(x, (m0, n0), (B, B), (m, n))
        if TRANS:
            kt.store(y, (n0, m0), OUT(kt.trans(t)), (n, m))
        else:
            kt.store(y, (m0, n0), OUT(t), (m, n))

    return relayout


@cache
def column_sum_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType) -> Any:  # noqa: N803
    """``y[j] = sum_i x[i, j]`` in f32 for a row-major (m, n) ``x``: one program per BN columns."""

    @kaio.tile_kernel(num_warps=4)
    def column_sum(x: Array[IN], y: MutArray[OUT], m: i32, n: i32, BM: kaio.constexpr = 32,
                   BN: kaio.constexpr = 128):  # fmt: skip
        n0 = i32(kt.program_id(0)) * BN
        acc = kt.zeros((BN,), f32)
        for m0 in range(0, m, BM):
            acc = acc + kt.sum(f32(kt.load(x, (m0, n0), (BM, BN), (m, n))), 0)
        kt.store(y, (n0,), OUT(acc), (n,))

    return column_sum


def relayout(ops: Operands, x: Operand, out_type: dtypes.ScalarType, transpose: bool) -> Operand:
    """``x`` (2-D) transposed and/or cast to ``out_type``: a new operand of the call's kind."""
    m, n = x.shape
    y = ops.output((n, m) if transpose else (m, n), out_type)
    if m and n:
        grid = (math.ceil(m / TRANSPOSE_TILE), math.ceil(n / TRANSPOSE_TILE))
        relayout_kernel(x.dtype, out_type).launch(ops.device, x.value, y.value, m, n, grid=grid,
                                                  B=TRANSPOSE_TILE, TRANS=transpose)  # fmt: skip
    return y


def column_sums(ops: Operands, x: Operand, out_type: dtypes.ScalarType) -> Operand:
    """``x`` (2-D) summed over rows, in f32, stored as ``out_type``."""
    m, n = x.shape
    y = ops.output((n,), out_type)
    if n:
        bm, bn = COLUMN_SUM_TILE
        column_sum_kernel(x.dtype, out_type).launch(ops.device, x.value, y.value, m, n,
                                                    grid=(math.ceil(n / bn),), BM=bm, BN=bn)  # fmt: skip
    return y


def _bias_type(op: str, bias: Any, a: dtypes.ScalarType) -> dtypes.ScalarType | None:
    if bias is None or bias is False:
        return None
    if bias is True:
        return a
    kind = dtypes.from_numpy(bias) if not isinstance(bias, dtypes.ScalarType) else bias
    if kind not in (dtypes.f32, a):
        raise KaioTypeError(f"{op}: `bias` is the bias type, f32 or {a.name} (A's type), got {kind.name}")
    return kind


def matmul_backward(grad_out: Any, a: Any, b: Any, *, alpha: float = 1.0, bias: Any = None,
                    device: Any = None) -> tuple[Any, Any, Any]:  # fmt: skip
    """``(dA, dB, dbias)`` of ``C = alpha * A @ B (+ bias)`` for ``grad_out`` = dC (m, n);
    ``bias``: None/False (no bias: dbias is None), True (a bias of A's type) or its dtype."""
    op = "matmul_backward"
    refuse_grad(op, grad_out, a, b)  # run directly: nothing would record a second derivative
    if isinstance(alpha, bool) or not isinstance(alpha, int | float):
        raise KaioTypeError(f"{op}: `alpha` must be a number, got {alpha!r}")
    ops = Operands(op, grad_out, a, b, device=device)
    og, oa, ob = ops.take("grad_out", grad_out), ops.take("a", a), ops.take("b", b)
    if len(oa.shape) != 2 or len(ob.shape) != 2 or oa.shape[1] != ob.shape[0]:
        raise KaioTypeError(f"{op}: `a` and `b` must be (m, k) and (k, n), got {oa.shape} and {ob.shape}")
    if oa.dtype not in INPUT_TYPES or ob.dtype != oa.dtype:
        raise KaioTypeError(f"{op}: `a` and `b` have one type among f16, bf16, f32; got {oa.dtype.name} and {ob.dtype.name}")
    (m, k), n = oa.shape, ob.shape[1]
    if tuple(og.shape) != (m, n):
        raise KaioTypeError(f"{op}: `grad_out` must have shape {(m, n)} (A @ B's), got {tuple(og.shape)}")
    if og.dtype not in (dtypes.f32, oa.dtype):
        raise KaioTypeError(f"{op}: `grad_out` must be f32 or {oa.dtype.name}, got {og.dtype.name}")
    try:
        bias_type = _bias_type(op, bias, oa.dtype)
    except TypeError:
        raise KaioTypeError(f"{op}: `bias` is None, True or the bias dtype, got {bias!r}") from None
    g = og if og.dtype == oa.dtype else relayout(ops, og, oa.dtype, transpose=False)
    da = ops.output((m, k), oa.dtype)
    db = ops.output((k, n), oa.dtype)
    if m and k:  # an empty inner size (n == 0) still writes the zero gradient
        bt = relayout(ops, ob, oa.dtype, transpose=True)
        matmul.run(g.value, bt.value, da.value, alpha=float(alpha), device=ops.device)
    if k and n:
        at = relayout(ops, oa, oa.dtype, transpose=True)
        matmul.run(at.value, g.value, db.value, alpha=float(alpha), device=ops.device)
    dbias = column_sums(ops, og, bias_type) if bias_type is not None else None
    return ops.result(da), ops.result(db), (ops.result(dbias) if dbias is not None else None)
