"""``tile.convert_layout``, ``tile.broadcast``, ``tile.expand_dims`` and ``tile.trans`` -> PTX:
relabel registers, or move the tile through shared memory.

Each of these ops gives a tile's elements a new distribution over the threads. Where every
element stays in its thread, the result's registers are the input's, relabelled
(:func:`relabel`); broadcasts and ``expand_dims`` always are, a transpose or a conversion between
incompatible layouts goes through shared memory (:func:`through_shared`, element by element).

A conversion that keeps every element in its thread only renames registers. Otherwise every
thread writes its elements to a shared scratch tile and reads back the ones the new layout gives
it. For 2-D tiles of 16-bit elements this moves vectors: each thread writes the consecutive
elements it holds along a row (an mma accumulator's 4-byte pairs) and reads up to 16 bytes at
once (a row-blocked layout's 8 halves: ``ld.shared.v4.b32``), 16-bit pairs as packed
words all the way. The scratch rows are padded by 16 bytes: an address is then the thread's base
plus a compile-time offset per vector (no per-access swizzle arithmetic, no extra registers),
and the 8 rows of an accumulator fragment a warp writes at once, like the 128 bytes of a row a
quarter-warp reads, still fall in distinct banks. This is what ``tile-layout``'s staged stores
go through: mma tile -> shared -> 16-byte row vectors -> ``st.global.v4``.

The scratch reuses a shared buffer that is dead by then (``shared_reuse``: the K loop's operand
ring, in an epilogue), so the conversion costs the kernel no shared memory beyond what its loop
already needs. A map only the conversion uses (the fused epilogue) is computed pair by pair as
its words are written, as a store would, so the tile of results is never live at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import bf16, f16, i1, i16, i32
from xdsl.ir import SSAValue

from kaio.dialects import ptx, smem, tile
from kaio.dialects.tile_layout import Bit, Distribution
from kaio.errors import KaioCompileError
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter, element_bytes, mem_spec, reg_type
from kaio.passes.to_ptx.half_pairs import Lanes
from kaio.passes.to_ptx.shared_reuse import in_loop, reuse_or_declare, wait_for_async_accesses
from kaio.passes.to_ptx.tile_distribution import add32, distribution, owner_predicate, thread_base
from kaio.passes.to_ptx.tile_elementwise import STREAMING_USERS, tile_elements

VECTOR_TYPES = (f16, bf16)
"""Element types a conversion moves as vectors (pairs as 32-bit words). f32 tiles keep the
element-wise path: vectors gave ptxas no better code there (rope's interleaved f32 conversion
spilled 4 bytes with them)."""
FENCE_BYTES = 64
"""A streamed map that reads global memory has its shared writes fenced (``membar.cta``) every
this many bytes per thread: ptxas hoists no load above a fence. Without them it issues all of
the map's global reads (C, the bias) at once, up in the K loop's tail next to the live
accumulators, and spills (f16 out, bias and gelu, C read: sm_80 128x128x32 2x2 warps 255
registers and 32 bytes of spills, sm_90a 128x256x64 on a cp.async ring 344 bytes, f32 out
on TMA 1432 bytes; with them none). A fence is no ordering the code needs, and an expensive
one (``MEMBAR.SC.CTA`` waits for every outstanding access): a map that reads no global memory
(the plain product, a scale, an activation) has nothing to hoist and goes unfenced. An opaque
never-taken branch instead does not hold ptxas's loads back (sm_90a f32: 704 bytes of spills)."""


def fence_interval(em: PtxEmitter, value: SSAValue, eb: int) -> int:
    """Elements between the fences of ``value``'s shared writes (``eb``-byte elements): 0 (no
    fences) unless it is a streamed map reading global memory (:data:`FENCE_BYTES`)."""
    owner = value.owner
    if value not in em.deferred or not isinstance(owner, tile.MapOp):
        return 0
    reads = any(x in em.deferred and isinstance(x.owner, tile.LoadOp) for x in owner.inputs)
    return FENCE_BYTES // eb if reads else 0


def _vectors(src: Distribution, dst: Distribution, t: object) -> tuple[int, int] | None:
    """(elements per shared write, per shared read) of a vector conversion; None when the
    tile is not a 2-D tile of 16-bit elements with rows of whole 16-byte chunks, or when
    neither side holds two consecutive elements (then element by element is as good)."""
    if len(src.shape) != 2 or t not in VECTOR_TYPES or src.shape[1] * 2 % 16:
        return None
    write, read = min(src.contiguous(1), 8), min(dst.contiguous(1), 8)
    return (write, read) if max(write, read) >= 2 else None


