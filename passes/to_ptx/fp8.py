"""Conversions to and from the OCP FP8 types (``f8e4m3``, ``f8e5m2``) in PTX.

PTX converts FP8 only in pairs (sm_89 with PTX 8.1): ``cvt.rn.satfinite.e4m3x2.f32 d, hi, lo`` packs
two f32 into the two bytes of a ``.b16``, and ``cvt.rn.f16x2.e4m3x2 d, a`` unpacks the two bytes
of a ``.b16`` into an ``f16x2``. A lone FP8 value lives in the low byte of a 16-bit register (as
an 8-bit integer does), so it converts as the low lane of a pair: the high lane converts 0.0
(or whatever byte sits above it) and is dropped.

- To FP8: from f32 directly; f16 and bf16 widen to f32 first (exact); f64 is rounded to odd in
  f32 first, so that the one rounding to FP8 is correct. ``satfinite``: beyond the largest
  finite value, infinities included, the result is that value with the sign; NaN stays NaN.
- From FP8: every FP8 value is exact in f16 (e5m2 is f16 with fewer fraction bits, e4m3's range
  and precision fit inside f16's), so the f16 is the value, widened or rounded from there.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from kaio.dialects import ptx
from kaio.passes.to_ptx.emitter import FP8_TYPES, PtxEmitter
from kaio.passes.to_ptx.f32_convert import f32_rounded_to_odd, from_f32, to_f32
from xdsl.dialects.builtin import bf16, f16, f32, f64, i16, i32
from xdsl.ir import Attribute, SSAValue



@cache
def _numpy_fp8(kind: str) -> np.dtype:
    """ml_dtypes' FP8 type (loaded on a first FP8 constant: importing it costs more than the
    rest of the lowering's imports)."""
    import ml_dtypes

    return np.dtype({"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[kind])


def is_fp8(t: Attribute) -> bool:
    return t in FP8_TYPES


def fp8_bits(value: float, t: Attribute) -> int:
    """The byte of ``value`` in FP8 type ``t`` (a constant: the compiler rounded it already)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return int(np.array([value], np.float64).astype(_numpy_fp8(FP8_TYPES[t])).view(np.uint8)[0])


def to_fp8(em: PtxEmitter, v: SSAValue, src: Attribute, dst: Attribute) -> SSAValue:
    """``v`` (a float of type ``src``) converted to the FP8 type ``dst``, in a 16-bit register."""
    if src == f64:
        v = f32_rounded_to_odd(em, v, "f64", "f64")
    elif src != f32:
        v = to_f32(em, v)
    spec = f"rn.satfinite.{FP8_TYPES[dst]}x2.f32"
    return em.instr(ptx.CvtOp, spec, [em.const(0.0, f32), v], i16)


def fp8_to_f16(em: PtxEmitter, v: SSAValue, src: Attribute) -> SSAValue:
    """The FP8 value in the low byte of ``v`` as an f16 (exact)."""
    pair = em.instr(ptx.CvtOp, f"rn.f16x2.{FP8_TYPES[src]}x2", [v], i32)
    unpack = ptx.MovOp("b32", [pair], [f16, f16])
    em.emit(unpack)
    return unpack.outs[0]


def from_fp8(em: PtxEmitter, v: SSAValue, src: Attribute, dst: Attribute) -> SSAValue:
    """The FP8 value ``v`` as the float type ``dst``."""
    half = fp8_to_f16(em, v, src)
    if dst == f16:
        return half
    if dst in (f32, f64):
        return em.instr(ptx.CvtOp, f"{'f32' if dst == f32 else 'f64'}.f16", [half], dst)
    assert dst == bf16
    wide = em.instr(ptx.CvtOp, "f32.f16", [half], f32)
    return from_f32(em, wide, bf16)
