"""``wgmma`` -> the Hopper warpgroup mma instructions (``ptx_hopper``).

Most rules are one instruction; the exceptions say why:

- accumulators are updated in place by ``wgmma.mma_async``: a rule gives each accumulator value
  registers of its own (``wgmma.zero`` moves zeros into fresh ones; an mma whose input is still
  used elsewhere copies it first), so the in-place update never clobbers a value someone reads;
- descriptors are built at run time from the 32-bit shared address (the address is only known
  to the assembler): the low word is ``(addr >> 4) & 0x3FFF`` or-ed with the constant fields of
  :func:`kaio.dialects.wgmma.descriptor_bits` there, the high word is a constant, and an
  advance adds to the low word alone (a shared address is below 256 KiB, so the 14-bit start
  field never carries into the LBO beside it): ptxas keeps one 32-bit register per descriptor
  (uniform where the address is) and moves the constant half with the instruction, instead of
  64-bit arithmetic and two register moves per wgmma;
- ``wgmma.warpgroup_id`` is computed once where the kernel starts (every warp converged
  there), from lane 0's warp index (``shfl.sync.idx``, :func:`kernel_ops.uniform_warp`): ptxas
  then knows what is built from it is warp-uniform.

The TMA copies and mbarriers that feed the operands are lowered in ``tma_mbarrier``.
"""

from __future__ import annotations

from kaio.dialects import mma, ptx, wgmma
from kaio.dialects import ptx_hopper as hp
from kaio.passes.ptx_scalar import signed
from kaio.passes.to_ptx import lowering, register_parts
from kaio.passes.to_ptx.emitter import PtxEmitter
from kaio.passes.to_ptx.kernel_ops import uniform_warp
from xdsl.dialects import scf
from xdsl.dialects.builtin import f32, i1, i32, i64
from xdsl.ir import Attribute, Block, SSAValue


@register_parts(wgmma.AccType)
def accumulator_parts(t: Attribute, em: PtxEmitter) -> list[Attribute]:
    assert isinstance(t, wgmma.AccType)
    return [t.element] * t.registers


def _predicate(em: PtxEmitter, value: int) -> SSAValue:
    """A constant predicate register (wgmma's scale-d)."""

    def build() -> SSAValue:
        return em.instr(ptx.SetpOp, "ne.u32", [em.const(value, i32), em.const(0, i32)], i1)

    return em.invariant(("predicate", value), build)


# --------------------------------------------------------------------------- wgmma


def _signed32(bits: int) -> int:
    """i32 constants are signed: the swizzle field sets the top bits of the high word."""
    return bits - (1 << 32) if bits >= 1 << 31 else bits


def _descriptor(em: PtxEmitter, low: SSAValue, high: int) -> SSAValue:
    """The 64-bit descriptor ``{low, high}`` with the constant high word as an immediate
    (``cvt.u64.u32`` then ``or.b64``, as Triton writes it): ptxas then sees that only the low
    word varies, keeps it in a uniform register and rematerialises the high word (UMOV) at each
    wgmma, where a ``mov.b64 {low, high}`` pack kept whole descriptors live in ordinary
    registers across a K loop and moved them to uniform ones (R2UR) on every trip."""
    wide = em.instr(ptx.CvtOp, "u64.u32", [low], i64)
    return em.instr(ptx.OrOp, "b64", [wide, em.const(signed(high << 32, 64), i64)], i64)


def _descriptor_parts(value: SSAValue) -> tuple[SSAValue, int] | None:
    """(low word, high word) of a descriptor :func:`_descriptor` built, else None."""
    op = value.owner
    if not (isinstance(op, ptx.OrOp) and len(op.args) == 2):
        return None
    wide, high = op.args
    cvt, const = wide.owner, high.owner
    if not (isinstance(cvt, ptx.CvtOp) and isinstance(const, ptx.ConstOp)):
        return None
    return cvt.args[0], (int(const.value.value.data) >> 32) & 0xFFFFFFFF


@lowering(wgmma.DescriptorOp)
def lower_descriptor(em: PtxEmitter, op: wgmma.DescriptorOp) -> None:
    units = em.instr(ptx.ShrOp, "u32", [em.value(op.address), em.const(4, i32)], i32)
    start = em.instr(ptx.AndOp, "b32", [units, em.const(0x3FFF, i32)], i32)
    bits = wgmma.descriptor_bits(op.lbo.value.data, op.sbo.value.data, op.swizzle.data)
    low = em.instr(ptx.OrOp, "b32", [start, em.const(_signed32(bits & 0xFFFFFFFF), i32)], i32)
    em.bind(op.result, _descriptor(em, low, bits >> 32))


