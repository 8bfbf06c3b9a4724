"""What the scalar passes on the ``ptx`` dialect share: integer constants and their wrapping
arithmetic, which instructions are pure, building instructions in place, and one pool of
``ptx.const`` values per entry.

A ``ptx.entry`` is one flat block in SSA form (see :mod:`kaio.dialects.ptx`): every result is
defined once, except the ``ptx.reg`` registers that ``ptx.assign`` writes (loop-carried values,
branch results). A pass may therefore move or merge an instruction that reads only SSA values
freely within their dominance, but one that reads a ``ptx.reg`` sees whatever was last assigned.
Only the 32- and 64-bit integer forms are rewritten; 16-bit and 8-bit ones are left to ptxas.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache

from kaio.dialects import ptx
from kaio.dialects.ptx_base import is_instr_class
from kaio.ir_walk import ops_of
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i32, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

WORD_TYPES = {"s32": (32, True), "u32": (32, False), "b32": (32, False),
              "s64": (64, True), "u64": (64, False), "b64": (64, False)}  # fmt: skip
"""The integer PTX types the passes rewrite: (bits, signed)."""

# Instructions that only compute their results from their operands: no memory, no
# synchronisation, no warp-collective semantics, no state that changes between executions.
PURE_OPS: frozenset[type[Operation]] = frozenset((
    ptx.AddOp, ptx.SubOp, ptx.MulOp, ptx.MadOp, ptx.DivOp, ptx.RemOp, ptx.MinOp, ptx.MaxOp,
    ptx.AbsOp, ptx.NegOp, ptx.FmaOp, ptx.AndOp, ptx.OrOp, ptx.XorOp, ptx.NotOp, ptx.ShlOp,
    ptx.ShrOp, ptx.Lop3Op, ptx.PrmtOp, ptx.BfeOp, ptx.BfiOp, ptx.PopcOp, ptx.ClzOp, ptx.BrevOp,
    ptx.SetpOp, ptx.SelpOp, ptx.CvtOp, ptx.CvtaOp, ptx.MovOp,
))  # fmt: skip

# special registers that hold the same value for the whole life of a thread
_FIXED_SPECIALS = frozenset(
    f"%{r}.{d}" for r in ("tid", "ntid", "ctaid", "nctaid", "cluster_ctaid", "cluster_nctaid") for d in "xyz"
) | {"%laneid", "%cluster_ctarank"}


def block_ops(block: Block) -> list[Operation]:
    """The block's ops, as a list taken in one walk: ``list(block.ops)`` walks the chain
    twice, since ``list`` asks for the length first and xDSL counts a block's ops by walking
    them (a 2000-instruction entry: ~1 ms a call); :func:`kaio.ir_walk.ops_of` follows the links."""
    return ops_of(block)


# Whether ops of a class are PTX instructions (the passes dispatch on exact types: an
# ``isinstance`` against xDSL's abstract classes costs more than the rewrite)
is_instr = is_instr_class


@lru_cache(maxsize=4096)
def _spec_parts(n_types: int, spec: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    tokens = tuple(spec.split(".")) if spec else ()
    return (tokens[:-n_types], tokens[-n_types:]) if n_types else (tokens, ())


def spec_parts(op: ptx.PtxInstr) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(modifiers, types) of an instruction's spec, parsed once per distinct spec."""
    return _spec_parts(op.INFO.n_types, op.spec_text)


def word(op: Operation) -> tuple[int, bool] | None:
    """(bits, signed) of an integer instruction on 32- or 64-bit words, else None."""
    if not is_instr(type(op)):
        return None
    types = spec_parts(op)[1]  # type: ignore[arg-type]
    return WORD_TYPES.get(types[-1]) if types else None


def is_pure(op: Operation) -> bool:
    """Whether ``op`` computes only from its operands (it may move, merge or vanish when unused).
    A ``mov`` of a symbol is pure for a shared array's address or a fixed special register, not
    for ``%clock`` or ``%smid``; a guarded instruction is not (it may leave its result unset)."""
    cls = type(op)
    if cls is ptx.ConstOp:
        return True
    if cls not in PURE_OPS or "guard" in op.properties:
        return False
    if cls is ptx.MovOp and op.symbol is not None:  # type: ignore[attr-defined]
        name = op.symbol.data  # type: ignore[attr-defined]
        return not name.startswith("%") or name in _FIXED_SPECIALS
    return True


def reads_registers(op: Operation) -> bool:
    """Whether ``op`` reads a ``ptx.reg`` (a value an assign may change)."""
    return any(type(v.owner) is ptx.RegOp for v in op.operands)


