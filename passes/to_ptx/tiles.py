"""``tile``, ``smem`` and ``cpasync`` -> PTX.

Tile views are descriptions: their users read the view op's operands. Shared buffers are
``.shared`` arrays addressed by the smem layout function (the XOR swizzle is three integer ops).
Tile copies are spread over all threads of the block, ``vec`` elements (up to 16 bytes) per
access; ``cpasync.copy`` issues ``cp.async`` with a source size of zero past the matrix edge
(hardware zero-fill), ``smem.copy`` loads and stores synchronously.

Without ``lower-to-mma-sync``, a warp's accumulator tile is spread over its lanes in a SIMT
layout: lane L owns rows L/8 + 4i and columns L%8 + 8j, and ``tile.mma`` is plain FMAs.
"""

from __future__ import annotations

import math

from xdsl.dialects.builtin import bf16, f16, f32, i1, i16, i32, i64
from xdsl.ir import Attribute, SSAValue

from kaio.dialects import cpasync, ptx, smem, tile
from kaio.errors import KaioCompileError
from kaio.passes.to_ptx import lowering, register_parts
from kaio.passes.to_ptx.emitter import PtxEmitter, element_bytes, float_spec, mem_spec
from kaio.passes.to_ptx.kernel_ops import linear_thread_id

# --------------------------------------------------------------------------- shared buffers


@lowering(tile.ViewOp)
def lower_view(em: PtxEmitter, op: tile.ViewOp) -> None:
    """Nothing to emit: copies and stores read the view's operands directly."""


def view_of(value: SSAValue) -> tile.ViewOp:
    owner = value.owner
    if not isinstance(owner, tile.ViewOp):
        raise KaioCompileError("tile operands must come straight from a tile.view")
    return owner


@lowering(smem.AllocOp)
def lower_alloc(em: PtxEmitter, op: smem.AllocOp) -> None:
    buffer = op.result.type
    em.bind(op.result, em.shared(op.sym_name.data, buffer.total_bytes, 128))


@lowering(smem.StageOp)
def lower_stage(em: PtxEmitter, op: smem.StageOp) -> None:
    ring = op.ring.type
    base, index = em.value(op.ring), em.value(op.index)
    em.bind(op.result, em.instr(ptx.MadOp, "lo.s32", [index, em.const(ring.stage_bytes, i32), base], i32))


def add32(em: PtxEmitter, a: SSAValue, b: SSAValue | int) -> SSAValue:
    other = em.const(b, i32) if isinstance(b, int) else b
    return em.instr(ptx.AddOp, "s32", [a, other], i32)


def shared_offset(em: PtxEmitter, buffer: smem.BufferType, row: SSAValue, col: SSAValue) -> SSAValue:
    """Byte offset of (row, col) in one stage of ``buffer``, as the layout defines it."""
    layout = buffer.layout
    rows, cols = buffer.tile
    eb = buffer.elem_bytes
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


# --------------------------------------------------------------------------- tile copies

_VECTOR_LOADS = {16: ("v4.b32", i32, 4), 8: ("v2.b32", i32, 2), 4: ("b32", i32, 1), 2: ("b16", i16, 1)}


def global_address(em: PtxEmitter, view: tile.ViewOp, row: SSAValue, col: SSAValue) -> SSAValue:
    """64-bit address of element (row, col) of the matrix a view looks into."""
    eb = element_bytes(view.result.type.element_type)
    base = em.value(view.array)
    ld = em.value(view.ld)
    ld_bytes = em.hoisted(("bytes", ld, eb), [ld], lambda: em.instr(ptx.MulOp, "lo.s32", [ld, em.const(eb, i32)], i32))
    row_off = em.instr(ptx.MulOp, "wide.u32", [row, ld_bytes], i64)
    col_off = em.instr(ptx.MulOp, "wide.u32", [col, em.const(eb, i32)], i64)
    return em.instr(ptx.AddOp, "s64", [em.instr(ptx.AddOp, "s64", [base, row_off], i64), col_off], i64)


def in_bounds(em: PtxEmitter, view: tile.ViewOp, row: SSAValue, col: SSAValue) -> SSAValue:
    row_ok = em.instr(ptx.SetpOp, "lt.u32", [row, em.value(view.rows)], i1)
    col_ok = em.instr(ptx.SetpOp, "lt.u32", [col, em.value(view.cols)], i1)
    return em.instr(ptx.AndOp, "pred", [row_ok, col_ok], i1)


