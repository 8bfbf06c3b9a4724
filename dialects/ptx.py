"""The ``ptx`` dialect: one op per PTX instruction. The single place PTX knowledge lives.

Each op knows its spelling (mnemonic + ``spec``, the dot-separated modifiers and types written
after it: ``add`` + ``"lo.s32"``), which modifiers and types it accepts, the register widths of
its operands, the oldest GPU and PTX ISA that have it, and how it prints as PTX text. The
printer (``kaio.targets.ptx.printer``) is a thin walk calling :meth:`PtxInstr.ptx`.

Values are virtual registers: every result is a fresh register of the class of its type (i1
``.pred``, i16/f16/bf16 ``.b16``, i32 ``.b32``, f32 ``.f32``, i64 ``.b64``, f64 ``.f64``).
Control flow is flat: ``ptx.label`` and ``ptx.bra`` in one block. The one non-SSA op is
``ptx.assign`` (``mov`` into an existing register), used for loop-carried values and the
results of branches. ``ptx.const`` values are printed as immediates where an instruction takes
one. Any instruction may be predicated (``guard = "@"`` or ``"@!"``; the predicate is then the
last operand).

Textual form: ``%d = ptx.add s32 %a, %b : (i32, i32) -> i32``,
``ptx.st global.f32 [%p + 4], %v if %q : (i64, f32, i1) -> ()``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    I64,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove, NoTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------- types and registers

TYPE_BITS: dict[str, int] = {
    "pred": 1,
    **dict.fromkeys(("b8", "u8", "s8"), 8),
    **dict.fromkeys(("b16", "u16", "s16", "f16", "bf16"), 16),
    **dict.fromkeys(("b32", "u32", "s32", "f32", "f16x2", "bf16x2", "tf32"), 32),
    **dict.fromkeys(("b64", "u64", "s64", "f64"), 64),
}
INT_TYPES = frozenset(t for t in TYPE_BITS if t[0] in "bsu" and t != "bf16" and t != "bf16x2")
FLOAT_TYPES = frozenset(("f16", "bf16", "f32", "f64", "f16x2", "bf16x2"))

# xDSL type of a virtual register -> (register name prefix, .reg declaration type)
REGISTER_CLASSES: dict[Attribute, tuple[str, str]] = {
    i1: ("p", "pred"),
    i16: ("rs", "b16"),
    f16: ("rs", "b16"),
    bf16: ("rs", "b16"),
    i32: ("r", "b32"),
    f32: ("f", "f32"),
    i64: ("rd", "b64"),
    f64: ("fd", "f64"),
}


def register_bits(t: Attribute) -> int:
    if t == i1:
        return 1
    width = getattr(t, "bitwidth", None)
    if width is None or t not in REGISTER_CLASSES:
        raise VerifyException(f"{t} is not a PTX register type")
    return int(width)


def register_type(ptx_type: str) -> Attribute:
    """The register type holding values of a PTX type (``u32`` -> i32, ``f32`` -> f32)."""
    if ptx_type == "pred":
        return i1
    if ptx_type in ("f32", "f64", "f16", "bf16"):
        return {"f32": f32, "f64": f64, "f16": f16, "bf16": bf16}[ptx_type]
    return {8: i16, 16: i16, 32: i32, 64: i64}[TYPE_BITS[ptx_type]]


def _check_width(v: SSAValue, bits: int, what: str) -> None:
    have = register_bits(v.type)
    if bits == 8:  # 8-bit values live in 16-bit registers, as nvcc does it
        bits = 16
    if have != bits:
        raise VerifyException(f"{what} needs a {bits}-bit register, got {v.type}")


@dataclass(frozen=True)
class Requirement:
    """A feature an instruction needs: the oldest sm that has it and the PTX ISA that spells it."""

    feature: str
    min_sm: int
    min_ptx: tuple[int, int]
    # only the "a" target of min_sm has it (wgmma on sm_90a): neither sm_90 nor a later sm
    arch_specific: bool = False

    @property
    def min_target(self) -> str:
        return f"sm_{self.min_sm}{'a' if self.arch_specific else ''}"

    def met_by(self, sm: int, arch_specific: bool) -> bool:
        if self.arch_specific:
            return arch_specific and sm == self.min_sm
        return sm >= self.min_sm

    def error(self, arch_name: str) -> Exception:
        """The KaioTargetError for a target that lacks this feature."""
        from kaio.errors import KaioTargetError

        if not self.arch_specific:
            return KaioTargetError(self.feature, self.min_sm, arch_name)
        return KaioTargetError(
            self.feature,
            self.min_sm,
            arch_name,
            f"{self.feature} needs {self.min_target} (arch-specific); the target is {arch_name}",
        )


# --------------------------------------------------------------------------- the instruction base


@lru_cache(maxsize=4096)
def _string(text: str) -> StringAttr:
    """Specs and symbols repeat: build each StringAttr once (attributes are immutable)."""
    return StringAttr(text)


RegName = Callable[[SSAValue], str]
_BARE_SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")


@dataclass(frozen=True)
class InstrInfo:
    """What an instruction accepts; families share one and members tweak it with :meth:`but`."""

    mnemonic: str = ""  # default: the op name without "ptx."
    n_outs: tuple[int, int] = (1, 1)
    n_args: tuple[int, int] = (2, 2)  # sources, without the guard predicate
    n_types: int = 1  # type tokens at the end of the spec (cvt: 2, mma: 4)
    types: frozenset[str] = frozenset(TYPE_BITS)
    mods: frozenset[str] = frozenset()
    imm_args: frozenset[int] = frozenset()  # source positions that may be immediates
    imm_required: frozenset[int] = frozenset()  # ... that must be (ptx.const)
    min_sm: int = 0
    min_ptx: tuple[int, int] = (1, 0)
    has_address: bool = False  # args[0] is a memory address: printed [%a + offset]
    group_outs: bool = False  # several outs print as one vector {%a, %b}
    pair_outs: bool = False  # two outs print as d|p (setp's second predicate, shfl's valid bit)

    def but(self, **changes: object) -> "InstrInfo":
        return replace(self, **changes)  # type: ignore[arg-type]


class PtxInstr(IRDLOperation):
    """Base of every PTX instruction op; concrete ops mostly only name themselves."""

    INFO: ClassVar[InstrInfo] = InstrInfo()

    spec = prop_def(StringAttr)
    guard = opt_prop_def(StringAttr)  # "@" or "@!": the last arg is the predicate
    offset = opt_prop_def(IntegerAttr)  # address displacement in bytes
    symbol = opt_prop_def(StringAttr)  # address by name: [symbol + offset]
    args = var_operand_def()
    outs = var_result_def()

    def __init__(
        self,
        spec: str,
        args: Sequence[SSAValue] = (),
        out_types: Sequence[Attribute] = (),
        *,
        guard: SSAValue | None = None,
        negate: bool = False,
        offset: int = 0,
        symbol: str | None = None,
    ):
        props: dict[str, Attribute] = {"spec": _string(spec)}
        operands = list(args)
        if guard is not None:
            props["guard"] = _string("@!" if negate else "@")
            operands.append(guard)
        if offset:
            props["offset"] = IntegerAttr(offset, i64)
        if symbol is not None:
            props["symbol"] = _string(symbol)
        # Operation's own constructor: the IRDL one re-checks every argument (3x slower), and
        # the verifier checks the same things once the module is complete.
        Operation.__init__(self, operands=operands, result_types=out_types, properties=props)

    # -- structure --------------------------------------------------------------------------

    @property
    def spec_text(self) -> str:
        # properties[...] instead of the IRDL accessor: printing reads this for every op
        return self.properties["spec"].data  # type: ignore[attr-defined]

    @property
    def mnemonic(self) -> str:
        return self.INFO.mnemonic or self.name[4:]

    @property
    def srcs(self) -> tuple[SSAValue, ...]:
        """Source operands, without the guard predicate."""
        operands = self.operands
        return tuple(operands[:-1]) if "guard" in self.properties else tuple(operands)

    @property
    def guard_value(self) -> SSAValue | None:
        return self.operands[-1] if self.guard is not None else None

    def split_spec(self) -> tuple[list[str], list[str]]:
        tokens = self.spec_text.split(".") if self.spec_text else []
        n = self.INFO.n_types
        mods, types = (tokens[:-n], tokens[-n:]) if n else (tokens, [])
        return mods, types

    @property
    def ptx_types(self) -> list[str]:
        return self.split_spec()[1]

    @property
    def mods(self) -> list[str]:
        return self.split_spec()[0]

    # -- verification -----------------------------------------------------------------------

    def verify_(self) -> None:
        mods, types = self.split_spec()
        name = self.mnemonic
        if len(types) != self.INFO.n_types or any(t not in self.INFO.types for t in types):
            raise VerifyException(
                f"{name}.{self.spec_text}: expected {self.INFO.n_types} type(s) among {sorted(self.INFO.types)}"
            )
        bad = [m for m in mods if m not in self.INFO.mods]
        if bad:
            raise VerifyException(f"{name}.{self.spec_text}: unknown modifier(s) {bad}")
        lo, hi = self.INFO.n_outs
        if not lo <= len(self.results) <= hi:
            raise VerifyException(f"{name} has {lo}..{hi} results, got {len(self.results)}")
        lo, hi = self.INFO.n_args
        if not lo <= len(self.srcs) <= hi:
            raise VerifyException(f"{name} takes {lo}..{hi} operands, got {len(self.srcs)}")
        if self.guard is not None:
            if self.guard.data not in ("@", "@!") or self.operands[-1].type != i1:
                raise VerifyException(f"{name}: the guard must be an i1 predicate")
        for pos in self.INFO.imm_required:
            if not isinstance(self.srcs[pos].owner, ConstOp):
                raise VerifyException(f"{name}: operand {pos} must be a ptx.const immediate")
        if self.INFO.has_address and self.symbol is None and not self.srcs:
            raise VerifyException(f"{name} needs an address operand or a symbol")
        self.check(mods, types)

    def check(self, mods: list[str], types: list[str]) -> None:
        """Register widths; the default: all outs and value sources have the type's width."""
        bits = TYPE_BITS[types[0]] if types else 32
        for v in self.results:
            _check_width(v, bits, self.mnemonic)
        for v in self.value_srcs():
            _check_width(v, bits, self.mnemonic)

    def value_srcs(self) -> tuple[SSAValue, ...]:
        srcs = self.srcs
        return srcs[1:] if self.INFO.has_address and self.symbol is None else srcs

    # -- targets ------------------------------------------------------------------------------

    def requirements(self) -> Iterable[Requirement]:
        if self.INFO.min_sm or self.INFO.min_ptx > (1, 0):
            yield Requirement(f"{self.mnemonic}", self.INFO.min_sm, self.INFO.min_ptx)

    # -- PTX text -------------------------------------------------------------------------------

    def opcode(self) -> str:
        return f"{self.mnemonic}.{self.spec_text}" if self.spec_text else self.mnemonic

    def address_text(self, reg: RegName) -> str:
        base = self.symbol.data if self.symbol is not None else reg(self.srcs[0])
        off = self.offset.value.data if self.offset is not None else 0
        return f"[{base}+{off}]" if off > 0 else f"[{base}{off}]" if off < 0 else f"[{base}]"

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        """Operands in PTX order after the opcode (destinations first)."""
        outs = [reg(v) for v in self.results]
        if self.INFO.group_outs and len(outs) > 1:
            outs = ["{" + ", ".join(outs) + "}"]
        elif self.INFO.pair_outs and len(outs) == 2:
            outs = [f"{outs[0]}|{outs[1]}"]
        srcs = self.value_srcs()
        first = 1 if self.INFO.has_address and self.symbol is None else 0
        texts = [
            imm(v) if (i + first) in self.INFO.imm_args | self.INFO.imm_required else reg(v)
            for i, v in enumerate(srcs)
        ]
        if self.INFO.has_address:
            texts.insert(0, self.address_text(reg))
        return outs + texts

    def ptx(self, reg: RegName, imm: RegName) -> str:
        guard = f"{self.guard.data}{reg(self.operands[-1])} " if self.guard is not None else ""
        operands = ", ".join(self.operand_texts(reg, imm))
        return f"{guard}{self.opcode()}{' ' + operands if operands else ''};"

    # -- MLIR text: %d = ptx.add s32 %a, %b if %p : (i32, i32, i1) -> (i32) ------------------

    def print(self, printer: Printer) -> None:
        if self.spec_text:
            # specs with "::" (``shared::cta``) or a leading digit (``2d``) are no identifier
            if _BARE_SPEC.fullmatch(self.spec_text):
                printer.print_string(f" {self.spec_text}")
            else:
                printer.print_string(" ")
                printer.print_string_literal(self.spec_text)
        srcs = list(self.srcs)
        items: list[Callable[[], None]] = []
        if self.INFO.has_address:
            off = self.offset.value.data if self.offset is not None else 0
            suffix = f" + {off}]" if off else "]"
            if self.symbol is not None:
                items.append(
                    lambda: (
                        printer.print_string("["),
                        printer.print_symbol_name(self.symbol.data),
                        printer.print_string(suffix),
                    )
                )
            else:
                base = srcs.pop(0)
                items.append(
                    lambda: (
                        printer.print_string("["),
                        printer.print_ssa_value(base),
                        printer.print_string(suffix),
                    )
                )
        elif self.symbol is not None:
            items.append(lambda: printer.print_symbol_name(self.symbol.data))
        items += [lambda v=v: printer.print_ssa_value(v) for v in srcs]
        for i, item in enumerate(items):
            printer.print_string(", " if i else " ")
            item()
        if self.guard is not None:
            printer.print_string(" ifnot " if self.guard.data == "@!" else " if ")
            printer.print_ssa_value(self.operands[-1])
        self.print_extra_props(printer)
        if self.attributes:
            printer.print_op_attributes(self.attributes)
        printer.print_string(" : (")
        printer.print_list([a.type for a in self.operands], printer.print_attribute)
        printer.print_string(") -> (")
        printer.print_list([r.type for r in self.results], printer.print_attribute)
        printer.print_string(")")

    def print_extra_props(self, printer: Printer) -> None:
        """Subclasses with properties of their own print them here (``label``, ...)."""

    @classmethod
    def parse_extra_props(cls, parser: Parser) -> dict[str, Attribute]:
        return {}

    @classmethod
    def parse(cls, parser: Parser) -> PtxInstr:
        spec = parser.parse_optional_identifier() or parser.parse_optional_str_literal() or ""
        props: dict[str, Attribute] = {"spec": StringAttr(spec)}
        operands: list[UnresolvedOperand] = []

        def parse_item() -> bool:
            if parser.parse_optional_punctuation("[") is not None:
                sym = parser.parse_optional_symbol_name()
                if sym is not None:
                    props["symbol"] = sym
                else:
                    operands.append(parser.parse_unresolved_operand())
                if parser.parse_optional_punctuation("+") is not None:
                    props["offset"] = IntegerAttr(parser.parse_integer(allow_negative=True), i64)
                parser.parse_punctuation("]")
                return True
            sym = parser.parse_optional_symbol_name()
            if sym is not None:
                props["symbol"] = sym
                return True
            operand = parser.parse_optional_unresolved_operand()
            if operand is None:
                return False
            operands.append(operand)
            return True

        if parse_item():
            while parser.parse_optional_punctuation(",") is not None:
                if not parse_item():
                    parser.raise_error("expected an operand")
        if parser.parse_optional_keyword("ifnot") is not None:
            props["guard"] = StringAttr("@!")
            operands.append(parser.parse_unresolved_operand())
        elif parser.parse_optional_keyword("if") is not None:
            props["guard"] = StringAttr("@")
            operands.append(parser.parse_unresolved_operand())
        props |= cls.parse_extra_props(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ftype = parser.parse_function_type()
        if len(ftype.inputs.data) != len(operands):
            parser.raise_error(f"{len(operands)} operands but {len(ftype.inputs.data)} types")
        values = [parser.resolve_operand(u, t) for u, t in zip(operands, ftype.inputs.data)]
        return cls.create(
            operands=values,
            result_types=list(ftype.outputs.data),
            properties=props,
            attributes=attrs,
        )


def _gate(feature: str, min_sm: int, min_ptx: tuple[int, int]) -> Requirement:
    return Requirement(feature, min_sm, min_ptx)


def _half_requirements(
    op: PtxInstr, bf16_sm: int = 80, bf16_ptx: tuple[int, int] = (7, 0)
) -> Iterable[Requirement]:
    types = op.ptx_types
    name = op.opcode()
    if any(t in ("bf16", "bf16x2") for t in types):
        yield _gate(name, bf16_sm, bf16_ptx)
    elif any(t in ("f16", "f16x2") for t in types):
        yield _gate(name, 53, (4, 2))


# --------------------------------------------------------------------------- arithmetic

_ROUND = frozenset(("rn", "rz", "rm", "rp"))
_FLOAT_MODS = _ROUND | {"ftz", "sat"}
_ARITH_TYPES = frozenset(TYPE_BITS) - {"pred", "b8", "u8", "s8", "b16", "b32", "b64", "tf32"}


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


@irdl_op_definition
class SubOp(_Arith):
    name = "ptx.sub"


@irdl_op_definition
class MulOp(_Arith):
    """``mul.lo/.hi/.wide`` for integers (``.wide`` doubles the result width), rounding for floats."""

    name = "ptx.mul"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(mods=_FLOAT_MODS | {"lo", "hi", "wide"})

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

    def requirements(self) -> Iterable[Requirement]:
        yield from _half_requirements(self)


@irdl_op_definition
class DivOp(_Arith):
    name = "ptx.div"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(mods=_FLOAT_MODS | {"approx", "full"})


@irdl_op_definition
class RemOp(_Arith):
    name = "ptx.rem"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(
        types=INT_TYPES - {"b16", "b32", "b64"}, mods=frozenset()
    )


class _MinMax(_Arith):
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(mods=frozenset({"ftz", "NaN"}))

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


@irdl_op_definition
class NegOp(_Unary):
    name = "ptx.neg"


@irdl_op_definition
class CopysignOp(_Arith):
    name = "ptx.copysign"
    INFO: ClassVar[InstrInfo] = _Arith.INFO.but(types=frozenset(("f32", "f64")), mods=frozenset())


class _FloatUnary(_Unary):
    """Float-only math; ``.approx`` forms are the fast hardware (SFU) versions."""

    INFO: ClassVar[InstrInfo] = _Unary.INFO.but(types=frozenset(("f32", "f64")))


@irdl_op_definition
class RcpOp(_FloatUnary):
    name = "ptx.rcp"


@irdl_op_definition
class SqrtOp(_FloatUnary):
    name = "ptx.sqrt"


@irdl_op_definition
class RsqrtOp(_FloatUnary):
    name = "ptx.rsqrt"


class _Sfu(_FloatUnary):
    """ex2/lg2/sin/cos: f32 only, .approx; ex2 also has f16 forms (sm_75)."""

    INFO: ClassVar[InstrInfo] = _FloatUnary.INFO.but(types=frozenset(("f32", "f16", "f16x2")))

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

    def requirements(self) -> Iterable[Requirement]:
        yield _gate(self.opcode(), 75, (7, 0))


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

CMP_OPS = frozenset(
    ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs",
     "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
)  # fmt: skip


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

    def check(self, mods: list[str], types: list[str]) -> None:
        if not any(m in CMP_OPS for m in mods):
            raise VerifyException("setp needs a comparison (lt, eq, ...)")
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


# --------------------------------------------------------------------------- conversion and moves


@irdl_op_definition
class CvtOp(PtxInstr):
    """``cvt.rn.f32.s32 d, a``: destination type first, then source type."""

    name = "ptx.cvt"
    # two sources only for packing: cvt.rn.f16x2.f32 d, hi, lo
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(1, 2),
        n_types=2,
        types=frozenset(TYPE_BITS) - {"pred", "b8", "b16", "b32", "b64"},
        mods=_ROUND | {"rni", "rzi", "rmi", "rpi", "ftz", "sat", "relu"},
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_width(self.results[0], TYPE_BITS[types[0]], "cvt")
        for v in self.srcs:
            _check_width(v, TYPE_BITS[types[1]], "cvt")

    def requirements(self) -> Iterable[Requirement]:
        dst, src = self.ptx_types
        if "bf16" in (dst, src) or dst in ("f16x2", "bf16x2"):
            yield _gate(
                self.opcode(), 80, (7, 8) if src == "bf16" and dst not in ("f32",) else (7, 0)
            )
        if src == "bf16" and dst == "f32":
            yield _gate(self.opcode(), 80, (7, 1))


@irdl_op_definition
class CvtaOp(PtxInstr):
    """``cvta.to.global.u64 d, a``: generic address -> state-space address (or back)."""

    name = "ptx.cvta"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(1, 1),
        types=frozenset(("u32", "u64")),
        mods=frozenset(("to", "global", "shared", "local", "const", "param")),
    )


