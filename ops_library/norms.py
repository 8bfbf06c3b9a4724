"""``kaio.ops_library.layer_norm`` and ``rms_norm``: along the last axis, statistics in f32.

    from kaio.ops_library import layer_norm, rms_norm
    y = layer_norm(x, weight, bias, eps=1e-5)     # x: (..., n); weight, bias: (n,) or None
    y = rms_norm(x, weight, eps=1e-6)
    y, h = rms_norm(x, weight, residual=r)        # h = x + r, y = rms_norm(h) * weight: one pass

``x`` is f16, bf16 or f32; ``weight``, ``bias`` and ``residual`` have its type; results have
its shape, type and kind (numpy, kaio Buffer or torch tensor). A row that fits one tile is
read once. A longer row takes two passes: the statistics over column blocks (layer_norm merges
per-block means and squared deviations, Chan et al., so no ``E[x^2] - E[x]^2`` cancellation),
then the normalised values. With ``residual`` the sum is stored in the input type and normalised
as stored.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.ops_library import rows as rowops
from kaio.ops_library.autograd import needs_grad
from kaio.ops_library.operands import Operands
from kaio.prelude import Array, MutArray, f32, i32, min, rsqrt  # noqa: A004


# Rows up to this long multiply their sum by 1/cols. rms_norm's longest one-pass rows (32768
# elements, kept whole in 64 registers a thread) divide: without div.rn's slow-path call ptxas
# hoists the weight loads above the reduction and spills (20 bytes on sm_80 with a residual).
MULTIPLY_UP_TO = 16384


@cache
def layer_norm_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4)
    def layer_norm(x: Array[T], w: Array[T], b: Array[T], y: MutArray[T], mean_out: MutArray[f32],
                   rstd_out: MutArray[f32], rows: i32, cols: i32, eps: f32, inv_cols: f32,
                   R: kaio.constexpr = 1, C: kaio.constexpr = 1024, SINGLE: kaio.constexpr = True,
                   HAS_W: kaio.constexpr = False, HAS_B: kaio.constexpr = False, SAVE: kaio.constexpr = False,
                   BASE_X: kaio.constexpr = 16,
                   BASE_W: kaio.constexpr = 16, BASE_B: kaio.constexpr = 16, BASE_Y: kaio.constexpr = 16):  # fmt: skip
        x, y = kt.multiple_of(x, BASE_X), kt.multiple_of(y, BASE_Y)
        w, b = kt.multiple_of(w, BASE_W), kt.multiple_of(b, BASE_B)
        r0 = i32(kt.program_id(0)) * R
        if SINGLE:
            t = f32(kt.load(x, (r0, 0), (R, C), (rows, cols)))
            inside = kt.expand_dims(kt.arange(C) < cols, 0)
            mean = kt.sum(t, 1) * inv_cols
            d = kt.where(inside, t - kt.expand_dims(mean, 1), 0.0)
            rstd = rsqrt(kt.sum(d * d, 1) * inv_cols + eps)
            if SAVE:  # for the backward: per-row statistics in f32
                kt.store(mean_out, (r0,), mean, (rows,))
                kt.store(rstd_out, (r0,), rstd, (rows,))
            out = d * kt.expand_dims(rstd, 1)
            if HAS_W and HAS_B:  # one rounding: out * w + b
                wt = kt.expand_dims(f32(kt.load(w, (0,), (C,), (cols,))), 0)
                out = kt.fma(out, wt, kt.expand_dims(f32(kt.load(b, (0,), (C,), (cols,))), 0))
            elif HAS_W:
                out = out * kt.expand_dims(f32(kt.load(w, (0,), (C,), (cols,))), 0)
            elif HAS_B:
                out = out + kt.expand_dims(f32(kt.load(b, (0,), (C,), (cols,))), 0)
            kt.store(y, (r0, 0), T(out), (rows, cols))
        else:
            # pass 1: merge each block's (count, mean, sum of squared deviations) into the row's
            mean = kt.zeros((R,), f32)
            m2 = kt.zeros((R,), f32)
            for k0 in range(0, cols, C):
                t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols)))
                seen = f32(k0)
                nb = f32(min(cols - k0, C))
                bmean = kt.sum(t, 1) / nb
                inside = kt.expand_dims(kt.arange(C) + k0 < cols, 0)
                d = kt.where(inside, t - kt.expand_dims(bmean, 1), 0.0)
                delta = bmean - mean
                mean = mean + delta * (nb / (seen + nb))
                m2 = m2 + kt.sum(d * d, 1) + delta * delta * (seen * nb / (seen + nb))
            row_rstd = rsqrt(m2 * inv_cols + eps)
            if SAVE:
                kt.store(mean_out, (r0,), mean, (rows,))
                kt.store(rstd_out, (r0,), row_rstd, (rows,))
            mu = kt.expand_dims(mean, 1)
            rstd = kt.expand_dims(row_rstd, 1)
            for k0 in range(0, cols, C):
                out = (f32(kt.load(x, (r0, k0), (R, C), (rows, cols))) - mu) * rstd
                if HAS_W:
                    out = out * kt.expand_dims(f32(kt.load(w, (k0,), (C,), (cols,))), 0)
                if HAS_B:
                    out = out + kt.expand_dims(f32(kt.load(b, (k0,), (C,), (cols,))), 0)
                kt.store(y, (r0, k0), T(out), (rows, cols))

    return layer_norm


@cache
def rms_norm_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4)
    def rms_norm(x: Array[T], res: Array[T], w: Array[T], y: MutArray[T], h: MutArray[T],
                 rstd_out: MutArray[f32], rows: i32, cols: i32, eps: f32, inv_cols: f32,
                 R: kaio.constexpr = 1, C: kaio.constexpr = 1024, SINGLE: kaio.constexpr = True,
                 HAS_W: kaio.constexpr = False, HAS_RES: kaio.constexpr = False, SAVE: kaio.constexpr = False,
                 BASE_X: kaio.constexpr = 16,
                 BASE_R: kaio.constexpr = 16, BASE_W: kaio.constexpr = 16, BASE_Y: kaio.constexpr = 16,
                 BASE_H: kaio.constexpr = 16):  # fmt: skip
        x, res, w = kt.multiple_of(x, BASE_X), kt.multiple_of(res, BASE_R), kt.multiple_of(w, BASE_W)
        y, h = kt.multiple_of(y, BASE_Y), kt.multiple_of(h, BASE_H)
        r0 = i32(kt.program_id(0)) * R
        if SINGLE:
            if HAS_RES:
                hv = T(f32(kt.load(x, (r0, 0), (R, C), (rows, cols))) + f32(kt.load(res, (r0, 0), (R, C), (rows, cols))))
                kt.store(h, (r0, 0), hv, (rows, cols))
                t = f32(hv)
            else:
                t = f32(kt.load(x, (r0, 0), (R, C), (rows, cols)))
            if C > MULTIPLY_UP_TO:
                rstd = rsqrt(kt.sum(t * t, 1) / f32(cols) + eps)
            else:
                rstd = rsqrt(kt.sum(t * t, 1) * inv_cols + eps)
            if SAVE:  # for the backward: per-row rstd in f32
                kt.store(rstd_out, (r0,), rstd, (rows,))
            out = t * kt.expand_dims(rstd, 1)
            if HAS_W:
                out = out * kt.expand_dims(f32(kt.load(w, (0,), (C,), (cols,))), 0)
            kt.store(y, (r0, 0), T(out), (rows, cols))
        else:
            ss = kt.zeros((R,), f32)
            for k0 in range(0, cols, C):
                if HAS_RES:
                    hv = T(f32(kt.load(x, (r0, k0), (R, C), (rows, cols))) + f32(kt.load(res, (r0, k0), (R, C), (rows, cols))))
                    kt.store(h, (r0, k0), hv, (rows, cols))
                    t = f32(hv)
                else:
                    t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols)))
                ss = ss + kt.sum(t * t, 1)
            row_rstd = rsqrt(ss * inv_cols + eps)
            if SAVE:
                kt.store(rstd_out, (r0,), row_rstd, (rows,))
            rstd = kt.expand_dims(row_rstd, 1)
            for k0 in range(0, cols, C):
                # the sum again from x and res: no read of what other threads wrote
                if HAS_RES:
                    t = f32(T(f32(kt.load(x, (r0, k0), (R, C), (rows, cols))) + f32(kt.load(res, (r0, k0), (R, C), (rows, cols)))))
                else:
                    t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols)))
                out = t * rstd
                if HAS_W:
                    out = out * kt.expand_dims(f32(kt.load(w, (k0,), (C,), (cols,))), 0)
                kt.store(y, (r0, k0), T(out), (rows, cols))

    return rms_norm


def _vector(ops: Operands, op: str, name: str, value: Any, x: Any, cols: int) -> Any:
    if value is None:
        return None
    o = rowops.take_float(ops, op, name, value)
    rowops.same_dtype(op, name, o, x)
    rowops.same_shape(op, name, o, (cols,))
    return o


def _align(o: Any) -> int:
    return rowops.base_alignment(o.ptr) if o is not None else 16


def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5, *, device: Any = None) -> Any:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis (biased variance)."""
    eps = rowops.check_eps("layer_norm", eps)
    if (ops := rowops.torch_op(x, weight, bias, device=device)) is not None:
        if needs_grad(x, weight, bias):  # the form that saves the statistics the backward reads
            return ops.layer_norm_fwd(x, weight, bias, eps)[0]
        return ops.layer_norm(x, weight, bias, eps)
    return run_layer_norm(x, weight, bias, eps, device)


