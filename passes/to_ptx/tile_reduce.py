"""``tile.reduce`` -> PTX: within each thread, across the lanes of a warp, across warps.

A reduction along an axis combines, in this order, the registers a thread holds along it, the
lanes holding the axis (``shfl.sync.bfly`` butterflies: every lane ends with the total), and the
warps holding it, through the kernel's shared reduce scratch (``reduce_scratch``). A sum of
products that only this reduction uses streams its map into ``fma``.
"""

from __future__ import annotations

import math

from xdsl.dialects import arith
from xdsl.dialects.builtin import TensorType, f32, i1, i32
from xdsl.ir import Attribute, SSAValue

from kaio.dialects import ptx, tile
from kaio.dialects.kernel import Combine
from kaio.dialects.tile_layout import Distribution
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter, element_bytes, mem_spec, reg_type
from kaio.passes.to_ptx.kernel_ops import combine, shuffle
from kaio.passes.to_ptx.reduce_scratch import ScratchSlot, reduce_slot
from kaio.passes.to_ptx.tile_distribution import add32, bits_value, distribution, source_bits, thread_base, warp_id
from kaio.passes.to_ptx.tile_elementwise import STREAMING_USERS, MapElements


@lowering(tile.ReduceOp)
def lower_reduce(em: PtxEmitter, op: tile.ReduceOp) -> None:
    dist = distribution(em, op.input.type)
    axis = op.axis.value.data
    kind = op.combine.data
    t = op.input.type.element_type  # type: ignore[attr-defined]
    parts = em.parts(op.input) if op.input not in em.deferred else ()

    def key(off: tuple[int, ...]) -> tuple[int, ...]:
        return off[:axis] + off[axis + 1 :]

    partial: dict[tuple[int, ...], SSAValue] = {}
    if op.input in em.deferred:  # 1. within the thread: a sum of products, by fma
        elements, product = MapElements(em, op.input.owner), _product(op)  # type: ignore[arg-type]
        assert product is not None
        for r, off in enumerate(dist.offsets):
            k = key(off)
            value = elements.value(r)  # binds the product's operands for register r
            if k in partial:
                args = [em.value(product.lhs), em.value(product.rhs), partial[k]]
                value = em.instr(ptx.FmaOp, "rn.f32", args, f32)  # the multiply above goes unused
            partial[k] = value
    else:
        for r, off in enumerate(dist.offsets):  # 1. within the thread
            k = key(off)
            partial[k] = parts[r] if k not in partial else combine(em, kind, partial[k], parts[r], t)
    mask = em.const(-1, i32)
    for i, b in enumerate(dist.lane):  # 2. across the lanes holding the axis
        if b is not None and b[0] == axis:
            for k, v in partial.items():
                partial[k] = combine(em, kind, v, shuffle(em, "bfly", v, em.const(1 << i, i32), 32, mask), t)
    warp_bits = [i for i, b in enumerate(dist.warp) if b is not None and b[0] == axis]
    if warp_bits:  # 3. across the warps holding the axis, through shared memory
        scratch, place = reduce_slot(em, op, lambda r: _scratch_bytes(em, r))
        partial = _across_warps(em, dist, axis, warp_bits, partial, kind, t, scratch, place)
    if isinstance(op.result.type, TensorType):
        out_dist = distribution(em, op.result.type)
        em.bind(op.result, [partial[off] for off in out_dist.offsets])
    else:
        em.bind(op.result, partial[()])


def _product(op: tile.ReduceOp) -> arith.MulfOp | None:
    """The f32 product a sum reduces, when a map of this reduction's alone ends in one."""
    source = op.input.owner
    if op.combine.data != Combine.ADDF or not isinstance(source, tile.MapOp) or not op.input.has_one_use():
        return None
    product = source.block.last_op.operands[0].owner  # type: ignore[union-attr]
    if not isinstance(product, arith.MulfOp) or product.result.type != f32:
        return None
    return product


