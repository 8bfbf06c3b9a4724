"""``ptx`` bit manipulation, logic, shifts, comparison (``setp``) and selection (``selp``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from kaio.dialects.ptx_base import (
    TYPE_BITS,
    InstrInfo,
    PtxInstr,
    Requirement,
    _check_width,
    _half_requirements,
)
from kaio.dialects.ptx_grammar import TypeRule, rule
from xdsl.irdl import (
    irdl_op_definition,
)
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------- bits and logic

_BIT_TYPES = frozenset(("pred", "b16", "b32", "b64"))


class _Logic(PtxInstr):
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(types=_BIT_TYPES, imm_args=frozenset({1}))


@irdl_op_definition
class AndOp(_Logic):
    name = "ptx.and"


@irdl_op_definition
class OrOp(_Logic):
    name = "ptx.or"


@irdl_op_definition
class XorOp(_Logic):
    name = "ptx.xor"


@irdl_op_definition
class NotOp(_Logic):
    name = "ptx.not"
    INFO: ClassVar[InstrInfo] = _Logic.INFO.but(n_args=(1, 1))


class _Shift(PtxInstr):
    """The shift amount is always a 32-bit register."""

    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        types=frozenset(("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64")),
        imm_args=frozenset({1}),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        bits = TYPE_BITS[types[0]]
        _check_width(self.results[0], bits, self.mnemonic)
        _check_width(self.srcs[0], bits, self.mnemonic)
        _check_width(self.srcs[1], 32, self.mnemonic)


@irdl_op_definition
class ShlOp(_Shift):
    name = "ptx.shl"


@irdl_op_definition
class ShrOp(_Shift):
    name = "ptx.shr"


@irdl_op_definition
class Lop3Op(PtxInstr):
    """Any 3-input boolean function; the truth table is an 8-bit immediate."""

    name = "ptx.lop3"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(4, 4),
        types=frozenset(("b32",)),
        imm_args=frozenset({0, 1, 2}),
        imm_required=frozenset({3}),
    )


@irdl_op_definition
class PrmtOp(PtxInstr):
    """Byte permute: pick 4 bytes out of two 32-bit registers by a selector."""

    name = "ptx.prmt"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(3, 3),
        types=frozenset(("b32",)),
        mods=frozenset(("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")),
        imm_args=frozenset({2}),
    )

    def opcode(self) -> str:
        mods, types = self.split_spec()  # the mode is written after the type: prmt.b32.f4e
        return ".".join([self.mnemonic, *types, *mods])


@irdl_op_definition
class BfeOp(PtxInstr):
    """Bit-field extract: ``bfe.u32 d, a, pos, len`` (pos and len are 32-bit)."""

    name = "ptx.bfe"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(3, 3), types=frozenset(("u32", "s32", "u64", "s64")), imm_args=frozenset({1, 2})
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        bits = TYPE_BITS[types[0]]
        _check_width(self.results[0], bits, "bfe")
        _check_width(self.srcs[0], bits, "bfe")


@irdl_op_definition
class BfiOp(PtxInstr):
    """Bit-field insert: ``bfi.b32 d, f, b, pos, len``."""

    name = "ptx.bfi"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(4, 4), types=frozenset(("b32", "b64")), imm_args=frozenset({2, 3})
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        bits = TYPE_BITS[types[0]]
        for v in (self.results[0], self.srcs[0], self.srcs[1]):
            _check_width(v, bits, "bfi")


class _BitCount(PtxInstr):
    """popc/clz: the result is always a 32-bit count, whatever the source width."""

    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(n_args=(1, 1), types=frozenset(("b32", "b64")))

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_width(self.results[0], 32, self.mnemonic)
        _check_width(self.srcs[0], TYPE_BITS[types[0]], self.mnemonic)


@irdl_op_definition
class PopcOp(_BitCount):
    name = "ptx.popc"


@irdl_op_definition
class ClzOp(_BitCount):
    name = "ptx.clz"


@irdl_op_definition
class BrevOp(PtxInstr):
    name = "ptx.brev"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(n_args=(1, 1), types=frozenset(("b32", "b64")))


# --------------------------------------------------------------------------- compare and select

_EQUALITY = ("eq", "ne")
_ORDERED = (*_EQUALITY, "lt", "le", "gt", "ge")
_UNSIGNED_CMP = (*_ORDERED, "lo", "ls", "hi", "hs")
_FLOAT_CMP = (*_ORDERED, "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
CMP_OPS = frozenset(_UNSIGNED_CMP + _FLOAT_CMP)
_COMBINE = ("and", "or", "xor")  # setp's optional third predicate


@irdl_op_definition
class SetpOp(PtxInstr):
    """``setp.lt.s32 p, a, b``; with ``.and/.or/.xor`` a third predicate operand combines."""

    name = "ptx.setp"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(1, 2),
        pair_outs=True,
        n_args=(2, 3),
        types=frozenset(TYPE_BITS) - {"pred", "b8", "u8", "s8"},
        mods=CMP_OPS | {"and", "or", "xor", "ftz"},
        imm_args=frozenset({1}),
    )
    # each type class its comparisons (one of them, required); .ftz on f32 and f16
    RULES: ClassVar[tuple[TypeRule, ...]] = (
        rule(["b16", "b32", "b64"], _COMBINE, required=[_EQUALITY]),
        rule(["s16", "s32", "s64"], _COMBINE, required=[_ORDERED]),
        rule(["u16", "u32", "u64"], _COMBINE, required=[_UNSIGNED_CMP]),
        rule(["f32", "f16", "f16x2"], (*_COMBINE, "ftz"), required=[_FLOAT_CMP]),
        rule(["f64", "bf16", "bf16x2"], _COMBINE, required=[_FLOAT_CMP]),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        for v in self.results:
            _check_width(v, 1, "setp")
        bits = TYPE_BITS[types[0]]
        _check_width(self.srcs[0], bits, "setp")
        _check_width(self.srcs[1], bits, "setp")
        if len(self.srcs) == 3:
            _check_width(self.srcs[2], 1, "setp")

    def requirements(self) -> Iterable[Requirement]:
        yield from _half_requirements(self, 90, (7, 8))


@irdl_op_definition
class SelpOp(PtxInstr):
    """``selp.f32 d, a, b, p``: d = p ? a : b."""

    name = "ptx.selp"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(3, 3),
        types=frozenset(TYPE_BITS) - {"pred", "b8", "u8", "s8", "f16x2", "bf16x2", "tf32"},
        imm_args=frozenset({0, 1}),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        bits = TYPE_BITS[types[0]]
        for v in (self.results[0], self.srcs[0], self.srcs[1]):
            _check_width(v, bits, "selp")
        _check_width(self.srcs[2], 1, "selp")