def moves_vectors(em: PtxEmitter, op: tile.ConvertLayoutOp) -> bool:
    """Whether ``op`` goes through shared memory a vector at a time."""
    src, dst = distribution(em, op.input.type), distribution(em, op.result.type)
    if relabel(src, dst, list(range(len(dst.shape)))) is not None:
        return False
    return _vectors(src, dst, op.input.type.element_type) is not None  # type: ignore[attr-defined]


STREAMING_USERS[tile.ConvertLayoutOp] = moves_vectors  # type: ignore[assignment]


def scratch_buffer(shape: tuple[int, ...], t: object) -> smem.BufferType:
    """The shared tile a conversion goes through: rows padded by one 16-byte chunk."""
    return smem.BufferType(shape, t, smem.LayoutAttr("pad", 16 // element_bytes(t)))  # type: ignore[arg-type]


def _access_spec(t: object, vec: int) -> tuple[str, object, int]:
    """(st/ld spec, register type, registers) moving ``vec`` 16-bit elements: pairs as words,
    a lone element as itself."""
    if vec == 1:
        return "b16", reg_type(t), 1
    words = vec // 2
    return (f"v{words}.b32" if words > 1 else "b32"), i32, words


def _convert_by_vectors(em: PtxEmitter, op: tile.ConvertLayoutOp, src: Distribution, dst: Distribution) -> None:
    t = op.input.type.element_type  # type: ignore[attr-defined]
    eb = element_bytes(t)
    write, read = _vectors(src, dst, t)  # type: ignore[misc]
    buffer = scratch_buffer(src.shape, t)
    scratch, reused = reuse_or_declare(em, op, "relayout", buffer.total_bytes, buffer.layout.alignment())

    value = op.input
    element, pair = tile_elements(em, value)  # the epilogue's map: computed a pair at a time as it is written

    row_bytes = buffer.layout.row_bytes(src.shape[1], eb)

    def thread_start(dist: Distribution) -> SSAValue:
        base = thread_base(em, dist)
        offset = em.instr(ptx.MadOp, "lo.s32", [base[1], em.const(eb, i32), scratch], i32)
        return em.instr(ptx.MadOp, "lo.s32", [base[0], em.const(row_bytes, i32), offset], i32)

    def offset(off: tuple[int, ...]) -> int:
        return off[0] * row_bytes + off[1] * eb

    if reused:
        wait_for_async_accesses(em)
    em.barrier()  # the buffer's earlier readers are done
    start, owner = thread_start(src), owner_predicate(em, src)
    spec, _, _ = _access_spec(t, write)
    fence_every = fence_interval(em, value, eb)
    for r in range(0, src.registers, write):
        if fence_every and r % fence_every == 0:
            em.emit(ptx.MembarOp("cta"))
        data = [pair(r + i).packed(em) for i in range(0, write, 2)] if write >= 2 else [element(r)]
        em.emit(ptx.StOp(f"shared.{spec}", [start, *data], guard=owner, offset=offset(src.offsets[r])))
    em.barrier()

    start = thread_start(dst)
    spec, reg, count = _access_spec(t, read)
    out: list[SSAValue] = []
    for r in range(0, dst.registers, read):
        load = ptx.LdOp(f"shared.{spec}", [start], [reg] * count, offset=offset(dst.offsets[r]))  # type: ignore[list-item]
        em.emit(load)
        if read >= 2:
            for k, word in enumerate(load.outs):
                em.packed[(op.result, r + 2 * k)] = word
                out += Lanes(t, word=word).scalars(em)
        else:
            out += list(load.outs)
    if in_loop(op.parent_block()):  # type: ignore[arg-type]  # the next iteration writes the scratch (or the buffer it reuses) again
        em.barrier()
    em.bind(op.result, out)


@lowering(tile.ConvertLayoutOp)
def lower_convert(em: PtxEmitter, op: tile.ConvertLayoutOp) -> None:
    src, dst = distribution(em, op.input.type), distribution(em, op.result.type)
    regs = relabel(src, dst, list(range(len(dst.shape))))
    if regs is not None:
        bind_relabelled(em, op.input, op.result, regs)
        return
    if _vectors(src, dst, op.input.type.element_type) is not None:  # type: ignore[attr-defined]
        _convert_by_vectors(em, op, src, dst)
        return
    em.bind(op.result, through_shared(em, op.input, dst, transpose=False))


# --------------------------------------------------------------------------- relabelling


def relabel(src: Distribution, dst: Distribution, dim_map: Sequence[int | None]) -> list[int] | None:
    """For each register of ``dst``, the register of ``src`` holding its element, when the
    change keeps every element in its thread (``dim_map[d]``: the src dim of dst dim d, None
    for a dim that src broadcasts); None when data must move between threads."""

    def src_bit(b: Bit) -> Bit:
        if b is None:
            return None
        d = dim_map[b[0]]
        return None if d is None else (d, b[1])

    if len(src.lane) != len(dst.lane) or len(src.warp) != len(dst.warp):
        return None
    for sb, db in zip(src.thread_bits(), dst.thread_bits(), strict=True):
        if src_bit(db) != sb:
            return None
    result = []
    for off in dst.offsets:
        coord = [0] * len(src.shape)
        for d, v in enumerate(off):
            if dim_map[d] is not None:
                coord[dim_map[d]] = v  # type: ignore[index]
        r = src.register_of.get(tuple(coord))
        if r is None:
            return None
        result.append(r)
    return result


def _relabel_or_fail(em: PtxEmitter, op_name: str, src_v: SSAValue, dst_v: SSAValue, dim_map: Sequence[int | None]) -> None:
    src, dst = distribution(em, src_v.type), distribution(em, dst_v.type)
    regs = relabel(src, dst, dim_map)
    if regs is None:
        raise KaioCompileError(f"internal: {op_name} from {src_v.type} to {dst_v.type} moves data between threads")
    bind_relabelled(em, src_v, dst_v, regs)


def bind_relabelled(em: PtxEmitter, src_v: SSAValue, dst_v: SSAValue, regs: Sequence[int]) -> None:
    """``dst_v``'s registers are ``src_v``'s ``regs``; packed pairs that stay pairs stay packed."""
    parts = em.parts(src_v)
    em.bind(dst_v, [parts[r] for r in regs])
    for r in range(0, len(regs) - 1, 2):
        if regs[r] % 2 == 0 and regs[r + 1] == regs[r] + 1 and (src_v, regs[r]) in em.packed:
            em.packed[(dst_v, r)] = em.packed[(src_v, regs[r])]


@lowering(tile.BroadcastOp)
def lower_broadcast(em: PtxEmitter, op: tile.BroadcastOp) -> None:
    a, r = tile.shape_of(op.input.type), tile.shape_of(op.result.type)
    _relabel_or_fail(em, "broadcast", op.input, op.result, [d if a[d] == r[d] else None for d in range(len(r))])


@lowering(tile.ExpandDimsOp)
def lower_expand_dims(em: PtxEmitter, op: tile.ExpandDimsOp) -> None:
    axis = op.axis.value.data
    rank = len(tile.shape_of(op.result.type))
    _relabel_or_fail(em, "expand_dims", op.input, op.result, [None if d == axis else d - (d > axis) for d in range(rank)])


@lowering(tile.TransOp)
def lower_trans(em: PtxEmitter, op: tile.TransOp) -> None:
    src, dst = distribution(em, op.input.type), distribution(em, op.result.type)
    regs = relabel(src, dst, [1, 0])
    if regs is None:
        em.bind(op.result, through_shared(em, op.input, dst, transpose=True))
        return
    bind_relabelled(em, op.input, op.result, regs)


def through_shared(em: PtxEmitter, value: SSAValue, dst: Distribution, transpose: bool) -> list[SSAValue]:
    """Every thread writes its elements to a shared scratch tile, then reads the ones ``dst``
    gives it (bracketed by barriers, so the scratch can be reused)."""
    src = distribution(em, value.type)
    t = value.type.element_type  # type: ignore[attr-defined]
    eb = element_bytes(t)
    rows = src.shape
    scratch = em.shared("relayout", max(math.prod(rows) * eb, 4), 16)

    def address(coord: Sequence[SSAValue]) -> SSAValue:
        linear = coord[0]
        for d in range(1, len(coord)):
            linear = em.instr(ptx.MadOp, "lo.s32", [linear, em.const(rows[d], i32), coord[d]], i32)
        return em.instr(ptx.MadOp, "lo.s32", [linear, em.const(eb, i32), scratch], i32)

    em.barrier()
    base, owner, parts = thread_base(em, src), owner_predicate(em, src), em.parts(value)
    for r, off in enumerate(src.offsets):
        coord = [add32(em, base[d], off[d]) for d in range(len(off))]
        v = parts[r]
        if t == i1:  # predicates have no memory form: store them as bytes
            v = em.instr(ptx.SelpOp, "b16", [em.const(1, i16), em.const(0, i16), v], i16)
        em.emit(ptx.StOp(f"shared.{mem_spec(t)}", [address(coord), v], guard=owner))
    em.barrier()
    base = thread_base(em, dst)
    out = []
    for off in dst.offsets:
        coord = [add32(em, base[d], off[d]) for d in range(len(off))]
        if transpose:
            coord = coord[::-1]
        if t == i1:
            byte = em.instr(ptx.LdOp, "shared.u8", [address(coord)], i16)
            out.append(em.instr(ptx.SetpOp, "ne.u16", [byte, em.const(0, i16)], i1))
        else:
            out.append(em.instr(ptx.LdOp, f"shared.{mem_spec(t)}", [address(coord)], reg_type(t)))
    em.barrier()
    return out
