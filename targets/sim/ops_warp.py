"""Warp-synchronous instructions: shfl.sync, vote.sync, redux.sync, activemask, and the
convergence checks that ldmatrix and mma.sync share with them.

The executor runs exactly the threads that sit at the same PC, so "the lanes executing this
instruction together" is the executing set. A ``.sync`` instruction requires every existing lane
named in its member mask to be in that set (a lane that diverged or exited is a bug, reported as
KaioSimError); a shuffle must also read only from lanes that execute it, since the value of any
other lane is undefined on hardware. Lanes past the end of a partial last warp do not exist and
are ignored in member masks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .context import WARP, ExecContext
from .faults import DecodeError, SimFault
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .program import Behaviour, Idx
from .ptx_types import PTX_TYPES
from .syntax import Instruction, PairOperand, RegOperand, SinkOperand

_U32 = PTX_TYPES["u32"]
_B32 = PTX_TYPES["b32"]
_PRED = PTX_TYPES["pred"]
_FULL = 0xFFFFFFFF


def executing_lanes(ctx: ExecContext, idx: Idx) -> np.ndarray:
    """Per batch warp: bitmask (uint64) of the lanes executing this instruction."""
    if idx is None:
        return ctx.warp_existing_lanes
    weights = np.left_shift(1, ctx.lane[idx].astype(np.int64)).astype(np.float64)  # exact below 2**53
    nwarps = ctx.warp_existing_lanes.size
    return np.bincount(ctx.warp[idx], weights=weights, minlength=nwarps).astype(np.uint64)


def check_converged(ctx: ExecContext, idx: Idx, mask: Any, name: str) -> np.ndarray:
    """Raise unless every existing lane of each thread's member mask executes this
    instruction; returns the executing-lane bitmask per warp."""
    lanes = executing_lanes(ctx, idx)
    if idx is None and np.ndim(mask) == 0 and int(mask) == _FULL:
        return lanes  # converged fast path: every lane of every warp is here
    warp = ctx.warp if idx is None else ctx.warp[idx]
    lane = ctx.lane if idx is None else ctx.lane[idx]
    m = np.asarray(mask).astype(np.uint64)
    named = m & ctx.warp_existing_lanes[warp]
    missing = named & ~lanes[warp]
    self_missing = ((m >> lane.astype(np.uint64)) & np.uint64(1)) == 0
    bad = (missing != 0) | self_missing
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        thread = k if idx is None else int(idx[k])
        mk = int(np.broadcast_to(m, bad.shape)[k])
        if bool(self_missing.reshape(-1)[k] if np.ndim(self_missing) else self_missing):
            detail = f"lane {int(lane[k])} executes it but is not in its own member mask {mk:#010x}"
        else:
            gone = int(np.broadcast_to(missing, bad.shape)[k])
            detail = (
                f"member mask {mk:#010x} names lanes {_lane_list(gone)} that are not converged at this "
                f"instruction (diverged or exited)"
            )
        raise SimFault("sim", f"{name}: {detail}", thread)
    return lanes


def full_warps(ctx: ExecContext, idx: Idx, name: str) -> None:
    """Raise unless the executing threads are whole warps of 32 lanes, all converged here:
    what ``.sync.aligned`` collectives (ldmatrix, mma.sync) need. Afterwards the executing
    threads, in order, reshape to ``(-1, 32)`` with one warp per row."""
    check_converged(ctx, idx, _FULL, name)
    tail = ctx.cta_threads % WARP
    if tail:
        first = 0 if idx is None else int(idx[0])
        raise SimFault("sim", f"{name} needs all 32 lanes of a warp; the last warp of this {ctx.cta_threads}-thread block has only {tail}", first)


def _lane_list(bits: int) -> str:
    """'0-3,8,16-31' for the set bits of a lane mask."""
    lanes = [i for i in range(32) if bits >> i & 1]
    runs: list[str] = []
    start = prev = lanes[0]
    for x in lanes[1:]:
        if x == prev + 1:
            prev = x
            continue
        runs.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = x
    runs.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(runs)


def _mask_reader(dc: DecodeContext, ins: Instruction, ops: tuple[Any, ...], legacy: bool) -> Any:
    if legacy:
        return None
    return dc.reader(ops[-1], _U32)


def make_shfl(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    legacy = not mods.flag("sync")
    mode = mods.require("up", "down", "bfly", "idx")
    mods.one_type({"b32"})
    ops = operands(ins, 4 if legacy else 5)
    dest = ops[0]
    if isinstance(dest, PairOperand):
        d = dc.writer(SinkOperand() if dest.first == "_" else RegOperand(dest.first), _B32)
        p = dc.writer(RegOperand(dest.second), _PRED)
    else:
        d, p = dc.writer(dest, _B32), None
    a, b, c = dc.reader(ops[1], _B32), dc.reader(ops[2], _U32), dc.reader(ops[3], _U32)
    member = _mask_reader(dc, ins, ops, legacy)
    name = ins.opcode

    def run(ctx: ExecContext, idx: Idx) -> None:
        mask = member(ctx, idx) if member is not None else None
        lanes_here = check_converged(ctx, idx, mask, name) if mask is not None else executing_lanes(ctx, idx)
        lane = (ctx.lane if idx is None else ctx.lane[idx]).astype(np.int64)
        bval = np.asarray(b(ctx, idx)).astype(np.int64) & 0x1F
        cv = np.asarray(c(ctx, idx)).astype(np.int64)
        clamp, seg = cv & 0x1F, (cv >> 8) & 0x1F
        max_lane = (lane & seg) | (clamp & ~seg)
        min_lane = lane & seg
        if mode == "up":
            j = lane - bval
            ok = j >= max_lane
        elif mode == "down":
            j = lane + bval
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            ok = j <= max_lane
        else:
            j = min_lane | (bval & ~seg)
            ok = j <= max_lane
        j = np.where(ok, j, lane)
        warp = ctx.warp if idx is None else ctx.warp[idx]
        src_here = (lanes_here[warp] >> j.astype(np.uint64)) & np.uint64(1)
        if not src_here.all():
            k = int(np.flatnonzero(src_here == 0)[0])
            thread = k if idx is None else int(idx[k])
            raise SimFault(
                "sim",
                f"{name}: lane {int(lane[k])} reads lane {int(j[k])}, which does not execute this "
                f"instruction (diverged, exited or absent): its value is undefined",
                thread,
            )
        first = ctx.warp_first_thread if idx is None else ctx.warp_first_thread[idx]
        src = first + j
        values = np.asarray(a(ctx, idx))
        if idx is None:
            result = values[src]
        else:
            full = np.zeros(ctx.n, dtype=np.uint32)
            full[idx] = values
            result = full[src]
        d(ctx, idx, result)
        if p is not None:
            p(ctx, idx, np.asarray(ok))

    return Behaviour(run=run, klass="shfl")


def make_vote(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    legacy = not mods.flag("sync")
    mode = mods.require("all", "any", "uni", "ballot")
    t = mods.one_type({"pred", "b32"})
    if (mode == "ballot") != (t.name == "b32"):
        raise DecodeError(f"{ins.opcode}: ballot gives .b32, the others .pred")
    ops = operands(ins, 2 if legacy else 3)
    d = dc.writer(ops[0], t)
    a = dc.reader(ops[1], _PRED)
    member = _mask_reader(dc, ins, ops, legacy)
    name = ins.opcode

    def run(ctx: ExecContext, idx: Idx) -> None:
        mask = member(ctx, idx) if member is not None else None
        lanes_here = check_converged(ctx, idx, mask, name) if mask is not None else executing_lanes(ctx, idx)
        warp = ctx.warp if idx is None else ctx.warp[idx]
        lane = ctx.lane if idx is None else ctx.lane[idx]
        votes = np.broadcast_to(np.asarray(a(ctx, idx)), warp.shape)
        weights = np.where(votes, np.left_shift(1, lane.astype(np.int64)), 0).astype(np.float64)
        ballots = np.bincount(warp, weights=weights, minlength=lanes_here.size).astype(np.uint64)
        m = lanes_here[warp] if mask is None else np.asarray(mask).astype(np.uint64) & ctx.warp_existing_lanes[warp]
        mine = ballots[warp] & m
        if mode == "ballot":
            d(ctx, idx, mine.astype(np.uint32))
        elif mode == "all":
            d(ctx, idx, mine == m)
        elif mode == "any":
            d(ctx, idx, mine != 0)
        else:
            d(ctx, idx, (mine == m) | (mine == 0))

    return Behaviour(run=run, klass="vote")


_REDUX_TYPES = {"add": {"u32", "s32"}, "min": {"u32", "s32"}, "max": {"u32", "s32"}, "and": {"b32"}, "or": {"b32"}, "xor": {"b32"}}


def make_redux(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    """redux.sync.op.type d, a, membermask (sm_80 integer forms): every lane gets the reduction
    over the lanes of its member mask, which must all execute the instruction."""
    if not mods.flag("sync"):
        raise DecodeError(f"{ins.opcode}: redux needs .sync")
    op = mods.require(*_REDUX_TYPES)
    t = mods.one_type(_REDUX_TYPES[op])
    d_op, a_op, m_op = operands(ins, 3)
    d, a, member = dc.writer(d_op, t), dc.reader(a_op, t), dc.reader(m_op, _U32)
    wide = np.dtype(np.int64) if t.is_signed else np.dtype(np.uint64)
    identity = {"add": 0, "or": 0, "xor": 0, "and": 0xFFFFFFFF, "min": np.iinfo(t.value).max, "max": np.iinfo(t.value).min}[op]
    reduce = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    name = ins.opcode
    lane_bits = np.uint64(1) << np.arange(WARP, dtype=np.uint64)

    def run(ctx: ExecContext, idx: Idx) -> None:
        mask = np.asarray(member(ctx, idx)).astype(np.uint64)
        check_converged(ctx, idx, mask, name)
        warp = ctx.warp if idx is None else ctx.warp[idx]
        first = ctx.warp_first_thread if idx is None else ctx.warp_first_thread[idx]
        values = np.zeros(ctx.n, dtype=wide)
        values[slice(None) if idx is None else idx] = np.asarray(a(ctx, idx)).astype(wide)
        lanes = first[:, None] + np.arange(WARP)
        members = ((np.broadcast_to(mask, warp.shape)[:, None] & ctx.warp_existing_lanes[warp][:, None]) & lane_bits) != 0
        gathered = np.where(members, values[np.minimum(lanes, ctx.n - 1)], wide.type(identity))
        d(ctx, idx, reduce.reduce(gathered, axis=1).astype(t.value))

    return Behaviour(run=run, klass=f"redux.{op}")


def make_activemask(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    mods.one_type({"b32"})
    (d_op,) = operands(ins, 1)
    d = dc.writer(d_op, _B32)

    def run(ctx: ExecContext, idx: Idx) -> None:
        warp = ctx.warp if idx is None else ctx.warp[idx]
        d(ctx, idx, executing_lanes(ctx, idx)[warp].astype(np.uint32))

    return Behaviour(run=run, klass="activemask")


TABLE = {
    ("shfl", "*"): make_shfl,
    ("vote", "*"): make_vote,
    ("activemask", "*"): make_activemask,
    ("redux", "*"): make_redux,
}
