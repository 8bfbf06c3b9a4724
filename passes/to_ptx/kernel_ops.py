"""``kernel`` dialect -> PTX: indices, memory, barriers, warp shuffles, reductions, atomics, bits
of words, register budgets (``setmaxnreg``)."""

from __future__ import annotations

from kaio.dialects import kernel, kernel_bits, ptx
from kaio.dialects import ptx_hopper as hp
from kaio.dialects.kernel import Combine
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.arith_math import float_op
from kaio.passes.value_facts import constant_int
from kaio.passes.to_ptx.emitter import (
    PtxEmitter,
    bits_spec,
    element_bytes,
    float_spec,
    int_spec,
    mem_spec,
    reg_type,
    width,
)
from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType, f16, f32, f64, i1, i32, i64
from xdsl.ir import Attribute, SSAValue

from kaio.errors import KaioCompileError

# --------------------------------------------------------------------------- indices

_DIM_REGISTERS = {
    kernel.ThreadIdOp: "tid",
    kernel.BlockIdOp: "ctaid",
    kernel.BlockDimOp: "ntid",
    kernel.GridDimOp: "nctaid",
}


@lowering(*_DIM_REGISTERS)
def lower_dim_index(em: PtxEmitter, op: kernel.ThreadIdOp) -> None:
    em.bind(op.result, em.special(f"{_DIM_REGISTERS[type(op)]}.{op.dim.data.value}"))


@lowering(kernel.LaneIdOp)
def lower_lane_id(em: PtxEmitter, op: kernel.LaneIdOp) -> None:
    em.bind(op.result, em.special("laneid"))


def linear_thread_id(em: PtxEmitter) -> SSAValue:
    """tid.x + ntid.x * (tid.y + ntid.y * tid.z), simplified for 1-D and 2-D blocks."""
    x = em.special("tid.x")
    bx, by, bz = em.block_shape
    if by == 1 and bz == 1:
        return x
    row = em.special("tid.y")
    if bz != 1:
        row = em.instr(ptx.MadOp, "lo.s32", [em.special("tid.z"), em.special("ntid.y"), row], i32)
    return em.instr(ptx.MadOp, "lo.s32", [row, em.special("ntid.x"), x], i32)


@lowering(kernel.WarpIdOp)
def lower_warp_id(em: PtxEmitter, op: kernel.WarpIdOp) -> None:
    em.bind(op.result, em.instr(ptx.ShrOp, "u32", [linear_thread_id(em), em.const(5, i32)], i32))


def uniform_warp(em: PtxEmitter) -> SSAValue:
    """This thread's warp in the block, as lane 0 of the warp reads it: the same number, but
    ptxas treats a ``shfl.sync.idx`` from a constant lane as warp-uniform (CUTLASS's
    ``canonical_warp_idx_sync``). Computed where the kernel starts, every lane converged."""

    def build() -> SSAValue:
        warp = em.instr(ptx.ShrOp, "u32", [linear_thread_id(em), em.const(5, i32)], i32)
        args = [warp, em.const(0, i32), em.const(31, i32), em.const(-1, i32)]
        return em.instr(ptx.ShflOp, "sync.idx.b32", args, i32)

    return em.invariant(("uniform warp",), build)


@lowering(kernel.SourceLocOp)
def lower_source_loc(em: PtxEmitter, op: kernel.SourceLocOp) -> None:
    # The location (file:line) becomes the printer's .loc; the comment keeps the text readable.
    em.emit(ptx.CommentOp(op.text.data.strip()))


# --------------------------------------------------------------------------- addresses