@lowering(wgmma.AdvanceOp)
def lower_advance(em: PtxEmitter, op: wgmma.AdvanceOp) -> None:
    """The start address (low word, 16-byte units) moves; the high word stays the constant."""
    parts = _descriptor_parts(em.value(op.desc))
    assert parts is not None, "wgmma.advance of a descriptor wgmma.descriptor did not build"
    low, high = parts
    moved = em.instr(ptx.AddOp, "s32", [low, em.const(op.bytes.value.data >> 4, i32)], i32)
    em.bind(op.result, _descriptor(em, moved, high))


@lowering(wgmma.WarpgroupIdOp)
def lower_warpgroup_id(em: PtxEmitter, op: wgmma.WarpgroupIdOp) -> None:
    build = lambda: em.instr(ptx.ShrOp, "u32", [uniform_warp(em), em.const(2, i32)], i32)
    em.bind(op.result, em.invariant(("warpgroup",), build))


@lowering(wgmma.ZeroOp)
def lower_zero(em: PtxEmitter, op: wgmma.ZeroOp) -> None:
    regs = em.regs(op.result.type)
    zero = em.const(0.0, f32)
    for r in regs:
        em.assign(r, zero)
    em.bind(op.result, regs)


@lowering(wgmma.SplitOp)
def lower_split(em: PtxEmitter, op: wgmma.SplitOp) -> None:
    """The tile's registers, in column chunks. wgmma updates them in place, so they are the
    tile's own only when nothing else can read them: a loop-carried tile or a loop's result
    (fresh registers of the loop) or a previous join, used by this split alone; otherwise a
    copy (never of accumulators still in flight: lower-to-wgmma splits those in place), into
    the registers of the loop-carried value the product replaces when those are dead here
    (:func:`replaced_carried_registers`), else into fresh ones."""
    parts = list(em.parts(op.tile))
    owner = op.tile.owner
    own = isinstance(owner, Block | wgmma.JoinOp | scf.ForOp) and op.tile.uses.get_length() == 1
    if not own or len(set(parts)) != len(parts):
        fresh = replaced_carried_registers(em, op, parts)
        if fresh is None:
            fresh = [r for acc in op.accs for r in em.regs(acc.type)]
        for r, v in zip(fresh, parts):
            em.assign(r, v)
        parts = fresh
    first = 0
    for acc in op.accs:
        count = acc.type.registers  # type: ignore[attr-defined]
        em.bind(acc, parts[first : first + count])
        first += count


def product_join(op: wgmma.SplitOp) -> wgmma.JoinOp | None:
    """The join that ends the wgmma chain from ``op`` (split -> mma_async... -> wait_group ->
    join, each value used once), or None."""
    joins: set[wgmma.JoinOp] = set()
    for acc in op.accs:
        v: SSAValue = acc
        while True:
            if v.uses.get_length() != 1:
                return None
            (use,) = v.uses
            user = use.operation
            if isinstance(user, wgmma.MmaAsyncOp) and use.index == 0:
                v = user.result
            elif isinstance(user, wgmma.WaitGroupOp):
                v = user.results_[use.index]
            elif isinstance(user, wgmma.JoinOp):
                joins.add(user)
                break
            else:
                return None
    return joins.pop() if len(joins) == 1 else None


def replaced_carried_registers(em: PtxEmitter, op: wgmma.SplitOp, parts: list[SSAValue]) -> list[SSAValue] | None:
    """The registers of the loop-carried tile this split's product is yielded in place of,
    when that tile is dead here: FlashAttention's ``acc = acc * alpha`` then ``acc += P V``
    updates the loop's own accumulator registers (as Triton's PTX does), where a fresh copy
    left ptxas a register copy of the accumulator per element on every trip (it cannot always
    coalesce the loop's registers with a wgmma's, whose accumulators it places first).

    Dead here: every use of the carried tile is an op before this split in the loop body (its
    reads are emitted already), and none of those ops' results share its registers (a view that
    would read them later). The registers are the loop's own (``ptx.reg``), distinct, and not
    among the split's sources (the copy would overwrite what it reads)."""
    join = product_join(op)
    if join is None or join.result.uses.get_length() != 1:
        return None
    (use,) = join.result.uses
    loop = use.operation.parent_op()
    block = op.parent_block()
    if not (isinstance(use.operation, scf.YieldOp) and isinstance(loop, scf.ForOp) and block is loop.body.block):
        return None
    carried = block.args[use.index + 1]
    regs = list(em.parts(carried))
    if len(regs) != len(parts) or len(set(regs)) != len(regs) or set(regs) & set(parts):
        return None
    if not all(isinstance(r.owner, ptx.RegOp) for r in regs):
        return None
    for u in carried.uses:
        anchor = block.find_ancestor_op_in_block(u.operation)
        if anchor is None or not anchor.is_before_in_block(op):
            return None
        for reader in {u.operation, anchor}:
            for r in reader.results:
                if (r in em.values or r in em.aggregates) and set(em.parts(r)) & set(regs):
                    return None
    return regs


