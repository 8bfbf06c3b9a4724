"""``pipeline-cp-async{stages=N}``: overlap the global->shared copies of a K loop with its math.

N is the pass's ``stages`` option where the pipeline gives one, else the module's
``kaio.launch`` ``num_stages`` (the tile kernel's ``num_stages``; 0 or 1 there: no ring, the
pass leaves the copies as they are), else 3.

The shared buffers become rings of N stages. Before the loop, the copies of the first N-1
tiles are started (one ``cp.async`` group each). Iteration i then waits until tile i has
landed (at most N-2 groups still in flight), synchronizes the block, computes on stage i % N,
and starts the copy of tile i + N - 1 into the stage iteration i - 1 just finished with. Copies
past the end of K read nothing (they zero-fill), so no tail loop is needed. A scalar load the
copies' addresses need (a block table's page) is read for such a trip only if the trip runs
(``scf.if``, else 0): past the end it may lie past its array (the copy's bounds, which hold the
trip's K offset, make it read nothing whatever the value). A K loop inside
another loop runs again: a barrier before its prologue keeps the new copies from overwriting
stages slower warps still read from the previous run. The barriers
``promote-to-shared`` placed around the loop's copies give way to the one after the wait;
barriers that order other shared writes (``smem.store``) stay.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import AnyFloat, FloatAttr, IntegerAttr, ModuleOp, i32
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from kaio.dialects import cpasync, kernel, smem, stage_attrs
from kaio.errors import KaioCompileError
from kaio.pass_contracts import OptionRange, PassContract
from kaio.passes.int_builder import IndexBuilder
from kaio.launch_limits import MAX_STAGES, MIN_RING_STAGES
from kaio.passes.stage_rings import erase_single_buffers, load_slice, make_rings, move_math, next_stage, read_stages


def _trip_runs(ix: IndexBuilder, loop: scf.ForOp, k: SSAValue) -> SSAValue:
    """Whether the trip at K offset ``k`` is one the loop runs (``k < ub``; a negative step's
    loop counts down)."""
    below = ix.b.insert(arith.CmpiOp(k, loop.ub, "slt")).result
    step = loop.step.owner
    if isinstance(step, arith.ConstantOp) and isinstance(step.value, IntegerAttr) and step.value.value.data > 0:
        return below
    up = ix.b.insert(arith.CmpiOp(loop.step, ix.const(0), "sgt")).result
    above = ix.b.insert(arith.CmpiOp(k, loop.ub, "sgt")).result
    return ix.b.insert(arith.SelectOp(up, below, above)).result


def _reads_memory(op: Operation) -> bool:
    """Whether ``op`` is, or holds in its regions (a device function's ``scf.if``), a scalar load."""
    return any(isinstance(inner, kernel.LoadOp) for inner in op.walk())


def _guarded(ix: IndexBuilder, op: Operation, mapping: dict[SSAValue, SSAValue], runs: SSAValue) -> None:
    """``op`` (a load, or an op holding one) for another trip, run only if ``runs``, else its
    results 0."""
    run, skip = Block(), Block()
    clone = op.clone(value_mapper=mapping)
    run.add_ops([clone, scf.YieldOp(*clone.results)])
    zeros = [arith.ConstantOp(FloatAttr(0.0, t) if isinstance(t, AnyFloat) else IntegerAttr(0, t)) for t in op.result_types]
    skip.add_ops([*zeros, scf.YieldOp(*(z.result for z in zeros))])
    guarded = ix.b.insert(scf.IfOp(runs, list(op.result_types), [run], [skip]))
    for old, new in zip(op.results, guarded.results, strict=True):
        mapping[old] = new


def _issue_copies(
    ix: IndexBuilder,
    loop: scf.ForOp,
    slice_ops: list[Operation],
    copies: list[smem.CopyOp],
    rings: dict[SSAValue, SSAValue],
    iv: SSAValue,
    k: SSAValue,
    stage: SSAValue,
) -> None:
    """Copies of the tiles at K offset ``k`` into ``stage`` of the rings, as one group."""
    mapping: dict[SSAValue, SSAValue] = {iv: k}
    reads = [op for op in slice_ops if _reads_memory(op)]
    runs = _trip_runs(ix, loop, k) if reads else None
    for op in slice_ops:
        if runs is not None and op in reads:
            _guarded(ix, op, mapping, runs)
        else:
            ix.b.insert(op.clone(value_mapper=mapping))
    for c in copies:
        dst = ix.b.insert(smem.StageOp(rings[c.dst], stage)).result
        ix.b.insert(cpasync.CopyOp(mapping.get(c.src, c.src), dst, c.vec.value.data))
    ix.b.insert(cpasync.CommitOp())


def _runs_again(loop: scf.ForOp) -> bool:
    """Whether the K loop sits inside another loop (its prologue follows its previous run)."""
    parent = loop.parent_op()
    while parent is not None and not isinstance(parent, kernel.KernelFuncOp):
        if isinstance(parent, scf.ForOp | scf.WhileOp):
            return True
        parent = parent.parent_op()
    return False


def pipeline_loop(loop: scf.ForOp, stages: int) -> None:
    body = loop.body.block
    copies = [op for op in body.ops if isinstance(op, smem.CopyOp)]
    if not copies:
        return
    iv = body.args[0]
    slice_ops = load_slice(body, [c.src for c in copies])

    rings = make_rings(copies, stages, "pipeline-cp-async")

    # prologue: tiles 0 .. stages-2
    outer = IndexBuilder(Builder(InsertPoint.before(loop)))
    if _runs_again(loop):  # the previous run's last stages may still be read by slower warps
        outer.b.insert(kernel.BarrierOp())
    for s in range(stages - 1):
        k = outer.add(loop.lb, outer.mul(loop.step, outer.const(s)))
        _issue_copies(outer, loop, slice_ops, copies, rings, iv, k, outer.const(s))

    # the new loop carries the read and write stage indices too
    n = len(body.args)
    new_body = Block(arg_types=[*body.arg_types, i32, i32])
    for old, new in zip(body.args, new_body.args[:n]):
        old.replace_all_uses_with(new)
    read, write = new_body.args[n], new_body.args[n + 1]
    b = Builder(InsertPoint.at_end(new_body))
    b.insert(cpasync.WaitOp(stages - 2))
    b.insert(kernel.BarrierOp())
    old_yield = move_math(body, b)
    read_stages(new_body, rings, read)  # the math reads the stage this iteration waited for
    ix = IndexBuilder(b)
    ahead = ix.add(new_body.args[0], ix.mul(loop.step, ix.const(stages - 1)))
    _issue_copies(ix, loop, slice_ops, copies, rings, new_body.args[0], ahead, write)
    carried = list(old_yield.arguments)
    old_yield.erase(safe_erase=False)
    b.insert(scf.YieldOp(*carried, next_stage(ix, read, stages), next_stage(ix, write, stages)))

    zero, last = outer.const(0), outer.const(stages - 1)
    new_loop = scf.ForOp(loop.lb, loop.ub, loop.step, [*loop.iter_args, zero, last], new_body)
    Rewriter.insert_op(new_loop, InsertPoint.before(loop))
    Rewriter.insert_op(cpasync.WaitOp(0), InsertPoint.after(new_loop))
    for old, new in zip(loop.results, new_loop.results):
        old.replace_all_uses_with(new)
    loop.detach()
    loop.erase()
    erase_single_buffers(rings)


@dataclass(frozen=True)
class PipelineCpAsyncPass(ModulePass):
    name = "pipeline-cp-async"
    contract = PassContract(
        after=("promote-to-shared", "pipeline-tma"), options=(OptionRange("stages", MIN_RING_STAGES, MAX_STAGES),)
    )

    stages: int | None = None
    """Shared buffers per operand in the ring (2 = double buffering); None: the module's
    ``kaio.launch`` num_stages (below 2 there: no ring), else 3."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        stages = stage_attrs.launch_stages(op, self.stages)
        if stages < MIN_RING_STAGES:
            if self.stages is None:  # the kernel asked for no ring
                return
            raise KaioCompileError(f"pipeline-cp-async needs at least {MIN_RING_STAGES} stages, got {stages}")
        loops = [o for o in op.walk() if isinstance(o, scf.ForOp) and any(isinstance(x, smem.CopyOp) for x in o.body.block.ops)]
        for loop in loops:
            pipeline_loop(loop, stages)
