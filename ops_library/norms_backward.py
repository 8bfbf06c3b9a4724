"""``kaio.ops_library.rms_norm_backward`` and ``layer_norm_backward``: the gradients of the norms
from the per-row statistics their forward saved.

    from kaio.ops_library import layer_norm_backward, rms_norm_backward
    y, rstd = run_rms_norm(x, w, eps, None, None, save=True)       # (or the torch autograd path)
    dx, dw = rms_norm_backward(dy, x, w, rstd)                      # dw None when w is None
    dr, dw = rms_norm_backward(dy, h, w, rstd, grad_h=dh)           # residual form: h = x + r
    dx, dw, db = layer_norm_backward(dy, x, w, mean, rstd, bias=b)  # db None when bias is None

With ``xhat = (x - mean) * rstd`` (``mean`` = 0 for rms_norm) and ``g = dy * weight``:
``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`` (rms_norm: no ``mean(g)`` term),
``dweight = sum over rows of dy * xhat``, ``dbias = sum over rows of dy``. In the residual form
``h = x + residual`` feeds both the norm and the caller, so ``grad_h`` (the gradient flowing
into ``h`` from the caller) is added: ``dh = dnorm + grad_h``, which is the gradient of both
``x`` and ``residual``.

The weight and bias gradients are reduced across rows in f32 without atomics, as Apex and
Liger do: each program walks a contiguous range of rows, keeps its column sums in registers
and writes them as one row of an f32 ``(programs, cols)`` buffer; a second kernel sums that
buffer's rows (deterministic: the same order every run). A row longer than one tile is
read twice (the row sums over column blocks, then dx), and its column sums are added into the
program's row of the buffer column block by column block (``kt.atomic_add``, one thread per
element and no other program: still the same order every run). The buffer is at most
``PROGRAMS_PER_SM * sm_count`` rows, whatever the row count. The statistics are f32 arrays of
shape ``x.shape[:-1]``.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, f32, i32, min  # noqa: A004

PROGRAMS_PER_SM = 2  # programs of the row sweep per SM: each one f32 row of partial sums
# The backward keeps dy, x, the weight and the column sums per element live: rows are kept
# whole (one program of 16 warps) up to 8192 for rms_norm; layer_norm's second column sum
# spills there (ptxas, 128 registers a thread at 512 threads), so its rows loop past one tile.
ONE_PASS_RMS = rowops.ONE_PASS // 2
ONE_PASS_LAYER_NORM = rowops.MAX_BLOCK
SUM_TILE = 4096  # elements of the partial-sum tile the column reduction loads per step


@cache
def norm_backward_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    """The row sweep for one storage type: ``dx`` and per-program partial sums of the weight
    and bias gradients. ``CENTERED``: layer_norm (subtracts ``mean``), else rms_norm."""

    @kaio.tile_kernel(num_warps=4)
    def norm_backward(dy: Array[T], x: Array[T], w: Array[T], mean: Array[f32], rstd: Array[f32], dh: Array[T],
                      dx: MutArray[T], dw_part: MutArray[f32], db_part: MutArray[f32],
                      rows: i32, cols: i32, per_program: i32,
                      R: kaio.constexpr = 1, C: kaio.constexpr = 1024, SINGLE: kaio.constexpr = True,
                      CENTERED: kaio.constexpr = False, HAS_W: kaio.constexpr = False, HAS_B: kaio.constexpr = False,
                      HAS_DH: kaio.constexpr = False, BASE_DY: kaio.constexpr = 16, BASE_X: kaio.constexpr = 16,
                      BASE_W: kaio.constexpr = 16, BASE_DH: kaio.constexpr = 16, BASE_DX: kaio.constexpr = 16):  # fmt: skip
        dy, x, dx = kt.multiple_of(dy, BASE_DY), kt.multiple_of(x, BASE_X), kt.multiple_of(dx, BASE_DX)
        w, dh = kt.multiple_of(w, BASE_W), kt.multiple_of(dh, BASE_DH)
        p = i32(kt.program_id(0))
        first = p * per_program
        last = min(first + per_program, rows)  # rows past it are the next program's: masked
        part = p * cols  # this program's row of the partial sums
        n = f32(cols)
        if SINGLE:
            # the weight once per program; columns past `cols` load as 0, so add nothing
            wv = kt.expand_dims(f32(kt.load(w, (0,), (C,), (cols,))), 0)
            dw_acc = kt.zeros((C,), f32)
            db_acc = kt.zeros((C,), f32)
            for r0 in range(first, last, R):
                g = f32(kt.load(dy, (r0, 0), (R, C), (last, cols)))
                rs = kt.expand_dims(kt.load(rstd, (r0,), (R,), (last,)), 1)
                if CENTERED:
                    mu = kt.expand_dims(kt.load(mean, (r0,), (R,), (last,)), 1)
                    xhat = (f32(kt.load(x, (r0, 0), (R, C), (last, cols))) - mu) * rs
                else:
                    xhat = f32(kt.load(x, (r0, 0), (R, C), (last, cols))) * rs
                if HAS_W:
                    dw_acc = dw_acc + kt.sum(g * xhat, 0)
                    g = g * wv
                if HAS_B:
                    db_acc = db_acc + kt.sum(f32(kt.load(dy, (r0, 0), (R, C), (last, cols))), 0)
                d = g - xhat * kt.expand_dims(kt.sum(g * xhat, 1) / n, 1)
                if CENTERED:
                    d = d - kt.expand_dims(kt.sum(g, 1) / n, 1)
                d = d * rs
                if HAS_DH:
                    d = d + f32(kt.load(dh, (r0, 0), (R, C), (last, cols)))
                kt.store(dx, (r0, 0), T(d), (last, cols))
            if HAS_W:
                kt.store(dw_part, (part,), dw_acc, (part + cols,))
            if HAS_B:
                kt.store(db_part, (part,), db_acc, (part + cols,))
        else:
            # rows longer than a tile: per row block the row sums over column blocks, then dx.
            # The column sums go to this program's own row of the (zeroed) buffer by atomics:
            # each element is updated by one thread, row block after row block, and by no other
            # program, so the sums come out in the same order every run.
            for r0 in range(first, last, R):
                rs = kt.expand_dims(kt.load(rstd, (r0,), (R,), (last,)), 1)
                mu = kt.expand_dims(kt.load(mean, (r0,), (R,), (last,)), 1)
                s_gx = kt.zeros((R,), f32)
                s_g = kt.zeros((R,), f32)
                for k0 in range(0, cols, C):
                    g = f32(kt.load(dy, (r0, k0), (R, C), (last, cols)))
                    t = f32(kt.load(x, (r0, k0), (R, C), (last, cols)))
                    xhat = ((t - mu) if CENTERED else t) * rs
                    if HAS_W:
                        g = g * kt.expand_dims(f32(kt.load(w, (k0,), (C,), (cols,))), 0)
                    s_gx = s_gx + kt.sum(g * xhat, 1)
                    if CENTERED:
                        s_g = s_g + kt.sum(g, 1)
                c_gx = kt.expand_dims(s_gx / n, 1)
                c_g = kt.expand_dims(s_g / n, 1)
                for k0 in range(0, cols, C):
                    g = f32(kt.load(dy, (r0, k0), (R, C), (last, cols)))
                    t = f32(kt.load(x, (r0, k0), (R, C), (last, cols)))
                    xhat = ((t - mu) if CENTERED else t) * rs
                    column = kt.arange(C) + k0
                    if HAS_W:
                        kt.atomic_add(dw_part, part + column, kt.sum(g * xhat, 0), mask=column < cols)
                    if HAS_B:
                        kt.atomic_add(db_part, part + column, kt.sum(g, 0), mask=column < cols)
                    if HAS_W:
                        g = g * kt.expand_dims(f32(kt.load(w, (k0,), (C,), (cols,))), 0)
                    d = g - xhat * c_gx
                    if CENTERED:
                        d = d - c_g
                    d = d * rs
                    if HAS_DH:
                        d = d + f32(kt.load(dh, (r0, k0), (R, C), (last, cols)))
                    kt.store(dx, (r0, k0), T(d), (last, cols))

    return norm_backward


@cache
def column_sum_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    """``out[c] = sum over p of part[p, c]`` in f32, stored as ``T``: the second pass."""

    @kaio.tile_kernel(num_warps=4)
    def column_sum(part: Array[f32], out: MutArray[T], programs: i32, cols: i32,
                   P: kaio.constexpr = 16, C: kaio.constexpr = 256):  # fmt: skip
        c0 = i32(kt.program_id(0)) * C
        acc = kt.zeros((C,), f32)
        for p0 in range(0, programs, P):
            acc = acc + kt.sum(kt.load(part, (p0, c0), (P, C), (programs, cols)), 0)
        kt.store(out, (c0,), T(acc), (cols,))

    return column_sum


def _partial_sums(ops: Operands, x: Operand, programs: int, cols: int, zeroed: bool) -> Operand:
    """The f32 ``(programs, cols)`` scratch of the column sums (not an output of the op):
    ``zeroed`` when the kernel adds into it, else every element is stored."""
    shape = (programs, cols)
    if ops.torch:
        t = x.value.new_zeros(shape, dtype=torch_f32()) if zeroed else x.value.new_empty(shape, dtype=torch_f32())
        return Operand(t, shape, dtypes.f32, t.data_ptr())
    buf = (ops.device.zeros if zeroed else ops.device.empty)(shape, dtypes.f32.np_dtype)
    return Operand(buf, shape, dtypes.f32, buf.ptr)


def torch_f32() -> Any:
    from kaio.runtime import tensors

    return tensors.torch_dtype(dtypes.f32)


def _sum_rows(ops: Operands, part: Operand, programs: int, cols: int, dtype: dtypes.ScalarType) -> Operand:
    """The column sums of the ``(programs, cols)`` partial-sum buffer, as ``dtype``."""
    out = ops.output((cols,), dtype)
    c = min(rowops.next_pow2(cols), 256)
    p = max(1, min(rowops.next_pow2(programs), SUM_TILE // c))
    blk = rowops.Blocks(p, c, max(1, min(8, p * c // 256)), True)
    kernel = rowops.with_warps(column_sum_kernel(dtype), blk.warps)
    kernel.launch(ops.device, part.value, out.value, programs, cols, grid=(math.ceil(cols / c),), P=p, C=c)
    return out


def _like_x(ops: Any, op: str, name: str, value: Any, x: Operand) -> Operand:
    o = rowops.take_float(ops, op, name, value)
    rowops.same_dtype(op, name, o, x)
    rowops.same_shape(op, name, o, tuple(x.shape))
    return o


def _vector(ops: Any, op: str, name: str, value: Any, x: Operand, cols: int) -> Operand | None:
    if value is None:
        return None
    o = rowops.take_float(ops, op, name, value)
    rowops.same_dtype(op, name, o, x)
    rowops.same_shape(op, name, o, (cols,))
    return o


def _row_stat(ops: Any, op: str, name: str, value: Any, x: Operand) -> Operand:
    o = ops.take(name, value)
    if o.dtype != dtypes.f32:
        raise KaioTypeError(f"{op}: `{name}` must be f32 (as the forward saved it), got {o.dtype.name}")
    rowops.same_shape(op, name, o, tuple(x.shape[:-1]))
    return o


def _align(o: Operand | None) -> int:
    return rowops.base_alignment(o.ptr) if o is not None else 16


@dataclass(frozen=True)
class BackwardOperands:
    """A norm backward's checked operands (None: not given)."""

    grad_y: Operand
    x: Operand
    weight: Operand | None
    bias: Operand | None
    mean: Operand | None
    rstd: Operand
    grad_h: Operand | None


