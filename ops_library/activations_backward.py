"""``kaio.ops_library.silu_and_mul_backward`` and ``gelu_and_mul_backward``: the gradient of the
gated activations with respect to their input.

    from kaio.ops_library import silu_and_mul_backward, gelu_and_mul_backward
    dx = silu_and_mul_backward(dy, x)                        # dy: (..., d), x: (..., 2d) -> dx: (..., 2d)
    dx = gelu_and_mul_backward(dy, x, approximate="tanh")

With ``x = [a | g]`` (gate and up halves) and ``y = act(a) * g``, one pass reads ``dy`` and both
halves of ``x`` and writes both halves of ``dx``: ``da = dy * g * act'(a)`` and
``dg = dy * act(a)`` (Liger-Kernel's SwiGLU/GEGLU backward). Nothing but ``x`` is saved for it:
``act(a)`` is recomputed, in f32, with the forward's formulas.
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
from kaio.ops_library.activations import GELUS, SILU
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, abs, exp, f32, i32, tanh  # noqa: A004


@cache
def gated_backward_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4)
    def gated_activation_backward(dy: Array[T], x: Array[T], dx: MutArray[T], rows: i32, d: i32,
                                  R: kaio.constexpr = 1, C: kaio.constexpr = 1024, ACT: kaio.constexpr = 0,
                                  BASE_DY: kaio.constexpr = 16, BASE_X: kaio.constexpr = 16,
                                  BASE_DX: kaio.constexpr = 16):  # fmt: skip
        dy, x, dx = kt.multiple_of(dy, BASE_DY), kt.multiple_of(x, BASE_X), kt.multiple_of(dx, BASE_DX)
        r0, c0 = i32(kt.program_id(0)) * R, i32(kt.program_id(1)) * C
        row = d * 2
        a = f32(kt.load(x, (r0, c0), (R, C), (rows, d), strides=(row, 1)))
        g = f32(kt.load(x, (r0, c0 + d), (R, C), (rows, row), strides=(row, 1)))
        grad = f32(kt.load(dy, (r0, c0), (R, C), (rows, d)))
        if ACT == 0:
            s = 1.0 / (1.0 + exp(-a))
            act = a * s
            slope = s * (1.0 + a * (1.0 - s))
        elif ACT == 1:
            inner = 0.7978845608028654 * (a + 0.044715 * a * a * a)
            t = tanh(inner)
            act = 0.5 * a * (1.0 + t)
            slope = 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * a * a)
        else:
            # the forward's erfc (Abramowitz & Stegun 7.1.26), so 1 + erf never cancels
            z = abs(a) * 0.7071067811865476
            t = 1.0 / (1.0 + 0.3275911 * z)
            poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
            half_erfc = 0.5 * poly * exp(-z * z)
            cdf = kt.where(a >= 0.0, 1.0 - half_erfc, half_erfc)  # Phi(a)
            act = a * cdf
            slope = cdf + a * 0.3989422804014327 * exp(-0.5 * a * a)  # Phi(a) + a * phi(a)
        kt.store(dx, (r0, c0), T(grad * g * slope), (rows, d), strides=(row, 1))
        kt.store(dx, (r0, c0 + d), T(grad * act), (rows, row), strides=(row, 1))

    return gated_activation_backward


def check(ops: Any, op: str, grad_out: Any, x: Any) -> tuple[Operand, Operand, int, int]:
    """The operands (``ops``: an ``Operands``, or tensor metadata for a fake), rows and d."""
    ox = rowops.take_float(ops, op, "x", x)
    ody = rowops.take_float(ops, op, "grad_out", grad_out)
    rows, cols = rowops.rows_cols(ox.shape, op)
    if cols % 2:
        raise KaioTypeError(f"{op}: the last dim of `x` must be even (gate and up halves), got shape {ox.shape}")
    rowops.same_shape(op, "grad_out", ody, (*ox.shape[:-1], cols // 2))
    rowops.same_dtype(op, "grad_out", ody, ox)
    return ody, ox, rows, cols // 2


def run(op: str, grad_out: Any, x: Any, act: int, device: Any) -> Any:
    """The op itself, without the torch custom-op routing."""
    ops = Operands(op, grad_out, x, device=device)
    ody, ox, rows, d = check(ops, op, grad_out, x)
    odx = ops.output(tuple(ox.shape), ox.dtype)
    if rows and d:
        b = rowops.blocks(rows, d)
        grid = (b.grid(rows), math.ceil(d / b.cols))
        args = (ody.value, ox.value, odx.value, rows, d)
        rowops.launch(gated_backward_kernel(ox.dtype), b, grid, args, ops.device, ACT=act,
                      BASE_DY=rowops.base_alignment(ody.ptr), BASE_X=rowops.base_alignment(ox.ptr),
                      BASE_DX=rowops.base_alignment(odx.ptr))  # fmt: skip
    return ops.result(odx)


def silu_and_mul_backward(grad_out: Any, x: Any, *, device: Any = None) -> Any:
    """The gradient of ``silu_and_mul`` at ``x`` (..., 2d) for ``grad_out`` (..., d): (..., 2d)."""
    if (ops := rowops.torch_op(grad_out, x, device=device)) is not None:
        return ops.gated_activation_backward(grad_out, x, SILU)
    return run("silu_and_mul_backward", grad_out, x, SILU, device)


def gelu_and_mul_backward(grad_out: Any, x: Any, *, approximate: str = "none", device: Any = None) -> Any:
    """The gradient of ``gelu_and_mul(x, approximate)`` at ``x`` (..., 2d) for ``grad_out``
    (..., d): (..., 2d)."""
    if not isinstance(approximate, str) or approximate not in GELUS:
        raise KaioTypeError(f"gelu_and_mul_backward: `approximate` is 'none' or 'tanh', got {approximate!r}")
    if (ops := rowops.torch_op(grad_out, x, device=device)) is not None:
        return ops.gated_activation_backward(grad_out, x, GELUS[approximate])
    return run("gelu_and_mul_backward", grad_out, x, GELUS[approximate], device)