def run_layer_norm(x: Any, weight: Any, bias: Any, eps: float, device: Any, save: bool = False) -> Any:
    """The op itself, without the torch custom-op routing. ``save``: also return the per-row
    mean and rstd (f32, shape ``x.shape[:-1]``) the backward needs: ``(y, mean, rstd)``."""
    op = "layer_norm"
    ops = Operands(op, x, weight, bias, device=device)
    ox = rowops.take_float(ops, op, "x", x)
    rows, cols = rowops.rows_cols(ox.shape, op)
    ow = _vector(ops, op, "weight", weight, ox, cols)
    ob = _vector(ops, op, "bias", bias, ox, cols)
    eps = rowops.check_eps(op, eps)
    oy = ops.output(tuple(ox.shape), ox.dtype)
    orstd = rowops.row_stats(ops, ox, save)
    om = rowops.row_stats(ops, ox, save) if save else orstd  # one stand-in for both when not saving
    if rows and cols:
        blk = rowops.blocks(rows, cols, one_pass=rowops.ONE_PASS, aligned=rowops.rows_aligned(cols, ox, ow, ob, oy))
        args = (ox.value, (ow or ox).value, (ob or ox).value, oy.value, om.value, orstd.value, rows, cols, eps,
                rowops.reciprocal(cols))  # fmt: skip
        rowops.launch(layer_norm_kernel(ox.dtype), blk, blk.grid(rows), args, ops.device,
                      HAS_W=ow is not None, HAS_B=ob is not None, SAVE=save, BASE_X=_align(ox), BASE_W=_align(ow),
                      BASE_B=_align(ob), BASE_Y=_align(oy))  # fmt: skip
    if save:
        return ops.result(oy), ops.result(om), ops.result(orstd)
    return ops.result(oy)


