"""Which thread holds which element of a distributed tile: the layout arithmetic of the tile rules.

A tile value is an aggregate: register r of a thread holds the element at the thread's base
coordinates (from its lane and warp bits, computed once per kernel) plus the layout's
compile-time offset of r (:class:`kaio.dialects.tile_layout.Distribution`). This module gives a
tile type its registers (``register_parts``), each thread its base coordinates and the
predicate of the one thread among copies of an element, and the small register helpers the
tile rules share (``add32``, ``and_pred``, ``or_pred``). It lowers no op itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import TensorType, i1, i32
from xdsl.ir import Attribute, SSAValue

from kaio.dialects import ptx
from kaio.dialects.tile_layout import Distribution, layout_of
from kaio.errors import KaioCompileError
from kaio.passes.to_ptx import register_parts
from kaio.passes.to_ptx.emitter import PtxEmitter, reg_type
from kaio.passes.to_ptx.kernel_ops import linear_thread_id


def num_warps(em: PtxEmitter) -> int:
    return max(math.prod(em.block_shape) // 32, 1)


def distribution(em_or_warps: PtxEmitter | int, t: Attribute) -> Distribution:
    layout = layout_of(t)
    if layout is None:
        raise KaioCompileError(f"tile {t} has no layout: run tile-layout before lower-to-ptx")
    warps = em_or_warps if isinstance(em_or_warps, int) else num_warps(em_or_warps)
    assert isinstance(t, TensorType)
    return layout.distribution(tuple(t.get_shape()), warps)


@register_parts(TensorType)
def tile_parts(t: Attribute, em: PtxEmitter) -> list[Attribute]:
    return [reg_type(t.element_type)] * distribution(em, t).registers  # type: ignore[attr-defined]


def warp_id(em: PtxEmitter) -> SSAValue:
    return em.invariant(("warp",), lambda: em.instr(ptx.ShrOp, "u32", [linear_thread_id(em), em.const(5, i32)], i32))


def bits_value(em: PtxEmitter, source: SSAValue, picks: list[tuple[int, int]], width: int = 32) -> SSAValue | None:
    """Sum of ((source >> i) & 1) << o over (i, o) pairs, in runs of consecutive bits. ``width``:
    the bits ``source`` can have set (a run that reaches its top needs no mask)."""
    picks = sorted(picks)
    runs: list[list[int]] = []  # [first input bit, first output bit, length]
    for i, o in picks:
        if runs and runs[-1][0] + runs[-1][2] == i and runs[-1][1] + runs[-1][2] == o:
            runs[-1][2] += 1
        else:
            runs.append([i, o, 1])
    total = None
    for i, o, n in runs:
        v = em.instr(ptx.ShrOp, "u32", [source, em.const(i, i32)], i32) if i else source
        if i + n < width:
            v = em.instr(ptx.AndOp, "b32", [v, em.const((1 << n) - 1, i32)], i32)
        v = em.instr(ptx.ShlOp, "b32", [v, em.const(o, i32)], i32) if o else v
        total = v if total is None else em.instr(ptx.OrOp, "b32", [total, v], i32)
    return total


def source_bits(em: PtxEmitter, source: str) -> int:
    """Bits a lane id (5) or warp id can have set: the block (``.maxntid``) holds ``num_warps``
    warps, so a power of two has no bit above its log."""
    if source == "laneid":
        return 5
    warps = num_warps(em)
    return (warps - 1).bit_length() if warps & (warps - 1) == 0 else 32


def thread_base(em: PtxEmitter, dist: Distribution) -> list[SSAValue]:
    """This thread's base coordinate along each dim (computed once per kernel)."""

    def build(d: int) -> SSAValue:
        whole = _one_run_of_thread_id(em, dist, d)
        if whole is not None:
            return whole
        terms = []
        for source, bits in (("laneid", dist.lane), ("warp", dist.warp)):
            picks = [(i, b[1]) for i, b in enumerate(bits) if b is not None and b[0] == d]
            if picks:
                src = em.special("laneid") if source == "laneid" else warp_id(em)
                # a lane id has no bit above 4; the warp id's bits keep their mask: without it
                # ptxas's register choice spilled kernels at either end (a 48-register
                # dequantiser, dK/dV at 255)
                terms.append(bits_value(em, src, picks, 5 if source == "laneid" else 32))
        if not terms:
            return em.const(0, i32)
        total = terms[0]
        for t in terms[1:]:
            total = em.instr(ptx.OrOp, "b32", [total, t], i32)  # type: ignore[list-item]
        return total  # type: ignore[return-value]

    return [em.invariant(("tile-base", dist.lane, dist.warp, d), lambda d=d: build(d)) for d in range(len(dist.shape))]


