"""The ``ptx`` dialect's foundation: PTX types and register classes, feature requirements,
:class:`PtxInstr` (spec, verification, PTX and MLIR text) that every instruction op derives
from, and the two value ops (``ptx.reg``, ``ptx.const``).

The instruction families live beside it (``ptx_arith``, ``ptx_logic``, ``ptx_move``,
``ptx_memory``, ``ptx_control``, ``ptx_tensor``, ``ptx_structure``, ``ptx_hopper``); users import
them all through :mod:`kaio.dialects.ptx`.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from kaio.dialects.plain_init import init_plain
from kaio.dialects.ptx_grammar import FLOAT_ROUNDING, TypeRule, check_exclusive, check_type_rules

# --------------------------------------------------------------------------- types and registers

TYPE_BITS: dict[str, int] = {
    "pred": 1,
    **dict.fromkeys(("b8", "u8", "s8", "e4m3", "e5m2"), 8),
    **dict.fromkeys(("b16", "u16", "s16", "f16", "bf16", "e4m3x2", "e5m2x2"), 16),
    **dict.fromkeys(("b32", "u32", "s32", "f32", "f16x2", "bf16x2", "tf32"), 32),
    **dict.fromkeys(("b64", "u64", "s64", "f64"), 64),
}
INT_TYPES = frozenset(t for t in TYPE_BITS if t[0] in "bsu" and t not in ("bf16", "bf16x2"))
FLOAT_TYPES = frozenset(("f16", "bf16", "f32", "f64", "f16x2", "bf16x2"))
FP8_PAIR_TYPES = frozenset(("e4m3x2", "e5m2x2"))  # two OCP FP8 values in a .b16 (cvt only)

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


_REGISTER_BITS: dict[Attribute, int] = {t: 1 if t == i1 else int(t.bitwidth) for t in REGISTER_CLASSES}  # type: ignore[attr-defined]
# the same by identity: most types are these very objects, and hashing a type is not free
_REGISTER_BITS_BY_ID: dict[int, int] = {id(t): bits for t, bits in _REGISTER_BITS.items()}


def register_bits(t: Attribute) -> int:
    bits = _REGISTER_BITS_BY_ID.get(id(t)) or _REGISTER_BITS.get(t)
    if bits is None:
        raise VerifyException(f"{t} is not a PTX register type")
    return bits


def register_type(ptx_type: str) -> Attribute:
    """The register type holding values of a PTX type (``u32`` -> i32, ``f32`` -> f32)."""
    if ptx_type == "pred":
        return i1
    if ptx_type in ("f32", "f64", "f16", "bf16"):
        return {"f32": f32, "f64": f64, "f16": f16, "bf16": bf16}[ptx_type]
    return {8: i16, 16: i16, 32: i32, 64: i64}[TYPE_BITS[ptx_type]]


def _check_width(v: SSAValue, bits: int, what: str) -> None:
    # the value's type field, by identity first (register_bits' own first look, without the
    # ``type`` property and a call: every instruction's verification checks each of its values)
    have = _REGISTER_BITS_BY_ID.get(id(v._type)) or register_bits(v.type)  # pyright: ignore[reportPrivateUsage]
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


# (op class, spec) pairs whose spec verified, with its split: most ops share a few specs
_CHECKED_SPECS: dict[tuple[type, str], tuple[tuple[str, ...], tuple[str, ...]]] = {}


# (op class, spec) -> its requirements: the printer asks for every instruction's
_SPEC_REQUIREMENTS: dict[tuple[type, str], tuple[Requirement, ...]] = {}


@cache
def is_instr_class(cls: type[Operation]) -> bool:
    """Whether ops of this class are PTX instructions, once per class: ``isinstance`` against
    xDSL's ABC-derived op classes is slow, and the passes and the printer ask for every op."""
    return issubclass(cls, PtxInstr)


def spec_requirements(op: PtxInstr) -> tuple[Requirement, ...]:
    """``op.requirements()``, computed once per (op class, spec): a kernel has thousands of
    instructions but few distinct specs."""
    key = (type(op), op.properties["spec"].data)  # type: ignore[attr-defined]
    found = _SPEC_REQUIREMENTS.get(key)
    if found is None:
        found = _SPEC_REQUIREMENTS[key] = tuple(op.requirements())
    return found


def within_attr(array: str, lo: int, hi: int) -> ArrayAttr:
    """The ``within`` property: bytes [lo, hi) of shared ``array``."""
    return ArrayAttr([_string(array), IntAttr(lo), IntAttr(hi)])


