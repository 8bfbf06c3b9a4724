"""``ptx`` memory instructions: ``ld``, ``st``, the atomics ``atom``/``red`` and the sm_80
asynchronous copies ``cp.async``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from kaio.dialects.ptx_base import (
    TYPE_BITS,
    ConstOp,
    InstrInfo,
    PtxInstr,
    RegName,
    RegOp,
    Requirement,
    _check_address,
    _check_width,
    _gate,
    _NoTypes,
    register_bits,
)
from kaio.dialects.ptx_grammar import VECTORS, check_memory_spec, vector_count
from xdsl.dialects.builtin import (
    IntegerAttr,
)
from xdsl.irdl import (
    irdl_op_definition,
)
from xdsl.utils.exceptions import VerifyException

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
_VECTOR = VECTORS


class _LoadStore(PtxInstr):
    """ld and st: ptx_grammar's rules for spaces, cache operators, orders and vector widths."""

    STORE: ClassVar[bool] = False

    def check_spec(self, mods: list[str], types: list[str]) -> None:
        super().check_spec(mods, types)
        check_memory_spec(self.opcode(), mods, TYPE_BITS[types[0]], self.STORE)


@irdl_op_definition
class LdOp(_LoadStore):
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
        if len(self.results) != vector_count(mods):
            raise VerifyException(
                f"ld.{self.spec_text} yields {vector_count(mods)} values, got {len(self.results)}"
            )
        for v in self.results:
            _check_width(v, TYPE_BITS[types[0]], "ld")


@irdl_op_definition
class LdIntoOp(_LoadStore):
    """``@p ld.global.v4.b32 {a, b, c, d}, [%rd]`` into *existing* registers (``ptx.reg``; args:
    the address, then the destinations): a masked load whose destinations were first set to the
    masked-off value, as nvcc and Triton write it. Where the guard is false the registers keep
    that value, so no select follows the load (ptxas zeroes pairs with one CS2R)."""

    name = "ptx.ld_into"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        mnemonic="ld",
        n_outs=(0, 0),
        n_args=(2, 5),
        types=frozenset(TYPE_BITS) - {"pred"},
        mods=_SPACES | _CACHE | frozenset(_VECTOR),
        has_address=True,
    )

    @property
    def destinations(self) -> tuple:
        return self.srcs[1:]

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_address(self, mods)
        if self.symbol is not None:
            raise VerifyException("ld_into takes a register address")
        if len(self.destinations) != vector_count(mods):
            raise VerifyException(
                f"ld.{self.spec_text} writes {vector_count(mods)} registers, got {len(self.destinations)}"
            )
        for v in self.destinations:
            if not isinstance(v.owner, RegOp):
                raise VerifyException("ld_into writes registers declared by ptx.reg")
            _check_width(v, TYPE_BITS[types[0]], "ld")

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        outs = [reg(v) for v in self.destinations]
        return ["{" + ", ".join(outs) + "}" if len(outs) > 1 else outs[0], self.address_text(reg)]


@irdl_op_definition
class StOp(_LoadStore):
    """``st.global.f32 [%rd], %f``; vector stores take 2 or 4 values."""

    name = "ptx.st"
    STORE: ClassVar[bool] = True
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
        if len(values) != vector_count(mods):
            raise VerifyException(
                f"st.{self.spec_text} stores {vector_count(mods)} values, got {len(values)}"
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
        types=frozenset(("b16", "b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "bf16")),
        mods=frozenset(("global", "shared", "noftz", "relaxed", "acq_rel", "gpu", "cta", "sys"))
        | _ATOM_OPS,
        has_address=True,
    )

    def check_spec(self, mods: list[str], types: list[str]) -> None:
        super().check_spec(mods, types)
        if len(set(mods) & _SPACES) > 1:
            raise VerifyException(f"{self.opcode()}: one state space")

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_address(self, mods)
        if sum(m in _ATOM_OPS for m in mods) != 1:
            raise VerifyException(f"{self.mnemonic} needs exactly one operation (add, cas, ...)")
        if types[0] == "b16" and "cas" not in mods:  # atom.cas.b16 (sm_70) is the one 16-bit integer atomic
            raise VerifyException(f"{self.mnemonic}.{self.spec_text}: only cas has a .b16 form")
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


# --------------------------------------------------------------------------- async copies (sm_80)


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
