"""``lower-to-wgmma``: ``tile.dot`` on Hopper's warpgroup tensor cores (sm_90a).

A dot qualifies when its accumulator is an f32 tile in the ``#tile.mma<[W, 1]>`` layout with
M = 16 W and W a multiple of 4 (``tile-layout{wgmma=true}`` picks that grid for the dots it
can), and both f16/bf16 operands sit in shared buffers in the ``wgmma`` layout
(``promote-to-shared{layout=wgmma}``), or B does and A is in registers in the accumulator's
layout (``promote-to-shared`` leaves such an A, like attention's P, where it is: each warp's
m16n8k16 A fragment of its 16 rows, ``mma.pack_a``, is what wgmma takes from registers).
Each warp then holds a 16-row strip of all N columns, register for register the wgmma D
fragment, so the tile *is* the accumulators of its W/4 warpgroups (warpgroup G: rows
64G..64G+63): ``wgmma.split`` only regroups registers.

The dot becomes ``fence.proxy.async`` (the operands were written by ordinary stores or
cp.async, the generic proxy; wgmma reads through the async proxy; the fence goes before the
outermost enclosing loop that only reads them, see :func:`fence_point`), ``wgmma.fence``, one
``wgmma.mma_async`` per k16 step and column chunk (N in chunks of at most 256), one
``commit_group`` and ``wait_group 0`` (the accumulators are final, the operands read, before
anything else touches them), and ``wgmma.join``. Descriptors come from the buffer's address
(``smem.address``; a ring's stage is already in the buffer value) plus compile-time offsets,
and the warpgroup's row offset (its 64 rows of A):

- K-major operand (A as it is, B given as ``kt.trans`` of an N x K tile): rows of the panel are
  M or N; step k16 moves 32 bytes along the row (next panel every S bytes); SBO = 8 S.
- MN-major operand (B as K x N, A given transposed): rows of the panel are K; step k16 moves 16
  rows (16 S bytes); LBO = one panel (rows x S bytes), SBO = 8 S; ``trans`` 1.

**Overlap** (``overlap=true``, the default): in a K loop that ``pipeline-cp-async`` made a
ring (both operands are stages of rings, the accumulator is carried by the loop and only the
dot reads and writes it), the dot waits with ``wait_group 1`` instead: iteration i's products
run on while iteration i + 1 waits for its tiles, the wait retiring iteration i - 1's, whose
stage the copies issued right after (behind a barrier: every warpgroup has retired it) refill.
The accumulators stay in flight across the loop's back edge (they live in the loop's registers,
which nothing else touches) and a ``wait_group 0`` after the loop makes them final. A loop that
``pipeline-tma`` refills before its dot (a 2-stage ring) is not overlapped: its next iteration
overwrites the stage this one reads before any wait of its own.

Dots that do not qualify are left as they are (``lower-to-mma-sync`` takes them next).

**Proxy fences.** ``pipeline-tma`` fences each refill of a TMA ring (a generic-proxy read of the
stage, ``ldmatrix``, must be ordered before the TMA write). Once the dots are lowered, a ring
whose every reader is a wgmma descriptor is async-proxy only, and this pass drops those fences.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, bf16, f16, f32, i8, i32
from xdsl.dialects import arith, scf
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import VerifyException

from kaio.dialects import kernel, mma, smem, tile, tma, wgmma
from kaio.dialects import stage_attrs
from kaio.dialects.tile_layout import MmaLayout, layout_of
from kaio.pass_contracts import PassContract
from kaio.passes.int_builder import IndexBuilder

SWIZZLE_NAMES = {128: "128B", 64: "64B", 32: "32B"}


@dataclass(frozen=True)
class OperandPlan:
    """How wgmma reads one operand buffer: major-ness and the descriptor's fixed fields."""

    mn_major: bool
    span: int  # panel width = swizzle span, bytes
    rows: int  # stored rows of one stage
    elem_bytes: int

    @property
    def lbo(self) -> int:
        return self.rows * self.span if self.mn_major else 16

    @property
    def sbo(self) -> int:
        return 8 * self.span

    @property
    def swizzle(self) -> str:
        return SWIZZLE_NAMES[self.span]

    def offset(self, mn: int, kk: int) -> int:
        """Byte offset of the K slice ``kk`` (32 bytes deep: 16 elements of 16 bits, 32 of 8;
        MN-major operands are 16-bit) starting at M/N index ``mn``."""
        panel = self.rows * self.span
        if self.mn_major:
            return (mn * self.elem_bytes // self.span) * panel + 16 * kk * self.span
        k_bytes = 32 * kk
        return (k_bytes // self.span) * panel + mn * self.span + k_bytes % self.span


def operand_plan(t: Attribute, mn_major: bool, mn_step: int) -> OperandPlan | str:
    """The plan for a buffer read with M/N offsets in multiples of ``mn_step``, or why not."""
    if not isinstance(t, smem.BufferType):
        return "operands must be in shared memory (run promote-to-shared first)"
    if t.element_type not in (f16, bf16, i8, *tile.FP8_ELEMENTS):
        return f"wgmma multiplies f16/bf16, fp8 or 8-bit integers here, not {t.element_type}"
    if mn_major and t.element_type in (i8, *tile.FP8_ELEMENTS):
        return "8-bit wgmma operands are K-major in shared memory (B as kt.trans of an (N, K) tile)"
    if t.layout.kind.data != "wgmma":
        return f"operand buffer is in the {t.layout.kind.data} layout, not wgmma"
    rows, cols = t.tile
    eb = t.elem_bytes
    span = t.layout.panel_span(cols, eb)
    if mn_major and (mn_step * eb) % span:
        return f"M/N blocks of {mn_step} do not start on {span}-byte panels"
    return OperandPlan(mn_major, span, rows, eb)


def dot_plan(dot: tile.DotOp, num_warps: int) -> tuple[list[int], OperandPlan | None, OperandPlan] | str:
    """(column chunks, A plan (None: A in registers), B plan) for a dot wgmma can take, else
    the reason it cannot."""
    try:
        chunks = wgmma.tile_chunks(dot.acc.type)
    except VerifyException as e:
        return str(e)
    layout = layout_of(dot.acc.type)
    assert isinstance(layout, MmaLayout)
    if layout.warp_grid[0] != num_warps:
        return f"the accumulator spans {layout.warp_grid[0]} of the kernel's {num_warps} warps"
    ta, tb = dot.trans
    in_registers = not ta and mma.register_a_operand(dot.a.type, dot.acc.type)
    if not (in_registers or isinstance(dot.a.type, smem.BufferType)) or not isinstance(dot.b.type, smem.BufferType):
        return "operands must be in shared memory (run promote-to-shared first), or A in registers in the accumulator's layout"
    ea, eb = tile.element_of(dot.a.type), tile.element_of(dot.b.type)
    if ea != eb and not (ea in tile.FP8_ELEMENTS and eb in tile.FP8_ELEMENTS):
        return "A and B differ in element type"
    k = tile.operand_shape(dot.a.type, ta)[1]
    if k % mma.k_step(ea):
        return f"K={k} is not a multiple of {mma.k_step(ea)}"
    if ea == i8 and chunks[0] not in wgmma.INT8_N:
        return f"integer wgmma takes N in {wgmma.INT8_N}, not {chunks[0]}"
    a = None if in_registers else operand_plan(dot.a.type, ta, 64)
    b = operand_plan(dot.b.type, not tb, chunks[0])
    for p in (a, b):
        if isinstance(p, str):
            return p
    return chunks, a, b  # type: ignore[return-value]


def overlap_loop(dot: tile.DotOp) -> scf.ForOp | None:
    """The K loop whose iterations may overlap this dot's wgmmas (see the module doc), or None."""
    loop = dot.parent_op()
    if not isinstance(loop, scf.ForOp) or dot.parent_block() is not loop.body.block:
        return None
    acc = dot.acc
    if not isinstance(acc, BlockArgument) or acc.owner is not loop.body.block or acc.index == 0:
        return None
    if acc.uses.get_length() != 1 or dot.result.uses.get_length() != 1:
        return None
    (use,) = dot.result.uses
    if not isinstance(use.operation, scf.YieldOp) or use.index != acc.index - 1:
        return None
    if not all(isinstance(x.owner, smem.StageOp) for x in (dot.a, dot.b)):
        return None  # a buffer the next iteration rewrites in place (smem.store) must be read first
    if refilled_before(dot):
        return None  # the next iteration refills the stage first (a 2-stage TMA ring): read it now
    return loop


def filled_by_tma(buffer: SSAValue) -> bool:
    """A stage of a ring only TMA writes (the async proxy wgmma reads through: no fence)."""
    stage = buffer.owner
    return isinstance(stage, smem.StageOp) and stage_attrs.TMA_RING_ATTR in stage.ring.owner.attributes  # type: ignore[union-attr]


def fence_point(dot: tile.DotOp, buffers: list[SSAValue]) -> Operation:
    """The op a proxy fence for the dot's generically written operand ``buffers`` goes before:
    the dot, or the outermost enclosing loop whose body writes none of them.

    PTX ISA, memory consistency model, "proxies": a generic-proxy write and an async-proxy read
    of the same location are ordered by a ``fence.proxy.async`` between them in the writing
    thread (then a barrier orders that thread before the others that issue the wgmma). A buffer
    defined outside a loop and only read inside it (by dots, or through descriptors) gets no new
    generic write from the loop: one fence on the way in orders every write before it for every
    trip, so a loop-invariant operand (attention's Q) is not fenced again per trip. Register
    operands (A packed from registers) are not shared memory and need none."""
    point: Operation = dot
    loop = dot.parent_op()
    while isinstance(loop, scf.ForOp) and all(read_only_in(b, loop) for b in buffers):
        point = loop
        loop = loop.parent_op()
    return point


def read_only_in(buffer: SSAValue, loop: scf.ForOp) -> bool:
    """Whether ``buffer`` is defined outside ``loop`` and the loop only reads it: every use
    inside is a dot operand or an address feeding wgmma descriptors or TMA copies' reads."""
    if loop.is_ancestor(buffer.owner):  # defined by the loop (a stage, an iteration argument)
        return False
    for use in buffer.uses:
        op = use.operation
        if not loop.is_ancestor(op):
            continue
        if isinstance(op, tile.DotOp):
            continue
        if isinstance(op, smem.AddressOp) and async_proxy_only(op.result):
            continue
        return False
    return True


def fence_generic_writes(dot: tile.DotOp, buffers: list[SSAValue]) -> None:
    """A ``tma.fence`` before the dot's wgmmas, hoisted out of the loops that only read the
    operands (:func:`fence_point`); one fence serves every dot hoisted to the same place."""
    point = fence_point(dot, buffers)
    if point is not dot and isinstance(point.prev_op, tma.FenceOp):
        return
    Builder(InsertPoint.before(point)).insert(tma.FenceOp())


def refilled_before(dot: tile.DotOp) -> bool:
    """Whether ``pipeline-tma`` refills the ring before the dot in its iteration (then the
    next iteration's refill overwrites the stage this dot reads)."""
    op = dot.prev_op
    while op is not None and stage_attrs.REFILL_BARRIER_ATTR not in op.attributes:
        op = op.prev_op
    return op is not None


def refilled_after_barrier(dot: tile.DotOp) -> bool:
    """Whether ``pipeline-tma`` already ordered the refill after the dot (a barrier, or the
    release of the stage to a producer warpgroup)."""
    op = dot.next_op
    while op is not None and stage_attrs.REFILL_BARRIER_ATTR not in op.attributes:
        op = op.next_op
    return op is not None


def lower_dot(dot: tile.DotOp, num_warps: int, chunks: list[int], pa: OperandPlan | None, pb: OperandPlan,
              overlap: bool = False) -> None:  # fmt: skip
    ta, tb = dot.trans
    k = tile.operand_shape(dot.a.type, ta)[1]
    ua, ub = dot.signs  # i8 operands read as u8
    elem = mma.fragment_element(tile.element_of(dot.a.type), ua)
    elem_b = mma.fragment_element(tile.element_of(dot.b.type), ub)
    step = mma.k_step(elem)  # K per wgmma: 16, or 32 for 8-bit inputs
    loop = overlap_loop(dot) if overlap else None
    ix = IndexBuilder(Builder(InsertPoint.before(dot)))
    insert = ix.b.insert

    a_desc: SSAValue | None = None
    if pa is not None:
        a_addr = insert(smem.AddressOp(dot.a)).result
        if num_warps > 4:  # warpgroup G multiplies rows 64G.. of A (G warp-uniform: see wgmma.warpgroup_id)
            group = insert(wgmma.WarpgroupIdOp()).result
            a_addr = ix.add(a_addr, ix.mul(group, ix.const(pa.offset(64, 0) - pa.offset(0, 0))))
        a_desc = insert(wgmma.DescriptorOp(a_addr, pa.swizzle, pa.lbo, pa.sbo)).result
    # A in registers: each warp's A fragment of its 16 rows, for every k16 step, packed from
    # the registers it holds before the fence (wgmma reads them asynchronously)
    a_frags = [insert(mma.PackAOp(dot.a, 0, kk)).result for kk in range(k // 16)] if pa is None else []
    b_desc = insert(wgmma.DescriptorOp(insert(smem.AddressOp(dot.b)).result, pb.swizzle, pb.lbo, pb.sbo)).result

    def at(desc: SSAValue, offset: int) -> SSAValue:
        return insert(wgmma.AdvanceOp(desc, offset)).result if offset else desc

    accs: list[SSAValue] = list(insert(wgmma.SplitOp(dot.acc)).accs)
    generic = [x for x in ([dot.a] if pa else []) + [dot.b] if not filled_by_tma(x)]
    if generic:  # generic-proxy writes of the operands -> wgmma's async proxy
        fence_generic_writes(dot, generic)
    insert(wgmma.FenceOp())
    for kk in range(k // step):
        a = a_frags[kk] if pa is None else at(a_desc, pa.offset(0, kk))  # type: ignore[arg-type]
        n0 = 0
        for c, width in enumerate(chunks):
            b = at(b_desc, pb.offset(n0, kk))
            accs[c] = insert(wgmma.MmaAsyncOp(accs[c], a, b, elem, int(ta), int(not tb), element_b=elem_b)).result
            n0 += width
    insert(wgmma.CommitGroupOp())
    done = insert(wgmma.WaitGroupOp(accs, 1 if loop else 0)).results_
    if loop is None:
        Rewriter.replace_op(dot, wgmma.JoinOp(list(done), dot.result.type))
        return
    if not refilled_after_barrier(dot):
        insert(kernel.BarrierOp())  # every warpgroup retired the previous stage before it is refilled
    index = dot.acc.index - 1  # type: ignore[attr-defined]
    Rewriter.replace_op(dot, wgmma.JoinOp(list(done), dot.result.type))
    result = loop.results[index]  # final after the loop (waited for even if nothing reads it)
    after = Builder(InsertPoint.after(loop))
    split = after.insert(wgmma.SplitOp(result))
    final = after.insert(wgmma.WaitGroupOp(list(split.accs), 0))
    join = after.insert(wgmma.JoinOp(list(final.results_), result.type))
    result.replace_uses_with_if(join.result, lambda use: use.operation is not split)


def async_proxy_only(address: SSAValue) -> bool:
    """Whether a shared address only reaches the async proxy: wgmma descriptors, TMA copies
    (through address arithmetic)."""
    for use in address.uses:
        op = use.operation
        if isinstance(op, arith.AddiOp | arith.MuliOp):
            if not async_proxy_only(op.result):
                return False
        elif not isinstance(op, wgmma.DescriptorOp | tma.LoadOp | tma.StoreOp):
            return False
    return True


def read_by_async_proxy_only(ring: SSAValue) -> bool:
    """Whether every access to a ring's stages goes through the async proxy (TMA fills, wgmma
    reads): no generic-proxy access, so no proxy fence before a refill."""
    for use in ring.uses:
        if not isinstance(use.operation, smem.StageOp):
            return False
        for stage_use in use.operation.result.uses:
            reader = stage_use.operation
            if not (isinstance(reader, smem.AddressOp) and async_proxy_only(reader.result)):
                return False
    return True


def drop_async_only_refill_fences(module: ModuleOp) -> None:
    """``pipeline-tma`` fences every refill (its stage may be read by ``ldmatrix``); once the
    dots are wgmmas, a refill whose rings only the async proxy reads needs none: TMA's write
    after wgmma's read is one proxy, ordered by the wait_group and the barrier (or mbarrier)."""
    for fence in [o for o in module.walk() if isinstance(o, tma.FenceOp) and stage_attrs.REFILL_FENCE_ATTR in o.attributes]:
        rings = []
        op = fence.next_op
        while op is not None:
            if isinstance(op, smem.StageOp):
                rings.append(op.ring)
            op = op.next_op
        if rings and all(read_by_async_proxy_only(r) for r in rings):
            fence.detach()
            fence.erase()


@dataclass(frozen=True)
class LowerToWgmmaPass(ModulePass):
    name = "lower-to-wgmma"
    contract = PassContract(after=("tile-layout", "promote-to-shared", "pipeline-tma", "pipeline-cp-async"))

    overlap: bool = True
    """Keep one group of wgmmas in flight across the iterations of a cp.async-pipelined K loop."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for dot in [o for o in op.walk() if isinstance(o, tile.DotOp)]:
            if dot.acc.type.element_type not in (f32, i32):  # type: ignore[attr-defined]
                continue
            func = kernel.enclosing_kernel(dot)
            num_warps = max(func.block_shape[0] * func.block_shape[1] * func.block_shape[2] // 32, 1)
            plan = dot_plan(dot, num_warps)
            if not isinstance(plan, str):
                lower_dot(dot, num_warps, *plan, overlap=self.overlap)
        drop_async_only_refill_fences(op)
