"""What ``ptx-fold`` does (the pass is :class:`~kaio.passes.ptx_optimize.PtxFoldPass`, which
calls :func:`fold_module`): constant folding, algebraic simplification and local value numbering
on the ``ptx`` dialect, after ``lower-to-ptx`` (where the lowering rules' index math is finally
visible as instructions, constants and casts included). :func:`value_key`, what makes two pure
instructions the same, is shared with ``ptx-licm``'s merging of repeats.

- An integer instruction whose sources are all constants becomes a constant (``add``, ``sub``,
  ``mul``, ``mad``, ``div``, ``rem``, shifts, logic, ``min``/``max``, ``neg``, and ``cvt``
  between integer widths), with PTX's wrapping and clamped-shift semantics.
- Identities: ``x + 0``, ``x - 0``, ``x * 1``, ``x / 1``, shifts by 0, ``x | 0``, ``x ^ 0``,
  ``x & -1`` are ``x``; ``x * 0``, ``x & 0``, ``x % 1`` are 0; ``mad(a, 0, c)`` is ``c``,
  ``mad(a, 1, c)`` an add; ``selp(a, a, p)`` is ``a``; ``(x + c) & (2^k - 1)`` is
  ``x & (2^k - 1)`` when c's low k bits are zero.
- A constant first operand of a commutative instruction moves second (where PTX takes an
  immediate).
- With ``window`` > 0, a pure instruction identical to one at most ``window`` instructions
  earlier in the same straight-line stretch (no label between them, so the earlier one
  dominates it) reads the earlier result instead; one that reads a ``ptx.reg`` is left alone,
  since an assign may change the register between them.
- Pure instructions nobody reads go.

Only 32- and 64-bit integer forms are rewritten; floating point is left exactly as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from kaio.dialects import ptx
from kaio.passes.ptx_scalar import (
    WORD_TYPES,
    ConstPool,
    Emit,
    as_typed,
    block_ops,
    const_int,
    entries,
    erase_dead,
    is_instr,
    is_pure,
    power_of_two,
    reads_registers,
    replace_result,
    spec_parts,
    word,
    word_type,
)
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

_FOLDABLE = frozenset((
    ptx.AddOp, ptx.SubOp, ptx.MulOp, ptx.MadOp, ptx.DivOp, ptx.RemOp, ptx.ShlOp, ptx.ShrOp, ptx.AndOp,
    ptx.OrOp, ptx.XorOp, ptx.NotOp, ptx.NegOp, ptx.MinOp, ptx.MaxOp, ptx.CvtOp, ptx.SelpOp,
))  # fmt: skip
_COMMUTATIVE = frozenset((ptx.AddOp, ptx.AndOp, ptx.OrOp, ptx.XorOp, ptx.MinOp, ptx.MaxOp))


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _shift(op: ptx.PtxInstr, x: int, amount: int, bits: int, is_signed: bool) -> int:
    amount = min(amount, bits)  # PTX clamps shift amounts to the width
    if isinstance(op, ptx.ShlOp):
        return x << amount
    if is_signed:
        return as_typed(x, bits, True) >> amount
    return x >> amount


def _evaluate(op: ptx.PtxInstr, values: list[int], bits: int, is_signed: bool) -> int | None:
    """The folded value of ``op`` (before wrapping), or None when it has no fixed value."""
    v = [as_typed(x, bits, is_signed) for x in values]
    mods = spec_parts(op)[0]
    simple: dict[type[ptx.PtxInstr], Callable[[], int]] = {
        ptx.AddOp: lambda: v[0] + v[1],
        ptx.SubOp: lambda: v[0] - v[1],
        ptx.AndOp: lambda: v[0] & v[1],
        ptx.OrOp: lambda: v[0] | v[1],
        ptx.XorOp: lambda: v[0] ^ v[1],
        ptx.MinOp: lambda: min(v),
        ptx.MaxOp: lambda: max(v),
        ptx.NegOp: lambda: -v[0],
        ptx.NotOp: lambda: ~v[0],
    }
    if type(op) in simple:
        return None if mods else simple[type(op)]()
    if isinstance(op, ptx.MulOp | ptx.MadOp):
        product = v[0] * v[1]
        if mods == ("hi",) and isinstance(op, ptx.MulOp):
            return product >> bits
        if mods in (("lo",), ("wide",)):
            addend_bits = 2 * bits if mods == ("wide",) else bits  # mad.wide adds a double word
            return product + (as_typed(values[2], addend_bits, is_signed) if isinstance(op, ptx.MadOp) else 0)
        return None
    if isinstance(op, ptx.DivOp | ptx.RemOp):
        if mods or v[1] == 0:
            return None
        q = _trunc_div(v[0], v[1])
        return q if isinstance(op, ptx.DivOp) else v[0] - q * v[1]
    if isinstance(op, ptx.ShlOp | ptx.ShrOp):
        return _shift(op, values[0], values[1], bits, is_signed)
    return None


def _fold_constant(op: ptx.PtxInstr, pool: ConstPool) -> SSAValue | None:
    """The constant ``op`` computes when all its sources are constants."""
    shape = word(op)
    if shape is None or op.guard is not None or len(op.results) != 1:
        return None
    values = [const_int(v) for v in op.srcs]
    if not values or any(x is None for x in values):
        return None
    out_type = op.results[0].type
    out_bits = 32 if out_type == word_type(32) else 64 if out_type == word_type(64) else None
    if out_bits is None:
        return None
    if isinstance(op, ptx.CvtOp):
        if spec_parts(op)[0] or spec_parts(op)[1][1] not in WORD_TYPES:
            return None
        src_bits, src_signed = WORD_TYPES[spec_parts(op)[1][1]]
        return pool.get(as_typed(values[0], src_bits, src_signed), out_type)  # type: ignore[arg-type]
    bits, is_signed = shape
    result = _evaluate(op, values, bits, is_signed)  # type: ignore[arg-type]
    return None if result is None else pool.get(result, out_type)


_ZERO_IDENTITY = frozenset((ptx.AddOp, ptx.SubOp, ptx.OrOp, ptx.XorOp, ptx.ShlOp, ptx.ShrOp))
"""Instructions whose constant second source of 0 gives back the first."""


def _simplify(op: ptx.PtxInstr, pool: ConstPool) -> SSAValue | None:
    """A value equal to ``op``'s result by an algebraic identity, or None."""
    shape = word(op)
    if shape is None or op.guard is not None or len(op.results) != 1 or op.results[0].type != word_type(shape[0]):
        return None
    bits, _ = shape
    srcs = op.srcs
    c = const_int(srcs[1]) if len(srcs) > 1 else None
    mods = spec_parts(op)[0]
    zero_type = op.results[0].type
    cls = type(op)  # exact classes: isinstance against xDSL's ABC-derived ops is slow
    if cls is ptx.SelpOp and srcs[0] is srcs[1]:
        return srcs[0]
    if c is None:
        return None
    ones = (1 << bits) - 1
    if cls in _ZERO_IDENTITY and c == 0 and not mods:
        return srcs[0]
    if cls is ptx.MulOp and mods == ("lo",):
        return srcs[0] if c == 1 else pool.get(0, zero_type) if c == 0 else None
    if cls is ptx.DivOp and not mods and c == 1:
        return srcs[0]
    if cls is ptx.RemOp and c == 1:
        return pool.get(0, zero_type)
    if cls is ptx.MadOp and mods == ("lo",):
        if c == 0:
            return srcs[2]
        if c == 1:
            return Emit(op, pool)(ptx.AddOp, f"s{bits}", [srcs[0], srcs[2]], bits)
        return None
    if cls is ptx.AndOp:
        if c == ones:
            return srcs[0]
        if c == 0:
            return pool.get(0, zero_type)
        k = power_of_two(c + 1)
        inner = srcs[0].owner
        if k is not None and isinstance(inner, ptx.AddOp) and inner.guard is None and not spec_parts(inner)[0]:
            added = const_int(inner.srcs[1])
            if added is not None and added & c == 0:  # the low k bits of x + c are x's
                return Emit(op, pool)(ptx.AndOp, f"b{bits}", [inner.srcs[0], c], bits)
    return None