@irdl_op_definition
class MovOp(PtxInstr):
    """``mov``: register copy, a special register or symbol address (``symbol``: ``%tid.x``,
    ``smem0``), vector pack ``mov.b32 d, {a, b}`` (several sources) and unpack
    ``mov.b64 {a, b}, d`` (several results)."""

    name = "ptx.mov"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(1, 4), n_args=(0, 4), imm_args=frozenset({0})
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        bits = TYPE_BITS[types[0]]
        if self.symbol is not None:
            if self.srcs or len(self.results) != 1:
                raise VerifyException("mov of a symbol has no register sources")
            _check_width(self.results[0], bits, "mov")
            return
        outs, srcs = list(self.results), list(self.srcs)
        if len(outs) > 1 and len(srcs) > 1:
            raise VerifyException("mov either packs or unpacks, not both")
        whole, parts = (srcs, outs) if len(outs) > 1 else (outs, srcs)
        _check_width(whole[0], bits, "mov")
        part_bits = bits // len(parts) if len(parts) > 1 else bits
        for v in parts:
            _check_width(v, part_bits, "mov")

    def requirements(self) -> Iterable[Requirement]:
        return ()

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        outs = [reg(v) for v in self.results]
        if self.symbol is not None:
            return [outs[0], self.symbol.data]
        srcs = [imm(v) for v in self.srcs] if len(self.srcs) == 1 else [reg(v) for v in self.srcs]
        group = lambda xs: "{" + ", ".join(xs) + "}" if len(xs) > 1 else xs[0]  # noqa: E731
        return [group(outs), group(srcs)]


