"""``kaio.ops_library.cross_entropy``: per-row loss ``logsumexp(logits) - logits[target]``.

    from kaio.ops_library import cross_entropy
    loss = cross_entropy(logits, targets)          # logits (..., V) f16/bf16/f32, targets (...) i32/i64
    loss = cross_entropy(logits, targets, ignore_index=-100)   # rows with that target: 0
    loss, dlogits = cross_entropy(logits, targets, return_grad=True)   # d loss.sum() / d logits
    dlogits = cross_entropy_backward(logits, targets, grad_loss)        # grad_loss: (...) f32

The loss is f32, one per row, of the logits' kind (numpy, kaio Buffer or torch tensor); take
``.mean()`` (over the rows kept) for torch's default reduction. The logits are read once per
row when a row fits one tile (:data:`COLUMNS`), else in one pass of column blocks with an online
max and sum: no probabilities are ever written. Each row's target logit is one gather; exp and
log are single MUFU instructions (fast-math, as Triton's and Liger's kernels compile them). With ``return_grad`` the same sweep writes the gradient
``softmax - onehot`` (a row longer than a tile is swept a second time once its logsumexp is
known); ``cross_entropy_backward`` is that sweep scaled by each row's ``grad_loss``. Targets are checked before the launch (a device tensor's
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
from kaio.ops_library.autograd import needs_grad
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, exp, f32, i32, log, u32

NEG_INF = rowops.NEG_INF
TARGET_TYPES = (dtypes.i32, dtypes.i64)
COLUMNS = 8192
"""Logits per tile (a row up to this long is read once; longer, swept in blocks of this many):
32 a thread over 8 warps, 48-64 registers and no spill, 18.8 instructions per logit for the loss
and the gradient at V=32768 where the row ops' 4096 give 20.7 (benchmarks/codegen.py)."""
GATHER_LIMIT = 2**32
"""Logits fewer than this: the kernel reads each row's target logit by one gather (a flat u32
index); more: it finds it in the sweep (a compare, a select and a sum per logit)."""


@cache
def cross_entropy_kernel(T: dtypes.ScalarType, TT: dtypes.ScalarType) -> Any:  # noqa: N803
    """The tile kernel for one (logits, targets) type pair. ``GRAD``: also write ``dlogits`` =
    ``scale[r] * (softmax(logits[r]) - onehot(targets[r]))`` (0 on ignored rows) in the same
    row sweep, with ``scale`` = 1 unless ``SCALED`` (then read from ``grad_loss``)."""

    @kaio.tile_kernel(num_warps=4)
    def cross_entropy(x: Array[T], targets: Array[TT], loss: MutArray[f32], dx: MutArray[T],
                      grad_loss: Array[f32], rows: i32, cols: i32, ignore: i32,
                      R: kaio.constexpr = 1, C: kaio.constexpr = 1024, SINGLE: kaio.constexpr = True,
                      GRAD: kaio.constexpr = False, SCALED: kaio.constexpr = False,
                      BASE_X: kaio.constexpr = 16, BASE_DX: kaio.constexpr = 16,
                      GATHER: kaio.constexpr = True):  # fmt: skip
        x, dx = kt.multiple_of(x, BASE_X), kt.multiple_of(dx, BASE_DX)
        r0 = i32(kt.program_id(0)) * R
        target = i32(kt.load(targets, (r0,), (R,), (rows,)))
        keep = (target != ignore) & (target >= 0) & (target < cols)
        column = kt.expand_dims(target, 1)
        # the gradient's row scale as an (R, 1) tile: a 1-D load widened by expand_dims came out
        # with every row's value taken from the first row when the kernel also compares
        # `column` with an arange (a tile-layout bug); the 2-D load has no such step
        kept = kt.expand_dims(keep, 1)
        scale = kt.where(kept, 1.0, 0.0)
        if SCALED:
            scale = kt.where(kept, kt.load(grad_loss, (r0, 0), (R, 1), (rows, 1)), 0.0)
        if GATHER:  # each row's target logit read once (flat u32 index: rows * cols < 2**32)
            row = r0 + kt.arange(R)
            flat = u32(row) * u32(cols) + u32(target)
            picked = f32(kt.load(x, flat, mask=keep & (row < rows)))  # the last program's extra rows read nothing
        if SINGLE:
            t = f32(kt.load(x, (r0, 0), (R, C), (rows, cols), other=NEG_INF))
            m = kt.max(t, 1)
            lse = m + log(kt.sum(exp(t - kt.expand_dims(m, 1)), 1))
            hit = kt.expand_dims(kt.arange(C), 0) == column
            if not GATHER:
                picked = kt.sum(kt.where(hit, t, 0.0), 1)
            if GRAD:  # the row is still in registers: logits are read once
                p = exp(t - kt.expand_dims(lse, 1)) - kt.where(hit, 1.0, 0.0)
                kt.store(dx, (r0, 0), T(p * scale), (rows, cols))
        else:
            m = kt.full((R,), NEG_INF, f32)
            s = kt.zeros((R,), f32)
            if not GATHER:
                picked = kt.zeros((R,), f32)
            for k0 in range(0, cols, C):
                t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols), other=NEG_INF))
                if not GATHER:  # a tensor of 2**32 logits or more: found in the sweep
                    picked = picked + kt.sum(kt.where(kt.expand_dims(kt.arange(C) + k0, 0) == column, t, 0.0), 1)
                m_new = kt.maximum(m, kt.max(t, 1))
                shift = kt.where(m_new == NEG_INF, 0.0, m_new)
                s = s * exp(m - shift) + kt.sum(exp(t - kt.expand_dims(shift, 1)), 1)
                m = m_new
            lse = m + log(s)
            if GRAD:  # a second sweep once the row's lse is known
                ll = kt.expand_dims(lse, 1)
                for k0 in range(0, cols, C):
                    t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols), other=NEG_INF))
                    hit = kt.expand_dims(kt.arange(C), 0) == column - k0  # one subtraction per trip, not per logit
                    kt.store(dx, (r0, k0), T((exp(t - ll) - kt.where(hit, 1.0, 0.0)) * scale), (rows, cols))
        kt.store(loss, (r0,), kt.where(keep, lse - picked, 0.0), (rows,))

    return cross_entropy.with_pipeline(fast_math_pipeline)