def within_of(op: Operation) -> tuple[str, int, int] | None:
    """(array, lo, hi) of an instruction's ``within`` property, None without one."""
    attr = op.properties.get("within")
    if attr is None:
        return None
    name, lo, hi = attr.data  # type: ignore[attr-defined]
    return name.data, lo.data, hi.data


class PtxInstr(IRDLOperation):
    """Base of every PTX instruction op; concrete ops mostly only name themselves."""

    INFO: ClassVar[InstrInfo] = InstrInfo()
    # the modifiers each type class takes (ptx_grammar); empty: INFO's lists alone
    RULES: ClassVar[tuple[TypeRule, ...]] = ()

    spec = prop_def(StringAttr)
    guard = opt_prop_def(StringAttr)  # "@" or "@!": the last arg is the predicate
    offset = opt_prop_def(IntegerAttr)  # address displacement in bytes
    symbol = opt_prop_def(StringAttr)  # address by name: [symbol + offset]
    # [array, lo, hi]: every address computed from this result lies in bytes [lo, hi) of the
    # shared array (a buffer's start, where several buffers share one declaration); read by
    # ptx-sync-cleanup, which tells such buffers apart
    within = opt_prop_def(ArrayAttr)
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
        within: tuple[str, int, int] | None = None,
    ):
        props: dict[str, Attribute] = {"spec": _string(spec)}
        if within is not None:
            props["within"] = within_attr(*within)
        operands = list(args)
        if guard is not None:
            props["guard"] = _string("@!" if negate else "@")
            operands.append(guard)
        if offset:
            props["offset"] = IntegerAttr(offset, i64)
        if symbol is not None:
            props["symbol"] = _string(symbol)
        # Operation's constructor, not the IRDL one, which re-checks every argument (3x
        # slower; the verifier checks the same things once the module is complete), taken
        # directly (init_plain: a matmul's lowering builds ~2000 of these)
        init_plain(self, operands, out_types, props)

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
        operands = tuple(self._operands)  # a plain tuple: SSAValues slices through isinstance
        return operands[:-1] if "guard" in self.properties else operands

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
        info = self.INFO
        props = self.properties
        key = (type(self), props["spec"].data)  # type: ignore[attr-defined]
        split = _CHECKED_SPECS.get(key)
        if split is None:  # the spec's checks depend on the op class and the spec alone
            split = self._checked_spec()
            _CHECKED_SPECS[key] = split
        mods, types = split
        n_results = len(self.results)
        lo, hi = info.n_outs
        if not lo <= n_results <= hi:
            raise VerifyException(f"{self.mnemonic} has {lo}..{hi} results, got {n_results}")
        guard = props.get("guard")
        operands = tuple(self._operands)  # a plain tuple, not xDSL's view of it
        srcs = operands[:-1] if guard is not None else operands
        lo, hi = info.n_args
        if not lo <= len(srcs) <= hi:
            raise VerifyException(f"{self.mnemonic} takes {lo}..{hi} operands, got {len(srcs)}")
        if guard is not None:
            if guard.data not in ("@", "@!") or operands[-1].type != i1:  # type: ignore[attr-defined]
                raise VerifyException(f"{self.mnemonic}: the guard must be an i1 predicate")
        for pos in info.imm_required:
            if not isinstance(srcs[pos].owner, ConstOp):
                raise VerifyException(f"{self.mnemonic}: operand {pos} must be a ptx.const immediate")
        if info.has_address and "symbol" not in props and not srcs:
            raise VerifyException(f"{self.mnemonic} needs an address operand or a symbol")
        self.check(list(mods), list(types))

    def _checked_spec(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The spec's modifiers and types, once they are known to be this op's."""
        mods, types = self.split_spec()
        name = self.mnemonic
        if len(types) != self.INFO.n_types or any(t not in self.INFO.types for t in types):
            raise VerifyException(
                f"{name}.{self.spec_text}: expected {self.INFO.n_types} type(s) among {sorted(self.INFO.types)}"
            )
        bad = [m for m in mods if m not in self.INFO.mods]
        if bad:
            raise VerifyException(f"{name}.{self.spec_text}: unknown modifier(s) {bad}")
        self.check_spec(mods, types)
        return tuple(mods), tuple(types)

    def check_spec(self, mods: list[str], types: list[str]) -> None:
        """The spec's grammar beyond INFO's lists (which modifiers go together and with which
        type); it depends on the op class and the spec alone, so it runs once per pair."""
        opcode = self.opcode()
        check_exclusive(opcode, mods)
        if self.RULES:
            check_type_rules(opcode, self.RULES, mods, types[0])

    def check(self, mods: list[str], types: list[str]) -> None:
        """Register widths; the default: all outs and value sources have the type's width."""
        bits = TYPE_BITS[types[0]] if types else 32
        held = 16 if bits == 8 else bits  # what _check_width accepts
        for v in (*self.results, *self.value_srcs()):
            # the common case by identity (see _REGISTER_BITS_BY_ID); anything else, the full check
            if _REGISTER_BITS_BY_ID.get(id(v._type)) != held:  # pyright: ignore[reportPrivateUsage]
                _check_width(v, bits, self.mnemonic)

    def value_srcs(self) -> tuple[SSAValue, ...]:
        srcs = self.srcs
        return srcs[1:] if self.INFO.has_address and "symbol" not in self.properties else srcs

    # -- targets ------------------------------------------------------------------------------

    def requirements(self) -> Iterable[Requirement]:
        """The features this instruction needs. They depend on the op class and its spec alone
        (:func:`spec_requirements` keeps them per pair): an override reads ``INFO``, the spec
        and what derives from it (``mods``, ``ptx_types``, ``opcode()``), nothing else."""
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
        info = self.INFO  # (read once: the printer asks this of every instruction)
        outs = [reg(v) for v in self.results]
        if info.group_outs and len(outs) > 1:
            outs = ["{" + ", ".join(outs) + "}"]
        elif info.pair_outs and len(outs) == 2:
            outs = [f"{outs[0]}|{outs[1]}"]
        srcs = self.value_srcs()
        immediates = info.imm_args | info.imm_required
        if immediates:
            first = 1 if info.has_address and "symbol" not in self.properties else 0
            texts = [imm(v) if (i + first) in immediates else reg(v) for i, v in enumerate(srcs)]
        else:
            texts = [reg(v) for v in srcs]
        if info.has_address:
            texts.insert(0, self.address_text(reg))
        return outs + texts

    def ptx(self, reg: RegName, imm: RegName) -> str:
        guard = self.properties.get("guard")  # (the dict, not the IRDL accessor: per instruction)
        guard = f"{guard.data}{reg(self._operands[-1])} " if guard is not None else ""  # type: ignore[attr-defined]
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
        if (within := within_of(self)) is not None:  # within @array[lo, hi]
            printer.print_string(" within ")
            printer.print_symbol_name(within[0])
            printer.print_string(f"[{within[1]}, {within[2]}]")
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
        if parser.parse_optional_keyword("within") is not None:
            array = parser.parse_symbol_name().data
            parser.parse_punctuation("[")
            lo = parser.parse_integer()
            parser.parse_punctuation(",")
            hi = parser.parse_integer()
            parser.parse_punctuation("]")
            props["within"] = within_attr(array, lo, hi)
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


# --------------------------------------------------------------------------- shared by families

_ROUND = FLOAT_ROUNDING


class _NoTypes(PtxInstr):
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(n_outs=(0, 0), n_args=(0, 0), n_types=0)


def _check_address(op: PtxInstr, mods: list[str]) -> None:
    if op.symbol is not None:
        return
    addr = op.srcs[0]
    bits = register_bits(addr.type)
    if bits == 64 or (bits == 32 and ("shared" in mods or "local" in mods or "param" in mods)):
        return
    raise VerifyException(
        f"{op.opcode()}: address must be 64-bit (32-bit allowed for shared), got {addr.type}"
    )


# --------------------------------------------------------------------------- registers and immediates


@irdl_op_definition
class RegOp(IRDLOperation):
    """Declares a register that ``ptx.assign`` writes (a loop-carried value, a branch result).
    Prints nothing: PTX registers are declared per function by the printer."""

    name = "ptx.reg"
    result = result_def()
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, type: Attribute):
        # Operation's constructor, as PtxInstr's: the IRDL one re-checks the arguments (3x
        # slower, ~300 registers a matmul) and the verifier checks them once built
        init_plain(self, (), (type,), {})

    def verify_(self) -> None:
        # results[0], not the IRDL accessor (a descriptor call per read): every register and
        # constant is verified, and every constant read when printed
        if self.results[0].type not in REGISTER_CLASSES:
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
        init_plain(self, (), (type,), {"value": attr})  # as RegOp's

    def verify_(self) -> None:
        # results[0], not the IRDL accessor (a descriptor call per read): every register and
        # constant is verified, and every constant read when printed
        if self.results[0].type not in REGISTER_CLASSES:
            raise VerifyException(f"{self.result.type} is not a PTX register type")

    def immediate(self) -> str | None:
        """PTX text of the value, or None where PTX has no immediate of this type (f16/bf16)."""
        t = self.results[0].type
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
        t = self.results[0].type
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