@irdl_op_definition
class AssignOp(PtxInstr):
    """``mov`` into an *existing* register (args: destination, source). The only op that writes
    a register it does not define: loop-carried values and branch results use it."""

    name = "ptx.assign"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        mnemonic="mov", n_outs=(0, 0), n_args=(2, 2), imm_args=frozenset({1})
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        dst, src = self.srcs
        if dst.type != src.type:
            raise VerifyException(
                f"assign needs equal register types, got {dst.type} and {src.type}"
            )
        _check_width(dst, TYPE_BITS[types[0]], "assign")

    def requirements(self) -> Iterable[Requirement]:
        return ()


@irdl_op_definition
class RegOp(IRDLOperation):
    """Declares a register that ``ptx.assign`` writes (a loop-carried value, a branch result).
    Prints nothing: PTX registers are declared per function by the printer."""

    name = "ptx.reg"
    result = result_def()
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, type: Attribute):
        super().__init__(result_types=[type])

    def verify_(self) -> None:
        if self.result.type not in REGISTER_CLASSES:
            raise VerifyException(f"{self.result.type} is not a PTX register type")


@irdl_op_definition
class ConstOp(IRDLOperation):
    """An immediate. Printed inline where the using instruction accepts an immediate, otherwise
    as ``mov`` into a register."""

    name = "ptx.const"
    value = prop_def(Attribute)
    result = result_def()

    def __init__(self, value: int | float, type: Attribute):
        attr: Attribute = (
            FloatAttr(float(value), type)
            if type in (f16, bf16, f32, f64)
            else IntegerAttr(int(value), type)
        )
        super().__init__(properties={"value": attr}, result_types=[type])

    def verify_(self) -> None:
        if self.result.type not in REGISTER_CLASSES:
            raise VerifyException(f"{self.result.type} is not a PTX register type")

    def immediate(self) -> str | None:
        """PTX text of the value, or None where PTX has no immediate of this type (f16/bf16)."""
        t = self.result.type
        if isinstance(self.value, FloatAttr):
            v = self.value.value.data
            if t == f32:
                return "0f%08X" % struct.unpack("<I", struct.pack("<f", v))[0]
            if t == f64:
                return "0d%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]
            return None
        assert isinstance(self.value, IntegerAttr)
        return str(self.value.value.data)

    def ptx(self, reg: RegName, imm: RegName) -> str:
        t = self.result.type
        text = self.immediate()
        if text is None:  # f16/bf16: move the bit pattern
            assert isinstance(self.value, FloatAttr)
            text = "0x%04X" % _half_bits(self.value.value.data, t)
        kind = REGISTER_CLASSES[t][1]
        return f"mov.{kind} {reg(self.result)}, {text};"

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)

    @classmethod
    def parse(cls, parser: Parser) -> ConstOp:
        attr = parser.parse_attribute()
        assert isinstance(attr, IntegerAttr | FloatAttr)
        return cls.create(properties={"value": attr}, result_types=[attr.type])


