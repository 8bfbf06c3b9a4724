"""``tile.atomic_rmw`` / ``tile.atomic_cas`` -> PTX: each element updated exactly once.

A layout may give several threads copies of one element (a tile smaller than the CTA, a
broadcast dim); the copy :func:`owner_predicate` picks is the only one that touches memory, so
a histogram counts each element once, not once per copy. When the old values are used, the
owner hands them to the other copies through shared memory; when they are not, the update is a
``red`` (no value comes back). A scalar atomic is one per program: the CTA's first thread does
it, and shares the old value the same way.
"""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType, i1, i32
from xdsl.ir import Attribute, SSAValue

from kaio.dialects import ptx, tile
from kaio.dialects.kernel import Combine
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter, element_bytes, is_float, mem_spec, reg_type, width
from kaio.passes.to_ptx.kernel_ops import atomic_spec, float_min_max_loop, linear_thread_id
from kaio.passes.to_ptx.tile_distribution import and_pred, distribution, owner_predicate
from kaio.passes.to_ptx.relayout import through_shared
from kaio.passes.to_ptx.tile_memory import indexed_address, selp_spec


def _update(em: PtxEmitter, op: tile.TileAtomic, addr: SSAValue, operands: list[SSAValue],
            guard: SSAValue | None, keep_old: bool) -> SSAValue | None:  # fmt: skip
    """One atomic on ``addr`` where ``guard``; the old value when ``keep_old``."""
    t = op.result.type.element_type if isinstance(op.result.type, TensorType) else op.result.type
    if isinstance(op, tile.AtomicCasOp):
        atom = ptx.AtomOp(f"global.cas.b{width(t)}", [addr, *operands], [reg_type(t)], guard=guard)
        em.emit(atom)
        return atom.outs[0]
    kind = op.combine.data
    if kind in (Combine.MAXF, Combine.MINF):  # a compare-and-swap loop: branch around it
        skip = em.label("atomic_skip")
        if guard is not None:
            em.branch(skip, guard, negate=True)
        old = float_min_max_loop(em, kind, operands[0], addr, 0, "global")
        em.place_label(skip)
        return old
    spec = f"global.{atomic_spec(kind, t)}"
    if not keep_old:
        em.emit(ptx.RedOp(spec, [addr, *operands], [], guard=guard))
        return None
    atom = ptx.AtomOp(spec, [addr, *operands], [reg_type(t)], guard=guard)
    em.emit(atom)
    return atom.outs[0]


def _value_operands(op: tile.TileAtomic) -> list[SSAValue]:
    return [op.compare, op.value] if isinstance(op, tile.AtomicCasOp) else [op.value]


def _masked_old(em: PtxEmitter, old: SSAValue, ok: SSAValue, t: Attribute) -> SSAValue:
    """The old value where the element was updated, the type's zero where its mask is false."""
    zero = em.const(0.0 if is_float(t) else 0, reg_type(t))
    return em.instr(ptx.SelpOp, selp_spec(t), [old, zero, ok], reg_type(t))


@lowering(tile.AtomicRMWOp, tile.AtomicCasOp)
def lower_tile_atomic(em: PtxEmitter, op: tile.TileAtomic) -> None:
    if isinstance(op.result.type, TensorType):
        _lower_elementwise(em, op)
    else:
        _lower_once(em, op)


def _lower_elementwise(em: PtxEmitter, op: tile.TileAtomic) -> None:
    t = op.result.type.element_type  # type: ignore[union-attr]
    dist = distribution(em, op.result.type)
    owner = owner_predicate(em, dist)
    keep_old = bool(op.result.uses)
    values = [em.parts(v) for v in _value_operands(op)]
    olds = []
    for r, (idx, ok) in enumerate(zip(em.parts(op.index), em.parts(op.mask), strict=True)):
        addr = indexed_address(em, op.array, idx, t)
        old = _update(em, op, addr, [v[r] for v in values], and_pred(em, [ok, owner]), keep_old)
        if keep_old:
            assert old is not None
            olds.append(_masked_old(em, old, ok, t))
    if not keep_old:
        return
    em.bind(op.result, olds)
    if owner is not None:  # the other copies of each element take the owner's old value
        em.bind(op.result, through_shared(em, op.result, dist, transpose=False))


def _lower_once(em: PtxEmitter, op: tile.TileAtomic) -> None:
    t = op.result.type
    first = em.invariant(
        ("first-thread",), lambda: em.instr(ptx.SetpOp, "eq.u32", [linear_thread_id(em), em.const(0, i32)], i1)
    )
    ok = em.value(op.mask)
    keep_old = bool(op.result.uses)
    addr = indexed_address(em, op.array, em.value(op.index), t)
    old = _update(em, op, addr, [em.value(v) for v in _value_operands(op)], and_pred(em, [ok, first]), keep_old)
    if old is None:
        return
    old = _masked_old(em, old, ok, t)
    scratch = em.shared("atomic_old", max(element_bytes(t), 4), 8)
    em.emit(ptx.StOp(f"shared.{mem_spec(t)}", [scratch, old], guard=first))
    em.barrier()
    em.bind(op.result, em.instr(ptx.LdOp, f"shared.{mem_spec(t)}", [scratch], reg_type(t)))
    em.barrier()  # the next scalar atomic may write the scratch again
