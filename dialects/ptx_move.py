"""``ptx`` conversions and moves: ``cvt``, ``cvta``, ``mov`` (registers, special registers,
symbols, vector pack/unpack) and ``ptx.assign``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from kaio.dialects.ptx_base import (
    _ROUND,
    FLOAT_TYPES,
    FP8_PAIR_TYPES,
    TYPE_BITS,
    InstrInfo,
    PtxInstr,
    RegName,
    Requirement,
    _check_width,
    _gate,
)
from kaio.dialects.ptx_grammar import check_cvt_spec
from xdsl.irdl import (
    irdl_op_definition,
)
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------- conversion and moves


@irdl_op_definition
class CvtOp(PtxInstr):
    """``cvt.rn.f32.s32 d, a``: destination type first, then source type. FP8 pairs:
    ``cvt.rn.satfinite.e4m3x2.f32 d16, hi, lo``, ``cvt.rn.satfinite.e4m3x2.f16x2 d16, a32`` and
    ``cvt.rn.f16x2.e4m3x2 d32, a16`` (sm_89 with PTX 8.1; sm_90 from PTX 7.8)."""

    name = "ptx.cvt"
    # two sources only for packing: cvt.rn.f16x2.f32 d, hi, lo
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_args=(1, 2),
        n_types=2,
        types=frozenset(TYPE_BITS) - {"pred", "b8", "b16", "b32", "b64", "e4m3", "e5m2"},
        mods=_ROUND | {"rni", "rzi", "rmi", "rpi", "ftz", "sat", "relu", "satfinite"},
    )

    def check_spec(self, mods: list[str], types: list[str]) -> None:
        super().check_spec(mods, types)
        if not {*types} & (FP8_PAIR_TYPES | {"tf32"}):  # those carry their own (.rn.satfinite)
            check_cvt_spec(self.opcode(), mods, types[0], types[1], TYPE_BITS, FLOAT_TYPES)

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_width(self.results[0], TYPE_BITS[types[0]], "cvt")
        for v in self.srcs:
            _check_width(v, TYPE_BITS[types[1]], "cvt")

    def requirements(self) -> Iterable[Requirement]:
        dst, src = self.ptx_types
        if dst in FP8_PAIR_TYPES or src in FP8_PAIR_TYPES:  # PTX 7.8 has it for sm_90 only
            yield _gate(self.opcode(), 89, (8, 1))
            return
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