def _half_bits(value: float, t: Attribute) -> int:
    import numpy as np

    if t == f16:
        return int(np.float16(value).view(np.uint16))
    import ml_dtypes

    return int(np.array(value, dtype=ml_dtypes.bfloat16).view(np.uint16))


# --------------------------------------------------------------------------- memory

_SPACES = frozenset(("global", "shared", "local", "param", "const"))
_CACHE = frozenset(
    (
        "ca",
        "cg",
        "cs",
        "lu",
        "cv",
        "nc",
        "wb",
        "wt",
        "volatile",
        "relaxed",
        "acquire",
        "release",
        "gpu",
        "cta",
        "sys",
    )
)
_VECTOR = {"v2": 2, "v4": 4}


def _check_address(op: PtxInstr, mods: list[str]) -> None:
    if op.symbol is not None:
        return
    addr = op.srcs[0]
    bits = register_bits(addr.type)
    if bits == 64 or (bits == 32 and ("shared" in mods or "local" in mods or "param" in mods)):
        return
    raise VerifyException(
        f"{op.MNEMONIC}: address must be 64-bit (32-bit allowed for shared), got {addr.type}"
    )


def _vector_count(mods: list[str]) -> int:
    return next((_VECTOR[m] for m in mods if m in _VECTOR), 1)


