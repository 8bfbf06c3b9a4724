"""What ``ptx-strength-reduce`` does (the pass is
:class:`~kaio.passes.ptx_optimize.PtxStrengthReducePass`, which calls
:func:`strength_reduce_module`): integer ``mul``, ``div`` and ``rem`` by a constant become
cheaper instructions, for every kernel (tile layouts, copy loops and the frontend's code all
reach PTX as ``div.u32 x, 4``).

- ``mul.lo`` by 2^k: ``shl``.
- unsigned ``div``/``rem`` by 2^k: ``shr`` / ``and``.
- signed ``div``/``rem`` by 2^k, C truncation as the language (and PTX) defines ``//`` and
  ``%``: the quotient rounds toward zero, the remainder has the sign of the dividend. A
  negative dividend is biased by 2^k - 1 first: ``bias = (x >>s (n-1)) >>u (n-k)``,
  ``q = (x + bias) >>s k``, ``r = x - ((x + bias) & -2^k)``.
- ``div``/``rem`` by any other positive constant: one multiply-high by a magic number
  (:mod:`kaio.passes.magic_division`); the remainder is ``x - q * d``.

A signed division of a value known to be non-negative (a thread coordinate, ``max(x, 0)``, a
mask) takes the unsigned form: no bias, no sign correction. Only 32- and 64-bit words and
positive divisors are rewritten (a divisor of 1 is left to ``ptx-fold``); guarded instructions
stay as they are.
"""

from __future__ import annotations

from kaio.dialects import ptx
from kaio.passes.magic_division import signed_magic, unsigned_magic
from kaio.passes.ptx_scalar import (
    ConstPool,
    Emit,
    as_typed,
    block_ops,
    const_int,
    entries,
    known_nonnegative,
    power_of_two,
    replace_result,
    spec_parts,
    word,
)
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue


def _pow2_quotient(e: Emit, x: SSAValue, k: int, bits: int, is_signed: bool, want_rem: bool) -> SSAValue:
    n = f"{bits}"
    if not is_signed:
        if want_rem:
            return e(ptx.AndOp, f"b{n}", [x, (1 << k) - 1], bits)
        return e(ptx.ShrOp, f"u{n}", [x, k], bits)
    sign = e(ptx.ShrOp, f"s{n}", [x, bits - 1], bits) if k > 1 else x
    bias = e(ptx.ShrOp, f"u{n}", [sign, bits - k], bits)
    biased = e(ptx.AddOp, f"s{n}", [x, bias], bits)
    if not want_rem:
        return e(ptx.ShrOp, f"s{n}", [biased, k], bits)
    rounded = e(ptx.AndOp, f"b{n}", [biased, -(1 << k)], bits)
    return e(ptx.SubOp, f"s{n}", [x, rounded], bits)


def _magic_quotient(e: Emit, x: SSAValue, d: int, bits: int, is_signed: bool) -> SSAValue:
    n = f"{bits}"
    if not is_signed:
        um = unsigned_magic(d, bits)
        hi = e(ptx.MulOp, f"hi.u{n}", [x, um.multiplier], bits)
        if um.add:
            diff = e(ptx.SubOp, f"u{n}", [x, hi], bits)
            half = e(ptx.ShrOp, f"u{n}", [diff, 1], bits)
            hi = e(ptx.AddOp, f"u{n}", [half, hi], bits)
        return e(ptx.ShrOp, f"u{n}", [hi, um.shift], bits) if um.shift else hi
    sm = signed_magic(d, bits)
    q = e(ptx.MulOp, f"hi.s{n}", [x, sm.multiplier], bits)
    if sm.add:
        q = e(ptx.AddOp, f"s{n}", [q, x], bits)
    if sm.shift:
        q = e(ptx.ShrOp, f"s{n}", [q, sm.shift], bits)
    negative = e(ptx.ShrOp, f"u{n}", [x, bits - 1], bits)
    return e(ptx.AddOp, f"s{n}", [q, negative], bits)


def reduce(op: ptx.PtxInstr, pool: ConstPool) -> bool:
    """Rewrite ``op`` if it is a multiply/divide/remainder by a constant this pass handles."""
    shape = word(op)
    if shape is None or op.guard is not None:
        return False
    bits, is_signed = shape
    srcs = op.srcs
    if isinstance(op, ptx.MulOp):
        c = const_int(srcs[1])
        if spec_parts(op)[0] != ("lo",) or c is None or power_of_two(c) is None or c == 1:
            return False
        e = Emit(op, pool)
        replace_result(op, e(ptx.ShlOp, f"b{bits}", [srcs[0], power_of_two(c)], bits))  # type: ignore[list-item]
        return True
    if not isinstance(op, ptx.DivOp | ptx.RemOp) or spec_parts(op)[0]:
        return False
    raw = const_int(srcs[1])
    if raw is None:
        return False
    d = as_typed(raw, bits, is_signed)
    if d < 2:
        return False
    if is_signed and known_nonnegative(srcs[0]):  # C truncation and the unsigned quotient agree
        is_signed = False
    e, x = Emit(op, pool), srcs[0]
    want_rem = isinstance(op, ptx.RemOp)
    k = power_of_two(d)
    if k is not None:
        replace_result(op, _pow2_quotient(e, x, k, bits, is_signed, want_rem))
        return True
    q = _magic_quotient(e, x, d, bits, is_signed)
    if want_rem:  # x - q * d (the low bits are the same signed or not)
        q = e(ptx.MadOp, f"lo.s{bits}", [q, -d, x], bits)
    replace_result(op, q)
    return True


_REDUCIBLE = frozenset((ptx.MulOp, ptx.DivOp, ptx.RemOp))


def strength_reduce_module(module: ModuleOp, magic: bool) -> None:
    """``ptx-strength-reduce`` on every entry of ``module``; with ``magic`` false, only the
    powers of two (no multiply-high)."""
    for entry in entries(module):
        pool = ConstPool(entry)
        for instr in block_ops(entry.body.block):
            if type(instr) in _REDUCIBLE and (magic or _power_case(instr)):  # type: ignore[arg-type]
                reduce(instr, pool)  # type: ignore[arg-type]


def _power_case(op: ptx.PtxInstr) -> bool:
    c = const_int(op.srcs[1]) if len(op.srcs) > 1 else None
    shape = word(op)
    return c is not None and shape is not None and power_of_two(as_typed(c, *shape)) is not None
