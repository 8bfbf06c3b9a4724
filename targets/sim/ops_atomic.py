"""atom and red on global and shared memory (and generic addresses pointing there).

Atomics of one instruction are applied one thread at a time in increasing thread order, so
results (float sums included) are deterministic and every returned old value is one a real
serialization could produce. The serialization is vectorized: distinct addresses in one step;
integer add in closed form (wrapping prefix sums); other ufunc reductions with a sequential
``accumulate`` per address; the rest (cas, inc, dec, half-precision add, flushed f32 add) in
rounds, round k applying every address's k-th access. Ufunc reductions take whichever of
"per address" or "per round" needs fewer Python iterations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import floatmath as fm
from .faults import DecodeError
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .ops_memory import take_space
from .program import Behaviour, Idx
from .ptx_types import PtxType
from .spaces import check_shared_written, locate, mark_shared_written, split_generic
from .syntax import Instruction

Step = Callable[[Any, Any, Any], Any]  # (old, b, c) -> new, on element values

_UFUNCS = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
_HALF = {"f16", "f16x2", "bf16", "bf16x2"}
_OP_TYPES = {
    "and": {"b32", "b64"},
    "or": {"b32", "b64"},
    "xor": {"b32", "b64"},
    "exch": {"b32", "b64", "u32", "s32", "u64", "s64", "f32", "f64"},
    "cas": {"b16", "b32", "b64", "u32", "s32", "u64", "s64"},
    "add": {"u32", "s32", "u64", "s64", "f32", "f64"} | _HALF,
    "inc": {"u32"},
    "dec": {"u32"},
    "min": {"u32", "s32", "u64", "s64"},
    "max": {"u32", "s32", "u64", "s64"},
}


def element_dtype(t: PtxType) -> np.dtype:
    """What one atomic access reads and writes: the value, or the raw bits of a packed pair."""
    return t.value if t.lanes == 1 else t.container


def _step(op: str, t: PtxType, flush: bool) -> Step:
    if op == "add" and t.name in _HALF:
        lane = t.value

        def add_half(old: Any, b: Any, c: Any) -> Any:  # per lane, rounded once per access
            total = np.asarray(old).view(lane).astype(np.float32) + np.asarray(b).view(lane).astype(np.float32)
            return total.astype(lane).view(element_dtype(t))

        return add_half
    if op == "add" and flush:

        def add_ftz(old: Any, b: Any, c: Any) -> Any:
            f = fm.flush_subnormal
            return f(f(np.asarray(old), fm.F32) + f(np.asarray(b), fm.F32), fm.F32)

        return add_ftz
    if op in _UFUNCS:
        ufunc = _UFUNCS[op]
        return lambda old, b, c: ufunc(old, b)
    if op == "exch":
        return lambda old, b, c: np.array(np.broadcast_to(b, np.shape(old)))
    if op == "cas":
        return lambda old, b, c: np.where(old == b, c, old)
    if op == "inc":
        return lambda old, b, c: np.where(old >= b, np.uint32(0), old + np.uint32(1))
    return lambda old, b, c: np.where((old == 0) | (old > b), b, old - np.uint32(1))  # dec


def serialize(mem: np.ndarray, ix: np.ndarray, b: np.ndarray, c: np.ndarray | None, op: str, t: PtxType, flush: bool) -> np.ndarray:
    """Apply accesses ``ix`` (indices into the element array ``mem``) in order; returns the old
    value each access saw. ``b``/``c`` hold one element per access."""
    m = ix.size
    step = _step(op, t, flush)
    order = np.argsort(ix, kind="stable")
    sorted_ix = ix[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_ix[1:] != sorted_ix[:-1])))
    if starts.size == m:  # every access hits its own address
        before = mem[ix].copy()
        mem[ix] = step(before, b, c)
        return before
    dtype = element_dtype(t)
    old = np.empty(m, dtype=dtype)
    sizes = np.diff(np.append(starts, m))
    group_of = np.repeat(np.arange(starts.size), sizes)
    if op == "add" and t.is_integer:  # modular prefix sums: exact and one-shot
        u = t.container
        bs = b[order].view(u)
        inclusive = np.cumsum(bs, dtype=u)
        exclusive = inclusive - bs
        base = exclusive[starts]
        first = mem[sorted_ix[starts]].view(u)
        old[order] = (first[group_of] + (exclusive - base[group_of])).view(dtype)
        mem[sorted_ix[starts]] = (first + (inclusive[starts + sizes - 1] - base)).view(dtype)
        return old
    sequential_ufunc = op in _UFUNCS and not (op == "add" and (flush or t.name in _HALF))
    if sequential_ufunc and starts.size <= int(sizes.max()):
        ufunc = _UFUNCS[op]
        bs = b[order]
        for s, n in zip(starts.tolist(), sizes.tolist()):
            addr = sorted_ix[s]
            chain = ufunc.accumulate(np.concatenate((mem[addr : addr + 1], bs[s : s + n])), dtype=dtype)
            old[order[s : s + n]] = chain[:-1]
            mem[addr] = chain[-1]
        return old
    rank = np.arange(m) - starts[group_of]
    for r in range(int(sizes.max())):  # round r: every address's r-th access
        sel = order[rank == r]
        where = ix[sel]
        before = mem[where].copy()
        old[sel] = before
        mem[where] = step(before, b[sel], None if c is None else c[sel])
    return old


def _no_subnormal_sums(*arrays: Any) -> bool:
    """True if no partial sum of these f32 values can be subnormal: all are 0 or >= 2**-100,
    so every sum is a multiple of 2**-123 and hence 0 or normal."""
    return all(bool(np.all((a == 0) | (np.abs(a) >= 2.0**-100))) for a in map(np.asarray, arrays))


def make_atomic(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    is_red = mods.mnemonic == "red"
    space = take_space(mods)
    if space not in (None, "global", "shared"):
        raise DecodeError(f"{ins.opcode}: atomics work on global and shared memory only")
    op = mods.require(*_OP_TYPES)
    noftz = mods.flag("noftz")
    mods.drop_memory_hints()
    t = mods.one_type(_OP_TYPES[op])
    if t.name in _HALF and not noftz:
        raise DecodeError(f"{ins.opcode}: half-precision atomic add needs .noftz")
    if is_red:
        ops = operands(ins, (2, 3))
        d, addr, b, c = None, dc.address(ops[0], space), dc.reader(ops[1], t), None
    else:
        ops = operands(ins, (4,) if op == "cas" else (3, 4))
        d, addr, b = dc.writer(ops[0], t), dc.address(ops[1], space), dc.reader(ops[2], t)
        c = dc.reader(ops[3], t) if op == "cas" else None
    itemsize = t.nbytes
    dtype = element_dtype(t)

    def elements(v: Any, m: int) -> np.ndarray:
        return np.ascontiguousarray(np.broadcast_to(np.asarray(v).view(dtype) if t.lanes > 1 else np.asarray(v, dtype=dtype), (m,)))

    def apply(ctx: Any, sp: str, sub_idx: Idx, a: Any, bv: np.ndarray, cv: np.ndarray | None) -> np.ndarray:
        m = bv.size
        off = np.broadcast_to(np.asarray(locate(ctx, sp, sub_idx, a, itemsize, itemsize, "atomic")), (m,))
        if ctx.profiler is not None and sp == "global":
            ctx.profiler.global_access(ctx, sub_idx, a, itemsize)
        if sp == "shared":
            if ctx.race is not None:
                ctx.race.atomic(sub_idx, off, itemsize)
            if ctx.async_proxy is not None:  # a generic read and write
                ctx.async_proxy.generic_read(ctx, sub_idx, off, itemsize)
                ctx.async_proxy.generic_write(ctx, sub_idx, off, itemsize)
            check_shared_written(ctx, sub_idx, off, itemsize, a)
        mem = ctx.view(sp, itemsize).view(dtype)
        flush = op == "add" and t.name == "f32" and sp == "global"
        if flush and _no_subnormal_sums(bv, mem[off // itemsize]):
            flush = False  # .ftz cannot change anything: keep the fast path
        old = serialize(mem, off // itemsize, bv, cv, op, t, flush)
        if sp == "shared":
            mark_shared_written(ctx, off, itemsize)
        return old

    def run(ctx: Any, idx: Idx) -> None:
        m = ctx.n if idx is None else idx.size
        a = addr(ctx, idx)
        bv = elements(b(ctx, idx), m)
        cv = elements(c(ctx, idx), m) if c is not None else None
        if space is not None:
            old = apply(ctx, space, idx, a, bv, cv)
        else:
            groups = split_generic(idx, ctx.n, a)
            old = np.empty(m, dtype=dtype)
            for sp, sub_idx, positions, sub_a in groups:
                sub_a = sub_a if np.ndim(a) else sub_a[0]
                old[positions] = apply(ctx, sp, sub_idx, sub_a, bv[positions], None if cv is None else cv[positions])
        if d is not None:
            d(ctx, idx, old.view(t.value) if t.lanes > 1 else old)

    return Behaviour(run=run, klass=f"{mods.mnemonic}.{space or 'generic'}", shared_access=itemsize if space in (None, "shared") else 0)


TABLE = {
    ("atom", "*"): make_atomic,
    ("red", "*"): make_atomic,
}
