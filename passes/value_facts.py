"""What the IR proves about an integer value, read by the tile stages and their lowerings: its
constant, and the power of two it is a multiple of."""

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
