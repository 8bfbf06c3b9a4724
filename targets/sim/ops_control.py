"""Control flow and synchronization: bra, ret, exit, trap, bar/barrier (sync, arrive, red),
bar.warp.sync, and the instructions that are no-ops in a sequentially consistent simulator
(membar, fence, nanosleep, pmevent), but for the fences between the generic and the async proxy.

Branches, exits and CTA barriers change PCs, which the executor owns, so their factories return
a ``Behaviour`` describing the op instead of a closure.
"""

from __future__ import annotations

from typing import Any

from .faults import DecodeError
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .ops_warp import check_converged
from .program import BarrierReduction, BarrierSpec, Behaviour, Idx, OpKind
from .ptx_types import PTX_TYPES
from .syntax import Instruction, SymOperand

_U32 = PTX_TYPES["u32"]
_PRED = PTX_TYPES["pred"]
_FENCE_WORDS = {
    "sc", "acq_rel", "acquire", "release", "relaxed",
    "cta", "cluster", "gpu", "sys", "gl",
    "proxy", "async", "alias", "generic", "global", "shared", "shared::cta", "shared::cluster",
    "tensormap", "mbarrier_init", "op_restrict", "sync_restrict",
}  # fmt: skip


def make_bra(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    mods.flag("uni")
    (target,) = operands(ins, 1)
    if not isinstance(target, SymOperand) or target.offset:
        raise DecodeError("bra needs a label")
    return Behaviour(kind=OpKind.BRANCH, target_label=target.name, klass="bra")


def make_exit(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    mods.flag("uni")
    operands(ins, 0)
    return Behaviour(kind=OpKind.EXIT, klass=mods.mnemonic)


def make_trap(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    operands(ins, 0)
    return Behaviour(kind=OpKind.TRAP, klass="trap")


def make_barrier(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    if mods.flag("warp"):  # bar.warp.sync membermask: __syncwarp
        mods.flag("sync")
        (mask_op,) = operands(ins, 1)
        mask = dc.reader(mask_op, _U32)
        name = ins.opcode

        def run(ctx: Any, idx: Idx) -> None:
            check_converged(ctx, idx, mask(ctx, idx), name)
            if ctx.race is not None:
                ctx.race.warp_sync(idx)  # orders the lanes' shared accesses for the race check
            if ctx.async_proxy is not None:  # and for the async proxy's ordering rules
                ctx.async_proxy.warp_sync(ctx, idx)

        return Behaviour(run=run, klass="bar.warp.sync")
    mods.flag("cta")
    mods.flag("aligned")
    kind = mods.require("sync", "arrive", "red")
    reduction = None
    if kind == "red":
        op = mods.require("popc", "and", "or")
        t = mods.one_type({"u32"} if op == "popc" else {"pred"})
        mods.flag("aligned")
        ops = operands(ins, (3, 4))
        reduction = BarrierReduction(op, dc.reader(ops[-1], _PRED), dc.writer(ops[0], t))
        ops = ops[1:-1]
    else:
        ops = operands(ins, (1, 2))
    barrier_id = dc.reader(ops[0], _U32)
    count = dc.reader(ops[1], _U32) if len(ops) == 2 else None
    if kind == "arrive" and count is None:
        raise DecodeError(f"{ins.opcode} needs a thread count")
    spec = BarrierSpec(barrier_id=barrier_id, thread_count=count, wait=kind != "arrive", reduction=reduction)
    return Behaviour(kind=OpKind.BARRIER, barrier=spec, klass=f"bar.{kind}")


def make_fence(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    """Memory fences order nothing in this sequentially consistent simulator, except between
    the generic and the async proxy on shared memory (``async_proxy.py``): ``fence.proxy.async``
    with no state space, ``.shared::cta`` or ``.shared::cluster`` (``.global`` covers global
    memory only), and ``fence.mbarrier_init`` (it makes barrier inits visible to bulk copies)."""
    words = set(mods.items)
    proxy = ins.opcode.startswith("fence") and {"proxy", "async"} <= words and "global" not in words
    barrier_init = "mbarrier_init" in words
    mods.items = [m for m in mods.items if m not in _FENCE_WORDS]
    if not (proxy or barrier_init):
        return Behaviour(run=lambda ctx, idx: None, klass=mods.mnemonic)

    def run(ctx: Any, idx: Idx) -> None:
        if ctx.async_proxy is not None:
            ctx.async_proxy.fence(ctx, idx, proxy)

    return Behaviour(run=run, klass=mods.mnemonic)


def make_nanosleep(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    mods.one_type({"u32"})
    operands(ins, 1)
    return Behaviour(run=lambda ctx, idx: None, klass="nanosleep")


TABLE = {
    ("bra", "*"): make_bra,
    ("ret", "*"): make_exit,
    ("exit", "*"): make_exit,
    ("trap", "*"): make_trap,
    ("bar", "*"): make_barrier,
    ("barrier", "*"): make_barrier,
    ("membar", "*"): make_fence,
    ("fence", "*"): make_fence,
    ("nanosleep", "*"): make_nanosleep,
}