@irdl_op_definition
class LdOp(PtxInstr):
    """``ld.global.v4.f32 {a, b, c, d}, [%rd + 16]``; ``ld.param.u64 %rd, [kernel_param_0]``."""

    name = "ptx.ld"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(1, 4),
        n_args=(0, 1),
        types=frozenset(TYPE_BITS) - {"pred"},
        mods=_SPACES | _CACHE | frozenset(_VECTOR),
        has_address=True,
        group_outs=True,
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_address(self, mods)
        if len(self.results) != _vector_count(mods):
            raise VerifyException(
                f"ld.{self.spec_text} yields {_vector_count(mods)} values, got {len(self.results)}"
            )
        for v in self.results:
            _check_width(v, TYPE_BITS[types[0]], "ld")


@irdl_op_definition
class StOp(PtxInstr):
    """``st.global.f32 [%rd], %f``; vector stores take 2 or 4 values."""

    name = "ptx.st"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(0, 0),
        n_args=(1, 5),
        types=frozenset(TYPE_BITS) - {"pred"},
        mods=_SPACES | _CACHE | frozenset(_VECTOR),
        has_address=True,
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_address(self, mods)
        values = self.value_srcs()
        if len(values) != _vector_count(mods):
            raise VerifyException(
                f"st.{self.spec_text} stores {_vector_count(mods)} values, got {len(values)}"
            )
        for v in values:
            _check_width(v, TYPE_BITS[types[0]], "st")

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        values = [reg(v) for v in self.value_srcs()]
        value = "{" + ", ".join(values) + "}" if len(values) > 1 else values[0]
        return [self.address_text(reg), value]