def take_operands(ops: Any, op: str, grad_y: Any, x: Any, weight: Any, bias: Any, mean: Any, rstd: Any,
                  grad_h: Any) -> BackwardOperands:  # fmt: skip
    """The operands, checked (``ops``: the call's Operands, or anything with its ``take``: the
    torch fakes check tensors' metadata alone)."""
    if op == "layer_norm_backward" and mean is None:
        raise KaioTypeError(
            f"{op}: `mean` is None; layer_norm's gradient needs the forward's per-row mean "
            "(rms_norm_backward is the gradient without one)"
        )
    ox = rowops.take_float(ops, op, "x", x)
    _, cols = rowops.rows_cols(ox.shape, op)
    return BackwardOperands(
        grad_y=_like_x(ops, op, "grad_y", grad_y, ox),
        x=ox,
        weight=_vector(ops, op, "weight", weight, ox, cols),
        bias=_vector(ops, op, "bias", bias, ox, cols),
        mean=_row_stat(ops, op, "mean", mean, ox) if mean is not None else None,
        rstd=_row_stat(ops, op, "rstd", rstd, ox),
        grad_h=_like_x(ops, op, "grad_h", grad_h, ox) if grad_h is not None else None,
    )


def run_backward(op: str, grad_y: Any, x: Any, weight: Any, bias: Any, mean: Any, rstd: Any, grad_h: Any,
                 device: Any) -> tuple[Any, Any, Any]:  # fmt: skip
    """Both norms' backward without the torch custom-op routing: ``(dx, dweight, dbias)``, None
    for a weight or bias not given (``mean`` None: rms_norm)."""
    ops = Operands(op, grad_y, x, weight, bias, mean, rstd, grad_h, device=device)
    o = take_operands(ops, op, grad_y, x, weight, bias, mean, rstd, grad_h)
    ox, ody, ow, ob, om, ors, odh = o.x, o.grad_y, o.weight, o.bias, o.mean, o.rstd, o.grad_h
    rows, cols = rowops.rows_cols(ox.shape, op)
    odx = ops.output(tuple(ox.shape), ox.dtype)
    one_pass = ONE_PASS_RMS if om is None else ONE_PASS_LAYER_NORM
    blk = rowops.blocks(max(rows, 1), max(cols, 1), one_pass=one_pass,
                        aligned=rowops.rows_aligned(cols, ox, ody, ow, odh, odx))  # fmt: skip
    # a few programs per SM, each a contiguous range of row blocks
    programs = min(math.ceil(rows / blk.rows), max(1, int(PROGRAMS_PER_SM * ops.device.sm_count)))
    per_program = math.ceil(math.ceil(rows / blk.rows) / max(programs, 1)) * blk.rows
    programs = math.ceil(rows / per_program) if rows else 0
    odw = _partial_sums(ops, ox, programs, cols, zeroed=not blk.single) if ow is not None else None
    odb = _partial_sums(ops, ox, programs, cols, zeroed=not blk.single) if ob is not None else None
    if rows and cols:
        args = (ody.value, ox.value, (ow or ox).value, (om or ors).value, ors.value, (odh or ox).value, odx.value,
                (odw or ors).value, (odb or ors).value, rows, cols, per_program)  # fmt: skip
        rowops.launch(norm_backward_kernel(ox.dtype), blk, programs, args, ops.device, CENTERED=om is not None,
                      HAS_W=ow is not None, HAS_B=ob is not None, HAS_DH=odh is not None, BASE_DY=_align(ody),
                      BASE_X=_align(ox), BASE_W=_align(ow), BASE_DH=_align(odh), BASE_DX=_align(odx))  # fmt: skip
    def column_sums(part: Operand | None) -> Any:
        if part is None:
            return None
        if not (rows and cols):  # nothing to sum: zeros (or nothing)
            return ops.result(ops.output((cols,), ox.dtype))
        return ops.result(_sum_rows(ops, part, programs, cols, ox.dtype))

    return ops.result(odx), column_sums(odw), column_sums(odb)


