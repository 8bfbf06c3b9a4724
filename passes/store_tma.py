"""``store-tma``: a dot's output tile leaves through shared memory and the Tensor Memory
Accelerator (sm_90), not as every thread's scattered stores.

An mma accumulator gives each thread pairs of elements of 8 rows apart, so storing it directly
moves 4-byte pieces; ``tile-layout``'s staged stores regroup it through shared memory into 16-byte
row vectors. This pass goes one step further, as CUTLASS's and Triton's Hopper epilogues do: the
threads write the tile (epilogue math fused, a pair at a time) into a shared buffer in the wgmma
layout (swizzled column panels, conflict-free for accumulator fragments), and one thread hands
each panel to the TMA unit as one ``cp.async.bulk.tensor`` box store. The unit writes whole
lines, and it clips boxes at the tensor's edges, so ragged tiles need no bounds checks::

    %s = smem.alloc {kaio.reuse_dead}           # takes the bytes of the K loop's dead ring
    kernel.barrier                              # everyone is done with those bytes
    smem.store %value -> %s
    tma.fence                                   # the writes are visible to the async proxy ...
    kernel.barrier                              # ... of every thread
    if tma.issuer: tma.store per panel; tma.commit; tma.wait {pending 0, read}

The wait (for the buffer's reads only) keeps the buffer alive until the unit has read it, and,
with the barrier before the next write, makes the buffer safe to refill in a loop.

Proxies (PTX ISA, memory consistency model: shared memory accessed through the generic and the
async proxy needs a ``fence.proxy.async`` between the two): the threads' ``st.shared`` are
generic and the TMA store reads through the async proxy, so *every* writing thread fences its
own writes, then the barrier hands them to thread 0 (CUTLASS's ``fence_view_async_shared`` then
a named barrier; a fence after the barrier in thread 0 alone would not cover the other threads'
writes). The other transitions need no fence: the dead ring's last async accesses are TMA
loads, whose completion (observed on their mbarrier) "is followed by an implicit generic-async
proxy fence", and wgmma reads retired by ``wgmma.wait_group 0`` before the first barrier here;
in a loop, the previous tile's TMA store has finished reading (``cp.async.bulk.wait_group.read
0``) before the barrier that precedes the next writes, and a generic write after an async read
whose completion was waited for is ordered by that wait (as Triton's ProxyFenceInsertion and
ConSan treat it).

It takes a ``tile.store`` (looking through the layout conversion staged stores put before it)
of a 2-D tile in an mma layout, 16- or 32-bit, whose view a tensor map can describe
(``tensor_map_views``), in a kernel with a 1-D block, not under an ``scf.if`` (its barriers
need every thread). Other stores keep their path, with a debug note on the ``kaio.passes``
logger saying why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from kaio.dialects import kernel, smem, tile, tma
from kaio.dialects import stage_attrs
from kaio.dialects.tile_layout import MmaLayout, layout_of
from kaio.pass_contracts import PassContract
from kaio.passes.int_builder import IndexBuilder
from kaio.passes.tensor_map_views import MappedView, add_map_param, map_view

log = logging.getLogger("kaio.passes")
STORE_LAYOUT = smem.LayoutAttr("wgmma")  # TMA's swizzled boxes, one per column panel
MAX_STAGING_BYTES = 128 * 1024
"""The largest tile staged (the sm_90a default's 128 x 256 f32 C): it mostly takes a dead ring's
bytes, but a kernel without one must find them beside its other buffers (227 KiB a block)."""


@dataclass
class TmaStore:
    """How one tile store becomes box stores: one per ``span``-byte column panel, or one of a
    paneled map where the tile's columns are whole panels of the tensor's (``tensor_map_views``)."""

    store: tile.StoreOp
    value: SSAValue  # the tile in its register layout (before any staged-store conversion)
    mapped: MappedView
    buffer: smem.BufferType

    @property
    def span(self) -> int:
        return self.buffer.layout.panel_span(self.buffer.tile[1], self.buffer.elem_bytes)


def _unstaged(value: SSAValue) -> SSAValue:
    """The tile a layout conversion used only by this store converts (staged stores regroup
    registers for st.global; a shared buffer takes them as they are)."""
    owner = value.owner
    if isinstance(owner, tile.ConvertLayoutOp) and value.has_one_use():
        return owner.input
    return value


def _under_branch(op: Operation, func: kernel.KernelFuncOp) -> bool:
    parent = op.parent_op()
    while parent is not None and parent is not func:
        if not isinstance(parent, scf.ForOp):
            return True
        parent = parent.parent_op()
    return False


def plan_store(store: tile.StoreOp, func: kernel.KernelFuncOp) -> TmaStore | str:
    """The TMA plan of a tile store, or why it cannot have one."""
    value = _unstaged(store.value)
    t = value.type
    if not isinstance(layout_of(t), MmaLayout):
        return "the tile is not an mma accumulator (its stores are already row vectors)"
    shape = tuple(t.get_shape())  # type: ignore[attr-defined]
    if len(shape) != 2:
        return "the tile is not 2-D"
    element = t.element_type  # type: ignore[attr-defined]
    buffer = smem.BufferType(shape, element, STORE_LAYOUT)
    eb = buffer.elem_bytes
    span = STORE_LAYOUT.panel_span(shape[1], eb)
    if eb not in (2, 4) or not span or shape[0] % 8:
        return f"a {shape[0]} x {shape[1]} tile of {eb}-byte elements is not whole swizzled panels"
    if buffer.total_bytes > MAX_STAGING_BYTES:
        return f"its {buffer.total_bytes // 1024} KiB would not fit in shared memory beside a K loop's ring"
    if func.block_shape[1:] != (1, 1) or func.block_shape[0] % 32:
        return "the block is not 1-D whole warps (one thread of warp 0 issues the stores)"
    if _under_branch(store, func):
        return "the store is under a branch (its barriers need every thread)"
    mapped = map_view(store.view.owner, func, shape[0], span, eb, merge_panels=shape[1] * eb // span)
    if isinstance(mapped, str):
        return mapped
    return TmaStore(store, value, mapped, buffer)


def rewrite_store(plan: TmaStore, func: kernel.KernelFuncOp) -> None:
    """The store as the module doc's sequence."""
    store = plan.store
    tmap = add_map_param(func, plan.mapped)
    b = Builder(InsertPoint.before(store))
    alloc = b.insert(smem.AllocOp("tma_store", plan.buffer))
    alloc.attributes[stage_attrs.REUSE_DEAD_ATTR] = UnitAttr()
    b.insert(kernel.BarrierOp())
    b.insert(smem.StoreOp(plan.value, alloc.result))
    b.insert(tma.FenceOp())
    b.insert(kernel.BarrierOp())

    leader = b.insert(tma.IssuerOp(0)).result  # one elected thread of warp 0: uniform operands, no elect loops
    issue = Block()
    body = IndexBuilder(Builder(InsertPoint.at_end(issue)))
    base = body.b.insert(smem.AddressOp(alloc.result)).result
    coords = list(plan.mapped.coords)
    rows, span, eb = plan.buffer.tile[0], plan.span, plan.buffer.elem_bytes
    for p in range(0, plan.buffer.tile[1] * eb // span, plan.mapped.panels_per_box):  # one box a panel, or one paneled box
        src = body.add(base, body.const(p * rows * span)) if p else base
        body.b.insert(tma.StoreOp(src, tmap, plan.mapped.box_coords(body, coords, p)))
    body.b.insert(tma.CommitOp())
    body.b.insert(tma.WaitOp(0, read=True))
    issue.add_op(scf.YieldOp())
    b.insert(scf.IfOp(leader, [], [issue]))

    staged = store.value.owner
    store.detach()
    store.erase()
    if isinstance(staged, tile.ConvertLayoutOp) and not staged.result.uses:
        staged.detach()
        staged.erase()


@dataclass(frozen=True)
class StoreTmaPass(ModulePass):
    name = "store-tma"
    contract = PassContract(after=("tile-layout",))

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for store in [o for o in op.walk() if isinstance(o, tile.StoreOp)]:
            func = kernel.enclosing_kernel(store)
            plan = plan_store(store, func)
            if isinstance(plan, str):
                log.debug("store-tma: a store of kernel %s keeps its path: %s", func.sym_name.data, plan)
                continue
            rewrite_store(plan, func)