def _commute(op: ptx.PtxInstr) -> None:
    if type(op) not in _COMMUTATIVE or "guard" in op.properties:
        return
    srcs = op.operands
    if len(srcs) == 2 and const_int(srcs[0]) is not None and const_int(srcs[1]) is None:
        op.operands[0], op.operands[1] = srcs[1], srcs[0]


def value_key(op: Operation) -> tuple[object, ...]:
    """What makes two pure instructions compute the same: the op, its spec, its symbol (a ``mov``
    of ``%tid.x``), its operands and result types (a guarded one is never pure); and what its
    ``within`` says of the addresses made from it (two starts of one array's bytes are not one
    value for ptx-sync-cleanup, which must not see one buffer's accesses as another's)."""
    props = op.properties
    return (type(op), props.get("spec"), props.get("symbol"), props.get("offset"), props.get("within"),
            *op.operands, *(r.type for r in op.results))  # fmt: skip


def fold_entry(entry: ptx.EntryOp, window: int = 0) -> None:
    pool = ConstPool(entry)
    seen: dict[tuple[object, ...], tuple[Operation, int]] = {}
    for position, op in enumerate(block_ops(entry.body.block)):
        cls = type(op)
        if cls is ptx.LabelOp:
            seen.clear()  # another path may join here: earlier values no longer dominate
            continue
        if not is_instr(cls) or "guard" in op.properties or not op.results:
            continue
        if cls in _FOLDABLE and (cls is ptx.SelpOp or any(type(v.owner) is ptx.ConstOp for v in op._operands)):  # pyright: ignore[reportPrivateUsage]  # the tuple: no view
            _commute(op)  # type: ignore[arg-type]
            value = _fold_constant(op, pool) or _simplify(op, pool)  # type: ignore[arg-type]
            if value is not None:
                replace_result(op, value)
                continue
        if window > 0 and is_pure(op) and op.results and not reads_registers(op):  # 0: no merging, no keys
            key = value_key(op)
            twin, at = seen.get(key, (None, 0))
            if twin is None or position - at > window:
                seen[key] = (op, position)
            else:
                for old, new in zip(op.results, twin.results):
                    old.replace_all_uses_with(new)
                op.detach()
                op.erase()
    erase_dead(entry)


def fold_module(module: ModuleOp, window: int) -> None:
    """``ptx-fold`` on every entry of ``module``: repeats merge at most ``window`` instructions
    apart (0: none)."""
    for entry in entries(module):
        fold_entry(entry, window)