@lowering(wgmma.JoinOp)
def lower_join(em: PtxEmitter, op: wgmma.JoinOp) -> None:
    em.bind(op.result, [r for acc in op.accs for r in em.parts(acc)])


@lowering(wgmma.FenceOp)
def lower_fence(em: PtxEmitter, op: wgmma.FenceOp) -> None:
    em.emit(hp.WgmmaFenceOp("sync.aligned"))


@lowering(wgmma.CommitGroupOp)
def lower_commit(em: PtxEmitter, op: wgmma.CommitGroupOp) -> None:
    em.emit(hp.WgmmaCommitOp("sync.aligned"))


@lowering(wgmma.MmaAsyncOp)
def lower_mma_async(em: PtxEmitter, op: wgmma.MmaAsyncOp) -> None:
    acc = list(em.parts(op.acc))
    shared = len(set(acc)) != len(acc) or len(list(op.acc.uses)) > 1
    if shared and op.accumulate.value.data:
        fresh = em.regs(op.acc.type)
        for r, v in zip(fresh, acc):
            em.assign(r, v)
        acc = fresh
    elif shared:  # D = A * B ignores the input: any fresh registers do
        acc = em.regs(op.acc.type)
    n = op.acc.type.n.data  # type: ignore[attr-defined]
    a, b = (mma.OPERAND_PTX[t] for t in (op.element, op.b_element))
    d = "f32" if op.acc.type.element == f32 else "s32"  # type: ignore[attr-defined]
    spec = f"sync.aligned.m64n{n}k{mma.k_step(op.element)}.{d}.{a}.{b}"
    scale_d = _predicate(em, op.accumulate.value.data)
    em.emit(
        hp.WgmmaMmaAsyncOp(
            spec, acc, list(em.parts(op.a)), em.value(op.b), scale_d,
            trans_a=op.trans_a.value.data, trans_b=op.trans_b.value.data,
        )
    )  # fmt: skip
    em.bind(op.result, acc)


@lowering(wgmma.WaitGroupOp)
def lower_wait(em: PtxEmitter, op: wgmma.WaitGroupOp) -> None:
    em.emit(hp.WgmmaWaitOp("sync.aligned", [em.const(op.pending.value.data, i32)]))
    for result, acc in zip(op.results_, op.accs):
        em.bind(result, list(em.parts(acc)))


@lowering(wgmma.StoreOp)
def lower_store(em: PtxEmitter, op: wgmma.StoreOp) -> None:
    """Lane 4g + t of warp w holds rows 16w + g (+8), columns 8j + 2t (+1): pairs of f32."""
    tid = em.special("tid.x")
    warp = em.instr(ptx.AndOp, "b32", [em.instr(ptx.ShrOp, "u32", [tid, em.const(5, i32)], i32), em.const(3, i32)], i32)
    lane = em.instr(ptx.AndOp, "b32", [tid, em.const(31, i32)], i32)
    g = em.instr(ptx.ShrOp, "u32", [lane, em.const(2, i32)], i32)
    t2 = em.instr(ptx.ShlOp, "b32", [em.instr(ptx.AndOp, "b32", [lane, em.const(3, i32)], i32), em.const(1, i32)], i32)
    row = em.instr(ptx.MadOp, "lo.s32", [warp, em.const(16, i32), g], i32)
    ld = em.value(op.ld)
    first = em.instr(ptx.MadOp, "lo.s32", [row, ld, t2], i32)  # element index of (row, 2t)
    addr = em.instr(ptx.MadOp, "wide.u32", [first, em.const(4, i32), em.value(op.ptr)], i64)
    eight_rows = em.instr(ptx.MulOp, "wide.u32", [ld, em.const(32, i32)], i64)  # 8 rows in bytes
    acc = em.parts(op.acc)
    lower = addr
    upper = em.instr(ptx.AddOp, "s64", [addr, eight_rows], i64)
    for j in range(len(acc) // 4):
        for half, base in enumerate((lower, upper)):
            pair = list(acc[4 * j + 2 * half : 4 * j + 2 * half + 2])
            em.emit(ptx.StOp("global.v2.f32", [base, *pair], offset=32 * j))