def _one_run_of_thread_id(em: PtxEmitter, dist: Distribution, d: int) -> SSAValue | None:
    """Dim ``d``'s base from the linear thread id, when its lane and warp bits are one run of
    that id's bits (lane bit i is id bit i, warp bit j is id bit 5 + j): one shift and mask,
    as if from one register, where separate lane and warp terms take a shift, mask and add
    more (and a lane id register of their own). The mask stays (see ``build`` above)."""
    picks = [(i, b[1]) for i, b in enumerate(dist.lane) if b is not None and b[0] == d]
    picks += [(5 + j, b[1]) for j, b in enumerate(dist.warp) if b is not None and b[0] == d]
    picks.sort()
    first = picks[0] if picks else (0, 0)
    if not picks or any((i - first[0], o - first[1]) != (n, n) for n, (i, o) in enumerate(picks)):
        return None  # not one run (consecutive id bits to consecutive coordinate bits)
    if all(i < 5 for i, _ in picks) or all(i >= 5 for i, _ in picks):
        return None  # from one register already
    return bits_value(em, linear_thread_id(em), picks, 5 + source_bits(em, "warp"))


def owner_predicate(em: PtxEmitter, dist: Distribution) -> SSAValue | None:
    """True in the one thread of each group holding copies of the same elements."""
    lane_mask = sum(1 << i for i, b in enumerate(dist.lane) if b is None)
    warp_mask = sum(1 << i for i, b in enumerate(dist.warp) if b is None)
    if not lane_mask and not warp_mask:
        return None

    def build() -> SSAValue:
        preds = []
        for mask, src in ((lane_mask, "lane"), (warp_mask, "warp")):
            if mask:
                reg = em.special("laneid") if src == "lane" else warp_id(em)
                bits = em.instr(ptx.AndOp, "b32", [reg, em.const(mask, i32)], i32)
                preds.append(em.instr(ptx.SetpOp, "eq.u32", [bits, em.const(0, i32)], i1))
        return preds[0] if len(preds) == 1 else em.instr(ptx.AndOp, "pred", preds, i1)

    return em.invariant(("owner", lane_mask, warp_mask), build)


def add32(em: PtxEmitter, a: SSAValue, b: SSAValue | int) -> SSAValue:
    """``a + b`` in 32 bits (nothing to emit for a constant 0)."""
    if isinstance(b, int):
        return a if b == 0 else em.instr(ptx.AddOp, "s32", [a, em.const(b, i32)], i32)
    return em.instr(ptx.AddOp, "s32", [a, b], i32)


def _combine_preds(em: PtxEmitter, op: type[ptx.PtxInstr], preds: Sequence[SSAValue | None]) -> SSAValue | None:
    live = [p for p in preds if p is not None]
    if not live:
        return None
    result = live[0]
    for p in live[1:]:
        result = em.instr(op, "pred", [result, p], i1)
    return result


def and_pred(em: PtxEmitter, preds: Sequence[SSAValue | None]) -> SSAValue | None:
    return _combine_preds(em, ptx.AndOp, preds)


def or_pred(em: PtxEmitter, preds: Sequence[SSAValue | None]) -> SSAValue:
    result = _combine_preds(em, ptx.OrOp, preds)
    assert result is not None
    return result
