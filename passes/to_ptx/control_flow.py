"""Structured control flow (``scf``) -> labels, predicated branches and register assignments.

Region results and loop-carried values become registers (``ptx.reg``) written with
``ptx.assign``. Loops are rotated (test once before, then at the bottom) so each iteration
takes one branch, as nvcc lays them out.
"""

from __future__ import annotations

from collections.abc import Sequence

from kaio.dialects import kernel, ptx
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter, int_spec
from xdsl.dialects import scf
from xdsl.dialects.builtin import i1
from xdsl.ir import Attribute, Block, SSAValue


def _yielded(block: Block) -> list:
    term = block.last_op
    assert isinstance(term, scf.YieldOp)
    return list(term.arguments)


@lowering(scf.YieldOp, scf.ConditionOp)
def lower_terminator(em: PtxEmitter, op: scf.YieldOp | scf.ConditionOp) -> None:
    """Nothing to emit: the parent op reads the operands of its regions' terminators."""


def _fresh(em: PtxEmitter, types: Sequence[Attribute]) -> list[list[SSAValue]]:
    return [em.regs(t) for t in types]


def _assign(em: PtxEmitter, groups: list[list[SSAValue]], values: Sequence[SSAValue]) -> None:
    """Assign values (scalar or aggregate) to register groups, all at once."""
    dsts = [r for g in groups for r in g]
    srcs = [r for v in values for r in em.parts(v)]
    em.parallel_assign(dsts, srcs)


def _bind(em: PtxEmitter, values: Sequence[SSAValue], groups: list[list[SSAValue]]) -> None:
    for v, g in zip(values, groups):
        em.bind(v, g)


@lowering(scf.IfOp)
def lower_if(em: PtxEmitter, op: scf.IfOp) -> None:
    results = _fresh(em, [r.type for r in op.results])
    cond = em.value(op.cond)
    then_block = op.true_region.block
    else_block = op.false_region.blocks.first if op.false_region.blocks else None
    has_else = else_block is not None and (len(else_block.ops) > 1 or bool(results))
    end = em.label("endif")
    other = em.label("else") if has_else else end
    em.branch(other, cond, negate=True)
    em.lower_block(then_block)
    _assign(em, results, _yielded(then_block))
    if has_else:
        assert else_block is not None
        em.branch(end)
        em.place_label(other)
        em.lower_block(else_block)
        _assign(em, results, _yielded(else_block))
    em.place_label(end)
    _bind(em, list(op.results), results)


@lowering(scf.ForOp)
def lower_for(em: PtxEmitter, op: scf.ForOp) -> None:
    """``for iv in [lb, ub) step s`` with a signed comparison, as scf.for defines it."""
    body = op.body.block
    iv_type = op.lb.type
    spec = int_spec(iv_type, signed=True)
    iv = em.reg(iv_type)
    carried = _fresh(em, [a.type for a in op.iter_args])
    em.assign(iv, em.value(op.lb))
    _assign(em, carried, list(op.iter_args))
    ub = em.value(op.ub)
    end, top = em.label("endfor"), em.label("for")
    skip = em.instr(ptx.SetpOp, f"ge.{spec}", [iv, ub], i1)
    em.branch(end, skip)
    em.place_label(top)
    em.bind(body.args[0], iv)
    _bind(em, list(body.args[1:]), carried)
    em.lower_block(body)
    _assign(em, carried, _yielded(body))
    nxt = em.instr(ptx.AddOp, spec, [iv, em.value(op.step)], iv.type)
    em.assign(iv, nxt)
    again = em.instr(ptx.SetpOp, f"lt.{spec}", [iv, ub], i1)
    em.branch(top, again)
    em.place_label(end)
    _bind(em, list(op.results), carried)


@lowering(scf.WhileOp)
def lower_while(em: PtxEmitter, op: scf.WhileOp) -> None:
    before, after = op.before_region.block, op.after_region.block
    carried = _fresh(em, [a.type for a in before.args])
    forwarded = _fresh(em, [a.type for a in after.args])
    _assign(em, carried, list(op.arguments))
    head, end = em.label("while"), em.label("endwhile")
    em.place_label(head)
    _bind(em, list(before.args), carried)
    em.lower_block(before)
    cond_op = before.last_op
    assert isinstance(cond_op, scf.ConditionOp)
    _assign(em, forwarded, list(cond_op.args))
    em.branch(end, em.value(cond_op.condition), negate=True)
    _bind(em, list(after.args), forwarded)
    em.lower_block(after)
    _assign(em, carried, _yielded(after))
    em.branch(head)
    em.place_label(end)
    _bind(em, list(op.results), forwarded)


@lowering(kernel.ReturnOp, kernel.ExitOp)
def lower_return(em: PtxEmitter, op: kernel.ReturnOp | kernel.ExitOp) -> None:
    em.emit(ptx.RetOp(""))
