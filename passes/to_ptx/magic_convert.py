"""Small integer fields to ``f16``/``bf16`` two lanes at once, by the magic-bias trick (no ``cvt``).

A dequantiser converts bit fields of packed words: ``T(((w >> c) & m) - z)`` (GPTQ: a 4-bit
weight less its zero point). One ``cvt.rn.f16.s32`` per element is a quarter-rate instruction,
after a shift, a mask and a subtract. The half-precision number ``0x6400 | u`` is exactly
``1024 + u`` for ``u < 1024`` (its exponent is 10, its 10 mantissa bits are u; ``0x4300 | u`` is
``128 + u`` in bf16 for ``u < 128``), so for two lanes of a map (registers 2k and 2k+1, words
``w_lo`` and ``w_hi``), as Marlin and FasterTransformer do:

- ``prmt`` moves the byte holding the field of each word into the low byte of its half (when
  the field lies in one byte, at bit s of it; else each word is shifted first and s = 0);
- one ``lop3`` keeps the two fields and ORs in the magic exponent: ``1024 + u * 2^s`` per lane;
- one ``fma.rn.f16x2`` by ``2^-s`` and ``-(1024 * 2^-s + z)`` (a ``sub`` when s = 0): ``u - z``.

Exact: ``1024 + u * 2^s`` and its product by ``2^-s`` are exact, and so is the constant
``1024 * 2^-s + z`` when the IR proves z in a range where it is an integer the format holds
(``value_facts.int_range``; |C| <= 2048 in f16, 256 in bf16). The ``fma`` then rounds the exact
``u - z`` once, to nearest even, as ``cvt.rn`` does: the results are bit-identical to the
one-register lowering. A constant z costs nothing; a z that varies per lane costs a subtract and
a ``cvt`` per lane, the same for every map and row that reads it (ptxas merges the copies).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import bf16, f16, f32, i32
from xdsl.ir import Block, Operation, SSAValue

from kaio.dialects import ptx
from kaio.passes.to_ptx.emitter import PtxEmitter, float_spec
from kaio.passes.value_facts import constant_int, int_range

# format -> (the bits of its magic number M, M, mantissa bits: u * 2^s must stay below 2^bits,
# the largest integer magnitude it holds exactly)
_MAGIC = {f16: (0x6400, 1024, 10, 2048), bf16: (0x4300, 128, 7, 256)}
_AND_OR = 0xEA  # lop3 table of (a & b) | c


@dataclass(frozen=True)
class Field:
    """``T((word >> shift) & (2^bits - 1) + sign * offset)``; ``offset`` None: no term."""

    word: SSAValue
    shift: int
    bits: int
    offset: SSAValue | None
    sign: int  # +1: addi, -1: subi
    chain: tuple[Operation, ...]  # the integer ops it converts, the one the conversion reads first


def match(op: Operation, block: Block) -> Field | None:
    """The field ``op`` (an int-to-float conversion in ``block``) converts, if the trick is exact."""
    if not isinstance(op, arith.SIToFPOp | arith.UIToFPOp) or op.result.type not in _MAGIC or op.input.type != i32:
        return None
    _, big, mantissa, limit = _MAGIC[op.result.type]
    chain: list[Operation] = []
    v, offset, sign = op.input, None, 1
    owner = v.owner
    if isinstance(owner, arith.AddiOp | arith.SubiOp) and owner.parent_block() is block:
        sign = -1 if isinstance(owner, arith.SubiOp) else 1
        masked = [x for x in (owner.lhs, owner.rhs) if _mask_bits(x) is not None]
        if not masked or sign < 0 and masked[0] is not owner.lhs:
            return None
        v = masked[0]
        offset = owner.rhs if v is owner.lhs else owner.lhs
        chain.append(owner)
    bits = _mask_bits(v)
    if bits is None or v.owner.parent_block() is not block:  # type: ignore[union-attr]
        return None
    chain.append(v.owner)  # type: ignore[arg-type]
    x = next((o for o in v.owner.operands if constant_int(o) is None), None)  # type: ignore[union-attr]
    if x is None:
        return None
    word, shift = x, 0
    if isinstance(x.owner, arith.ShRUIOp | arith.ShRSIOp) and (c := constant_int(x.owner.rhs)) is not None and x.owner.parent_block() is block:
        word, shift = x.owner.lhs, c
        chain.append(x.owner)
    if not 0 <= shift or shift + bits > 32 or bits > mantissa or word.type != i32:
        return None  # a field past bit 31 takes sign bits; wider than the mantissa: inexact
    if offset is not None:
        bound = int_range(offset)
        if bound is None:
            return None
        s = _in_byte_shift(shift, bits, mantissa)
        base = big >> (s or 0)
        if not all(abs(base - sign * b) <= limit for b in bound):
            return None
    return Field(word, shift, bits, offset, sign, tuple(chain))


def dead_ops(fields: dict[Operation, Field]) -> set[Operation]:
    """The chains' ops that nothing but the chain and its conversion reads (their lanes are
    computed by the conversion instead), the conversions included."""
    dead: set[Operation] = set(fields)
    for f in fields.values():
        for op in f.chain:  # outermost first: each op's readers are decided before it
            if all(use.operation in dead for r in op.results for use in r.uses):
                dead.add(op)
    return dead


def lower(em: PtxEmitter, op: Operation, f: Field, word_lanes: tuple[SSAValue, SSAValue], offset_lanes: tuple[SSAValue, SSAValue] | None) -> SSAValue:
    """The packed word of ``op``'s two lanes, the words' registers given as ``word_lanes``."""
    t = op.results[0].type
    magic, big, mantissa, _ = _MAGIC[t]
    lo, hi = word_lanes
    s = _in_byte_shift(f.shift, f.bits, mantissa)
    if s is None:  # the field spans two bytes: shift each word, then take the two low halves
        if f.shift:
            lo, hi = (em.instr(ptx.ShrOp, "b32", [w, em.const(f.shift, i32)], i32) for w in (lo, hi))
        s, select = 0, 0x5410
    else:
        b = f.shift // 8
        select = b | b << 4 | (b + 4) << 8 | (b + 4) << 12
    picked = em.instr(ptx.PrmtOp, "b32", [lo, hi, em.const(select, i32)], i32)
    mask = ((1 << f.bits) - 1) << s
    args = [picked, em.const(mask | mask << 16, i32), em.const(magic | magic << 16, i32), em.const(_AND_OR, i32)]
    biased = em.instr(ptx.Lop3Op, "b32", args, i32)  # M + u * 2^s in each lane
    bias = _negated_bias(em, t, big >> s, f, offset_lanes)  # -(M * 2^-s + sign * offset)
    x2 = f"{float_spec(t)}x2"
    if s == 0 and (t == f16 or em.arch.sm >= 90):
        return em.instr(ptx.AddOp, f"rn.{x2}", [biased, bias], i32)
    return em.instr(ptx.FmaOp, f"rn.{x2}", [biased, _word(em, t, 2.0**-s), bias], i32)


def _negated_bias(em: PtxEmitter, t: object, base: int, f: Field, offset_lanes: tuple[SSAValue, SSAValue] | None) -> SSAValue:
    """-(M * 2^-s) + sign * offset in both lanes: what the biased lanes, scaled, are added."""
    if f.offset is None or (c := constant_int(f.offset)) is not None:
        return _word(em, t, float(-base + f.sign * (c if f.offset is not None else 0)))
    assert offset_lanes is not None
    lanes = []
    for z in dict.fromkeys(offset_lanes):  # one lane when both are the same register
        # the integer first (int_range bounds it where the format holds it), then one exact cvt
        n = em.instr(ptx.AddOp, "s32", [z, em.const(-base, i32)], i32) if f.sign > 0 else em.instr(ptx.SubOp, "s32", [em.const(-base, i32), z], i32)
        lanes.append(_to_half(em, t, n))
    return em.instr(ptx.MovOp, "b32", [lanes[0], lanes[-1]], i32)


def _to_half(em: PtxEmitter, t: object, n: SSAValue) -> SSAValue:
    spec = float_spec(t)  # type: ignore[arg-type]
    if t == bf16 and em.arch.sm < 90:  # no cvt.bf16 from integers before sm_90; exact through f32
        wide = em.instr(ptx.CvtOp, "rn.f32.s32", [n], f32)
        return em.instr(ptx.CvtOp, f"rn.{spec}.f32", [wide], t)  # type: ignore[arg-type]
    return em.instr(ptx.CvtOp, f"rn.{spec}.s32", [n], t)  # type: ignore[arg-type]


def _word(em: PtxEmitter, t: object, value: float) -> SSAValue:
    """A register holding ``value`` (exact in ``t``) in both lanes."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0] >> 16 if t == bf16 else struct.unpack("<H", struct.pack("<e", value))[0]
    return em.invariant(("pair-constant", bits), lambda: em.instr(ptx.MovOp, "b32", [em.const(bits | bits << 16, i32)], i32))


def _mask_bits(v: SSAValue) -> int | None:
    """b when ``v`` is ``x & (2^b - 1)`` (either operand the constant), else None."""
    if not isinstance(v.owner, arith.AndIOp):
        return None
    for c in map(constant_int, v.owner.operands):
        if c is not None and c > 0 and c & (c + 1) == 0:
            return c.bit_length()
    return None


def _in_byte_shift(shift: int, bits: int, mantissa: int) -> int | None:
    """Where the field starts in its byte, when it lies in one and ``u * 2^s`` fits the
    mantissa; None: the words are shifted instead."""
    s = shift % 8
    return s if s + bits <= 8 and s + bits <= mantissa else None