def fast_math_pipeline(arch: str) -> Any:
    """The default tile pipeline with ``fast-math``: exp and log as single MUFU instructions
    (``ex2.approx.ftz``, ``lg2.approx.ftz``, as Triton's and Liger's kernels compile them)
    instead of the accurate sequences with their subnormal fix-ups (3 more per logit and sweep);
    probabilities below 2**-126 flush to 0, a relative error of at most 2**-22 elsewhere."""
    from kaio.pipeline import TilePipelineOptions, build_pipeline

    return build_pipeline(arch, TilePipelineOptions(fast_math=True))


def check_targets(value: Any, vocab: int, ignore_index: int, op: str = "cross_entropy") -> None:
    """Every target is in [0, vocab) or ignore_index (a device array is read back once); shared
    by the ops that take class indices (cross_entropy, linear_cross_entropy)."""
    from kaio.runtime import tensors
    from kaio.runtime.buffer import Buffer

    if tensors.is_tensor(value):
        if not bool(((value != ignore_index) & ((value < 0) | (value >= vocab))).any()):
            return
        host = value.detach().cpu().numpy()
    elif isinstance(value, np.ndarray):
        host = value
    elif isinstance(value, Buffer):
        host = value.to_host()
    else:
        return  # another device array kind: the kernels still ignore out-of-range targets
    bad = (host != ignore_index) & ((host < 0) | (host >= vocab))
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise KaioTypeError(
            f"{op}: `targets`{list(where)} = {int(host[where])} is outside [0, {vocab}) "
            f"and is not ignore_index ({ignore_index})"
        )


def _check_ignore_index(op: str, ignore_index: Any) -> int:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int | np.integer) or not -(2**31) <= ignore_index < 2**31:
        raise KaioTypeError(f"{op}: `ignore_index` must be a 32-bit integer, got {ignore_index!r}")
    return int(ignore_index)


