"""``tile.view`` -> nothing emitted: the addresses and bounds masks of a view's elements.

A view names a rectangle of a global array (offsets, bounds, strides). Its rule emits nothing:
the loads, stores and copies that read it compute, for the elements each thread holds, their
addresses and whether they lie inside the bounds (:class:`ViewAccess`), and record the base
alignment their accesses assume (:func:`require_alignment`, checked at launch).
"""

from __future__ import annotations

from xdsl.dialects.builtin import i1, i32, i64
from xdsl.ir import SSAValue

from kaio.dialects import ptx, tile
from kaio.dialects.kernel import BlockIdOp
from kaio.dialects.stage_attrs import require_alignment as record_alignment
from kaio.dialects.tile_layout import Distribution
from kaio.errors import KaioCompileError
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter, element_bytes
from kaio.passes.to_ptx.tile_distribution import add32, and_pred, or_pred, thread_base
from kaio.passes.value_facts import constant_int

# --------------------------------------------------------------------------- bounds


def extent(em: PtxEmitter, bound: SSAValue) -> SSAValue:
    """A view's bound (IR value) as the element tests compare with it: a bound is a signed
    32-bit count, and one below zero has no element inside, so ``max(bound, 0)`` (computed once,
    in the prologue when the bound is a parameter)."""
    c = constant_int(bound)
    if c is not None and c >= 0:
        return em.value(bound)
    v = em.value(bound)
    return em.hoisted(("extent", v), [v], lambda: em.instr(ptx.MaxOp, "s32", [v, em.const(0, i32)], i32))


def inside(em: PtxEmitter, index: SSAValue, bound: SSAValue) -> SSAValue:
    """``0 <= index < bound`` for an ``extent``: one unsigned compare (a negative index reads as
    2^31 or more, past any extent)."""
    return em.instr(ptx.SetpOp, "lt.u32", [index, bound], i1)


# --------------------------------------------------------------------------- views


def require_alignment(em: PtxEmitter, array: SSAValue, nbytes: int) -> None:
    """Record that the launch must check that the array parameter's base address is a multiple
    of ``nbytes``: an access wider than the base alignment the compile was told would fault."""
    func = em.func
    args = list(func.body.block.args)
    if array in args:
        record_alignment(func, func.param_names.data[args.index(array)].data, nbytes)


def _never_negative(offset: SSAValue, extent: int) -> bool:
    """Whether ``offset`` plus a thread base plus a register offset along a dim of ``extent``
    elements is in [0, 2^31): a constant offset in [0, 2^30) (a thread base is below 2^16, a
    register offset below 2^30), or a block index (below 2^31) in a dim of one element (one
    row per program: no thread base, no register offset)."""
    c = constant_int(offset)
    if c is not None:
        return 0 <= c < 1 << 30
    return isinstance(offset.owner, BlockIdOp) and extent == 1


