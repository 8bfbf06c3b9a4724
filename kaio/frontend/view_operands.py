"""The offsets and bounds of ``kt.load``/``kt.store`` as the 32-bit operands of ``tile.view``.

Element ``i`` of a view along a dim is inside the array where ``0 <= offset + i < bound``. The
view takes 32-bit operands and its lowering compares them as signed counts (a bound at or below
zero: nothing inside; a negative index: outside), so a 32-bit offset or bound goes in as it is.
A 64-bit one would lose its high bits in a plain truncation (an offset of 2**32 + 3 would read
element 3), so the dim is decided in 64 bits here, once per view:

- an offset outside the signed 32-bit range has no element inside (a tile dim is far below
  2**31, and so is every index a 32-bit view reaches): the dim's bound becomes 0;
- a bound is clamped to ``[0, 2**31 - 1]`` first (no index of a view reaches past that).

What remains fits 32 bits exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from xdsl.dialects import arith, builtin
from xdsl.ir import SSAValue

from kaio.dtypes import i32, i64, u64
from kaio.frontend.emitter import Emitter
from kaio.frontend.values import Scalar, Value

INDEX_MAX = (1 << 31) - 1


def is_wide(v: Value) -> TypeGuard[Scalar]:
    """A 64-bit integer scalar: one the view cannot take as it is."""
    return isinstance(v, Scalar) and v.type.is_int and v.type.bits == 64


def view_dim(em: Emitter, offset: Value, bound: Value, narrow: Callable[[Value, str], SSAValue]) -> tuple[SSAValue, SSAValue]:
    """The 32-bit (offset, bound) of one dim; ``narrow(v, what)`` makes the operand of a value
    that is not 64-bit (checked and cast as every view operand is)."""
    if not is_wide(offset):
        off32 = narrow(offset, "an offset")
        return off32, _clamped_bound(em, bound) if is_wide(bound) else narrow(bound, "a bound")
    bound32 = _clamped_bound(em, bound) if is_wide(bound) else narrow(bound, "a bound")
    off32 = em.value(arith.TruncIOp(offset.ssa, builtin.i32))  # exact where it fits
    return off32, em.value(arith.SelectOp(_fits_32(em, offset), bound32, em.constant(0, i32)))


def _fits_32(em: Emitter, offset: Scalar) -> SSAValue:
    """``-2**31 <= offset < 2**31``."""
    x = offset.ssa
    if offset.type.kind == "uint":
        return em.value(arith.CmpiOp(x, em.constant(1 << 31, u64), "ult"))
    below = em.value(arith.CmpiOp(x, em.constant(1 << 31, i64), "slt"))
    above = em.value(arith.CmpiOp(x, em.constant(-(1 << 31), i64), "sge"))
    return em.value(arith.AndIOp(below, above))


def _clamped_bound(em: Emitter, bound: Scalar) -> SSAValue:
    """``min(max(bound, 0), 2**31 - 1)`` in 32 bits."""
    x = bound.ssa
    if bound.type.kind == "uint":
        x = em.value(arith.MinUIOp(x, em.constant(INDEX_MAX, u64)))
    else:
        x = em.value(arith.MaxSIOp(x, em.constant(0, i64)))
        x = em.value(arith.MinSIOp(x, em.constant(INDEX_MAX, i64)))
    return em.value(arith.TruncIOp(x, builtin.i32))
