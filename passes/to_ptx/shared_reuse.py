"""Shared buffers a lowering may reuse: the ``smem.alloc`` buffers no op touches any more.

A K loop's operand ring (``promote-to-shared``, ``pipeline-cp-async``) is dead once the loop is
done, while the epilogue after it may need scratch space as large (a tile going through shared
memory to change layout). Giving the scratch the ring's bytes keeps the kernel's shared memory,
and with it its occupancy, what the loop needs.

A buffer is dead at an op when every op that touches it (uses it, one of its stages, its
address, a descriptor or address computed from it) comes before that op in program order, and
no loop holds both: in the innermost block holding both, the toucher's ancestor precedes the
op's, and that block is in no loop (a loop around both may carry data in the buffer from one
iteration to the next, as a pipelined K loop's prefetched stages are, across the op).
What program order does not order are the asynchronous accesses still in flight: cp.async
writes and wgmma reads. A reusing lowering waits for both (:func:`wait_for_async_accesses`)
before the barrier that precedes its first write. A ring ``pipeline-tma`` fills needs no wait of
its own: that pass loads only the tiles its loop reads, each waited for on its mbarrier there.
"""

from __future__ import annotations

from xdsl.dialects import scf
from xdsl.dialects.builtin import IndexType, IntegerType, i32
from xdsl.ir import Block, Operation, SSAValue

from kaio.dialects import cpasync, ptx, smem, wgmma
from kaio.dialects import ptx_hopper as hp
from kaio.passes.to_ptx.emitter import PtxEmitter


# touching_ops and precedes also serve a pass that plans reuse before lowering (``reuse-dead-shared``)
def touching_ops(buffer: SSAValue) -> list[Operation]:
    """Every op using ``buffer`` or a value derived from it (a stage, an address, a descriptor:
    buffers and integers; a tensor, fragment or accumulator computed from its contents is data)."""
    ops: list[Operation] = []
    work, seen = [buffer], {buffer}
    while work:
        for use in work.pop().uses:
            user = use.operation
            ops.append(user)
            derived = list(user.results)
            if isinstance(user, scf.YieldOp | scf.ConditionOp) and user.parent_op() is not None:
                derived = list(user.parent_op().results)  # type: ignore[union-attr]
            for v in derived:
                if v not in seen and isinstance(v.type, smem.BufferType | IntegerType | IndexType):
                    seen.add(v)
                    work.append(v)
    return ops


def precedes(toucher: Operation, op: Operation) -> bool:
    """Whether ``toucher`` runs before ``op`` and not again after it (see the module doc)."""
    ancestors: dict[Block, Operation] = {}
    current: Operation | None = op
    while current is not None and (block := current.parent_block()) is not None:
        ancestors[block] = current
        current = block.parent_op()
    current = toucher
    while current is not None and (block := current.parent_block()) is not None:
        if block in ancestors:
            mine = ancestors[block]
            return current is not mine and current.is_before_in_block(mine) and not in_loop(block)
        current = block.parent_op()
    return False


def in_loop(block: Block) -> bool:
    """Whether ``block`` runs inside an ``scf.for`` or ``scf.while``."""
    parent = block.parent_op()
    while parent is not None:
        if isinstance(parent, scf.ForOp | scf.WhileOp):
            return True
        parent = parent.parent_op()
    return False


def dead_buffers(em: PtxEmitter, op: Operation) -> list[tuple[SSAValue, int]]:
    """(address, bytes) of the declared shared regions whose ``smem.alloc`` buffers are all
    dead at ``op``. A region is one declaration: a buffer, or the buffers an earlier reuse laid
    out in one (:meth:`PtxEmitter.merge_shared`: they sit at offsets from its start), so a
    second reuse takes the whole region or nothing."""
    regions: dict[SSAValue, tuple[bool, int]] = {}
    for alloc in em.func.walk():
        if isinstance(alloc, smem.AllocOp) and alloc.result in em.values:
            address = em.value(alloc.result)
            owner = address.owner
            root = owner.operands[0] if isinstance(owner, ptx.AddOp) else address
            dead = all(precedes(t, op) for t in touching_ops(alloc.result))
            was_dead, size = regions.get(root, (True, 0))
            regions[root] = (was_dead and dead, max(size, alloc.result.type.total_bytes, em.shared_bytes(root)))
    return [(root, size) for root, (dead, size) in regions.items() if dead]


def reuse_or_declare(em: PtxEmitter, op: Operation, hint: str, nbytes: int, align: int) -> tuple[SSAValue, bool]:
    """(address, reused): the smallest buffer dead at ``op`` that holds ``nbytes``, else all
    the dead buffers laid out as one region (grown to ``nbytes`` if they are smaller together),
    else a new buffer."""
    dead = dead_buffers(em, op)
    if not dead:
        return em.shared(hint, nbytes, align), False
    fits = [d for d in dead if d[1] >= nbytes]  # the smallest that holds it leaves the rest for later buffers
    address, size = min(fits, key=lambda d: d[1]) if fits else max(dead, key=lambda d: d[1])
    if size >= nbytes:
        em.grow_shared(address, nbytes, align)
        return address, True
    return em.merge_shared([a for a, _ in dead], nbytes, align), True


def wait_for_async_accesses(em: PtxEmitter) -> None:
    """This thread's cp.async copies landed and its warpgroup's wgmma reads are done (the
    barrier after makes that true of every thread): no-ops when nothing is in flight."""
    ops = [o for o in em.func.walk() if isinstance(o, cpasync.CopyOp | wgmma.MmaAsyncOp)]
    if any(isinstance(o, cpasync.CopyOp) for o in ops):
        em.emit(ptx.CpAsyncWaitGroupOp("", [em.const(0, i32)]))
    if any(isinstance(o, wgmma.MmaAsyncOp) for o in ops):
        em.emit(hp.WgmmaWaitOp("sync.aligned", [em.const(0, i32)]))