def _global_offset(em: PtxEmitter, index: SSAValue, size: int) -> SSAValue:
    """Byte offset of element ``index`` (i64): a 32->64-bit widening multiply where the index
    was extended from 32 bits, as nvcc emits it."""
    owner = index.owner
    if isinstance(owner, arith.ExtUIOp | arith.ExtSIOp) and owner.input.type == i32:
        narrow = em.value(owner.input)
        signed = "s" if isinstance(owner, arith.ExtSIOp) else "u"
        return em.instr(ptx.MulOp, f"wide.{signed}32", [narrow, em.const(size, i32)], i64)
    wide = em.value(index)
    if size == 1:
        return wide
    return em.instr(ptx.MulOp, "lo.s64", [wide, em.const(size, i64)], i64)


def element_address(
    em: PtxEmitter, ref: SSAValue, indices: tuple[SSAValue, ...]
) -> tuple[SSAValue, int, str]:
    """(address register, constant byte offset, state space) of ``ref[indices]``."""
    elem = kernel.element_type_of(ref.type)
    size = element_bytes(elem)
    base = em.value(ref)
    if isinstance(ref.type, kernel.ArrayType):
        (index,) = indices
        const = constant_int(index)
        if const is not None:
            return base, const * size, "global"
        return em.instr(ptx.AddOp, "s64", [base, _global_offset(em, index, size)], i64), 0, "global"
    assert isinstance(ref.type, MemRefType)
    shape = ref.type.get_shape()
    consts = [constant_int(i) for i in indices]
    if all(c is not None for c in consts):
        linear = 0
        for c, d in zip(consts, shape):
            linear = linear * d + c  # type: ignore[operator]
        return base, linear * size, "shared"
    linear: SSAValue | None = None
    for index, d in zip(indices, shape):
        i = em.value(index)
        linear = i if linear is None else em.instr(ptx.MadOp, "lo.s32", [linear, em.const(d, i32), i], i32)
    assert linear is not None
    return em.instr(ptx.MadOp, "lo.s32", [linear, em.const(size, i32), base], i32), 0, "shared"


# --------------------------------------------------------------------------- memory


@lowering(kernel.LoadOp)
def lower_load(em: PtxEmitter, op: kernel.LoadOp) -> None:
    addr, offset, space = element_address(em, op.ref, tuple(op.indices))
    t = op.result.type
    load = ptx.LdOp(f"{space}.{mem_spec(t)}", [addr], [reg_type(t)], offset=offset)
    em.emit(load)
    em.bind(op.result, load.outs[0])


@lowering(kernel.LoadVectorOp)
def lower_load_vector(em: PtxEmitter, op: kernel.LoadVectorOp) -> None:
    addr, offset, space = element_address(em, op.ref, (op.index,))
    t = op.values[0].type
    count = len(op.values)
    load = ptx.LdOp(f"{space}.v{count}.{mem_spec(t)}", [addr], [reg_type(t)] * count, offset=offset)
    em.emit(load)
    for v, reg in zip(op.values, load.outs):
        em.bind(v, reg)


@lowering(kernel.StoreOp)
def lower_store(em: PtxEmitter, op: kernel.StoreOp) -> None:
    addr, offset, space = element_address(em, op.ref, tuple(op.indices))
    em.emit(ptx.StOp(f"{space}.{mem_spec(op.value.type)}", [addr, em.value(op.value)], offset=offset))


@lowering(kernel.SharedAllocOp)
def lower_shared_alloc(em: PtxEmitter, op: kernel.SharedAllocOp) -> None:
    t = op.result.type
    assert isinstance(t, MemRefType)
    count = 1
    for d in t.get_shape():
        count *= d
    nbytes = count * element_bytes(t.element_type)
    em.bind(op.result, em.shared(op.sym_name.data, nbytes, 16))


@lowering(kernel.BarrierOp)
def lower_barrier(em: PtxEmitter, op: kernel.BarrierOp) -> None:
    em.barrier()


@lowering(kernel.BarrierThreadsOp)
def lower_barrier_threads(em: PtxEmitter, op: kernel.BarrierThreadsOp) -> None:
    em.barrier_threads = op.threads.value.data


# --------------------------------------------------------------------------- warp shuffles