class ViewAccess:
    """Addresses and masks of one view's elements for this thread, shared between registers."""

    def __init__(self, em: PtxEmitter, view: tile.ViewOp, dist: Distribution):
        self.em, self.view, self.dist = em, view, dist
        self.t = view.result.type.element_type
        self.eb = element_bytes(self.t)
        base = thread_base(em, dist)
        self.start = [em.instr(ptx.AddOp, "s32", [em.value(o), b], i32) for o, b in zip(view.offsets, base, strict=True)]
        self.bounds = [extent(em, b) for b in view.bounds]
        self.strides = [em.value(s) for s in view.strides]
        # dims whose index is never negative (see _never_negative): there one signed compare with
        # the bound itself is exact (a negative bound has nothing inside) and its max(bound, 0)
        # is not needed
        shape = view.result.type.dims  # type: ignore[attr-defined]
        self._from_zero = [_never_negative(o, n) for o, n in zip(view.offsets, shape, strict=True)]
        self._oks: dict[tuple[int, int], SSAValue] = {}
        self._addrs: dict[tuple[int, ...], SSAValue] = {}

    def ok(self, off: tuple[int, ...], upto: int | None = None) -> SSAValue | None:
        """Whether the element at ``off`` is inside the bounds (of the dims before ``upto``)."""
        preds = []
        for d, o in enumerate(off[:upto]):
            if (d, o) not in self._oks:
                index = add32(self.em, self.start[d], o)
                if self._from_zero[d] and 0 <= o < 1 << 30:
                    bound = self.em.value(self.view.bounds[d])  # bound > index: the bound's test
                    self._oks[(d, o)] = self.em.instr(ptx.SetpOp, "gt.s32", [bound, index], i1)
                else:
                    self._oks[(d, o)] = inside(self.em, index, self.bounds[d])
            preds.append(self._oks[(d, o)])
        return and_pred(self.em, preds)  # type: ignore[return-value]

    def ok_here(self, off: tuple[int, ...]) -> SSAValue:
        """``ok(off)``, its last-dim test computed here and not cached (inside a branch that may
        be skipped, a cached predicate would be unset for the next user)."""
        last = len(off) - 1
        here = inside(self.em, add32(self.em, self.start[last], off[last]), self.bounds[last])
        return and_pred(self.em, [self.ok(off, upto=last), here])  # type: ignore[return-value]

    def none_inside(self, off: tuple[int, ...], count: int) -> SSAValue:
        """Whether none of the ``count`` elements from ``off`` along the last dim is inside: the
        run ends before column 0 or starts at or past the bound (a run that starts before 0 may
        still reach inside, so its first element being outside proves nothing)."""
        em, last = self.em, len(off) - 1
        first = add32(em, self.start[last], off[last])
        before = em.instr(ptx.SetpOp, "lt.s32", [add32(em, first, count - 1), em.const(0, i32)], i1)
        after = em.instr(ptx.SetpOp, "ge.s32", [first, self.bounds[last]], i1)
        rows_out = em.instr(ptx.NotOp, "pred", [self.ok(off, upto=last)], i1) if last else None
        return or_pred(em, [before, after, rows_out])

    def split(self, off: tuple[int, ...], vec: int) -> tuple[SSAValue, list[SSAValue]]:
        """(the whole vector at ``off`` is inside, each element is inside and the vector is not):
        the guards of one vector access and of the element accesses that replace it at the bound."""
        em = self.em
        last = list(off)
        last[-1] += vec - 1
        full = self.ok(tuple(last))
        partial = em.instr(ptx.NotOp, "pred", [full], i1)
        elements = []
        for e in range(vec):
            each = list(off)
            each[-1] += e
            elements.append(em.instr(ptx.AndOp, "pred", [self.ok(tuple(each)), partial], i1))
        return full, elements

    def address(self, off: tuple[int, ...]) -> tuple[SSAValue, int]:
        """(register, immediate byte offset) of the element at ``off`` from the thread base."""
        em = self.em
        last = len(off) - 1
        key = off[:last]
        if key not in self._addrs:
            addr = em.value(self.view.array)
            for d in range(last + 1):
                index = add32(em, self.start[d], off[d]) if d < last else self.start[d]
                scale = em.instr(ptx.MulOp, "lo.s32", [self.strides[d], em.const(self.eb, i32)], i32)
                addr = em.instr(ptx.MadOp, "wide.s32", [index, scale, addr], i64)  # a start may be negative
            self._addrs[key] = addr
        unit = constant_int(self.view.strides[last])
        if unit is None:
            scale = em.instr(ptx.MulOp, "lo.s32", [self.strides[last], em.const(off[last] * self.eb, i32)], i32)
            return em.instr(ptx.MadOp, "wide.s32", [scale, em.const(1, i32), self._addrs[key]], i64), 0
        return self._addrs[key], off[last] * unit * self.eb


@lowering(tile.ViewOp)
def lower_view(em: PtxEmitter, op: tile.ViewOp) -> None:
    """Nothing to emit: loads, stores and copies read the view's operands."""


def view_of(value: SSAValue) -> tile.ViewOp:
    owner = value.owner
    if not isinstance(owner, tile.ViewOp):
        raise KaioCompileError("tile views must come straight from a tile.view")
    return owner


__all__ = ["ViewAccess", "extent", "inside", "require_alignment", "view_of"]