def rms_norm(x: Any, weight: Any = None, eps: float = 1e-6, residual: Any = None, *, device: Any = None) -> Any:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis. With ``residual``: returns
    ``(rms_norm(x + residual) * weight, x + residual)`` from one pass over x and residual."""
    eps = rowops.check_eps("rms_norm", eps)
    if (ops := rowops.torch_op(x, weight, residual, device=device)) is not None:
        if needs_grad(x, weight, residual):  # the forms that save the rstd the backward reads
            if residual is None:
                return ops.rms_norm_fwd(x, weight, eps)[0]
            y, h, _ = ops.add_rms_norm_fwd(x, residual, weight, eps)
            return y, h
        return ops.rms_norm(x, weight, eps) if residual is None else ops.add_rms_norm(x, residual, weight, eps)
    return run_rms_norm(x, weight, eps, residual, device)


def run_rms_norm(x: Any, weight: Any, eps: float, residual: Any, device: Any, save: bool = False) -> Any:
    """The op itself, without the torch custom-op routing. ``save``: also return the per-row
    rstd (f32, shape ``x.shape[:-1]``) the backward needs, last: ``(y, rstd)`` or ``(y, h, rstd)``."""
    op = "rms_norm"
    ops = Operands(op, x, weight, residual, device=device)
    ox = rowops.take_float(ops, op, "x", x)
    rows, cols = rowops.rows_cols(ox.shape, op)
    ow = _vector(ops, op, "weight", weight, ox, cols)
    orr = None
    if residual is not None:
        orr = rowops.take_float(ops, op, "residual", residual)
        rowops.same_dtype(op, "residual", orr, ox)
        rowops.same_shape(op, "residual", orr, tuple(ox.shape))
    eps = rowops.check_eps(op, eps)
    oy = ops.output(tuple(ox.shape), ox.dtype)
    oh = ops.output(tuple(ox.shape), ox.dtype) if orr is not None else None
    orstd = rowops.row_stats(ops, ox, save)
    if rows and cols:
        # rms_norm keeps one value per element live: halves' rows fit twice as long
        blk = rowops.blocks(rows, cols, one_pass=rowops.ONE_PASS_LIGHT if ox.dtype.bits == 16 else rowops.ONE_PASS,
                            aligned=rowops.rows_aligned(cols, ox, orr, ow, oy, oh))  # fmt: skip
        args = (ox.value, (orr or ox).value, (ow or ox).value, oy.value, (oh or oy).value, orstd.value,
                rows, cols, eps, rowops.reciprocal(cols))  # fmt: skip
        rowops.launch(rms_norm_kernel(ox.dtype), blk, blk.grid(rows), args, ops.device,
                      HAS_W=ow is not None, HAS_RES=orr is not None, SAVE=save, BASE_X=_align(ox), BASE_R=_align(orr),
                      BASE_W=_align(ow), BASE_Y=_align(oy), BASE_H=_align(oh))  # fmt: skip
    results = [ops.result(oy)] + ([ops.result(oh)] if oh is not None else []) + ([ops.result(orstd)] if save else [])
    return results[0] if len(results) == 1 else tuple(results)
