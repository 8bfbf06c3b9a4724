"""Two registers of a tile at once: packed ``f16x2``/``bf16x2`` arithmetic in ``tile.map`` regions.

A thread's registers 2k and 2k+1 of a 16-bit tile are two halves of one 32-bit word when they
come from a vector load (and go to a vector store as one). A map region is then lowered once per
pair: each half-precision op becomes one packed instruction on the word (``add.rn.f16x2``...),
and every other op runs once per lane on the unpacked registers, as in the one-register
lowering. Words are unpacked (``mov.b32 {lo, hi}``) and packed only where a value crosses
between the two forms. Every packed form rounds each lane exactly as the scalar op does, so the
results are bit-identical:

- ``add sub mul fma`` (``.rn``), ``min max`` (and their ``.NaN`` forms): the same instruction
  on two lanes. bf16 ``add sub mul`` before sm_90 (no ``add.bf16x2``) are ``fma.rn.bf16x2``
  with 1, -1 and -0 (one rounding of the exact result, like the scalar path through f32).
- ``neg abs``: the sign bits of the word (``xor``/``and``), as the scalar lowering does.
- ``truncf(op(extf a, extf b))`` for op in add/sub/mul, a and b of the result's 16-bit type
  (what ``T(f32(a) + f32(b))`` compiles to): the half op on a and b. f32 has more than 2p+2
  bits for both formats, so rounding the f32 result again is the one correct rounding.
- ``truncf`` from f32 (sm_80): ``cvt.rn.f16x2.f32``, one instruction per pair.
- ``extf`` from bf16: the lanes of the word are the high halves of two f32 (``shl``/``and``).
- ``sitofp``/``uitofp`` of a small bit field of a word, less a bounded offset (a dequantiser):
  ``prmt``, ``lop3`` and one packed ``fma`` by the magic-bias trick (``magic_convert``).
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import bf16, f16, f32, i32
from xdsl.ir import Attribute, Block, Operation, SSAValue

from kaio.dialects import ptx
from kaio.passes.to_ptx import LOWERINGS, magic_convert
from kaio.passes.to_ptx.emitter import PtxEmitter, float_spec, reg_type

HALVES = (f16, bf16)
ENABLED = True  # False: every map one register at a time (the tests' reference lowering)
_BITS = {f16: {1.0: 0x3C00, -1.0: 0xBC00, -0.0: 0x8000}, bf16: {1.0: 0x3F80, -1.0: 0xBF80, -0.0: 0x8000}}


class Lanes:
    """Registers r and r+1 of a tile value: two scalar registers, one packed word, or both."""

    __slots__ = ("hi", "lo", "t", "word")

    def __init__(self, t: Attribute, lo: SSAValue | None = None, hi: SSAValue | None = None, word: SSAValue | None = None):
        self.t, self.lo, self.hi, self.word = t, lo, hi, word

    def scalars(self, em: PtxEmitter) -> tuple[SSAValue, SSAValue]:
        if self.lo is None:
            unpack = ptx.MovOp("b32", [self.word], [reg_type(self.t), reg_type(self.t)])
            em.emit(unpack)
            self.lo, self.hi = unpack.outs
        return self.lo, self.hi  # type: ignore[return-value]

    def packed(self, em: PtxEmitter) -> SSAValue:
        if self.word is None:
            lo, hi = self.lo, self.hi
            if lo is hi:  # a splat (a scalar from outside the region, a constant)
                self.word = em.hoisted(("pair", lo), [lo], lambda: em.instr(ptx.MovOp, "b32", [lo, lo], i32))  # type: ignore[list-item]
            else:
                self.word = em.instr(ptx.MovOp, "b32", [lo, hi], i32)  # type: ignore[list-item]
        return self.word


def word_constant(em: PtxEmitter, t: Attribute, value: float) -> SSAValue:
    """A register holding ``value`` in both lanes (packed instructions take no immediates)."""
    bits = _BITS[t][value]
    return em.invariant(("pair-constant", bits), lambda: em.instr(ptx.MovOp, "b32", [em.const(bits | bits << 16, i32)], i32))


def _sm(em: PtxEmitter) -> int:
    return em.arch.sm


# op -> (mnemonic, PTX instruction, modifiers): the ops with one packed instruction
_PACKED: dict[type[Operation], tuple[str, type[ptx.PtxInstr], str]] = {
    arith.AddfOp: ("add", ptx.AddOp, "rn"),
    arith.SubfOp: ("sub", ptx.SubOp, "rn"),
    arith.MulfOp: ("mul", ptx.MulOp, "rn"),
    xmath.FmaOp: ("fma", ptx.FmaOp, "rn"),
    arith.MaxnumfOp: ("max", ptx.MaxOp, ""),
    arith.MinnumfOp: ("min", ptx.MinOp, ""),
    arith.MaximumfOp: ("max", ptx.MaxOp, "NaN"),
    arith.MinimumfOp: ("min", ptx.MinOp, "NaN"),
}
# mnemonic -> oldest sm with the packed form for (f16, bf16); bf16 add/sub/mul go by fma before 90
_PACKED_SM = {"add": (53, 80), "sub": (53, 80), "mul": (53, 80), "fma": (53, 80), "min": (80, 80), "max": (80, 80)}
_SIGN = {arith.NegfOp: (ptx.XorOp, 0x80008000), xmath.AbsFOp: (ptx.AndOp, 0x7FFF7FFF)}
_NARROWABLE = (arith.AddfOp, arith.SubfOp, arith.MulfOp)


def packed_op(em: PtxEmitter, mnemonic: str, cls: type[ptx.PtxInstr], mods: str, t: Attribute, words: list[SSAValue]) -> SSAValue:
    """One packed instruction on words of type ``t`` (bf16 add/sub/mul as fma before sm_90)."""
    x2 = f"{float_spec(t)}x2"
    if t == bf16 and mnemonic in ("add", "sub", "mul") and _sm(em) < 90:
        a, b = words
        if mnemonic == "add":
            args = [a, word_constant(em, t, 1.0), b]
        elif mnemonic == "sub":
            args = [b, word_constant(em, t, -1.0), a]
        else:
            args = [a, b, word_constant(em, t, -0.0)]
        return em.instr(ptx.FmaOp, f"rn.{x2}", args, i32)
    prefix = f"{mods}." if mods else ""
    return em.instr(cls, f"{prefix}{x2}", words, i32)


def _packable(em: PtxEmitter, op: Operation) -> bool:
    t = op.results[0].type if op.results else None
    if t not in HALVES:
        return False
    if type(op) in _SIGN:
        return True
    entry = _PACKED.get(type(op))
    return entry is not None and _sm(em) >= _PACKED_SM[entry[0]][HALVES.index(t)]


def _narrowed(em: PtxEmitter, block: Block) -> tuple[dict[Operation, tuple[Operation, SSAValue, SSAValue]], set[Operation]]:
    """``truncf(op(extf a, extf b))`` patterns with a packed form here: truncf -> (op, a, b);
    and the ops they make dead."""
    found: dict[Operation, tuple[Operation, SSAValue, SSAValue]] = {}
    for op in block.ops:
        if not isinstance(op, arith.TruncFOp) or op.result.type not in HALVES:
            continue
        inner = op.input.owner
        if not isinstance(inner, _NARROWABLE) or inner.parent_block() is not block or not inner.result.has_one_use():
            continue
        if _sm(em) < _PACKED_SM[_PACKED[type(inner)][0]][HALVES.index(op.result.type)]:
            continue
        exts = [v.owner for v in inner.operands]
        if all(isinstance(e, arith.ExtFOp) and e.parent_block() is block and e.input.type == op.result.type for e in exts):
            found[op] = (inner, exts[0].input, exts[1].input)  # type: ignore[union-attr]
    dead: set[Operation] = {inner for inner, _, _ in found.values()}
    for inner, _, _ in list(found.values()):
        for v in inner.operands:
            ext = v.owner
            if all(use.operation in dead for use in v.uses):
                dead.add(ext)  # type: ignore[arg-type]
    return found, dead


def worth_pairing(em: PtxEmitter, block: Block) -> bool:
    """Whether lowering the region two registers at a time saves instructions."""
    if not ENABLED or any(op.regions for op in block.ops):
        return False
    for op in block.ops:
        if _packable(em, op) or magic_convert.match(op, block) is not None:
            return True
        if isinstance(op, arith.TruncFOp) and op.result.type in HALVES and (op.input.type == f32 and _sm(em) >= 80 or op in _narrowed(em, block)[0]):
            return True
        if isinstance(op, arith.ExtFOp) and op.input.type == bf16 and op.result.type == f32:
            return True
    return False


def lower_pair(em: PtxEmitter, block: Block, args: list[Lanes]) -> Lanes:
    """The region's yielded value for two registers, the block's arguments given as ``args``."""
    env: dict[SSAValue, Lanes] = dict(zip(block.args, args, strict=True))
    narrowed, dead = _narrowed(em, block)
    fields = {op: f for op in block.ops if (f := magic_convert.match(op, block)) is not None}
    dead |= magic_convert.dead_ops(fields)

    def get(v: SSAValue) -> Lanes:
        if v not in env:  # defined outside the region: the same in both lanes
            reg = em.value(v)
            env[v] = Lanes(v.type, reg, reg)
        return env[v]

    for op in block.ops:
        if op is block.last_op:
            break
        if op in fields:
            f = fields[op]
            varies = f.offset is not None and magic_convert.constant_int(f.offset) is None
            offset = get(f.offset).scalars(em) if varies else None  # type: ignore[arg-type]
            word = magic_convert.lower(em, op, f, get(f.word).scalars(em), offset)
            env[op.results[0]] = Lanes(op.results[0].type, word=word)
            continue
        if op in dead:
            continue
        if op in narrowed:
            inner, a, b = narrowed[op]
            t = op.result.type
            env[op.result] = Lanes(t, word=packed_op(em, *_PACKED[type(inner)], t, [get(a).packed(em), get(b).packed(em)]))
            continue
        t = op.results[0].type if op.results else None
        if _packable(em, op):
            words = [get(v).packed(em) for v in op.operands]
            if type(op) in _SIGN:
                cls, mask = _SIGN[type(op)]
                word = em.instr(cls, "b32", [words[0], em.const(mask, i32)], i32)
            else:
                word = packed_op(em, *_PACKED[type(op)], t, words)
            env[op.results[0]] = Lanes(t, word=word)
        elif isinstance(op, arith.TruncFOp) and t in HALVES and op.input.type == f32 and _sm(em) >= 80:
            lo, hi = get(op.input).scalars(em)
            env[op.result] = Lanes(t, word=em.instr(ptx.CvtOp, f"rn.{float_spec(t)}x2.f32", [hi, lo], i32))
        elif isinstance(op, arith.ExtFOp) and op.input.type == bf16 and op.result.type == f32 and get(op.input).lo is None:
            word = get(op.input).word
            lo = em.instr(ptx.ShlOp, "b32", [word, em.const(16, i32)], f32)  # type: ignore[list-item]
            hi = em.instr(ptx.AndOp, "b32", [word, em.const(-65536, i32)], f32)  # type: ignore[list-item]
            env[op.result] = Lanes(f32, lo, hi)
        else:
            _scalar_twice(em, op, env)
    return get(block.last_op.operands[0])  # type: ignore[union-attr]


def _scalar_twice(em: PtxEmitter, op: Operation, env: dict[SSAValue, Lanes]) -> None:
    """Lower ``op`` with its one-register rule, once per lane (once if no operand differs)."""
    differ = any(v in env and (env[v].lo is None or env[v].lo is not env[v].hi) for v in op.operands)
    lanes: list[list[SSAValue]] = []
    for lane in (0, 1) if differ else (0,):
        for v in op.operands:
            if v in env:
                em.values[v] = env[v].scalars(em)[lane]
        # a rule may read through an operand to its producer's operands (a load's 64-bit index
        # to the i32 it was extended from): every scalar value of the region holds this lane
        for v, known in env.items():
            if known.lo is not None and v not in op.operands:
                em.values[v] = (known.lo, known.hi)[lane]
        LOWERINGS[type(op)](em, op)
        lanes.append([em.value(r) for r in op.results])
    if len(lanes) == 1:
        lanes.append(lanes[0])
    for r, lo, hi in zip(op.results, lanes[0], lanes[1], strict=True):
        env[r] = Lanes(r.type, lo, hi)
