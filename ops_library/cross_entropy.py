"""``kaio.ops_library.cross_entropy``: per-row loss ``logsumexp(logits) - logits[target]``.

    from kaio.ops_library import cross_entropy
    loss = cross_entropy(logits, targets)          # logits (..., V) f16/bf16/f32, targets (...) i32/i64
    loss = cross_entropy(logits, targets, ignore_index=-100)   # rows with that target: 0

The loss is f32, one per row, of the logits' kind (numpy, kaio Buffer or torch tensor); take
``.mean()`` (over the rows kept) for torch's default reduction. The logits are read once per
row when a row fits one tile, else in one pass of column blocks with an online max and sum:
no probabilities are ever written. Targets are checked before the launch (a device tensor's
are read back once for that); the kernel also treats any target outside ``[0, V)`` as ignored,
so no logit outside the row is ever read.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from functools import cache
from typing import Any

import numpy as np

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, exp, f32, i32, log

NEG_INF = rowops.NEG_INF
TARGET_TYPES = (dtypes.i32, dtypes.i64)


@cache
def cross_entropy_kernel(T: dtypes.ScalarType, TT: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4)
    def cross_entropy(x: Array[T], targets: Array[TT], loss: MutArray[f32], rows: i32, cols: i32, ignore: i32,
                      R: kaio.constexpr = 1, C: kaio.constexpr = 1024, SINGLE: kaio.constexpr = True,
                      BASE_X: kaio.constexpr = 16):  # fmt: skip
        x = kt.multiple_of(x, BASE_X)
        r0 = i32(kt.program_id(0)) * R
        target = i32(kt.load(targets, (r0,), (R,), (rows,)))
        keep = (target != ignore) & (target >= 0) & (target < cols)
        column = kt.expand_dims(target, 1)
        if SINGLE:
            t = f32(kt.load(x, (r0, 0), (R, C), (rows, cols), other=NEG_INF))
            m = kt.max(t, 1)
            lse = m + log(kt.sum(exp(t - kt.expand_dims(m, 1)), 1))
            picked = kt.sum(kt.where(kt.expand_dims(kt.arange(C), 0) == column, t, 0.0), 1)
        else:
            m = kt.full((R,), NEG_INF, f32)
            s = kt.zeros((R,), f32)
            picked = kt.zeros((R,), f32)
            for k0 in range(0, cols, C):
                t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols), other=NEG_INF))
                picked = picked + kt.sum(kt.where(kt.expand_dims(kt.arange(C) + k0, 0) == column, t, 0.0), 1)
                m_new = kt.maximum(m, kt.max(t, 1))
                shift = kt.where(m_new == NEG_INF, 0.0, m_new)
                s = s * exp(m - shift) + kt.sum(exp(t - kt.expand_dims(shift, 1)), 1)
                m = m_new
            lse = m + log(s)
        kt.store(loss, (r0,), kt.where(keep, lse - picked, 0.0), (rows,))

    return cross_entropy


def _check_targets(o: Operand, value: Any, cols: int, ignore_index: int) -> None:
    """Every target is in [0, cols) or ignore_index (reads a device array back once)."""
    from kaio.runtime import tensors
    from kaio.runtime.buffer import Buffer

    if tensors.is_tensor(value):
        bad = (value != ignore_index) & ((value < 0) | (value >= cols))
        if not bool(bad.any()):
            return
        host = value.detach().cpu().numpy()
    elif isinstance(value, np.ndarray):
        host = value
    elif isinstance(value, Buffer):
        host = value.to_host()
    else:
        return  # another device array kind: the kernel still ignores out-of-range targets
    bad_np = (host != ignore_index) & ((host < 0) | (host >= cols))
    if bad_np.any():
        where = tuple(int(i) for i in np.argwhere(bad_np)[0])
        raise KaioTypeError(
            f"cross_entropy: `targets`{list(where)} = {int(host[where])} is outside [0, {cols}) "
            f"and is not ignore_index ({ignore_index})"
        )


def cross_entropy(logits: Any, targets: Any, ignore_index: int = -100, *, device: Any = None) -> Any:
    """Per-row ``logsumexp(logits[r]) - logits[r, targets[r]]`` in f32; 0 where the target is
    ``ignore_index``. ``logits``: (..., V); ``targets``: the leading shape (...), i32 or i64."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int | np.integer) or not -(2**31) <= ignore_index < 2**31:
        raise KaioTypeError(f"cross_entropy: `ignore_index` must be a 32-bit integer, got {ignore_index!r}")
    if (ops := rowops.torch_op(logits, targets, device=device)) is not None:
        return ops.cross_entropy(logits, targets, int(ignore_index))
    return run(logits, targets, int(ignore_index), device)


def run(logits: Any, targets: Any, ignore_index: int, device: Any) -> Any:
    """The op itself, without the torch custom-op routing."""
    op = "cross_entropy"
    ops = Operands(op, logits, targets, device=device)
    ox = rowops.take_float(ops, op, "logits", logits)
    ot = ops.take("targets", targets)
    if ot.dtype not in TARGET_TYPES:
        raise KaioTypeError(f"{op}: `targets` must be i32 or i64, got {ot.dtype.name}")
    if tuple(ot.shape) != tuple(ox.shape[:-1]):
        raise KaioTypeError(
            f"{op}: `targets` must have shape {tuple(ox.shape[:-1])} (the logits' without the last dim), "
            f"got {tuple(ot.shape)}"
        )
    rows, cols = rowops.rows_cols(ox.shape, op)
    _check_targets(ot, targets, cols, int(ignore_index))
    out = ops.output(tuple(ox.shape[:-1]), dtypes.f32)
    if rows:
        b = rowops.blocks(rows, max(cols, 1))
        args = (ox.value, ot.value, out.value, rows, cols, int(ignore_index))
        rowops.launch(cross_entropy_kernel(ox.dtype, ot.dtype), b, b.grid(rows), args, ops.device,
                      BASE_X=rowops.base_alignment(ox.ptr))  # fmt: skip
    return ops.result(out)
