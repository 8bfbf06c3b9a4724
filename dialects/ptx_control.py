"""``ptx`` control flow and synchronisation: ``bra``, ``ret``, ``exit``, ``bar.sync``,
``membar`` and the warp-synchronous ``shfl``, ``vote``, ``activemask``."""

from __future__ import annotations

from typing import ClassVar

from kaio.dialects.ptx_base import (
    TYPE_BITS,
    InstrInfo,
    PtxInstr,
    RegName,
    _check_width,
    _NoTypes,
)
from xdsl.irdl import (
    irdl_op_definition,
)
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------- control


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