_ATOM_OPS = frozenset(("add", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec"))


class _Atomic(PtxInstr):
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        types=frozenset(("b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "bf16")),
        mods=frozenset(("global", "shared", "noftz", "relaxed", "acq_rel", "gpu", "cta", "sys"))
        | _ATOM_OPS,
        has_address=True,
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_address(self, mods)
        if sum(m in _ATOM_OPS for m in mods) != 1:
            raise VerifyException(f"{self.mnemonic} needs exactly one operation (add, cas, ...)")
        expected = 2 if "cas" in mods else 1
        if len(self.value_srcs()) != expected:
            raise VerifyException(
                f"{self.mnemonic}.{self.spec_text} takes {expected} value operand(s)"
            )
        for v in (*self.results, *self.value_srcs()):
            _check_width(v, TYPE_BITS[types[0]], self.mnemonic)

    def requirements(self) -> Iterable[Requirement]:
        t = self.ptx_types[0]
        if t == "f64":
            yield _gate(self.opcode(), 60, (5, 0))
        elif t == "f16":
            yield _gate(self.opcode(), 70, (6, 3))
        elif t == "bf16":
            yield _gate(self.opcode(), 90, (7, 8))


@irdl_op_definition
class AtomOp(_Atomic):
    """``atom.global.add.f32 d, [a], b`` (d gets the old value); ``cas`` takes compare and new."""

    name = "ptx.atom"
    INFO: ClassVar[InstrInfo] = _Atomic.INFO.but(n_args=(2, 3))


@irdl_op_definition
class RedOp(_Atomic):
    """``red.global.add.f32 [a], b``: an atomic whose old value nobody reads."""

    name = "ptx.red"
    INFO: ClassVar[InstrInfo] = _Atomic.INFO.but(n_outs=(0, 0), n_args=(2, 2))


# --------------------------------------------------------------------------- control


class _NoTypes(PtxInstr):
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(n_outs=(0, 0), n_args=(0, 0), n_types=0)


@irdl_op_definition
class BraOp(_NoTypes):
    """``@%p bra $L3``: the target label is the ``symbol`` property."""

    name = "ptx.bra"
    INFO: ClassVar[InstrInfo] = _NoTypes.INFO.but(mods=frozenset(("uni",)))

    def check(self, mods: list[str], types: list[str]) -> None:
        if self.symbol is None:
            raise VerifyException("bra needs a target label")

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        return [f"${self.symbol.data}"]


@irdl_op_definition
class RetOp(_NoTypes):
    name = "ptx.ret"


@irdl_op_definition
class ExitOp(_NoTypes):
    name = "ptx.exit"


@irdl_op_definition
class BarSyncOp(_NoTypes):
    """``bar.sync id[, thread_count]``: block-wide barrier (id and count are immediates or regs)."""

    name = "ptx.bar.sync"
    INFO: ClassVar[InstrInfo] = _NoTypes.INFO.but(n_args=(1, 2), imm_args=frozenset({0, 1}))

    def check(self, mods: list[str], types: list[str]) -> None:
        for v in self.srcs:
            _check_width(v, 32, "bar.sync")


@irdl_op_definition
class MembarOp(_NoTypes):
    name = "ptx.membar"
    INFO: ClassVar[InstrInfo] = _NoTypes.INFO.but(mods=frozenset(("cta", "gl", "sys")))


# --------------------------------------------------------------------------- warp-synchronous


@irdl_op_definition
class ShflOp(PtxInstr):
    """``shfl.sync.down.b32 d[|p], a, b, c, membermask``: c packs the segment mask and clamp."""

    name = "ptx.shfl"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(1, 2),
        pair_outs=True,
        n_args=(4, 4),
        types=frozenset(("b32",)),
        mods=frozenset(("sync", "up", "down", "bfly", "idx")),
        imm_args=frozenset({1, 2, 3}),
        min_ptx=(6, 0),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_width(self.results[0], 32, "shfl")
        if len(self.results) == 2:
            _check_width(self.results[1], 1, "shfl")
        for v in self.srcs:
            _check_width(v, 32, "shfl")



@irdl_op_definition
class VoteOp(PtxInstr):
    """``vote.sync.ballot.b32 d, p, membermask`` / ``vote.sync.all.pred d, p, membermask``."""

    name = "ptx.vote"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        types=frozenset(("b32", "pred")),
        mods=frozenset(("sync", "all", "any", "uni", "ballot")),
        imm_args=frozenset({1}),
        min_ptx=(6, 0),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_width(self.results[0], TYPE_BITS[types[0]], "vote")
        _check_width(self.srcs[0], 1, "vote")
        _check_width(self.srcs[1], 32, "vote")


@irdl_op_definition
class ActivemaskOp(PtxInstr):
    name = "ptx.activemask"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(0, 0), types=frozenset(("b32",)), min_ptx=(6, 2)
    )


# --------------------------------------------------------------------------- tensor cores


@irdl_op_definition
class LdmatrixOp(PtxInstr):
    """``ldmatrix.sync.aligned.m8n8.x4.shared.b16 {a, b, c, d}, [addr]``: each of the 32 lanes
    gives one 16-byte row address; each result register holds two b16 of one 8x8 matrix."""

    name = "ptx.ldmatrix"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(1, 4),
        n_args=(1, 1),
        types=frozenset(("b16",)),
        mods=frozenset(("sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared")),
        has_address=True,
        group_outs=True,
        min_sm=75,
        min_ptx=(6, 5),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_address(self, mods)
        count = next((int(m[1]) for m in mods if m in ("x1", "x2", "x4")), 0)
        if count != len(self.results):
            raise VerifyException(
                f"ldmatrix .x{count} yields {count} registers, got {len(self.results)}"
            )
        for v in self.results:
            _check_width(v, 32, "ldmatrix")


# (shape, A/B type) -> registers per thread in the A, B and C/D (f32 or s32) fragments
MMA_FRAGMENTS: dict[tuple[str, str], tuple[int, int, int]] = {
    ("m16n8k16", "f16"): (4, 2, 4),
    ("m16n8k16", "bf16"): (4, 2, 4),
    ("m16n8k8", "f16"): (2, 1, 4),
    ("m16n8k8", "bf16"): (2, 1, 4),
    ("m16n8k32", "s8"): (4, 2, 4),
    ("m16n8k32", "u8"): (4, 2, 4),
}


@irdl_op_definition
class MmaOp(PtxInstr):
    """``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d}, {a}, {b}, {c}``: one warp
    multiplies a 16xK by a Kx8 tile and accumulates into 16x8 (D = A*B + C)."""

    name = "ptx.mma"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(4, 4),
        n_args=(7, 10),
        n_types=4,
        types=frozenset(("f32", "f16", "bf16", "s32", "s8", "u8")),
        mods=frozenset(("sync", "aligned", "row", "col", "satfinite"))
        | {s for s, _ in MMA_FRAGMENTS},
    )

    def fragment_sizes(self) -> tuple[int, int, int]:
        mods, types = self.split_spec()
        shape = next((m for m in mods if m in {s for s, _ in MMA_FRAGMENTS}), "")
        return MMA_FRAGMENTS.get((shape, types[1]), (0, 0, 0))

    def check(self, mods: list[str], types: list[str]) -> None:
        na, nb, nc = self.fragment_sizes()
        if not na:
            raise VerifyException(f"mma.{self.spec_text}: unsupported shape/type combination")
        if types[1] != types[2] or types[0] != types[3] or types[0] not in ("f32", "s32"):
            raise VerifyException(
                f"mma.{self.spec_text}: kaio supports D=C in f32/s32 and A=B types"
            )
        if len(self.srcs) != na + nb + nc or len(self.results) != nc:
            raise VerifyException(
                f"mma.{self.spec_text} takes {na}+{nb}+{nc} operands and yields {nc}"
            )
        for v in (*self.results, *self.srcs):
            _check_width(v, 32, "mma")

    def requirements(self) -> Iterable[Requirement]:
        shape_k8_f16 = "m16n8k8" in self.mods and self.ptx_types[1] == "f16"
        yield _gate(
            "mma.sync " + self.spec_text,
            75 if shape_k8_f16 else 80,
            (6, 4) if shape_k8_f16 else (7, 0),
        )

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        na, nb, _ = self.fragment_sizes()
        names = [reg(v) for v in self.srcs]
        group = lambda xs: "{" + ", ".join(xs) + "}"  # noqa: E731
        return [
            group([reg(v) for v in self.results]),
            group(names[:na]),
            group(names[na : na + nb]),
            group(names[na + nb :]),
        ]


@irdl_op_definition
class CpAsyncOp(PtxInstr):
    """``cp.async.cg.shared.global [dst], [src], 16, src_size``: an asynchronous global->shared
    copy of 4/8/16 bytes; bytes past ``src_size`` are zero-filled. The data may only be read
    after the matching ``cp.async.wait_group``."""

    name = "ptx.cp.async"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(0, 0),
        n_args=(3, 4),
        n_types=0,
        mods=frozenset(("ca", "cg", "shared", "global")),
        imm_args=frozenset({3}),
        imm_required=frozenset({2}),
        min_sm=80,
        min_ptx=(7, 0),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        dst, src = self.srcs[0], self.srcs[1]
        if register_bits(dst.type) not in (32, 64) or register_bits(src.type) != 64:
            raise VerifyException(
                "cp.async takes a shared destination and a 64-bit global source address"
            )
        size = self.srcs[2].owner
        assert isinstance(size, ConstOp)
        nbytes = size.value.value.data if isinstance(size.value, IntegerAttr) else 0
        if nbytes not in (4, 8, 16) or ("cg" in mods and nbytes != 16):
            raise VerifyException(f"cp.async copies 4, 8 or 16 bytes (.cg only 16), got {nbytes}")

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        texts = [f"[{reg(self.srcs[0])}]", f"[{reg(self.srcs[1])}]", imm(self.srcs[2])]
        if len(self.srcs) == 4:
            texts.append(imm(self.srcs[3]))
        return texts


@irdl_op_definition
class CpAsyncCommitOp(_NoTypes):
    name = "ptx.cp.async.commit_group"
    INFO: ClassVar[InstrInfo] = _NoTypes.INFO.but(min_sm=80, min_ptx=(7, 0))


@irdl_op_definition
class CpAsyncWaitGroupOp(_NoTypes):
    """``cp.async.wait_group N``: wait until at most N committed groups are still in flight."""

    name = "ptx.cp.async.wait_group"
    INFO: ClassVar[InstrInfo] = _NoTypes.INFO.but(
        n_args=(1, 1), imm_required=frozenset({0}), min_sm=80, min_ptx=(7, 0)
    )


@irdl_op_definition
class CpAsyncWaitAllOp(_NoTypes):
    name = "ptx.cp.async.wait_all"
    INFO: ClassVar[InstrInfo] = _NoTypes.INFO.but(min_sm=80, min_ptx=(7, 0))


# --------------------------------------------------------------------------- structure


MIN_MAXNREG, MAX_MAXNREG = 24, 255  # what ptxas accepts for .maxnreg


TENSOR_MAP_PARAM = "tensormap"
"""The parameter type of a TMA tensor map: printed ``.param .align 64 .b8 name[128]``."""


@irdl_op_definition
class EntryOp(IRDLOperation):
    """A ``.visible .entry``: parameters are declared here and read with ``ld.param`` (a
    tensor map's address is taken instead: ``mov.b64`` of the name, then ``cvta.param``)."""

    name = "ptx.entry"
    sym_name = prop_def(SymbolNameConstraint())
    param_names = prop_def(ArrayAttr[StringAttr])
    param_types = prop_def(ArrayAttr[StringAttr])
    maxntid = opt_prop_def(DenseArrayBase)
    maxnreg = opt_prop_def(IntegerAttr[I64])
    """``.maxnreg N``: ptxas gives each thread at most N registers (more warps fit per SM)."""
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator(), SymbolOpInterface())
    assembly_format = (
        "$sym_name `params` $param_names `types` $param_types (`maxntid` qualified($maxntid)^)? "
        "(`maxnreg` $maxnreg^)? attr-dict-with-keyword $body"
    )

    def __init__(
        self, name: str, params: Sequence[tuple[str, str]], maxntid: Sequence[int] | None = None,
        maxnreg: int | None = None,
    ):  # fmt: skip
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name),
            "param_names": ArrayAttr([StringAttr(n) for n, _ in params]),
            "param_types": ArrayAttr([StringAttr(t) for _, t in params]),
        }
        if maxntid is not None:
            props["maxntid"] = DenseArrayBase.from_list(i32, list(maxntid))
        if maxnreg is not None:
            props["maxnreg"] = IntegerAttr(maxnreg, i64)
        super().__init__(properties=props, regions=[Region(Block())])

    @property
    def params(self) -> list[tuple[str, str]]:
        return [(n.data, t.data) for n, t in zip(self.param_names.data, self.param_types.data)]

    def verify_(self) -> None:
        if len(self.param_names.data) != len(self.param_types.data):
            raise VerifyException("one type per parameter")
        for _, t in self.params:
            if (t not in TYPE_BITS or t == "pred") and t != TENSOR_MAP_PARAM:
                raise VerifyException(f"bad parameter type {t}")
        if self.maxnreg is not None and not MIN_MAXNREG <= self.maxnreg.value.data <= MAX_MAXNREG:
            raise VerifyException(f".maxnreg is {MIN_MAXNREG}..{MAX_MAXNREG}, not {self.maxnreg.value.data}")


