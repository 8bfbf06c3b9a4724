"""Structured control flow (``scf``) -> labels, predicated branches and register assignments.

Region results and loop-carried values become registers (``ptx.reg``) written with
``ptx.assign``. Loops are rotated (test once before, then at the bottom) so each iteration
takes one branch, as nvcc lays them out.
"""

from __future__ import annotations

from xdsl.dialects import scf
from xdsl.dialects.builtin import i1
from xdsl.ir import Block

from kaio.dialects import kernel, ptx
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter, int_spec


def _yielded(block: Block) -> list:
    term = block.last_op
    assert isinstance(term, scf.YieldOp)
    return list(term.arguments)


@lowering(scf.YieldOp, scf.ConditionOp)
def lower_terminator(em: PtxEmitter, op: scf.YieldOp | scf.ConditionOp) -> None:
    """Nothing to emit: the parent op reads the operands of its regions' terminators."""


@lowering(scf.IfOp)
def lower_if(em: PtxEmitter, op: scf.IfOp) -> None:
    results = [em.reg(r.type) for r in op.results]
    cond = em.value(op.cond)
    then_block = op.true_region.block
    else_block = op.false_region.blocks.first if op.false_region.blocks else None
    has_else = else_block is not None and (len(else_block.ops) > 1 or results)
    end = em.label("endif")
    other = em.label("else") if has_else else end
    em.branch(other, cond, negate=True)
    em.lower_block(then_block)
    em.parallel_assign(results, [em.value(v) for v in _yielded(then_block)])
    if has_else:
        assert else_block is not None
        em.branch(end)
        em.place_label(other)
        em.lower_block(else_block)
        em.parallel_assign(results, [em.value(v) for v in _yielded(else_block)])
    em.place_label(end)
    for r, reg in zip(op.results, results):
        em.bind(r, reg)


@lowering(scf.ForOp)
def lower_for(em: PtxEmitter, op: scf.ForOp) -> None:
    """``for iv in [lb, ub) step s`` with a signed comparison, as scf.for defines it."""
    body = op.body.block
    iv_type = op.lb.type
    spec = int_spec(iv_type, signed=True)
    iv = em.reg(iv_type)
    carried = [em.reg(a.type) for a in op.iter_args]
    em.assign(iv, em.value(op.lb))
    em.parallel_assign(carried, [em.value(a) for a in op.iter_args])
    ub = em.value(op.ub)
    end, top = em.label("endfor"), em.label("for")
    skip = em.instr(ptx.SetpOp, f"ge.{spec}", [iv, ub], i1)
    em.branch(end, skip)
    em.place_label(top)
    em.bind(body.args[0], iv)
    for arg, reg in zip(body.args[1:], carried):
        em.bind(arg, reg)
    em.lower_block(body)
    em.parallel_assign(carried, [em.value(v) for v in _yielded(body)])
    nxt = em.instr(ptx.AddOp, spec, [iv, em.value(op.step)], iv.type)
    em.assign(iv, nxt)
    again = em.instr(ptx.SetpOp, f"lt.{spec}", [iv, ub], i1)
    em.branch(top, again)
    em.place_label(end)
    for r, reg in zip(op.results, carried):
        em.bind(r, reg)


@lowering(scf.WhileOp)
def lower_while(em: PtxEmitter, op: scf.WhileOp) -> None:
    before, after = op.before_region.block, op.after_region.block
    carried = [em.reg(a.type) for a in before.args]
    forwarded = [em.reg(a.type) for a in after.args]
    em.parallel_assign(carried, [em.value(a) for a in op.arguments])
    head, end = em.label("while"), em.label("endwhile")
    em.place_label(head)
    for arg, reg in zip(before.args, carried):
        em.bind(arg, reg)
    em.lower_block(before)
    cond_op = before.last_op
    assert isinstance(cond_op, scf.ConditionOp)
    em.parallel_assign(forwarded, [em.value(v) for v in cond_op.args])
    em.branch(end, em.value(cond_op.condition), negate=True)
    for arg, reg in zip(after.args, forwarded):
        em.bind(arg, reg)
    em.lower_block(after)
    em.parallel_assign(carried, [em.value(v) for v in _yielded(after)])
    em.branch(head)
    em.place_label(end)
    for r, reg in zip(op.results, forwarded):
        em.bind(r, reg)


@lowering(kernel.ReturnOp)
def lower_return(em: PtxEmitter, op: kernel.ReturnOp) -> None:
    em.emit(ptx.RetOp(""))
