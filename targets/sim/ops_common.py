"""Builders shared by the instruction modules: operand-count checks and the closures for
n-ary "compute then write" instructions, so each op module states only the arithmetic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .faults import DecodeError
from .operands import DecodeContext
from .program import Idx, RunFn
from .ptx_types import PtxType
from .syntax import Instruction, Operand

INT_TYPES = {"u16", "u32", "u64", "s16", "s32", "s64"}
BIT_TYPES = {"b16", "b32", "b64"}


def operands(ins: Instruction, count: int | tuple[int, ...]) -> tuple[Operand, ...]:
    counts = (count,) if isinstance(count, int) else count
    if len(ins.operands) not in counts:
        want = " or ".join(map(str, counts))
        raise DecodeError(f"{ins.opcode} takes {want} operands, got {len(ins.operands)}")
    return ins.operands


def unary(ins: Instruction, dc: DecodeContext, t: PtxType, fn: Callable[[Any], Any], dst: PtxType | None = None) -> RunFn:
    d_op, a_op = operands(ins, 2)
    d = dc.writer(d_op, dst or t)
    a = dc.reader(a_op, t)

    def run(ctx: Any, idx: Idx) -> None:
        d(ctx, idx, fn(a(ctx, idx)))

    return run


def binary(
    ins: Instruction,
    dc: DecodeContext,
    t: PtxType,
    fn: Callable[[Any, Any], Any],
    dst: PtxType | None = None,
    b_type: PtxType | None = None,
) -> RunFn:
    d_op, a_op, b_op = operands(ins, 3)
    d = dc.writer(d_op, dst or t)
    a = dc.reader(a_op, t)
    b = dc.reader(b_op, b_type or t)

    def run(ctx: Any, idx: Idx) -> None:
        d(ctx, idx, fn(a(ctx, idx), b(ctx, idx)))

    return run


def ternary(
    ins: Instruction,
    dc: DecodeContext,
    t: PtxType,
    fn: Callable[[Any, Any, Any], Any],
    dst: PtxType | None = None,
    c_type: PtxType | None = None,
    b_type: PtxType | None = None,
) -> RunFn:
    d_op, a_op, b_op, c_op = operands(ins, 4)
    d = dc.writer(d_op, dst or t)
    a = dc.reader(a_op, t)
    b = dc.reader(b_op, b_type or t)
    c = dc.reader(c_op, c_type or dst or t)

    def run(ctx: Any, idx: Idx) -> None:
        d(ctx, idx, fn(a(ctx, idx), b(ctx, idx), c(ctx, idx)))

    return run