def rms_norm_backward(grad_y: Any, x: Any, weight: Any, rstd: Any, *, grad_h: Any = None,
                      device: Any = None) -> tuple[Any, Any]:  # fmt: skip
    """``(dx, dweight)`` of ``y = rms_norm(x, weight)`` from ``rstd`` (f32, ``x.shape[:-1]``) the
    forward saved; ``dweight`` None when ``weight`` is None. Residual form: ``x`` is ``h``, and
    ``grad_h`` (the gradient of ``h`` from the caller) is added to ``dx`` (= ``d residual``)."""
    if (ops := rowops.torch_op(grad_y, x, weight, rstd, grad_h, device=device)) is not None:
        dx, dw = ops.rms_norm_backward(grad_y, x, weight, rstd, grad_h)
        return dx, dw if weight is not None else None
    dx, dw, _ = run_backward("rms_norm_backward", grad_y, x, weight, None, None, rstd, grad_h, device)
    return dx, dw


def layer_norm_backward(grad_y: Any, x: Any, weight: Any, mean: Any, rstd: Any, *, bias: Any = None,
                        device: Any = None) -> tuple[Any, Any, Any]:  # fmt: skip
    """``(dx, dweight, dbias)`` of ``y = layer_norm(x, weight, bias)`` from ``mean`` and ``rstd``
    (f32, ``x.shape[:-1]``) the forward saved; a gradient is None when its parameter is None
    (``bias`` is only looked at for its presence, shape and type)."""
    if mean is None:  # before any routing: the custom op's schema would refuse it in torch's words
        take_operands(None, "layer_norm_backward", grad_y, x, weight, bias, mean, rstd, None)
    if (ops := rowops.torch_op(grad_y, x, weight, mean, rstd, bias, device=device)) is not None:
        dx, dw, db = ops.layer_norm_backward(grad_y, x, weight, bias, mean, rstd)
        return dx, dw if weight is not None else None, db if bias is not None else None
    return run_backward("layer_norm_backward", grad_y, x, weight, bias, mean, rstd, None, device)  # type: ignore[no-any-return]
