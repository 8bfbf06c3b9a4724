"""``kaio.ops_library.silu_and_mul`` and ``gelu_and_mul``: the gated activations of LLM MLPs.

    from kaio.ops_library import silu_and_mul, gelu_and_mul
    y = silu_and_mul(x)                       # x: (..., 2d) -> y: (..., d) = silu(x[..., :d]) * x[..., d:]
    y = gelu_and_mul(x, approximate="tanh")   # "none" (erf, the default) or "tanh", as torch's gelu

f16, bf16 or f32 storage; the activation is computed in f32, rounded to the storage type and
multiplied by the up half in that type (as vLLM's kernels do: one more rounding, at most one
ulp, and a packed ``mul.f16x2`` per pair of halves); the result has x's type and kind. Each program
owns an (R, C) tile of the output and reads the two matching tiles of x (the gate half and the
up half of each row), so any d works and rows of any length split across programs.

The erf form uses Abramowitz & Stegun 7.1.26 for erfc (absolute error below 1.5e-7), written
so that ``1 + erf(x / sqrt 2)`` never cancels for negative x.
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
from kaio.ops_library.operands import Operands
from kaio.prelude import Array, MutArray, abs, exp, f32, i32, tanh  # noqa: A004

SILU, GELU_TANH, GELU_ERF = 0, 1, 2
GELUS = {"none": GELU_ERF, "tanh": GELU_TANH}


@cache
def gated_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4)
    def gated_activation(x: Array[T], y: MutArray[T], rows: i32, d: i32, R: kaio.constexpr = 1,
                         C: kaio.constexpr = 1024, ACT: kaio.constexpr = 0, BASE_X: kaio.constexpr = 16,
                         BASE_Y: kaio.constexpr = 16):  # fmt: skip
        x, y = kt.multiple_of(x, BASE_X), kt.multiple_of(y, BASE_Y)
        r0, c0 = i32(kt.program_id(0)) * R, i32(kt.program_id(1)) * C
        row = d * 2
        a = f32(kt.load(x, (r0, c0), (R, C), (rows, d), strides=(row, 1)))
        g = kt.load(x, (r0, c0 + d), (R, C), (rows, row), strides=(row, 1))
        if ACT == 0:
            act = a / (1.0 + exp(-a))
        elif ACT == 1:
            act = 0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))
        else:
            z = abs(a) * 0.7071067811865476
            t = 1.0 / (1.0 + 0.3275911 * z)
            poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
            erfc = poly * exp(-z * z)  # erfc(|x| / sqrt 2)
            act = 0.5 * a * kt.where(a >= 0.0, 2.0 - erfc, erfc)
        kt.store(y, (r0, c0), T(act) * g, (rows, d))  # the gate product in T: packed for halves

    return gated_activation


def run(op: str, x: Any, act: int, device: Any) -> Any:
    """The op itself, without the torch custom-op routing."""
    ops = Operands(op, x, device=device)
    ox = rowops.take_float(ops, op, "x", x)
    rows, cols = rowops.rows_cols(ox.shape, op)
    if cols % 2:
        raise KaioTypeError(f"{op}: the last dim of `x` must be even (gate and up halves), got shape {ox.shape}")
    d = cols // 2
    oy = ops.output((*ox.shape[:-1], d), ox.dtype)
    if rows and d:
        b = rowops.blocks(rows, d)
        grid = (b.grid(rows), math.ceil(d / b.cols))
        rowops.launch(gated_kernel(ox.dtype), b, grid, (ox.value, oy.value, rows, d), ops.device, ACT=act,
                      BASE_X=rowops.base_alignment(ox.ptr), BASE_Y=rowops.base_alignment(oy.ptr))  # fmt: skip
    return ops.result(oy)


def silu_and_mul(x: Any, *, device: Any = None) -> Any:
    """``silu(x[..., :d]) * x[..., d:]`` for x of shape ``(..., 2d)``; ``silu(a) = a * sigmoid(a)``."""
    if (ops := rowops.torch_op(x, device=device)) is not None:
        return ops.gated_activation(x, SILU)
    return run("silu_and_mul", x, SILU, device)


def gelu_and_mul(x: Any, approximate: str = "none", *, device: Any = None) -> Any:
    """``gelu(x[..., :d]) * x[..., d:]`` for x of shape ``(..., 2d)``; ``approximate``: ``"none"``
    (erf) or ``"tanh"``, as ``torch.nn.functional.gelu``."""
    if not isinstance(approximate, str) or approximate not in GELUS:  # a list is unhashable
        raise KaioTypeError(f"gelu_and_mul: `approximate` is 'none' or 'tanh', got {approximate!r}")
    if (ops := rowops.torch_op(x, device=device)) is not None:
        return ops.gated_activation(x, GELUS[approximate])
    return run("gelu_and_mul", x, GELUS[approximate], device)
