"""Rings of shared-memory stages a K loop cycles through: what ``pipeline-cp-async`` and
``pipeline-tma`` share (the slice of the body that computes the copies' sources, the ring
buffers beside the single ones, the stage counter, the body's math moved into the pipelined
loop, its reads redirected to the stage in use)."""

from __future__ import annotations

from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import arith, scf
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import Rewriter

from kaio.dialects import kernel, smem, stage_attrs
from kaio.errors import KaioCompileError
from kaio.passes.int_builder import IndexBuilder


def load_slice(body: Block, values: list[SSAValue]) -> list[Operation]:
    """The body ops the values (the copies' sources) are computed by, in program order: an op
    with regions (an ``scf.if`` of a device function's early return) needs what its nested
    ops read too."""
    needed: set[Operation] = set()
    work: list[SSAValue] = list(values)
    while work:
        owner = work.pop().owner
        if isinstance(owner, Operation) and owner.parent_block() is body and owner not in needed:
            needed.add(owner)
            work.extend(v for inner in owner.walk() for v in inner.operands)
    return [op for op in body.ops if op in needed]


def next_stage(ix: IndexBuilder, stage: SSAValue, stages: int) -> SSAValue:
    bumped = ix.add(stage, ix.const(1))
    wrap = ix.b.insert(arith.CmpiOp(bumped, ix.const(stages), "eq")).result
    return ix.b.insert(arith.SelectOp(wrap, ix.const(0), bumped)).result


def make_rings(copies: list[smem.CopyOp], stages: int, pass_name: str) -> dict[SSAValue, SSAValue]:
    """Each copy's shared buffer -> a ring of ``stages`` such buffers (allocated beside it)."""
    rings: dict[SSAValue, SSAValue] = {}
    for c in copies:
        alloc = c.dst.owner
        if not isinstance(alloc, smem.AllocOp) or c.dst in rings:
            raise KaioCompileError(f"{pass_name} needs each copy to fill its own smem.alloc buffer")
        single = alloc.result.type
        ring = smem.AllocOp(alloc.sym_name.data, smem.BufferType((stages, *single.dims), single.element_type, single.layout))
        Rewriter.insert_op(ring, InsertPoint.after(alloc))
        rings[c.dst] = ring.result
    return rings


def move_math(body: Block, b: Builder) -> scf.YieldOp:
    """Move the loop body's ops to ``b``, except its tile copies and the barriers that only
    ordered them (the pipeline replaces both); returns the old body's yield (not moved)."""
    old_yield = body.last_op
    assert isinstance(old_yield, scf.YieldOp)
    for op in list(body.ops):
        op.detach()
        if isinstance(op, smem.CopyOp) or (isinstance(op, kernel.BarrierOp) and stage_attrs.COPY_BARRIER_ATTR in op.attributes):
            op.erase(safe_erase=False)
        elif op is not old_yield:
            b.insert(op)
    return old_yield


def read_stages(body: Block, rings: dict[SSAValue, SSAValue], read: SSAValue) -> None:
    """The loop's math reads stage ``read`` of each ring instead of the single buffer."""
    for buffer, ring in rings.items():
        stage_view = smem.StageOp(ring, read)
        Rewriter.insert_op(stage_view, InsertPoint.after(body.ops.first))  # type: ignore[arg-type]
        for use in list(buffer.uses):
            if use.operation.parent_block() is body:
                use.operation.operands[use.index] = stage_view.result


def erase_single_buffers(rings: dict[SSAValue, SSAValue]) -> None:
    for buffer in rings:
        owner = buffer.owner
        assert isinstance(owner, smem.AllocOp)
        if not buffer.uses:
            owner.detach()
            owner.erase()