_FULL_MASK = -1  # 0xFFFFFFFF as a signed 32-bit immediate


def _shuffle32(em: PtxEmitter, mode: str, v: SSAValue, lane: SSAValue, clamp: int, mask: SSAValue) -> SSAValue:
    return em.instr(ptx.ShflOp, f"sync.{mode}.b32", [v, lane, em.const(clamp, i32), mask], v.type)


def shuffle(em: PtxEmitter, mode: str, v: SSAValue, lane: SSAValue, width_: int, mask: SSAValue) -> SSAValue:
    """``shfl.sync`` of any 16/32/64-bit register (split into 32-bit halves as PTX needs)."""
    clamp = ((32 - width_) << 8) | (0 if mode == "up" else 31)
    bits = width(v.type)
    if bits == 32:
        return _shuffle32(em, mode, v, lane, clamp, mask)
    if bits == 16:
        zero = em.const(0, v.type)
        packed = em.instr(ptx.MovOp, "b32", [v, zero], i32)
        moved = _shuffle32(em, mode, packed, lane, clamp, mask)
        unpack = ptx.MovOp("b32", [moved], [v.type, v.type])
        em.emit(unpack)
        return unpack.outs[0]
    unpack = ptx.MovOp("b64", [v], [i32, i32])
    em.emit(unpack)
    lo, hi = (_shuffle32(em, mode, h, lane, clamp, mask) for h in unpack.outs)
    return em.instr(ptx.MovOp, "b64", [lo, hi], v.type)


@lowering(kernel.ShuffleOp)
def lower_shuffle(em: PtxEmitter, op: kernel.ShuffleOp) -> None:
    mode = op.mode.data.value
    v = em.value(op.value)
    em.bind(op.result, shuffle(em, mode, v, em.value(op.offset), op.width.value.data, em.value(op.mask)))


# --------------------------------------------------------------------------- reductions


def combine(em: PtxEmitter, kind: Combine, a: SSAValue, b: SSAValue, t: Attribute) -> SSAValue:
    """a (op) b for a reduction kind."""
    if kind == Combine.ADDI:
        return em.instr(ptx.AddOp, int_spec(t, True), [a, b], reg_type(t))
    if kind in (Combine.MAXS, Combine.MINS, Combine.MAXU, Combine.MINU):
        cls = ptx.MaxOp if kind in (Combine.MAXS, Combine.MAXU) else ptx.MinOp
        return em.instr(cls, int_spec(t, kind in (Combine.MAXS, Combine.MINS)), [a, b], reg_type(t))
    cls = {Combine.ADDF: ptx.AddOp, Combine.MAXF: ptx.MaxOp, Combine.MINF: ptx.MinOp}[kind]
    return float_op(em, cls, "", [a, b], t)


def identity(em: PtxEmitter, kind: Combine, t: Attribute) -> SSAValue:
    """The neutral element of a reduction, as a constant register."""
    bits = width(t)
    values: dict[Combine, int | float] = {
        Combine.ADDI: 0,
        Combine.ADDF: 0.0,
        Combine.MAXS: -(1 << (bits - 1)),
        Combine.MINS: (1 << (bits - 1)) - 1,
        Combine.MAXU: 0,
        Combine.MINU: -1,
        Combine.MAXF: float("-inf"),
        Combine.MINF: float("inf"),
    }
    return em.const(values[kind], reg_type(t))


def _require_full_warps(em: PtxEmitter, what: str) -> int:
    bx, by, bz = em.block_shape
    threads = bx * by * bz
    if threads % 32:
        raise KaioCompileError(
            f"{what} needs whole warps, but block_size {em.block_shape} has {threads} threads; "
            "use a multiple of 32"
        )
    return threads


