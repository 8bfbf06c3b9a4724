"""The small Hopper instructions: ``elect.sync`` and ``setmaxnreg``.

``elect.sync d|p, membermask`` picks the lowest lane of the member mask: p is true in that lane
only and d is its lane number in every lane (the mask's lanes must all execute it, as for any
.sync instruction). ``setmaxnreg.{inc,dec}.sync.aligned.u32 N`` moves registers between a
warpgroup and the CTA's register pool (``register_pool``): ``.dec`` frees them, ``.inc`` blocks
until the pool can give them, and one that never can is reported as a deadlock. In a kernel
without the bounds ptxas needs to honour it (``kaio.targets.ptx.registers``) it is a no-op, as
ptxas drops it there.
"""

from __future__ import annotations

import numpy as np

from .context import ExecContext
from .faults import DecodeError
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .ops_warp import check_converged
from .program import Behaviour, Idx
from .ptx_types import PTX_TYPES
from .syntax import ImmOperand, Instruction, PairOperand, RegOperand

_U32 = PTX_TYPES["u32"]
_PRED = PTX_TYPES["pred"]


def make_elect(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    mods.require("sync")
    out, mask_op = operands(ins, 2)
    if isinstance(out, PairOperand):
        lane_op, pred_op = out.first, out.second
    else:
        raise DecodeError(f"{ins.opcode}: the destination is d|p (either may be _)")
    write_lane = None if lane_op == "_" else dc.writer(RegOperand(lane_op), _U32)
    write_pred = None if pred_op == "_" else dc.writer(RegOperand(pred_op), _PRED)
    mask = dc.reader(mask_op, _U32)
    name = ins.opcode

    def run(ctx: ExecContext, idx: Idx) -> None:
        m = np.asarray(mask(ctx, idx))
        check_converged(ctx, idx, m, name)
        lane = ctx.lane if idx is None else ctx.lane[idx]
        member = np.broadcast_to(m, lane.shape).astype(np.uint64) & np.uint64(0xFFFFFFFF)
        lowest = member & (~member + np.uint64(1))  # the lowest set bit
        leader = np.log2(np.maximum(lowest, 1).astype(np.float64)).astype(np.uint32)
        if write_lane is not None:
            write_lane(ctx, idx, leader)
        if write_pred is not None:
            write_pred(ctx, idx, lane == leader)

    return Behaviour(run=run, klass="elect.sync")


def make_setmaxnreg(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    mods.require("inc", "dec")
    if not (mods.flag("sync") and mods.flag("aligned")):
        raise DecodeError(f"{ins.opcode} needs .sync.aligned")
    mods.one_type({"u32"})
    (count,) = operands(ins, 1)
    if not isinstance(count, ImmOperand) or not (24 <= int(count.value) <= 256 and int(count.value) % 8 == 0):
        raise DecodeError(f"{ins.opcode}: the register count is an immediate in 24..256, a multiple of 8")
    action = "inc" if "inc" in ins.modifiers else "dec"
    wanted, name, line, text = int(count.value), ins.opcode, ins.line, ins.text

    def run(ctx: ExecContext, idx: Idx) -> None:
        check_converged(ctx, idx, 0xFFFFFFFF, name)
        if ctx.register_pool is not None:  # None: ptxas drops setmaxnreg in this kernel
            ctx.register_pool.execute(ctx.thread_index if idx is None else idx, action, wanted, line, text)

    return Behaviour(run=run, klass="setmaxnreg")


TABLE = {("elect", "*"): make_elect, ("setmaxnreg", "*"): make_setmaxnreg}