def cross_entropy(logits: Any, targets: Any, ignore_index: int = -100, *, return_grad: bool = False,
                  device: Any = None) -> Any:  # fmt: skip
    """Per-row ``logsumexp(logits[r]) - logits[r, targets[r]]`` in f32; 0 where the target is
    ``ignore_index``. ``logits``: (..., V); ``targets``: the leading shape (...), i32 or i64.

    ``return_grad=True``: ``(losses, dlogits)``, with ``dlogits = softmax(logits) -
    onehot(targets)`` (0 on ignored rows; the logits' type and shape), the gradient of
    ``losses.sum()`` computed in the same row sweep (logits read once), as Liger-Kernel does.
    torch logits that require grad take that path by themselves and save ``dlogits`` for the
    backward (a logits-sized buffer, instead of reading the logits again)."""
    ignore = _check_ignore_index("cross_entropy", ignore_index)
    if not isinstance(return_grad, bool):
        raise KaioTypeError(f"cross_entropy: `return_grad` must be a bool, got {return_grad!r}")
    if (ops := rowops.torch_op(logits, targets, device=device)) is not None:
        if return_grad:
            return ops.cross_entropy_with_grad(logits, targets, ignore)
        if needs_grad(logits):  # the fused path: the gradient comes with the losses
            return ops.cross_entropy_with_grad(logits, targets, ignore)[0]
        return ops.cross_entropy(logits, targets, ignore)
    return run(logits, targets, ignore, device, grad=return_grad)


def cross_entropy_backward(logits: Any, targets: Any, grad_loss: Any, ignore_index: int = -100, *,
                           device: Any = None) -> Any:  # fmt: skip
    """The gradient of ``cross_entropy(logits, targets, ignore_index)`` for the per-row
    ``grad_loss`` (f32, the targets' shape): ``grad_loss[r] * (softmax(logits[r]) -
    onehot(targets[r]))``, 0 on ignored rows; the logits' type and shape."""
    ignore = _check_ignore_index("cross_entropy_backward", ignore_index)
    if (ops := rowops.torch_op(logits, targets, grad_loss, device=device)) is not None:
        return ops.cross_entropy_backward(logits, targets, grad_loss, ignore)
    return run(logits, targets, ignore, device, grad_loss=grad_loss)


def check(ops: Any, op: str, logits: Any, targets: Any, grad_loss: Any = None
          ) -> tuple[Operand, Operand, Operand | None, int, int]:  # fmt: skip
    """The operands (``ops``: an ``Operands``, or tensor metadata for a fake), rows and cols."""
    ox = rowops.take_float(ops, op, "logits", logits)
    ot = ops.take("targets", targets)
    if ot.dtype not in TARGET_TYPES:
        raise KaioTypeError(f"{op}: `targets` must be i32 or i64, got {ot.dtype.name}")
    if tuple(ot.shape) != tuple(ox.shape[:-1]):
        raise KaioTypeError(
            f"{op}: `targets` must have shape {tuple(ox.shape[:-1])} (the logits' without the last dim), "
            f"got {tuple(ot.shape)}"
        )
    og = None
    if grad_loss is not None:
        og = ops.take("grad_loss", grad_loss)
        if og.dtype != dtypes.f32:
            raise KaioTypeError(f"{op}: `grad_loss` must be f32 (the losses' type), got {og.dtype.name}")
        rowops.same_shape(op, "grad_loss", og, tuple(ot.shape))
    rows, cols = rowops.rows_cols(ox.shape, op)
    return ox, ot, og, rows, cols


def run(logits: Any, targets: Any, ignore_index: int, device: Any, *, grad: bool = False,
        grad_loss: Any = None) -> Any:  # fmt: skip
    """The op itself, without the torch custom-op routing: the losses; ``grad``: (losses,
    dlogits); ``grad_loss`` given: dlogits scaled by it (the standalone backward)."""
    op = "cross_entropy" if grad_loss is None else "cross_entropy_backward"
    ops = Operands(op, logits, targets, grad_loss, device=device)
    ox, ot, og, rows, cols = check(ops, op, logits, targets, grad_loss)
    check_targets(targets, cols, int(ignore_index))
    out = ops.output(tuple(ox.shape[:-1]), dtypes.f32)
    wants_grad = grad or og is not None
    dx = ops.output(tuple(ox.shape), ox.dtype) if wants_grad else None
    if rows:
        b = rowops.blocks(rows, max(cols, 1), max_block=COLUMNS)
        odx = dx if dx is not None else ox  # never written without GRAD
        scale = og if og is not None else out  # never read without SCALED
        args = (ox.value, ot.value, out.value, odx.value, scale.value, rows, cols, int(ignore_index))
        rowops.launch(cross_entropy_kernel(ox.dtype, ot.dtype), b, b.grid(rows), args, ops.device,
                      GRAD=wants_grad, SCALED=og is not None, BASE_X=rowops.base_alignment(ox.ptr),
                      BASE_DX=rowops.base_alignment(odx.ptr), GATHER=rows * cols < GATHER_LIMIT)  # fmt: skip
    if og is not None:
        return ops.result(dx)
    return (ops.result(out), ops.result(dx)) if grad else ops.result(out)