def warp_allreduce(em: PtxEmitter, kind: Combine, v: SSAValue, t: Attribute) -> SSAValue:
    """Butterfly reduction: after log2(32) exchanges every lane holds the result."""
    mask = em.const(_FULL_MASK, i32)
    for offset in (16, 8, 4, 2, 1):
        other = shuffle(em, "bfly", v, em.const(offset, i32), 32, mask)
        v = combine(em, kind, v, other, t)
    return v


@lowering(kernel.WarpReduceOp)
def lower_warp_reduce(em: PtxEmitter, op: kernel.WarpReduceOp) -> None:
    _require_full_warps(em, "warp_reduce")
    t = op.value.type
    em.bind(op.result, warp_allreduce(em, op.combine.data, em.value(op.value), t))


@lowering(kernel.BlockReduceOp)
def lower_block_reduce(em: PtxEmitter, op: kernel.BlockReduceOp) -> None:
    """Each warp reduces, lane 0 parks the partial in shared memory, then every warp reduces
    the partials (so every thread ends with the result without a broadcast step)."""
    threads = _require_full_warps(em, "block_reduce")
    kind, t = op.combine.data, op.value.type
    size = element_bytes(t)
    if "reduce" not in em.scratch:
        em.scratch["reduce"] = em.shared("reduce_scratch", 32 * 8, 8)
    scratch = em.scratch["reduce"]
    partial = warp_allreduce(em, kind, em.value(op.value), t)
    warps = threads // 32
    if warps == 1:
        em.bind(op.result, partial)
        return
    lane = em.special("laneid")
    warp = em.instr(ptx.ShrOp, "u32", [linear_thread_id(em), em.const(5, i32)], i32)
    slot = em.instr(ptx.MadOp, "lo.s32", [warp, em.const(size, i32), scratch], i32)
    first_lane = em.instr(ptx.SetpOp, "eq.u32", [lane, em.const(0, i32)], i1)
    spec = f"shared.{mem_spec(t)}"
    em.emit(ptx.StOp(spec, [slot, partial], guard=first_lane))
    em.barrier()
    index = em.instr(ptx.MinOp, "u32", [lane, em.const(warps - 1, i32)], i32)
    addr = em.instr(ptx.MadOp, "lo.s32", [index, em.const(size, i32), scratch], i32)
    parked = em.instr(ptx.LdOp, spec, [addr], reg_type(t))
    valid = em.instr(ptx.SetpOp, "lt.u32", [lane, em.const(warps, i32)], i1)
    sel_spec = float_spec(t) if t in (f32, f64) else bits_spec(t)
    mine = em.instr(ptx.SelpOp, sel_spec, [parked, identity(em, kind, t), valid], reg_type(t))
    result = warp_allreduce(em, kind, mine, t)
    em.barrier()  # the scratch may be reused right after
    em.bind(op.result, result)


# --------------------------------------------------------------------------- atomics


def atomic_spec(kind: Combine, t: Attribute) -> str:
    bits = width(t)
    if kind == Combine.ADDF:
        return "add.noftz.f16" if t == f16 else f"add.{float_spec(t)}"
    return {
        Combine.ADDI: f"add.u{bits}",
        Combine.MAXS: f"max.s{bits}",
        Combine.MINS: f"min.s{bits}",
        Combine.MAXU: f"max.u{bits}",
        Combine.MINU: f"min.u{bits}",
        Combine.ANDI: f"and.b{bits}",
        Combine.ORI: f"or.b{bits}",
        Combine.XORI: f"xor.b{bits}",
        Combine.EXCH: f"exch.b{bits}",
    }[kind]


