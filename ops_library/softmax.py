"""``kaio.ops_library.softmax`` and ``log_softmax``: along the last axis, statistics in f32.

    from kaio.ops_library import softmax, log_softmax
    p = softmax(x)            # x: (..., n) f16/bf16/f32; p: the same shape, type and kind
    lp = log_softmax(x)

A row that fits one tile is read once: max, exponentials, sum and the result stay in
registers. A longer row takes two passes: an online max and rescaled sum over column blocks,
then the normalised values.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operands
from kaio.prelude import Array, MutArray, exp, f32, i32, log

NEG_INF = rowops.NEG_INF


@cache
def softmax_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    """The tile kernel for one storage type (``LOG``: log_softmax)."""

    @kaio.tile_kernel(num_warps=4)
    def softmax(x: Array[T], y: MutArray[T], rows: i32, cols: i32,
                R: kaio.constexpr = 1, C: kaio.constexpr = 1024, SINGLE: kaio.constexpr = True,
                LOG: kaio.constexpr = False, BASE_X: kaio.constexpr = 16, BASE_Y: kaio.constexpr = 16):  # fmt: skip
        x, y = kt.multiple_of(x, BASE_X), kt.multiple_of(y, BASE_Y)
        r0 = i32(kt.program_id(0)) * R
        if SINGLE:
            t = f32(kt.load(x, (r0, 0), (R, C), (rows, cols), other=NEG_INF))
            m = kt.expand_dims(kt.max(t, 1), 1)
            e = exp(t - m)
            s = kt.expand_dims(kt.sum(e, 1), 1)
            if LOG:
                kt.store(y, (r0, 0), T(t - m - log(s)), (rows, cols))
            else:
                kt.store(y, (r0, 0), T(e * (1.0 / s)), (rows, cols))
        else:
            # pass 1: the running max m and the sum s of exp(x - m), rescaled when m grows
            m = kt.full((R,), NEG_INF, f32)
            s = kt.zeros((R,), f32)
            for k0 in range(0, cols, C):
                t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols), other=NEG_INF))
                m_new = kt.maximum(m, kt.max(t, 1))
                shift = kt.where(m_new == NEG_INF, 0.0, m_new)  # a block of -inf adds nothing
                s = s * exp(m - shift) + kt.sum(exp(t - kt.expand_dims(shift, 1)), 1)
                m = m_new
            mm = kt.expand_dims(m, 1)
            if LOG:
                lse = kt.expand_dims(m + log(s), 1)
                for k0 in range(0, cols, C):
                    t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols)))
                    kt.store(y, (r0, k0), T(t - lse), (rows, cols))
            else:
                inv = kt.expand_dims(1.0 / s, 1)
                for k0 in range(0, cols, C):
                    t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols)))
                    kt.store(y, (r0, k0), T(exp(t - mm) * inv), (rows, cols))

    return softmax


def run(op: str, x: Any, log: bool, device: Any) -> Any:
    """The op itself, without the torch custom-op routing."""
    ops = Operands(op, x, device=device)
    ox = rowops.take_float(ops, op, "x", x)
    rows, cols = rowops.rows_cols(ox.shape, op)
    oy = ops.output(tuple(ox.shape), ox.dtype)
    if rows and cols:
        b = rowops.blocks(rows, cols, one_pass=rowops.ONE_PASS_LIGHT, aligned=rowops.rows_aligned(cols, ox, oy))
        rowops.launch(softmax_kernel(ox.dtype), b, b.grid(rows), (ox.value, oy.value, rows, cols), ops.device,
                      LOG=log, BASE_X=rowops.base_alignment(ox.ptr), BASE_Y=rowops.base_alignment(oy.ptr))  # fmt: skip
    return ops.result(oy)


def softmax(x: Any, *, device: Any = None) -> Any:
    """``exp(x - max) / sum(exp(x - max))`` along the last axis; same shape, type and kind as ``x``."""
    if (ops := rowops.torch_op(x, device=device)) is not None:
        return ops.softmax(x, False)
    return run("softmax", x, False, device)


def log_softmax(x: Any, *, device: Any = None) -> Any:
    """``x - max - log(sum(exp(x - max)))`` along the last axis; same shape, type and kind as ``x``."""
    if (ops := rowops.torch_op(x, device=device)) is not None:
        return ops.softmax(x, True)
    return run("log_softmax", x, True, device)
