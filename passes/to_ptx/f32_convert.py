"""Conversions through f32 that the arithmetic lowering (``arith_math``) and the FP8 conversions
(``fp8``) share: a float widened to f32, an f32 rounded to a narrower float, and a wider value in
f32 rounded to odd (so that one more rounding, to bf16 or FP8, is the one correct rounding).

A leaf of the ``to_ptx`` rules: it imports only the emitter, so both of them import it and
neither imports the other back.
"""

from __future__ import annotations

from kaio.dialects import ptx
from kaio.passes.to_ptx.emitter import PtxEmitter, float_spec
from xdsl.dialects.builtin import bf16, f32, i1, i32
from xdsl.ir import Attribute, SSAValue


def to_f32(em: PtxEmitter, v: SSAValue) -> SSAValue:
    """The float ``v`` as an f32 (exact: f16 and bf16 widen)."""
    if v.type == f32:
        return v
    if v.type == bf16:  # bf16 is the high half of an f32: no conversion instruction needed
        return em.instr(ptx.MovOp, "b32", [em.const(0, bf16), v], f32)
    return em.instr(ptx.CvtOp, f"f32.{float_spec(v.type)}", [v], f32)


def from_f32(em: PtxEmitter, v: SSAValue, t: Attribute) -> SSAValue:
    """The f32 ``v`` rounded to nearest in the float type ``t``."""
    if t == f32:
        return v
    return em.instr(ptx.CvtOp, f"rn.{float_spec(t)}.f32", [v], t)


def f32_rounded_to_odd(em: PtxEmitter, v: SSAValue, spec: str, back: str) -> SSAValue:
    """``v`` (a 32/64-bit integer of PTX type ``spec``, or an f64) in f32 rounded to odd: truncated,
    its last bit set when that lost anything. Rounding an f32 to nearest twice (source -> f32 ->
    bf16) can land a value that was just off a bf16 halfway point exactly on it and round it the
    wrong way; f32 keeps more than two bits beyond bf16, so rounding a round-to-odd f32 to bf16 is
    the one correct rounding. ``back`` converts the f32 back to ``v``'s type to test exactness."""
    truncated = em.instr(ptx.CvtOp, f"rz.f32.{spec}", [v], f32)
    again = em.instr(ptx.CvtOp, f"{back}.f32", [truncated], v.type)
    compare = "f64" if spec == "f64" else "b" + spec[1:]
    inexact = em.instr(ptx.SetpOp, f"ne.{compare}", [again, v], i1)
    bits = em.instr(ptx.MovOp, "b32", [truncated], i32)
    sticky = em.instr(ptx.SelpOp, "b32", [em.const(1, i32), em.const(0, i32), inexact], i32)
    odd = em.instr(ptx.OrOp, "b32", [bits, sticky], i32)
    return em.instr(ptx.MovOp, "b32", [odd], f32)