class ArrayDecl(IRDLOperation):
    """``.<space> .align A .b8 name[size];``: a byte array in a state space, declared in the
    entry (address it with ``ptx.mov`` of the symbol)."""

    SPACE: ClassVar[str]
    sym_name = prop_def(StringAttr)
    size = prop_def(IntegerAttr[I64])
    align = prop_def(IntegerAttr[I64])
    assembly_format = "$sym_name `size` $size `align` $align attr-dict"

    def __init__(self, name: str, size: int, align: int = 16):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "size": IntegerAttr(size, i64),
                "align": IntegerAttr(align, i64),
            }
        )

    def ptx(self, reg: RegName, imm: RegName) -> str:
        align, size = self.align.value.data, self.size.value.data
        return f".{self.SPACE} .align {align} .b8 {self.sym_name.data}[{size}];"


@irdl_op_definition
class SharedDeclOp(ArrayDecl):
    """Shared memory of the block."""

    name = "ptx.shared"
    SPACE: ClassVar[str] = "shared"


@irdl_op_definition
class DynamicSharedDeclOp(ArrayDecl):
    """The block's dynamic shared memory, ``.extern .shared .align A .b8 name[];`` (printed at
    module scope); ``size`` is how many bytes the kernel needs there at launch."""

    name = "ptx.dynamic_shared"
    SPACE: ClassVar[str] = "shared"

    def ptx(self, reg: RegName, imm: RegName) -> str:
        return f".extern .shared .align {self.align.value.data} .b8 {self.sym_name.data}[];"


