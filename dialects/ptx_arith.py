"""``ptx`` arithmetic: integer and float add/sub/mul/mad/fma/div/rem/min/max, the unary ops and
the special-function unit (ex2, lg2, sin, cos, tanh)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from kaio.dialects.ptx_base import (
    _ROUND,
    FLOAT_TYPES,
    INT_TYPES,
    TYPE_BITS,
    InstrInfo,
    PtxInstr,
    Requirement,
    _check_width,
    _gate,
    _half_requirements,
)
from kaio.dialects.ptx_grammar import FLOAT_ROUNDING as R
from kaio.dialects.ptx_grammar import TypeRule, rule
from xdsl.irdl import (
    irdl_op_definition,
)
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------- arithmetic

_FLOAT_MODS = _ROUND | {"ftz", "sat"}
_ARITH_TYPES = frozenset(TYPE_BITS) - {"pred", "b8", "u8", "s8", "b16", "b32", "b64", "tf32"}

# type classes of the rules (ptx_grammar): which modifiers each takes, as ptxas has them
_SIGNED = ("s16", "s32", "s64")
_INTS = (*_SIGNED, "u16", "u32", "u64")
_INTS_16_32 = ("s16", "s32", "u16", "u32")
_INTS_64 = ("s64", "u64")
_F16 = ("f16", "f16x2")
_BF16 = ("bf16", "bf16x2")
# add/sub/mul on floats: rounding optional; .ftz on f32 and f16, .sat on them too
_FLOAT_RULES = (
    rule(["f32"], R | {"ftz", "sat"}),
    rule(["f64"], R),
    rule(_F16, R | {"ftz", "sat"}),
    rule(_BF16, R),
)
_MULTIPLY_MODE = ("lo", "hi", "wide")  # of an integer mul/mad: required, .wide up to 32 bits


class _Arith(PtxInstr):
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        types=_ARITH_TYPES, mods=_FLOAT_MODS, imm_args=frozenset({1})
    )

    def requirements(self) -> Iterable[Requirement]:
        # add/sub/mul on bf16 arrived with sm_90; fma.rn.bf16 with sm_80
        yield from _half_requirements(self, 90, (7, 8))


@irdl_op_definition
class AddOp(_Arith):
    name = "ptx.add"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(mods=_FLOAT_MODS | {"cc"})
    RULES: ClassVar[tuple[TypeRule, ...]] = (
        rule(["s32"], {"sat", "cc"}),
        rule(["u32", "s64", "u64"], {"cc"}),
        rule(["s16", "u16"]),
        *_FLOAT_RULES,
    )


@irdl_op_definition
class SubOp(_Arith):
    name = "ptx.sub"
    RULES: ClassVar[tuple[TypeRule, ...]] = (rule(["s32"], {"sat"}), rule(_INTS), *_FLOAT_RULES)


@irdl_op_definition
class MulOp(_Arith):
    """``mul.lo/.hi/.wide`` for integers (``.wide`` doubles the result width), rounding for floats."""

    name = "ptx.mul"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(mods=_FLOAT_MODS | {"lo", "hi", "wide"})
    RULES: ClassVar[tuple[TypeRule, ...]] = (
        rule(_INTS_16_32, required=[_MULTIPLY_MODE]),
        rule(_INTS_64, required=[("lo", "hi")]),
        *_FLOAT_RULES,
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        bits = TYPE_BITS[types[0]]
        _check_width(self.results[0], bits * 2 if "wide" in mods else bits, "mul")
        for v in self.srcs:
            _check_width(v, bits, "mul")


@irdl_op_definition
class MadOp(_Arith):
    """``mad.lo/.hi/.wide`` integer multiply-add (``.wide``: the addend and result are 2x wide)."""

    name = "ptx.mad"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(
        n_args=(3, 3), mods=_FLOAT_MODS | {"lo", "hi", "wide"}, imm_args=frozenset({1, 2})
    )
    RULES: ClassVar[tuple[TypeRule, ...]] = (
        rule(["s32"], {"sat"}, required=[_MULTIPLY_MODE], needs={"sat": ["hi"]}),
        rule(_INTS_16_32, required=[_MULTIPLY_MODE]),
        rule(_INTS_64, required=[("lo", "hi")]),
        rule(["f32"], {"ftz", "sat"}, required=[R]),
        rule(["f64"], required=[R]),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        bits = TYPE_BITS[types[0]]
        wide = 2 if "wide" in mods else 1
        _check_width(self.results[0], bits * wide, "mad")
        _check_width(self.srcs[0], bits, "mad")
        _check_width(self.srcs[1], bits, "mad")
        _check_width(self.srcs[2], bits * wide, "mad")


@irdl_op_definition
class FmaOp(_Arith):
    name = "ptx.fma"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(
        n_args=(3, 3), types=FLOAT_TYPES, imm_args=frozenset({1, 2})
    )
    RULES: ClassVar[tuple[TypeRule, ...]] = (
        rule(["f32"], {"ftz", "sat"}, required=[R]),
        rule(["f64"], required=[R]),
        rule(_F16, {"ftz", "sat", "relu"}, required=[R]),
        rule(_BF16, {"relu"}, required=[R]),
    )

    def requirements(self) -> Iterable[Requirement]:
        yield from _half_requirements(self)


@irdl_op_definition
class DivOp(_Arith):
    name = "ptx.div"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(mods=_FLOAT_MODS | {"approx", "full"})
    RULES: ClassVar[tuple[TypeRule, ...]] = (
        rule(_INTS),
        rule(["f32"], {"ftz"}, required=[R | {"approx", "full"}]),
        rule(["f64"], required=[R]),
    )


@irdl_op_definition
class RemOp(_Arith):
    name = "ptx.rem"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(
        types=INT_TYPES - {"b16", "b32", "b64"}, mods=frozenset()
    )
    RULES: ClassVar[tuple[TypeRule, ...]] = (rule(_INTS),)


class _MinMax(_Arith):
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(mods=frozenset({"ftz", "NaN"}))
    RULES: ClassVar[tuple[TypeRule, ...]] = (
        rule(_INTS),
        rule(["f32"], {"ftz", "NaN"}),
        rule(["f64"]),
        rule(_F16, {"ftz", "NaN"}),
        rule(_BF16, {"NaN"}),
    )

    def requirements(self) -> Iterable[Requirement]:
        if any(t in ("f16", "f16x2", "bf16", "bf16x2") for t in self.ptx_types):
            yield _gate(self.opcode(), 80, (7, 0))


@irdl_op_definition
class MinOp(_MinMax):
    name = "ptx.min"


@irdl_op_definition
class MaxOp(_MinMax):
    name = "ptx.max"


class _Unary(PtxInstr):
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(1, 1), types=_ARITH_TYPES, mods=_FLOAT_MODS | {"approx", "full"}
    )

    def requirements(self) -> Iterable[Requirement]:
        yield from _half_requirements(self)


@irdl_op_definition
class AbsOp(_Unary):
    name = "ptx.abs"
    RULES: ClassVar[tuple[TypeRule, ...]] = (rule(_SIGNED), rule(["f32"], {"ftz"}), rule(["f64"]), rule(_F16, {"ftz"}), rule(_BF16))


@irdl_op_definition
class NegOp(_Unary):
    name = "ptx.neg"
    RULES: ClassVar[tuple[TypeRule, ...]] = AbsOp.RULES


@irdl_op_definition
class CopysignOp(_Arith):
    name = "ptx.copysign"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(types=frozenset(("f32", "f64")), mods=frozenset())
    RULES: ClassVar[tuple[TypeRule, ...]] = (rule(["f32", "f64"]),)


class _FloatUnary(_Unary):
    """Float-only math; ``.approx`` forms are the fast hardware (SFU) versions."""

    INFO: ClassVar[InstrInfo] = _Unary.INFO.but(types=frozenset(("f32", "f64")))


@irdl_op_definition
class RcpOp(_FloatUnary):
    name = "ptx.rcp"
    RULES: ClassVar[tuple[TypeRule, ...]] = (
        rule(["f32"], {"ftz"}, required=[R | {"approx"}]),
        rule(["f64"], {"ftz"}, required=[R | {"approx"}], needs={"approx": ["ftz"]}),
    )


@irdl_op_definition
class SqrtOp(_FloatUnary):
    name = "ptx.sqrt"
    RULES: ClassVar[tuple[TypeRule, ...]] = (rule(["f32"], {"ftz"}, required=[R | {"approx"}]), rule(["f64"], required=[R]))


@irdl_op_definition
class RsqrtOp(_FloatUnary):
    name = "ptx.rsqrt"
    RULES: ClassVar[tuple[TypeRule, ...]] = (rule(["f32", "f64"], {"ftz"}, required=[["approx"]]),)


class _Sfu(_FloatUnary):
    """ex2/lg2/sin/cos: f32 only, .approx; ex2 also has f16 forms (sm_75)."""

    INFO: ClassVar[InstrInfo] = _FloatUnary.INFO.but(types=frozenset(("f32", "f16", "f16x2")))
    RULES: ClassVar[tuple[TypeRule, ...]] = (rule(["f32"], {"ftz"}, required=[["approx"]]), rule(_F16, required=[["approx"]]))

    def requirements(self) -> Iterable[Requirement]:
        if any(t in ("f16", "f16x2") for t in self.ptx_types):
            yield _gate(self.opcode(), 75, (7, 0))


@irdl_op_definition
class Ex2Op(_Sfu):
    name = "ptx.ex2"


@irdl_op_definition
class Lg2Op(_Sfu):
    name = "ptx.lg2"
    INFO: ClassVar[InstrInfo] = _Sfu.INFO.but(types=frozenset(("f32",)))


@irdl_op_definition
class SinOp(_Sfu):
    name = "ptx.sin"
    INFO: ClassVar[InstrInfo] = _Sfu.INFO.but(types=frozenset(("f32",)))


@irdl_op_definition
class CosOp(_Sfu):
    name = "ptx.cos"
    INFO: ClassVar[InstrInfo] = _Sfu.INFO.but(types=frozenset(("f32",)))


@irdl_op_definition
class TanhOp(_Sfu):
    name = "ptx.tanh"
    RULES: ClassVar[tuple[TypeRule, ...]] = (rule(["f32", *_F16], required=[["approx"]]),)

    def requirements(self) -> Iterable[Requirement]:
        yield _gate(self.opcode(), 75, (7, 0))


# --------------------------------------------------------------------------- integer dot products


class _Dot(PtxInstr):
    """``dp4a.atype.btype d, a, b, c`` (``.u32``/``.s32`` each: the signedness of a's and b's
    packed lanes; d and c are s32 when either is signed); sm_61, PTX 5.0."""

    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(3, 3), n_types=2, types=frozenset(("u32", "s32")), min_sm=61, min_ptx=(5, 0)
    )


@irdl_op_definition
class Dp4aOp(_Dot):
    name = "ptx.dp4a"


@irdl_op_definition
class Dp2aOp(_Dot):
    """``dp2a.lo``/``.hi``: a's two 16-bit lanes times bytes 0-1 (lo) or 2-3 (hi) of b."""

    name = "ptx.dp2a"
    INFO: ClassVar[InstrInfo] = _Dot.INFO.but(mods=frozenset(("lo", "hi")))

    def check(self, mods: list[str], types: list[str]) -> None:
        if len([m for m in mods if m in ("lo", "hi")]) != 1:
            raise VerifyException("dp2a needs .lo or .hi")
        super().check(mods, types)