def _lower_tile_copy(em: PtxEmitter, op: smem.TileCopy, asynchronous: bool) -> None:
    view = view_of(op.src)
    buffer = op.dst.type
    assert isinstance(buffer, smem.BufferType)
    rows, cols = buffer.tile
    vec = op.vec.value.data
    nbytes = vec * buffer.elem_bytes
    if nbytes < 4:  # cp.async moves 4, 8 or 16 bytes; narrower copies go synchronously
        asynchronous = False
    threads = math.prod(em.block_shape)
    per_row = cols // vec
    total = rows * per_row
    tid = linear_thread_id(em)
    dst = em.value(op.dst)
    row0, col0 = em.value(view.row), em.value(view.col)
    for first in range(0, total, threads):
        q = add32(em, tid, first) if first else tid
        r = em.instr(ptx.DivOp, "u32", [q, em.const(per_row, i32)], i32)
        c = em.instr(ptx.MulOp, "lo.s32", [em.instr(ptx.RemOp, "u32", [q, em.const(per_row, i32)], i32), em.const(vec, i32)], i32)
        grow, gcol = add32(em, row0, r), add32(em, col0, c)
        inside = in_bounds(em, view, grow, gcol)
        active = em.instr(ptx.SetpOp, "lt.u32", [q, em.const(total, i32)], i1) if first + threads > total else None
        gaddr = global_address(em, view, grow, gcol)
        saddr = em.instr(ptx.AddOp, "s32", [dst, shared_offset(em, buffer, r, c)], i32)
        if asynchronous:
            size = em.instr(ptx.SelpOp, "b32", [em.const(nbytes, i32), em.const(0, i32), inside], i32)
            safe = em.instr(ptx.SelpOp, "b64", [gaddr, em.value(view.array), inside], i64)
            kind = "cg" if nbytes == 16 else "ca"
            em.emit(ptx.CpAsyncOp(f"{kind}.shared.global", [saddr, safe, em.const(nbytes, i32), size], guard=active))
        else:
            _sync_copy(em, gaddr, saddr, inside, active, nbytes)


def _sync_copy(em: PtxEmitter, gaddr: SSAValue, saddr: SSAValue, inside: SSAValue,
               active: SSAValue | None, nbytes: int) -> None:  # fmt: skip
    spec, reg, count = _VECTOR_LOADS[nbytes]
    done, zero = em.label("copied"), em.label("zero_fill")
    if active is not None:
        em.branch(done, active, negate=True)
    em.branch(zero, inside, negate=True)
    load = ptx.LdOp(f"global.{spec}", [gaddr], [reg] * count)
    em.emit(load)
    em.emit(ptx.StOp(f"shared.{spec}", [saddr, *load.outs]))
    em.branch(done)
    em.place_label(zero)
    em.emit(ptx.StOp(f"shared.{spec}", [saddr, *[em.const(0, reg)] * count]))
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


# --------------------------------------------------------------------------- C epilogue


def to_f32(em: PtxEmitter, v: SSAValue) -> SSAValue:
    if v.type == f32:
        return v
    if v.type == bf16:
        return em.instr(ptx.MovOp, "b32", [em.const(0, bf16), v], f32)
    return em.instr(ptx.CvtOp, f"f32.{float_spec(v.type)}", [v], f32)


def from_f32(em: PtxEmitter, v: SSAValue, t: Attribute) -> SSAValue:
    return v if t == f32 else em.instr(ptx.CvtOp, f"rn.{float_spec(t)}.f32", [v], t)


def epilogue_values(
    em: PtxEmitter, view: tile.ViewOp, alpha: SSAValue, beta: SSAValue,
    addr: SSAValue, accs: list[SSAValue], oks: list[SSAValue], vector: bool,
) -> list[SSAValue]:  # fmt: skip
    """alpha * acc + beta * C for consecutive elements of C at ``addr`` (C is read only where
    beta != 0 and the element is inside C)."""
    t = view.result.type.element_type
    eb = element_bytes(t)
    scaled = [em.instr(ptx.MulOp, "f32", [alpha, a], f32) for a in accs]
    reads_c = em.hoisted(("reads_c", beta), [beta], lambda: em.instr(ptx.SetpOp, "neu.f32", [beta, em.const(0.0, f32)], i1))
    load_oks = [em.instr(ptx.AndOp, "pred", [reads_c, ok], i1) for ok in oks]
    if vector and len(accs) == 2 and t == f32:
        load = ptx.LdOp("global.v2.f32", [addr], [f32, f32], guard=load_oks[0])
        em.emit(load)
        old = list(load.outs)
    else:
        old = []
        for i, ok in enumerate(load_oks):
            load = ptx.LdOp(f"global.{mem_spec(t)}", [addr], [t], guard=ok, offset=i * eb)
            em.emit(load)
            old.append(to_f32(em, load.outs[0]))
    zero = em.const(0.0, f32)
    old = [em.instr(ptx.SelpOp, "f32", [o, zero, ok], f32) for o, ok in zip(old, load_oks)]
    return [em.instr(ptx.FmaOp, "rn.f32", [beta, o, s], f32) for o, s in zip(old, scaled)]