@irdl_op_definition
class LocalDeclOp(ArrayDecl):
    """Per-thread local memory (a stack array)."""

    name = "ptx.local"
    SPACE: ClassVar[str] = "local"


@irdl_op_definition
class LabelOp(IRDLOperation):
    name = "ptx.label"
    sym_name = prop_def(StringAttr)
    assembly_format = "$sym_name attr-dict"

    def __init__(self, name: str):
        super().__init__(properties={"sym_name": StringAttr(name)})

    def ptx(self, reg: RegName, imm: RegName) -> str:
        return f"${self.sym_name.data}:"


@irdl_op_definition
class CommentOp(IRDLOperation):
    name = "ptx.comment"
    text = prop_def(StringAttr)
    assembly_format = "$text attr-dict"

    def __init__(self, text: str):
        super().__init__(properties={"text": StringAttr(text)})

    def ptx(self, reg: RegName, imm: RegName) -> str:
        return f"// {self.text.data}"


# --------------------------------------------------------------------------- targets


def requirements(module: Operation) -> list[tuple[Operation, Requirement]]:
    """Every (op, feature requirement) in a module, in program order."""
    found: list[tuple[Operation, Requirement]] = []
    for op in module.walk():
        if isinstance(op, PtxInstr):
            found.extend((op, r) for r in op.requirements())
    return found


def required_ptx_version(module: Operation) -> tuple[int, int]:
    return max((r.min_ptx for _, r in requirements(module)), default=(1, 0))


def check_target(module: Operation, sm: int, arch_name: str) -> None:
    """Raise KaioTargetError for the first instruction the target does not have."""
    for _, req in requirements(module):
        if not req.met_by(sm, arch_name.endswith("a")):
            raise req.error(arch_name)


_BASE_OPS: list[type[Operation]] = [
        # structure
        EntryOp,
        SharedDeclOp,
        DynamicSharedDeclOp,
        LocalDeclOp,
        RegOp,
        LabelOp,
        CommentOp,
        ConstOp,
        # arithmetic
        AddOp,
        SubOp,
        MulOp,
        MadOp,
        FmaOp,
        DivOp,
        RemOp,
        MinOp,
        MaxOp,
        AbsOp,
        NegOp,
        CopysignOp,
        RcpOp,
        SqrtOp,
        RsqrtOp,
        Ex2Op,
        Lg2Op,
        SinOp,
        CosOp,
        TanhOp,
        # bits and logic
        AndOp,
        OrOp,
        XorOp,
        NotOp,
        ShlOp,
        ShrOp,
        Lop3Op,
        PrmtOp,
        BfeOp,
        BfiOp,
        PopcOp,
        ClzOp,
        BrevOp,
        # compare, select, convert, move
        SetpOp,
        SelpOp,
        CvtOp,
        CvtaOp,
        MovOp,
        AssignOp,
        # memory
        LdOp,
        StOp,
        AtomOp,
        RedOp,
        # control
        BraOp,
        RetOp,
        ExitOp,
        BarSyncOp,
        MembarOp,
        # warp-synchronous
        ShflOp,
        VoteOp,
        ActivemaskOp,
        # tensor cores and async copies
        LdmatrixOp,
        MmaOp,
        CpAsyncOp,
        CpAsyncCommitOp,
        CpAsyncWaitGroupOp,
        CpAsyncWaitAllOp,
]  # fmt: skip


@lru_cache(maxsize=1)
def _dialect() -> Dialect:
    # The Hopper instructions live in ptx_hopper.py (this file is long enough); they subclass
    # PtxInstr, so the dialect object is built on first use, after both modules are loaded.
    from kaio.dialects.ptx_hopper import HOPPER_OPS

    return Dialect("ptx", [*_BASE_OPS, *HOPPER_OPS], [])


def __getattr__(name: str) -> Dialect:
    if name == "Ptx":
        return _dialect()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
