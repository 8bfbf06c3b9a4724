"""``kaio.ops_library.quantize_int8`` / ``quantize_fp8``: symmetric dynamic quantisation, the
activations' half of a W8A8 or fp8 GEMM (``int8_matmul``, ``fp8_matmul``).

    q, scale = quantize_int8(x)                         # per row: scale (M,), q int8
    q, scale = quantize_fp8(x)                          # per tensor: scale (1,), q e4m3
    q, scale = quantize_fp8(x, per_row=True, dtype="e5m2")

``x`` (M, K) is f16, bf16 or f32. ``amax`` is the largest ``|x|`` of a row (or of the tensor),
``scale = amax / QMAX`` (f32) with QMAX 127 for int8, 448 for e4m3 and 57344 for e5m2, and
``q = x * (QMAX / amax)``: rounded half to even and clamped to [-127, 127] for int8, converted
with saturation (``cvt.rn.satfinite``) for fp8; so ``q * scale`` approximates x. A zero row (or
tensor) gets scale 0 and q 0. NaN in x: its row's q is NaN (fp8) or unspecified (int8).

One tile kernel does it (:func:`quantize_rows_kernel`): a program owns R rows, walks them once
for ``amax`` (``kt.max`` of ``abs``) and once more to write q. Per tensor, a first launch writes
every row's amax and the quantising launch reduces them (each program reads the M maxima: a few
KB, next to the M x K elements it quantises).
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from functools import cache
from typing import Any

from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operands
from kaio.ops_library.scaled_matmul import require_arch

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.prelude import Array, MutArray, abs, f32, floor, i32

QUANTIZE, ROW_AMAX, QUANTIZE_PER_TENSOR = 0, 1, 2  # the kernel's MODE
QMAX = {"i8": 127, "f8e4m3": 448, "f8e5m2": 57344}
FP8_NAMES = {"e4m3": "f8e4m3", "e5m2": "f8e5m2"}
R, C = 4, 256  # rows per program, columns per step


@cache
def quantize_rows_kernel(T: dtypes.ScalarType, Q: dtypes.ScalarType) -> Any:
    """The tile kernel quantising ``T`` rows to ``Q`` (MODE: quantise with each row's amax,
    only write each row's amax to ``stats``, or quantise with the amax of all of ``stats``)."""

    @kaio.tile_kernel(num_warps=4)
    def quantize_rows(x: Array[T], q: MutArray[Q], scale: MutArray[f32], stats: MutArray[f32], m: i32, k: i32,
                      QMAX: kaio.constexpr = 127, INTEGER: kaio.constexpr = True, MODE: kaio.constexpr = 0,
                      R: kaio.constexpr = 4, C: kaio.constexpr = 256):  # fmt: skip
        r0 = i32(kt.program_id(0)) * R
        amax = kt.zeros((R,), f32)
        if MODE == QUANTIZE_PER_TENSOR:  # the tensor's amax, from every row's
            for i0 in range(0, m, C):
                amax = kt.maximum(amax, kt.max(kt.load(stats, (i0,), (C,), (m,)), 0))
        else:
            for c0 in range(0, k, C):
                amax = kt.maximum(amax, kt.max(abs(f32(kt.load(x, (r0, c0), (R, C), (m, k)))), 1))
        if MODE == ROW_AMAX:
            kt.store(stats, (r0,), amax, (m,))
        else:
            kt.store(scale, (r0,), amax / f32(QMAX), (m if MODE == QUANTIZE else min(m, 1),))
            inv = kt.expand_dims(kt.where(amax > 0.0, f32(QMAX) / amax, 0.0), 1)
            for c0 in range(0, k, C):
                v = f32(kt.load(x, (r0, c0), (R, C), (m, k))) * inv
                if INTEGER:  # round half to even (numpy's rint), then clamp
                    r = floor(v + 0.5)
                    r = kt.where((r - v == 0.5) & (r - 2.0 * floor(r * 0.5) != 0.0), r - 1.0, r)
                    v = kt.minimum(kt.maximum(r, -f32(QMAX)), f32(QMAX))
                kt.store(q, (r0, c0), Q(v), (m, k))

    return quantize_rows


def check_x(op: str, ops: Any, x: Any) -> Any:
    ox = ops.take("x", x)
    if ox.dtype not in rowops.FLOAT_TYPES or len(ox.shape) != 2:
        raise KaioTypeError(f"{op}: `x` must be a 2-D f16, bf16 or f32 array (M, K), got {ox.dtype.name} {ox.shape}")
    if ox.shape[0] * ox.shape[1] >= 2**31:
        raise KaioValueError(f"{op}: `x` must have fewer than 2**31 elements")
    return ox


def fp8_type(op: str, dtype: Any) -> dtypes.ScalarType:
    """The kaio fp8 type named "e4m3"/"e5m2" (or "f8e4m3"/"f8e5m2")."""
    name = FP8_NAMES.get(dtype, dtype)
    if name not in FP8_NAMES.values():
        raise KaioValueError(f"{op}: `dtype` must be 'e4m3' or 'e5m2', got {dtype!r}")
    return dtypes.BY_NAME[name]


def run(op: str, x: Any, q_type: dtypes.ScalarType, per_row: bool, device: Any = None) -> tuple[Any, Any]:
    """The op itself: (q, scale), without the torch custom-op routing."""
    ops = Operands(op, x, device=device)
    ox = check_x(op, ops, x)
    if q_type.is_fp8:
        require_arch(op, ops.device, 89, "conversion to fp8 (cvt.rn.satfinite.e4m3x2/e5m2x2.f32)")
    m, k = ox.shape
    oq = ops.output((m, k), q_type)
    oscale = ops.output((m,) if per_row else (1,), dtypes.f32)
    if m and k:
        kernel = quantize_rows_kernel(ox.dtype, q_type)
        integer = q_type == dtypes.i8
        consts = {"QMAX": QMAX[q_type.name], "INTEGER": integer, "R": R, "C": C}
        grid = (math.ceil(m / R),)
        if per_row:
            kernel.launch(ops.device, ox.value, oq.value, oscale.value, oscale.value, m, k, grid=grid, MODE=QUANTIZE, **consts)
        else:
            with ops.workspace((m,), dtypes.f32, zero=True) as stats:
                for mode in (ROW_AMAX, QUANTIZE_PER_TENSOR):
                    kernel.launch(ops.device, ox.value, oq.value, oscale.value, stats.value, m, k, grid=grid, MODE=mode, **consts)
    return ops.result(oq), ops.result(oscale)


def quantize_int8(x: Any, *, device: Any = None) -> tuple[Any, Any]:
    """``(q, scale)``: x (M, K) as int8 with one f32 scale per row (see the module doc)."""
    if (ops := rowops.torch_op(x, device=device)) is not None:
        return tuple(ops.quantize_int8(x))  # type: ignore[return-value]
    return run("quantize_int8", x, dtypes.i8, True, device)


def quantize_fp8(x: Any, *, per_row: bool = False, dtype: str = "e4m3", device: Any = None) -> tuple[Any, Any]:
    """``(q, scale)``: x (M, K) as e4m3 (or e5m2) with one f32 scale for the tensor, shape (1,),
    or per row, shape (M,) (see the module doc)."""
    q_type = fp8_type("quantize_fp8", dtype)
    if (ops := rowops.torch_op(x, device=device)) is not None:
        return tuple(ops.quantize_fp8(x, per_row, q_type.name))  # type: ignore[return-value]
    return run("quantize_fp8", x, q_type, per_row, device)
