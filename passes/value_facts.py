"""What the IR proves about an integer value, read by the tile stages and their lowerings: its
constant, the power of two it is a multiple of, and the interval it lies in."""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.ir import BlockArgument, SSAValue

from kaio.dialects import tile

CAP = 1 << 20
"""The largest divisibility claimed (zero is a multiple of everything)."""


def constant_int(v: SSAValue) -> int | None:
    """The value of an integer ``arith.constant``, else None."""
    owner = v.owner
    if isinstance(owner, arith.ConstantOp):
        return int(owner.value.value.data)  # type: ignore[union-attr]
    return None


def divisibility(v: SSAValue, depth: int = 0) -> int:
    """A power of two ``v`` is proven to be a multiple of (``CAP`` for zero)."""
    if depth > 32:
        return 1
    owner = v.owner
    d = lambda x: divisibility(x, depth + 1)  # noqa: E731
    if isinstance(owner, arith.ConstantOp):
        value = getattr(owner.value, "value", None)
        n = int(value.data) if value is not None and isinstance(value.data, int) else 1
        return CAP if n == 0 else min(n & -n, CAP)
    if isinstance(owner, tile.MultipleOfOp):
        return max(owner.n.value.data, d(owner.input))
    if isinstance(owner, arith.MuliOp):
        return min(d(owner.lhs) * d(owner.rhs), CAP)
    if isinstance(owner, arith.ShLIOp) and isinstance(owner.rhs.owner, arith.ConstantOp):
        return min(d(owner.lhs) << int(owner.rhs.owner.value.value.data), CAP)  # type: ignore[union-attr]
    if isinstance(owner, arith.AddiOp | arith.SubiOp):
        return min(d(owner.lhs), d(owner.rhs))
    if isinstance(owner, arith.SelectOp):
        return min(d(owner.lhs), d(owner.rhs))
    if isinstance(v, BlockArgument) and v.index == 0 and isinstance(loop := v.block.parent_op(), scf.ForOp):
        return min(d(loop.lb), d(loop.step))
    return 1


I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def int_range(v: SSAValue, depth: int = 0) -> tuple[int, int] | None:
    """An interval [lo, hi] that the i32 ``v`` (a scalar, or an element of a tile, the scalars of
    a ``tile.map`` region included) is proven to lie in, as a signed value; None when nothing
    bounds it. Masks, shifts by constants, sums and products by constants, and the tile ops
    that move elements without changing them (so an argument of a map region is bounded by the
    map that made its tile)."""
    if depth > 32:
        return None
    r = lambda x: int_range(x, depth + 1)  # noqa: E731
    owner = v.owner
    if isinstance(v, BlockArgument):
        parent = v.block.parent_op()
        if isinstance(parent, tile.MapOp) and v.block is parent.block:
            return r(parent.inputs[v.index])
        return None
    if isinstance(owner, arith.ConstantOp):
        c = constant_int(v)
        return (c, c) if isinstance(c, int) else None
    if isinstance(owner, tile.SplatOp):
        return r(owner.value)
    if isinstance(owner, tile.BroadcastOp | tile.ExpandDimsOp | tile.TransOp | tile.ConvertLayoutOp | tile.MultipleOfOp):
        return r(owner.input)
    if isinstance(owner, tile.MapOp):
        return r(owner.block.last_op.operands[0])  # type: ignore[union-attr]
    if isinstance(owner, arith.AndIOp):  # a non-negative operand bounds the result (its sign bit clear)
        bounds = [b for b in (r(owner.lhs), r(owner.rhs)) if b is not None and b[0] >= 0]
        return (0, min(b[1] for b in bounds)) if bounds else None
    if isinstance(owner, arith.ShRUIOp | arith.ShRSIOp) and (c := constant_int(owner.rhs)) is not None and 0 < c < 32:
        a = r(owner.lhs)
        if isinstance(owner, arith.ShRUIOp):  # the bits of the unsigned word: non-negative
            return (a[0] >> c, a[1] >> c) if a is not None and a[0] >= 0 else (0, (1 << (32 - c)) - 1)
        a = a or (I32_MIN, I32_MAX)
        return (a[0] >> c, a[1] >> c)
    if isinstance(owner, arith.AddiOp | arith.SubiOp | arith.MuliOp):
        a, b = r(owner.lhs), r(owner.rhs)
        if a is None or b is None:
            return None
        if isinstance(owner, arith.AddiOp):
            lo, hi = a[0] + b[0], a[1] + b[1]
        elif isinstance(owner, arith.SubiOp):
            lo, hi = a[0] - b[1], a[1] - b[0]
        else:
            products = [x * y for x in a for y in b]
            lo, hi = min(products), max(products)
        return (lo, hi) if I32_MIN <= lo and hi <= I32_MAX else None  # wrapped: unbounded
    return None
