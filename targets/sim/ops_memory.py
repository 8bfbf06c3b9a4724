"""ld / ldu / st (every state space, .v2/.v4, cache and ordering hints ignored), cvta,
isspacep and prefetch."""

from __future__ import annotations

from typing import Any

import numpy as np

from .faults import DecodeError
from .memory import GLOBAL_BASE, LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from .memory_access import load, store
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .program import Behaviour, Idx, RunFn
from .ptx_types import PTX_TYPES
from .syntax import Instruction, VecOperand

SPACE_NAMES = {
    "global": "global",
    "shared": "shared",
    "shared::cta": "shared",
    "shared::cluster": "shared",  # a cluster of one CTA: its own shared memory
    "local": "local",
    "const": "const",
    "param": "param",
    "param::entry": "param",
}
_WINDOW = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "param": PARAM_WINDOW}


def take_space(mods: Modifiers) -> str | None:
    found = mods.take(*SPACE_NAMES)
    return SPACE_NAMES[found] if found else None


def _vector(mods: Modifiers) -> int:
    v = mods.take("v2", "v4", "v8")
    return int(v[1:]) if v else 1


def _items(op: Any, count: int, ins: Instruction) -> list[Any]:
    items = list(op.items) if isinstance(op, VecOperand) else [op]
    if len(items) != count:
        raise DecodeError(f"{ins.opcode} moves {count} element(s) but names {len(items)}")
    return items


def make_ld(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    space = take_space(mods)
    if mods.mnemonic == "ldu" and space not in (None, "global"):
        raise DecodeError("ldu reads global memory only")
    count = _vector(mods)
    mods.drop_memory_hints()
    t = mods.one_type()
    ops = operands(ins, (2, 3))  # a third operand is an L2 cache policy
    writers = [dc.writer(item, t) for item in _items(ops[0], count, ins)]
    addr = dc.address(ops[1], space)
    itemsize = t.nbytes
    value = t.value

    def run(ctx: Any, idx: Idx) -> None:
        parts = load(ctx, space, idx, addr(ctx, idx), itemsize, count)
        for write, part in zip(writers, parts):
            write(ctx, idx, part.view(value))

    return Behaviour(run=run, klass=f"ld.{space or 'generic'}", shared_access=itemsize * count if space in (None, "shared") else 0)


def make_st(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    space = take_space(mods)
    if space in ("const", "param"):
        raise DecodeError(f"st.{space}: that state space is read-only in a kernel")
    count = _vector(mods)
    mods.drop_memory_hints()
    t = mods.one_type()
    ops = operands(ins, (2, 3))
    addr = dc.address(ops[0], space)
    readers = [dc.reader(item, t) for item in _items(ops[1], count, ins)]
    itemsize = t.nbytes
    container = t.container

    def run(ctx: Any, idx: Idx) -> None:
        values = [np.asarray(read(ctx, idx)).view(container) for read in readers]
        store(ctx, space, idx, addr(ctx, idx), itemsize, values)

    return Behaviour(run=run, klass=f"st.{space or 'generic'}", shared_access=itemsize * count if space in (None, "shared") else 0)


def make_cvta(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    to_space = mods.flag("to")
    space = take_space(mods)
    if space is None:
        raise DecodeError(f"{ins.opcode} needs a state space")
    t = mods.one_type({"u32", "u64"})
    d_op, a_op = operands(ins, 2)
    d = dc.writer(d_op, t)
    a = dc.reader(a_op, PTX_TYPES["u64"])
    base = np.uint64(_WINDOW.get(space, 0))
    value = t.value

    def run(ctx: Any, idx: Idx) -> None:
        v = np.asarray(a(ctx, idx))
        out = (v - base) if to_space else (v + base)
        d(ctx, idx, out.astype(value))

    return run


def make_isspacep(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    space = take_space(mods)
    if space is None:
        raise DecodeError(f"{ins.opcode} needs a state space")
    mods.done()
    p_op, a_op = operands(ins, 2)
    p = dc.writer(p_op, PTX_TYPES["pred"])
    a = dc.reader(a_op, PTX_TYPES["u64"])
    if space in _WINDOW:
        lo, hi = np.uint64(_WINDOW[space]), np.uint64(_WINDOW[space] + WINDOW_SIZE - 1)
    else:  # global and const variables both live in the global arena, above every window
        lo, hi = np.uint64(GLOBAL_BASE), np.uint64(0xFFFFFFFFFFFFFFFF)

    def run(ctx: Any, idx: Idx) -> None:
        v = np.asarray(a(ctx, idx))
        p(ctx, idx, np.asarray((v >= lo) & (v <= hi)))

    return run


def make_prefetch(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    take_space(mods)
    mods.drop_memory_hints()
    operands(ins, 1)
    return lambda ctx, idx: None  # a cache hint: no architectural effect


def make_createpolicy(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> RunFn:
    """createpolicy: an opaque L2 eviction policy that ld/st/atom may name as a cache hint.
    Hints have no effect here, so the policy is 0."""
    mods.take("fractional", "range")
    mods.drop_memory_hints()
    t = mods.one_type({"b64"})
    ops = operands(ins, (2, 3, 4))  # the fraction, or an address range: irrelevant to a hint
    d = dc.writer(ops[0], t)
    zero = np.uint64(0)
    return lambda ctx, idx: d(ctx, idx, zero)


TABLE = {
    ("ld", "*"): make_ld,
    ("ldu", "*"): make_ld,
    ("st", "*"): make_st,
    ("cvta", "*"): make_cvta,
    ("isspacep", "*"): make_isspacep,
    ("prefetch", "*"): make_prefetch,
    ("prefetchu", "*"): make_prefetch,
    ("createpolicy", "*"): make_createpolicy,
}
