"""``smem`` and ``cpasync`` -> PTX: shared buffers, tile copies into them, registers -> shared.

Shared buffers are ``.shared`` arrays addressed by the smem layout function (the XOR swizzle is
three integer ops). Tile copies are spread over all threads of the block, ``vec`` elements (up
to 16 bytes) per access; ``cpasync.copy`` issues ``cp.async`` with a source size of zero past
the view's bounds (hardware zero-fill), ``smem.copy`` loads and stores synchronously.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from xdsl.dialects.builtin import i1, i16, i32, i64
from xdsl.ir import SSAValue

from kaio.dialects import cpasync, ptx, smem, tile
from kaio.dialects import stage_attrs
from kaio.dialects.tile_layout import Distribution
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter, element_bytes, mem_spec
from kaio.passes.to_ptx.kernel_ops import linear_thread_id
from kaio.passes.value_facts import divisibility
from kaio.passes.to_ptx.relayout import fence_interval
from kaio.passes.to_ptx.shared_reuse import reuse_or_declare, wait_for_async_accesses
from kaio.passes.to_ptx.tile_distribution import add32, distribution, owner_predicate, thread_base
from kaio.passes.to_ptx.tile_elementwise import STREAMING_USERS, tile_elements
from kaio.passes.to_ptx.tile_views import extent, inside, require_alignment, view_of

# --------------------------------------------------------------------------- shared buffers


@lowering(smem.AllocOp)
def lower_alloc(em: PtxEmitter, op: smem.AllocOp) -> None:
    """A ``.shared`` buffer; one marked ``kaio.reuse_dead`` (an epilogue's scratch, allocated
    where it is first needed) takes the bytes of buffers dead by then, once their asynchronous
    accesses are done (``shared_reuse``)."""
    buffer = op.result.type
    nbytes, align = buffer.total_bytes, buffer.layout.alignment()
    if stage_attrs.REUSE_DEAD_ATTR not in op.attributes:
        em.bind(op.result, em.shared(op.sym_name.data, nbytes, align))
        return
    address, reused = reuse_or_declare(em, op, op.sym_name.data, nbytes, align)
    if reused:
        wait_for_async_accesses(em)
    em.bind(op.result, address)


@lowering(smem.AddressOp)
def lower_address(em: PtxEmitter, op: smem.AddressOp) -> None:
    em.bind(op.result, em.value(op.buffer))


@lowering(smem.StageOp)
def lower_stage(em: PtxEmitter, op: smem.StageOp) -> None:
    ring = op.ring.type
    base, index = em.value(op.ring), em.value(op.index)
    em.bind(op.result, em.instr(ptx.MadOp, "lo.s32", [index, em.const(ring.stage_bytes, i32), base], i32))


def shared_offset(em: PtxEmitter, buffer: smem.BufferType, row: SSAValue, col: SSAValue) -> SSAValue:
    """Byte offset of (row, col) in one stage of ``buffer``, as the layout defines it."""
    layout = buffer.layout
    rows, cols = buffer.tile
    eb = buffer.elem_bytes
    if layout.kind.data == "wgmma":
        return _panel_offset(em, buffer, row, col)
    rb = layout.row_bytes(cols, eb)
    col_bytes = em.instr(ptx.MulOp, "lo.s32", [col, em.const(eb, i32)], i32)
    off = em.instr(ptx.MadOp, "lo.s32", [row, em.const(rb, i32), col_bytes], i32)
    if layout.kind.data != "swizzle":
        return off
    shift = int(math.log2(layout.swizzle_period(rb)))
    pattern = em.instr(ptx.ShrOp, "u32", [row, em.const(shift, i32)], i32) if shift else row
    pattern = em.instr(ptx.AndOp, "b32", [pattern, em.const(7, i32)], i32)
    pattern = em.instr(ptx.ShlOp, "b32", [pattern, em.const(4, i32)], i32)
    return em.instr(ptx.XorOp, "b32", [off, pattern], i32)


def _panel_offset(em: PtxEmitter, buffer: smem.BufferType, row: SSAValue, col: SSAValue) -> SSAValue:
    """The wgmma layout: panel (col bytes / S) * panel bytes + row * S + col bytes % S, then
    chunk bits 4.. XOR bits 7.. (S = the panel span, a power of two)."""
    rows, cols = buffer.tile
    eb = buffer.elem_bytes
    span = buffer.layout.panel_span(cols, eb)
    col_bytes = em.instr(ptx.MulOp, "lo.s32", [col, em.const(eb, i32)], i32)
    off = em.instr(ptx.MadOp, "lo.s32", [row, em.const(span, i32), col_bytes], i32)
    if cols * eb > span:  # more than one panel: move whole panels of rows * S bytes
        shift = int(math.log2(span))
        panel = em.instr(ptx.ShrOp, "u32", [col_bytes, em.const(shift, i32)], i32)
        within = em.instr(ptx.AndOp, "b32", [col_bytes, em.const(span - 1, i32)], i32)
        off = em.instr(ptx.MadOp, "lo.s32", [row, em.const(span, i32), within], i32)
        off = em.instr(ptx.MadOp, "lo.s32", [panel, em.const(rows * span, i32), off], i32)
    pattern = em.instr(ptx.ShrOp, "u32", [off, em.const(3, i32)], i32)
    pattern = em.instr(ptx.AndOp, "b32", [pattern, em.const((span // 16 - 1) << 4, i32)], i32)
    return em.instr(ptx.XorOp, "b32", [off, pattern], i32)


# --------------------------------------------------------------------------- tile copies

_VECTOR_LOADS = {16: ("v4.b32", i32, 4), 8: ("v2.b32", i32, 2), 4: ("b32", i32, 1), 2: ("b16", i16, 1), 1: ("b8", i16, 1)}


def global_address(em: PtxEmitter, view: tile.ViewOp, row: SSAValue, col: SSAValue) -> SSAValue:
    """64-bit address of element (row, col) of the 2-D array a view looks into."""
    eb = element_bytes(view.result.type.element_type)
    addr = em.value(view.array)
    for index, stride in ((row, view.strides[0]), (col, view.strides[1])):
        s = em.value(stride)
        scaled = em.hoisted(("bytes", s, eb), [s], lambda s=s: em.instr(ptx.MulOp, "lo.s32", [s, em.const(eb, i32)], i32))
        addr = em.instr(ptx.MadOp, "wide.s32", [index, scaled, addr], i64)  # an index may be negative
    return addr


def in_bounds(em: PtxEmitter, view: tile.ViewOp, row: SSAValue, col: SSAValue) -> SSAValue:
    """Whether (row, col) is inside the view: ``0 <= row < rows`` and ``0 <= col < cols``."""
    row_ok = inside(em, row, extent(em, view.bounds[0]))
    col_ok = inside(em, col, extent(em, view.bounds[1]))
    return em.instr(ptx.AndOp, "pred", [row_ok, col_ok], i1)


def _lower_tile_copy(em: PtxEmitter, op: smem.TileCopy, asynchronous: bool) -> None:
    view = view_of(op.src)
    buffer = op.dst.type
    assert isinstance(buffer, smem.BufferType)
    rows, cols = buffer.tile
    vec = op.vec.value.data
    nbytes = vec * buffer.elem_bytes
    require_alignment(em, view.array, nbytes)  # promote-to-shared sized vec by the proven alignment
    if nbytes < 4:  # cp.async moves 4, 8 or 16 bytes; narrower copies go synchronously
        asynchronous = False
    threads = math.prod(em.block_shape)
    ragged = divisibility(view.bounds[1]) < vec
    per_row = cols // vec
    total = rows * per_row
    tid = linear_thread_id(em)
    dst = em.value(op.dst)
    row0, col0 = em.value(view.offsets[0]), em.value(view.offsets[1])
    first_pass: _Access | None = None
    for first in range(0, total, threads):
        q = add32(em, tid, first) if first else tid
        active = em.instr(ptx.SetpOp, "lt.u32", [q, em.const(total, i32)], i1) if first + threads > total else None
        if first_pass is not None and first % per_row == 0:
            access = first_pass.rows_further(em, view, buffer, first // per_row, vec)
        else:
            r = em.instr(ptx.DivOp, "u32", [q, em.const(per_row, i32)], i32)
            c = em.instr(ptx.MulOp, "lo.s32", [em.instr(ptx.RemOp, "u32", [q, em.const(per_row, i32)], i32), em.const(vec, i32)], i32)
            grow, gcol = add32(em, row0, r), add32(em, col0, c)
            access = _Access(r, c, grow, gcol, global_address(em, view, grow, gcol), dst, shared_offset(em, buffer, r, c), 0)
            first_pass = access if first == 0 else first_pass
        grow, gcol, gaddr = access.grow, access.gcol, access.gaddr
        ok = in_bounds(em, view, grow, gcol)
        saddr, soff = access.shared_address(em)
        if asynchronous:
            if ragged:  # the vector may straddle the bound: read what is inside, zero-fill the rest
                # (``ok`` tests its first element: the offset is a multiple of vec, so no vector
                # starts before column 0 and reaches past it)
                left = em.instr(ptx.SubOp, "s32", [extent(em, view.bounds[1]), gcol], i32)
                left = em.instr(ptx.MinOp, "s32", [left, em.const(vec, i32)], i32)
                size = em.instr(ptx.MulOp, "lo.s32", [left, em.const(buffer.elem_bytes, i32)], i32)
                size = em.instr(ptx.SelpOp, "b32", [size, em.const(0, i32), ok], i32)
            else:
                size = em.instr(ptx.SelpOp, "b32", [em.const(nbytes, i32), em.const(0, i32), ok], i32)
            # a source size of 0 reads nothing (the bytes are zero-filled): the address of a
            # thread outside the view is never dereferenced and needs no safe substitute
            kind = "cg" if nbytes == 16 else "ca"
            saddr = add32(em, saddr, soff)  # cp.async's operands take no displacement: ptxas folds it
            em.emit(ptx.CpAsyncOp(f"{kind}.shared.global", [saddr, gaddr, em.const(nbytes, i32), size], guard=active))
        elif ragged:  # element by element
            eb = buffer.elem_bytes
            for e in range(vec):
                ok_e = in_bounds(em, view, grow, add32(em, gcol, e)) if e else ok
                addr = em.instr(ptx.AddOp, "s64", [gaddr, em.const(e * eb, i64)], i64) if e else gaddr
                _sync_copy(em, addr, saddr, soff + e * eb, ok_e, active, eb)
        else:
            _sync_copy(em, gaddr, saddr, soff, ok, active, nbytes)


@dataclass
class _Access:
    """Where one pass of a tile copy reads and writes: the thread's (row, col) in the tile, in the
    array (``grow``, ``gcol``) and its global address, and its shared address as a base plus an
    offset (``shared``) and an immediate (``soff``)."""

    r: SSAValue
    c: SSAValue
    grow: SSAValue
    gcol: SSAValue
    gaddr: SSAValue
    base: SSAValue
    shared: SSAValue
    soff: int
    _address: SSAValue | None = None

    def shared_address(self, em: PtxEmitter) -> tuple[SSAValue, int]:
        if self._address is None:
            self._address = em.instr(ptx.AddOp, "s32", [self.base, self.shared], i32)
        return self._address, self.soff

    def rows_further(self, em: PtxEmitter, view: tile.ViewOp, buffer: smem.BufferType, d: int, vec: int) -> _Access:
        """The same thread's access ``d`` tile rows further on (a later pass of the copy, when the
        block's threads cover whole rows): the column stays, the global address moves by ``d``
        rows of the array, and the shared offset by a constant where the layout is a
        translation in rows (every layout, for a row step that keeps the XOR swizzle's phase)."""
        grow = add32(em, self.grow, d)
        stride = em.value(view.strides[0])
        eb = element_bytes(view.result.type.element_type)
        step = em.hoisted(
            ("row step", stride, eb * d), [stride],
            lambda: em.instr(ptx.MulOp, "wide.s32", [stride, em.const(eb * d, i32)], i64),
        )  # fmt: skip
        gaddr = em.instr(ptx.AddOp, "s64", [self.gaddr, step], i64)
        delta = row_translation(buffer, d, vec)
        r = add32(em, self.r, d)
        if delta is not None:
            return _Access(r, self.c, grow, self.gcol, gaddr, self.base, self.shared, self.soff + delta, self._address)
        return _Access(r, self.c, grow, self.gcol, gaddr, self.base, shared_offset(em, buffer, r, self.c), 0)


@lru_cache(maxsize=256)
def row_translation(buffer: smem.BufferType, d: int, vec: int) -> int | None:
    """The constant byte distance between element (r + d, c) and (r, c) of ``buffer``'s layout,
    the same for every r and every column c a multiple of ``vec``, else None (a swizzle whose phase ``d`` rows shift)."""
    rows, cols = buffer.tile
    layout, eb = buffer.layout, buffer.elem_bytes
    delta = layout.offset(d, 0, cols, eb, rows) - layout.offset(0, 0, cols, eb, rows)
    for r in range(rows - d):
        for c in range(0, cols, vec):
            if layout.offset(r + d, c, cols, eb, rows) - layout.offset(r, c, cols, eb, rows) != delta:
                return None
    return delta


def _sync_copy(em: PtxEmitter, gaddr: SSAValue, saddr: SSAValue, soff: int, ok: SSAValue,
               active: SSAValue | None, nbytes: int) -> None:  # fmt: skip
    spec, reg, count = _VECTOR_LOADS[nbytes]
    done, zero = em.label("copied"), em.label("zero_fill")
    if active is not None:
        em.branch(done, active, negate=True)
    em.branch(zero, ok, negate=True)
    load = ptx.LdOp(f"global.{spec}", [gaddr], [reg] * count)
    em.emit(load)
    em.emit(ptx.StOp(f"shared.{spec}", [saddr, *load.outs], offset=soff))
    em.branch(done)
    em.place_label(zero)
    em.emit(ptx.StOp(f"shared.{spec}", [saddr, *[em.const(0, reg)] * count], offset=soff))
    em.place_label(done)


@lowering(smem.CopyOp)
def lower_sync_copy(em: PtxEmitter, op: smem.CopyOp) -> None:
    _lower_tile_copy(em, op, asynchronous=False)


@lowering(cpasync.CopyOp)
def lower_async_copy(em: PtxEmitter, op: cpasync.CopyOp) -> None:
    _lower_tile_copy(em, op, asynchronous=True)


@lowering(cpasync.CommitOp)
def lower_commit(em: PtxEmitter, op: cpasync.CommitOp) -> None:
    em.emit(ptx.CpAsyncCommitOp(""))


@lowering(cpasync.WaitOp)
def lower_wait(em: PtxEmitter, op: cpasync.WaitOp) -> None:
    em.emit(ptx.CpAsyncWaitGroupOp("", [em.const(op.pending.value.data, i32)]))


# --------------------------------------------------------------------------- registers -> shared


def _bit_linear(buffer: smem.BufferType) -> bool:
    """Whether the layout's offset is linear over the bits of (row, col): an XOR swizzle of
    bit fields (power-of-two tiles)."""
    rows, cols = buffer.tile
    return buffer.layout.kind.data in ("swizzle", "wgmma") and not (rows & (rows - 1) or cols & (cols - 1))


def register_addresses(em: PtxEmitter, buffer: smem.BufferType, dist: Distribution, dst: SSAValue) -> Callable[[int], tuple[SSAValue, int]]:
    """(address, immediate) of each register's element of a ``dist`` tile in ``buffer`` at ``dst``.

    The thread's part of the offset is computed once and each register's constant part folded
    in where the layout allows. Pad and plain layouts add: the register's offset is an
    immediate. The XOR swizzles of power-of-two tiles are linear over bits, and a thread's
    coordinate bits and a register's are disjoint (each bit has one owner), so offset(thread
    | reg) = offset(thread) ^ offset(reg): the register's bits no thread offset can have are an
    immediate, the others one xor per distinct value (the few swizzled chunk indices)."""
    rows, cols = buffer.tile
    eb, layout = buffer.elem_bytes, buffer.layout
    base = thread_base(em, dist)

    def constant(coord: tuple[int, ...]) -> int:
        return layout.offset(coord[0], coord[1], cols, eb, rows)

    if layout.kind.data in ("none", "pad"):
        start = em.instr(ptx.AddOp, "s32", [dst, shared_offset(em, buffer, base[0], base[1])], i32)
        return lambda r: (start, constant(dist.offsets[r]))
    if not _bit_linear(buffer):

        def element_address(r: int) -> tuple[SSAValue, int]:
            row, col = (add32(em, base[d], dist.offsets[r][d]) for d in range(2))
            return em.instr(ptx.AddOp, "s32", [dst, shared_offset(em, buffer, row, col)], i32), 0

        return element_address
    thread = shared_offset(em, buffer, base[0], base[1])
    reachable = 0  # every bit some thread's offset can have
    for bit in dist.thread_bits():
        if bit is not None:
            reachable |= constant(tuple(1 << bit[1] if d == bit[0] else 0 for d in range(2)))
    starts: dict[int, SSAValue] = {}

    def swizzled_address(r: int) -> tuple[SSAValue, int]:
        c = constant(dist.offsets[r])
        mixed = c & reachable
        if mixed not in starts:
            offset = em.instr(ptx.XorOp, "b32", [thread, em.const(mixed, i32)], i32) if mixed else thread
            starts[mixed] = em.instr(ptx.AddOp, "s32", [dst, offset], i32)
        return starts[mixed], c & ~reachable

    return swizzled_address


@lowering(smem.StoreOp)
def lower_smem_store(em: PtxEmitter, op: smem.StoreOp) -> None:
    """Each thread writes the elements it holds (one copy of each) at the layout's offsets, two
    at a time where it holds a row's consecutive pairs (16-bit pairs as packed words, 32-bit
    ones as ``v2``). A map only this store uses is computed as it is written (an epilogue:
    the whole tile of results is never live), fenced as ``relayout``'s writes are (only a map
    that reads global memory)."""
    buffer = op.dst.type
    assert isinstance(buffer, smem.BufferType)
    dist = distribution(em, op.value.type)
    t = buffer.element_type
    eb = element_bytes(t)
    vec = 2 if dist.contiguous(1) >= 2 and eb in (2, 4) else 1
    owner, address = owner_predicate(em, dist), register_addresses(em, buffer, dist, em.value(op.dst))
    element, pair = tile_elements(em, op.value)
    fence_every = fence_interval(em, op.value, eb)
    for r in range(0, dist.registers, vec):
        if fence_every and r % fence_every == 0:
            em.emit(ptx.MembarOp("cta"))
        if vec == 1:
            spec, data = mem_spec(t), [element(r)]
        elif eb == 2:
            spec, data = "b32", [pair(r).packed(em)]
        else:
            spec, data = f"v2.{mem_spec(t)}", [element(r), element(r + 1)]
        addr, imm = address(r)
        em.emit(ptx.StOp(f"shared.{spec}", [addr, *data], guard=owner, offset=imm))


STREAMING_USERS[smem.StoreOp] = lambda em, op: True
