"""Two bitwise ops with constants as one ``lop3``: ``(x & m) | c`` (the mask-and-magic step of a
dequantiser), ``(x | a) ^ b``, ...

ptxas merges chains of ``and``/``or``/``xor`` into its three-input ``LOP3`` itself, except when
two of the inputs are different immediates: a ``LOP3`` has room for one, and ptxas then keeps two
instructions. Written as one ``lop3.b32`` with both constants, ptxas keeps one ``LOP3`` and puts
the other constant in a register, loaded once. The inner op must have no other user (it then
becomes dead code, which ptxas drops).
"""

from __future__ import annotations

from collections.abc import Callable

from kaio.dialects import ptx
from kaio.passes.to_ptx.emitter import PtxEmitter
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, i32
from xdsl.ir import Operation, SSAValue

_LOGIC: dict[type[Operation], Callable[[int, int], int]] = {
    arith.AndIOp: lambda a, b: a & b,
    arith.OrIOp: lambda a, b: a | b,
    arith.XOrIOp: lambda a, b: a ^ b,
}
# lop3's truth table is the function applied to these three bytes (a, b, c)
_A, _B, _C = 0xF0, 0xCC, 0xAA


def _constant(v: SSAValue) -> int | None:
    owner = v.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return int(owner.value.value.data) & 0xFFFFFFFF
    return None


def _split(op: Operation) -> tuple[SSAValue, int] | None:
    """(the non-constant operand, the constant) of a binary op with exactly one constant."""
    lhs, rhs = op.operands
    cl, cr = _constant(lhs), _constant(rhs)
    if (cl is None) == (cr is None):
        return None
    return (rhs, cl) if cl is not None else (lhs, cr)  # type: ignore[return-value]


def lop3_table(inner: type[Operation], outer: type[Operation]) -> int:
    """The table of ``outer(inner(a, b), c)``."""
    return _LOGIC[outer](_LOGIC[inner](_A, _B), _C) & 0xFF


def fuse_logic_pair(em: PtxEmitter, op: Operation) -> bool:
    """Lower ``op`` (and/or/xor of i32 with a constant) and the and/or/xor with a constant that
    feeds it as one ``lop3``; False (nothing emitted) when the pattern does not apply."""
    if type(op) not in _LOGIC or op.results[0].type != i32:
        return False
    outer = _split(op)
    if outer is None:
        return False
    value, c2 = outer
    inner_op = value.owner
    if type(inner_op) not in _LOGIC or not value.has_one_use() or inner_op.parent_block() is not op.parent_block():  # type: ignore[union-attr]
        return False
    inner = _split(inner_op)  # type: ignore[arg-type]
    if inner is None:
        return False
    x, c1 = inner
    lut = lop3_table(type(inner_op), type(op))  # type: ignore[arg-type]
    args = [em.value(x), em.const(c1, i32), em.const(c2, i32), em.const(lut, i32)]
    em.bind(op.results[0], em.instr(ptx.Lop3Op, "b32", args, i32))
    return True
