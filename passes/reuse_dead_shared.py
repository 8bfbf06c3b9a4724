"""``reuse-dead-shared``: a shared buffer first needed after others are dead takes their bytes.

``promote-to-shared`` declares every operand buffer where the kernel starts, so two K loops
that run one after the other (FlashAttention's off-band loop without masks, then the masked
diagonal blocks) hold both loops' Q buffers and K/V rings at once: twice the shared memory of
one loop, and half the occupancy, though the second loop never sees the first one's data.

This pass moves such a buffer's ``smem.alloc`` to just before the first op that touches it and
marks it ``kaio.reuse_dead``: ``lower-to-ptx`` then gives it the bytes of the buffers dead there
(:mod:`kaio.passes.to_ptx.shared_reuse`, liveness in program order: a buffer is dead when every
op touching it came before and no loop holds both), after waiting for the dead buffers'
asynchronous accesses (cp.async writes, wgmma reads). A block barrier follows the moved
allocations, so no thread writes the bytes while another still reads them as the old buffer
(the last ``ldmatrix``/``wgmma`` of the first loop's last stage). A buffer is moved only where
some buffer is dead by then, so a kernel with one K loop is left as it was.

Run it after the passes that make or replace buffers (``pipeline-cp-async``, ``pipeline-tma``,
``lower-to-mma-sync``/``lower-to-wgmma``) and before ``lower-to-ptx``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from kaio.dialects import kernel, smem
from kaio.dialects import stage_attrs
from kaio.passes.to_ptx.shared_reuse import precedes, touching_ops


def _top_level(op: Operation, block: Block) -> Operation:
    """``op``'s ancestor in ``block`` (``op`` itself when it is there)."""
    while op.parent_block() is not block:
        parent = op.parent_op()
        assert parent is not None, "a toucher outside the kernel body"
        op = parent
    return op


def reuse_dead_buffers(func: kernel.KernelFuncOp) -> int:
    """Move each buffer of ``func``'s body that is first touched after another is dead to that
    first touch, marked for reuse; the number of buffers moved."""
    body = func.body.block
    allocs = [op for op in body.ops if isinstance(op, smem.AllocOp) and stage_attrs.REUSE_DEAD_ATTR not in op.attributes]
    touchers = {a: touching_ops(a.result) for a in allocs}
    first: dict[smem.AllocOp, Operation] = {}
    order = {op: n for n, op in enumerate(body.ops)}
    for alloc, ops in touchers.items():
        if ops:
            first[alloc] = min((_top_level(t, body) for t in ops), key=order.__getitem__)
    moved: dict[Operation, list[smem.AllocOp]] = {}
    for alloc, anchor in first.items():
        if any(other is not alloc and ops and all(precedes(t, anchor) for t in ops) for other, ops in touchers.items()):
            moved.setdefault(anchor, []).append(alloc)
    for anchor, group in moved.items():
        for alloc in group:
            alloc.detach()
            alloc.attributes[stage_attrs.REUSE_DEAD_ATTR] = UnitAttr()
            Rewriter.insert_op(alloc, InsertPoint.before(anchor))
        # the old buffers' last readers are done everywhere before any thread writes the bytes
        Rewriter.insert_op(kernel.BarrierOp(), InsertPoint.before(anchor))
    return sum(len(g) for g in moved.values())


@dataclass(frozen=True)
class ReuseDeadSharedPass(ModulePass):
    """Let a kernel's later shared buffers take the bytes of the buffers dead before them."""

    name = "reuse-dead-shared"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for func in op.walk():
            if isinstance(func, kernel.KernelFuncOp):
                reuse_dead_buffers(func)