def store_pair(em: PtxEmitter, view: tile.ViewOp, addr: SSAValue, values: list[SSAValue],
               oks: list[SSAValue], vector: bool) -> None:  # fmt: skip
    """Store consecutive elements of C (as one vector store when C's rows allow it)."""
    t = view.result.type.element_type
    eb = element_bytes(t)
    out = [from_f32(em, v, t) for v in values]
    if vector and len(out) == 2:
        if t == f32:
            em.emit(ptx.StOp("global.v2.f32", [addr, *out], guard=oks[0]))
        else:
            packed = em.instr(ptx.MovOp, "b32", out, i32)
            em.emit(ptx.StOp("global.b32", [addr, packed], guard=oks[0]))
        return
    for i, (v, ok) in enumerate(zip(out, oks)):
        em.emit(ptx.StOp(f"global.{mem_spec(t)}", [addr, v], guard=ok, offset=i * eb))


# --------------------------------------------------------------------------- SIMT warp tiles


@register_parts(tile.AccType)
def simt_parts(t: Attribute) -> list[Attribute]:
    rows, cols = t.dims  # type: ignore[attr-defined]
    if rows % 4 or cols % 8:
        raise KaioCompileError(f"a SIMT warp tile must be a multiple of 4x8, got {rows}x{cols}")
    return [f32] * (rows * cols // 32)


def _simt_lane(em: PtxEmitter) -> tuple[SSAValue, SSAValue]:
    lane = em.special("laneid")
    return (
        em.instr(ptx.ShrOp, "u32", [lane, em.const(3, i32)], i32),
        em.instr(ptx.AndOp, "b32", [lane, em.const(7, i32)], i32),
    )


@lowering(tile.ZeroOp)
def lower_zero(em: PtxEmitter, op: tile.ZeroOp) -> None:
    em.bind(op.result, [em.const(0.0, f32)] * len(simt_parts(op.result.type)))


def _load_element(em: PtxEmitter, source: SSAValue, row: SSAValue, col: SSAValue) -> SSAValue:
    """Element (row, col) of a CTA tile (shared buffer or global view), as f32."""
    if isinstance(source.type, smem.BufferType):
        addr = em.instr(ptx.AddOp, "s32", [em.value(source), shared_offset(em, source.type, row, col)], i32)
        t = source.type.element_type
        return to_f32(em, em.instr(ptx.LdOp, f"shared.{mem_spec(t)}", [addr], t))
    view = view_of(source)
    t = view.result.type.element_type
    grow, gcol = add32(em, em.value(view.row), row), add32(em, em.value(view.col), col)
    ok = in_bounds(em, view, grow, gcol)
    safe = em.instr(ptx.SelpOp, "b64", [global_address(em, view, grow, gcol), em.value(view.array), ok], i64)
    value = to_f32(em, em.instr(ptx.LdOp, f"global.{mem_spec(t)}", [safe], t))
    return em.instr(ptx.SelpOp, "f32", [value, em.const(0.0, f32), ok], f32)


@lowering(tile.MmaOp)
def lower_simt_mma(em: PtxEmitter, op: tile.MmaOp) -> None:
    rows, cols = op.acc.type.dims
    bk = tile.tile_shape(op.a.type)[1]
    lr, lc = _simt_lane(em)
    wrow, wcol = em.value(op.warp_row), em.value(op.warp_col)
    my_rows = [add32(em, wrow, add32(em, lr, 4 * i)) for i in range(rows // 4)]
    my_cols = [add32(em, wcol, add32(em, lc, 8 * j)) for j in range(cols // 8)]
    accs = list(em.parts(op.acc))
    for kk in range(bk):
        k = em.const(kk, i32)
        a = [_load_element(em, op.a, r, k) for r in my_rows]
        b = [_load_element(em, op.b, k, c) for c in my_cols]
        for i, av in enumerate(a):
            for j, bv in enumerate(b):
                n = i * len(b) + j
                accs[n] = em.instr(ptx.FmaOp, "rn.f32", [av, bv, accs[n]], f32)
    em.bind(op.result, accs)


@lowering(tile.StoreOp)
def lower_simt_store(em: PtxEmitter, op: tile.StoreOp) -> None:
    view = view_of(op.c)
    rows, cols = op.acc.type.dims
    lr, lc = _simt_lane(em)
    row0 = add32(em, em.value(view.row), add32(em, em.value(op.row), lr))
    col0 = add32(em, em.value(view.col), add32(em, em.value(op.col), lc))
    alpha, beta = em.value(op.alpha), em.value(op.beta)
    accs = em.parts(op.acc)
    ncols = cols // 8
    for i in range(rows // 4):
        for j in range(ncols):
            r, c = add32(em, row0, 4 * i), add32(em, col0, 8 * j)
            ok = in_bounds(em, view, r, c)
            addr = global_address(em, view, r, c)
            (value,) = epilogue_values(em, view, alpha, beta, addr, [accs[i * ncols + j]], [ok], False)
            store_pair(em, view, addr, [value], [ok], False)


__all__ = ["f16", "view_of"]