def known_nonnegative(v: SSAValue, depth: int = 6) -> bool:
    """Whether a 32- or 64-bit value's sign bit is clear whatever the inputs (so a signed
    division of it is an unsigned one): a constant >= 0, a thread or block coordinate, a max
    with something non-negative, a mask without the sign bit, a logical right shift, ..."""
    owner = v.owner
    cls = type(owner)
    if cls is ptx.ConstOp:
        c = const_int(v)
        bits = 32 if v.type == i32 else 64
        return c is not None and c >> (bits - 1) == 0
    if depth == 0 or not is_instr(cls) or "guard" in owner.properties:  # type: ignore[union-attr]
        return False
    srcs = owner.srcs  # type: ignore[union-attr]
    if cls is ptx.MovOp:
        return owner.symbol is not None and owner.symbol.data in _FIXED_SPECIALS  # type: ignore[union-attr]
    types = spec_parts(owner)[1]  # type: ignore[arg-type]

    def below(x: SSAValue) -> bool:
        return known_nonnegative(x, depth - 1)

    if cls is ptx.MaxOp:
        return types[0][0] == "s" and any(below(x) for x in srcs)
    if cls is ptx.AndOp:
        return any(below(x) for x in srcs)
    if cls in (ptx.OrOp, ptx.XorOp, ptx.MinOp):
        return all(below(x) for x in srcs)
    if cls is ptx.SelpOp:
        return below(srcs[0]) and below(srcs[1])
    if cls is ptx.ShrOp:
        amount = const_int(srcs[1])
        return (types[0][0] != "s" and amount is not None and amount >= 1) or below(srcs[0])
    if cls in (ptx.DivOp, ptx.RemOp):
        return types[0][0] == "u" and (const_int(srcs[1]) or 0) >= 2 or (types[0][0] == "s" and below(srcs[0]))
    return False


def const_int(v: SSAValue) -> int | None:
    """The integer a ``ptx.const`` holds (as its bits, unsigned), else None."""
    owner = v.owner
    if type(owner) is ptx.ConstOp and isinstance(owner.value, IntegerAttr) and v.type in (i32, i64):  # type: ignore[attr-defined]
        bits = 32 if v.type == i32 else 64
        return owner.value.value.data & ((1 << bits) - 1)  # type: ignore[attr-defined]
    return None


def wrap(value: int, bits: int) -> int:
    """``value`` modulo 2^bits, as unsigned bits."""
    return value & ((1 << bits) - 1)


def signed(value: int, bits: int) -> int:
    """The two's-complement reading of ``bits`` bits."""
    value = wrap(value, bits)
    return value - (1 << bits) if value >> (bits - 1) else value


def as_typed(value: int, bits: int, is_signed: bool) -> int:
    return signed(value, bits) if is_signed else wrap(value, bits)


def power_of_two(value: int) -> int | None:
    """k where value == 2^k (value > 0), else None."""
    return value.bit_length() - 1 if value > 0 and value & (value - 1) == 0 else None


def word_type(bits: int) -> Attribute:
    return i32 if bits == 32 else i64


class ConstPool:
    """The ``ptx.const`` values of one entry, one per (value, type), defined at its top."""

    def __init__(self, entry: ptx.EntryOp):
        self.block = entry.body.block
        self.values: dict[tuple[int, Attribute], SSAValue] = {}
        # Integer constants move to the top (so the one kept for a value dominates every use
        # of it) and repeats merge into it. A constant has no operands: moving it up is free.
        top = self.block.first_op
        for op in block_ops(self.block):
            if type(op) is not ptx.ConstOp or not isinstance(op.value, IntegerAttr) or op.result.type not in (i32, i64):  # type: ignore[attr-defined]
                continue
            key = (const_int(op.results[0]), op.results[0].type)
            kept = self.values.get(key)  # type: ignore[arg-type]
            if kept is not None:
                replace_result(op, kept)
                continue
            self.values[key] = op.results[0]  # type: ignore[index]
            if op is top:
                top = op.next_op
            elif top is not None:
                op.detach()
                self.block.insert_op_before(op, top)

    def get(self, value: int, t: Attribute) -> SSAValue:
        bits = 32 if t == i32 else 64
        key = (wrap(value, bits), t)
        if key not in self.values:
            op = ptx.ConstOp(signed(value, bits), t)
            first = self.block.first_op
            if first is None:
                self.block.add_op(op)
            else:
                Rewriter.insert_op(op, InsertPoint.before(first))
            self.values[key] = op.result
        return self.values[key]


class Emit:
    """Builds instructions right before ``anchor``, with the anchor's source location."""

    def __init__(self, anchor: Operation, pool: ConstPool):
        self.anchor = anchor
        self.pool = pool

    def const(self, value: int, bits: int) -> SSAValue:
        return self.pool.get(value, word_type(bits))

    def __call__(self, cls: type[ptx.PtxInstr], spec: str, args: Sequence[SSAValue | int], bits: int,
                 out_bits: int | None = None) -> SSAValue:  # fmt: skip
        """One instruction; integer args become constants of ``bits`` (shift amounts: 32)."""
        shift = cls in (ptx.ShlOp, ptx.ShrOp)
        values = [
            a if isinstance(a, SSAValue) else self.const(a, 32 if shift and i == 1 else bits)
            for i, a in enumerate(args)
        ]
        op = cls(spec, values, [word_type(out_bits or bits)])
        op.location = self.anchor.location
        Rewriter.insert_op(op, InsertPoint.before(self.anchor))
        return op.outs[0]


def replace_result(op: Operation, value: SSAValue) -> None:
    """Every use of ``op``'s single result reads ``value``; ``op`` goes."""
    op.results[0].replace_all_uses_with(value)
    op.detach()
    op.erase()


def entries(module: ModuleOp) -> Iterator[ptx.EntryOp]:
    """The module's kernels (entries sit at its top level)."""
    for op in module.body.block.ops:
        if type(op) is ptx.EntryOp:
            yield op  # type: ignore[misc]


def erase_dead(entry: ptx.EntryOp) -> None:
    """Drop pure instructions whose results nobody reads (constants included), last first."""
    for op in reversed(block_ops(entry.body.block)):
        if is_pure(op) and all(not r.uses for r in op.results) and op.results:
            op.detach()
            op.erase()