# A sum of products streams its map (one register at a time) into fma: the partial sums round
# once per element instead of twice (the order of a reduction's additions is unspecified anyway)
STREAMING_USERS[tile.ReduceOp] = lambda em, op: _product(op) is not None  # type: ignore[assignment]


def _scratch_bytes(em: PtxEmitter, op: tile.ReduceOp) -> int | None:
    """The shared bytes ``op``'s warps' partials take (None: the reduction stays in a warp)."""
    dist = distribution(em, op.input.type)
    axis = op.axis.value.data
    warp_bits = [b for b in dist.warp if b is not None and b[0] == axis]
    if not warp_bits:
        return None
    rest = [s for d, s in enumerate(dist.shape) if d != axis]
    return (1 << len(warp_bits)) * math.prod(rest) * element_bytes(op.input.type.element_type)  # type: ignore[attr-defined]


def _across_warps(em: PtxEmitter, dist: Distribution, axis: int, warp_bits: list[int],
                  partial: dict[tuple[int, ...], SSAValue], kind: object, t: Attribute,
                  scratch: SSAValue, place: ScratchSlot) -> dict[tuple[int, ...], SSAValue]:  # fmt: skip
    """The warps' partial results through ``scratch``, this reduction's half of the kernel's
    reduce scratch (``reduce_scratch``): one barrier between the writes and the reads. The
    barrier of the reduction before orders the writes after the reads of the one before that
    (the same half); where that may not hold (each half read on some path since the last
    barrier) one comes first, and the last reduction of a block in a loop has one after its
    reads, before the next iteration writes the halves again."""
    eb = element_bytes(t)
    rest = [s for d, s in enumerate(dist.shape) if d != axis]
    count = math.prod(rest) if rest else 1
    groups = 1 << len(warp_bits)
    warp = warp_id(em)
    picks = [(i, n) for n, i in enumerate(warp_bits)]
    slot = em.invariant(("reduce-slot", tuple(warp_bits)), lambda: bits_value(em, warp, picks, source_bits(em, "warp")))
    base = thread_base(em, dist)
    rest_base = [b for d, b in enumerate(base) if d != axis]
    # the lanes holding the axis (and lanes holding copies) hold the same total now, bit for bit
    # (each butterfly step combines the same two values, in either order), at the same address:
    # all of them store it, one instruction, no lane test. Warps holding copies would be
    # separate stores to one address: only the first of them writes.
    dup_warps = sum(1 << i for i, b in enumerate(dist.warp) if b is None)
    writer = None
    if dup_warps:
        bits = em.instr(ptx.AndOp, "b32", [warp, em.const(dup_warps, i32)], i32)
        writer = em.instr(ptx.SetpOp, "eq.u32", [bits, em.const(0, i32)], i1)

    def address(k: tuple[int, ...], group: SSAValue | int) -> SSAValue:
        linear = em.const(0, i32)
        for d, size in enumerate(rest):
            linear = em.instr(ptx.MadOp, "lo.s32", [linear, em.const(size, i32), add32(em, rest_base[d], k[d])], i32)
        g = em.const(group, i32) if isinstance(group, int) else group
        linear = em.instr(ptx.MadOp, "lo.s32", [g, em.const(count, i32), linear], i32)
        return em.instr(ptx.MadOp, "lo.s32", [linear, em.const(eb, i32), scratch], i32)

    spec = mem_spec(t) if t != f32 else "f32"
    if place.barrier_first:
        em.barrier()
    for k, v in partial.items():
        em.emit(ptx.StOp(f"shared.{spec}", [address(k, slot), v], guard=writer))  # type: ignore[arg-type]
    em.barrier()
    result = {}
    for k in partial:
        total = None
        for g in range(groups):
            v = em.instr(ptx.LdOp, f"shared.{spec}", [address(k, g)], reg_type(t))
            total = v if total is None else combine(em, kind, total, v, t)  # type: ignore[arg-type]
        result[k] = total
    if place.barrier_after:
        em.barrier()
    return result  # type: ignore[return-value]