def float_min_max_loop(em: PtxEmitter, kind: Combine, value: SSAValue, addr: SSAValue, offset: int, space: str) -> SSAValue:
    """PTX has no f32 atomic min/max: compare-and-swap the bits until no other thread got in
    between. Returns the value the location held before this thread's update."""
    cls = ptx.MaxOp if kind == Combine.MAXF else ptx.MinOp
    old = em.reg(f32)
    first = ptx.LdOp(f"{space}.f32", [addr], [f32], offset=offset)
    em.emit(first)
    em.assign(old, first.outs[0])
    retry = em.label("atomic_retry")
    em.place_label(retry)
    wanted = em.instr(cls, "f32", [old, value], f32)
    expected = em.instr(ptx.MovOp, "b32", [old], i32)
    swap = ptx.AtomOp(f"{space}.cas.b32", [addr, expected, em.instr(ptx.MovOp, "b32", [wanted], i32)], [i32], offset=offset)
    em.emit(swap)
    seen = swap.outs[0]
    em.assign(old, em.instr(ptx.MovOp, "b32", [seen], f32))
    lost = em.instr(ptx.SetpOp, "ne.b32", [seen, expected], i1)
    em.branch(retry, lost)
    return old


@lowering(kernel.AtomicRMWOp)
def lower_atomic_rmw(em: PtxEmitter, op: kernel.AtomicRMWOp) -> None:
    addr, offset, space = element_address(em, op.ref, tuple(op.indices))
    t = op.value.type
    if op.combine.data in (Combine.MAXF, Combine.MINF):
        if t != f32:
            raise KaioCompileError(f"atomic float min/max works on f32, not {t}")
        em.bind(op.result, float_min_max_loop(em, op.combine.data, em.value(op.value), addr, offset, space))
        return
    spec = f"{space}.{atomic_spec(op.combine.data, t)}"
    atom = ptx.AtomOp(spec, [addr, em.value(op.value)], [reg_type(t)], offset=offset)
    em.emit(atom)
    em.bind(op.result, atom.outs[0])


@lowering(kernel.AtomicCasOp)
def lower_atomic_cas(em: PtxEmitter, op: kernel.AtomicCasOp) -> None:
    addr, offset, space = element_address(em, op.ref, tuple(op.indices))
    t = op.value.type
    spec = f"{space}.cas.b{width(t)}"
    atom = ptx.AtomOp(spec, [addr, em.value(op.compare), em.value(op.value)], [reg_type(t)], offset=offset)
    em.emit(atom)
    em.bind(op.result, atom.outs[0])


# --------------------------------------------------------------------------- bits of words


@lowering(kernel_bits.Dp4aOp, kernel_bits.Dp2aOp)
def lower_dot_bytes(em: PtxEmitter, op: kernel_bits.Dp4aOp) -> None:
    half = f"{op.half.data}." if isinstance(op, kernel_bits.Dp2aOp) else ""
    cls = ptx.Dp2aOp if isinstance(op, kernel_bits.Dp2aOp) else ptx.Dp4aOp
    args = [em.value(v) for v in (op.a, op.b, op.c)]
    em.bind(op.result, em.instr(cls, f"{half}{op.signs.data}", args, i32))


@lowering(kernel_bits.PrmtOp)
def lower_prmt(em: PtxEmitter, op: kernel_bits.PrmtOp) -> None:
    spec = "b32" if op.mode is None else f"{op.mode.data}.b32"
    args = [em.value(v) for v in (op.a, op.b, op.selector)]
    em.bind(op.result, em.instr(ptx.PrmtOp, spec, args, i32))


@lowering(kernel_bits.Lop3Op)
def lower_lop3(em: PtxEmitter, op: kernel_bits.Lop3Op) -> None:
    args = [em.value(v) for v in (op.a, op.b, op.c)]
    em.bind(op.result, em.instr(ptx.Lop3Op, "b32", [*args, em.const(op.lut.value.data, i32)], i32))


# --------------------------------------------------------------------------- register budgets


@lowering(kernel.SetMaxRegistersOp)
def lower_setmaxnreg(em: PtxEmitter, op: kernel.SetMaxRegistersOp) -> None:
    em.emit(hp.SetmaxnregOp(f"{op.mode.data}.sync.aligned.u32", [em.const(op.count.value.data, i32)]))
