"""``tile.load``, ``tile.store``, ``tile.gather`` and ``tile.scatter`` -> global memory accesses.

Global accesses take the view's proven alignment: up to 16 bytes of consecutive registers move
as one ``ld.global.v4``/``st.global.v4`` (16-bit elements packed two per 32-bit word). Threads
that hold copies of an element (a tile smaller than the CTA) all load it; only one stores it.
Where each thread holds 16 consecutive bytes of a row whose alignment is not proven, the address
is aligned at run time: a load reads the two aligned chunks around its bytes and shifts them into
place, a store writes the aligned chunk below its bytes with the previous lane's. A load only a
map uses is streamed into the map (:class:`LoadGroups`), and a map only a store uses is computed
by the store (``tile_elementwise``). Gathers and scatters move one element per register.
"""

from __future__ import annotations

from xdsl.dialects.builtin import bf16, f16, f32, f64, i1, i32, i64
from xdsl.ir import Attribute, SSAValue

from kaio.dialects import ptx, tile
from kaio.dialects.tile_layout import Distribution
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter, element_bytes, mem_spec, reg_type
from kaio.passes.to_ptx.half_pairs import Lanes
from kaio.passes.to_ptx.kernel_ops import shuffle
from kaio.passes.to_ptx.tile_distribution import add32, and_pred, distribution, or_pred, owner_predicate, thread_base
from kaio.passes.to_ptx.tile_elementwise import STREAMED_INPUTS, tile_elements
from kaio.passes.to_ptx.tile_views import ViewAccess, inside, require_alignment, view_of
from kaio.passes.ptx_scalar import const_int, signed
from kaio.passes.value_facts import constant_int, divisibility

# --------------------------------------------------------------------------- global memory


def _streamable(op: tile.LoadOp) -> bool:
    """A load used once, by an elementwise map right after it in the same block."""
    user = op.result.get_user_of_unique_use() if op.result.has_one_use() else None
    return isinstance(user, tile.MapOp) and user.parent_block() is op.parent_block()


def _vector(view: tile.ViewOp, dist: Distribution, t: Attribute) -> tuple[int, bool]:
    """(elements per access: consecutive in this thread and aligned, whether a vector may
    straddle the bound: then a vector inside it is one access, one straddling it element ones)."""
    eb = element_bytes(t)
    if eb not in (2, 4, 8):
        return 1, False
    vec = max(min(dist.contiguous(len(dist.shape) - 1), view.align.value.data, 16 // eb), 1)
    return vec, divisibility(view.bounds[-1]) < vec


def _realigned(view: tile.ViewOp, dist: Distribution, t: Attribute) -> int:
    """Elements per 16-byte access of a load whose alignment is not proven (a misaligned base, a
    row length that is not a multiple of the vector), where each thread holds 16 consecutive
    bytes: such a load reads the two aligned 16-byte chunks its bytes straddle and shifts them
    into place (``LoadGroups.realigned``). 0 when the proven vector is already 16 bytes."""
    eb = element_bytes(t)
    full = 16 // eb
    if eb not in (2, 4) or constant_int(view.strides[-1]) != 1 or dist.contiguous(len(dist.shape) - 1) < full:
        return 0
    return full if _vector(view, dist, t)[0] < full else 0


def _window(em: PtxEmitter, chunks: list[SSAValue], start: SSAValue, halves: bool) -> list[SSAValue]:
    """The 4 words at byte ``start & 15`` of 8 consecutive words (32 bytes): a select of words by
    bits 2-3, and with ``halves`` (an even but maybe not 4-byte-multiple start) a ``prmt`` by bit 1."""
    bit = [em.instr(ptx.SetpOp, "ne.b32", [em.instr(ptx.AndOp, "b32", [start, em.const(m, i32)], i32), em.const(0, i32)], i1)
           for m in (4, 8)]  # fmt: skip

    def word(i: int) -> SSAValue:  # chunks[i + (start bits 2-3)]
        pick = [em.instr(ptx.SelpOp, "b32", [chunks[j + 1], chunks[j], bit[0]], i32) for j in (i, i + 2)]
        return em.instr(ptx.SelpOp, "b32", [pick[1], pick[0], bit[1]], i32)

    if not halves:
        return [word(i) for i in range(4)]
    words = [word(i) for i in range(5)]
    half = em.instr(ptx.AndOp, "b32", [start, em.const(2, i32)], i32)
    sel = em.instr(ptx.MadOp, "lo.u32", [half, em.const(0x1111, i32), em.const(0x3210, i32)], i32)
    return [em.instr(ptx.PrmtOp, "b32", [words[i], words[i + 1], sel], i32) for i in range(4)]


def _word_spec(t: Attribute, vec: int) -> tuple[str, Attribute, int]:
    """(ld/st type spec, register type, register count) moving ``vec`` elements of ``t``."""
    eb = element_bytes(t)
    if eb == 2 and vec >= 2:
        words = vec // 2
        return (f"v{words}.b32" if words > 1 else "b32"), i32, words
    spec = mem_spec(t) if t not in (f32, f64) else ("f32" if t == f32 else "f64")
    return (f"v{vec}.{spec}" if vec > 1 else spec), reg_type(t), vec


def _unpack(em: PtxEmitter, words: list[SSAValue], t: Attribute, vec: int) -> list[SSAValue]:
    if element_bytes(t) != 2 or vec < 2:
        return words
    out = []
    for w in words:
        unpack = ptx.MovOp("b32", [w], [reg_type(t), reg_type(t)])
        em.emit(unpack)
        out += list(unpack.outs)
    return out


def _pack(em: PtxEmitter, values: list[SSAValue], t: Attribute, vec: int) -> list[SSAValue]:
    if element_bytes(t) != 2 or vec < 2:
        return values
    return [em.instr(ptx.MovOp, "b32", values[i : i + 2], i32) for i in range(0, len(values), 2)]


def masked_load(em: PtxEmitter, spec: str, addr: SSAValue, imm: int, types: list[Attribute], fill: SSAValue,
                ok: SSAValue | None) -> list[SSAValue]:
    """Registers loaded from ``addr + imm`` where ``ok``, else ``fill``: the registers are set to
    ``fill`` first and the load, guarded by ``ok``, writes over them (as nvcc and Triton do: no
    select after the load, and masked-off lanes never touch memory)."""
    if ok is None:
        load = ptx.LdOp(spec, [addr], types, offset=imm)
        em.emit(load)
        return list(load.outs)
    regs = [em.reg(rt) for rt in types]
    for r in regs:
        em.assign(r, fill)
    em.emit(ptx.LdIntoOp(spec, [addr, *regs], guard=ok, offset=imm))
    return regs


class LoadGroups:
    """A tile load, one vector access (``vec`` registers) at a time. 16-bit elements stay in
    their 32-bit words (``Lanes``) until an op needs them one by one."""

    def __init__(self, em: PtxEmitter, op: tile.LoadOp):
        self.em, self.op = em, op
        view = view_of(op.view)
        self.dist = distribution(em, op.result.type)
        self.access = ViewAccess(em, view, self.dist)
        self.t, self.other = self.access.t, em.value(op.other)
        self.vec, self.ragged = _vector(view, self.dist, self.t)
        self.proven = self.vec * self.access.eb  # bytes the address is proven a multiple of
        require_alignment(em, view.array, self.proven)
        self.realign = _realigned(view, self.dist, self.t)
        if self.realign:
            self.vec = self.realign
        self.words = self.access.eb == 2 and self.vec >= 2
        self.group: list = []

    def load(self, r: int) -> list:
        """The ``vec`` registers from r: ``vec // 2`` Lanes for 16-bit words, else registers."""
        if self.realign:
            return self.realigned(r)
        em, t, vec = self.em, self.t, self.vec
        spec, reg, count = _word_spec(t, vec)
        off = self.dist.offsets[r]
        addr, imm = self.access.address(off)
        if not self.ragged:
            fill = Lanes(t, self.other, self.other).packed(em) if self.words else self.other
            outs = masked_load(em, f"global.{spec}", addr, imm, [reg] * count, fill, self.access.ok(off))
            return [Lanes(t, word=w) for w in outs] if self.words else outs
        full, elements = self.access.split(off, vec)
        load = ptx.LdOp(f"global.{spec}", [addr], [reg] * count, guard=full, offset=imm)
        em.emit(load)
        values = _unpack(em, list(load.outs), t, vec)
        out = []
        eb = self.access.eb
        for e, (v, ok) in enumerate(zip(values, elements, strict=True)):
            one = ptx.LdOp(f"global.{mem_spec(t)}", [addr], [reg_type(t)], guard=ok, offset=imm + e * eb)
            em.emit(one)
            tail = em.instr(ptx.SelpOp, selp_spec(t), [one.outs[0], self.other, ok], reg_type(t))
            out.append(em.instr(ptx.SelpOp, selp_spec(t), [v, tail, full], reg_type(t)))
        if self.words:
            return [Lanes(t, out[i], out[i + 1]) for i in range(0, vec, 2)]
        return out

    def realigned(self, r: int) -> list:
        """16 bytes at an address known only at run time: the aligned chunks below and above it
        (one chunk twice when it is aligned), a word select by its bits 2-3 and, for 16-bit
        elements not proven 4-byte aligned, a byte permute by its bit 1. Both chunks must hold
        elements of the view (never a byte outside the array): a vector at either end of a row,
        or straddling the bound, is read element by element, as in ``load``."""
        em, t, vec, eb = self.em, self.t, self.vec, self.access.eb
        last = len(self.dist.shape) - 1
        off = self.dist.offsets[r]
        addr, imm = self.access.address(off)
        if imm:
            addr = em.instr(ptx.AddOp, "s64", [addr, em.const(imm, i64)], i64)
        low = em.instr(ptx.CvtOp, "u32.u64", [addr], i32)
        sh = em.instr(ptx.AndOp, "b32", [low, em.const(15, i32)], i32)  # bytes past the chunk below
        k = eb.bit_length() - 1
        col = add32(em, self.access.start[last], off[last])
        below = em.instr(ptx.ShrOp, "u32", [sh, em.const(k, i32)], i32)  # its elements before ours
        above = em.instr(ptx.SubOp, "s32", [em.const(16, i32), sh], i32)
        above = em.instr(ptx.ShrOp, "u32", [em.instr(ptx.AndOp, "b32", [above, em.const(15, i32)], i32), em.const(k, i32)], i32)
        end = add32(em, em.instr(ptx.AddOp, "s32", [col, above], i32), vec - 1)  # the chunk above's last
        tail = list(off)
        tail[-1] += vec - 1
        whole = and_pred(em, [
            self.access.ok(off),  # the first element inside: col >= 0, so the next test means col - below >= 0
            self.access.ok(tuple(tail)),
            em.instr(ptx.SetpOp, "ge.u32", [col, below], i1),
            inside(em, end, self.access.bounds[last]),
        ])  # fmt: skip
        chunks = []
        for a in (addr, em.instr(ptx.AddOp, "s64", [addr, em.const(15, i64)], i64)):
            aligned = em.instr(ptx.AndOp, "b64", [a, em.const(-16, i64)], i64)
            load = ptx.LdOp("global.v4.b32", [aligned], [i32] * 4, guard=whole)
            em.emit(load)
            chunks += list(load.outs)
        words = _window(em, chunks, low, eb == 2 and self.proven < 4)
        # the result registers: the shifted chunks, or `other` where no element is inside; a
        # branch taken only where a lane of the warp needs it reads the elements of a vector
        # that straddles a bound or a row's end one by one and overwrites them there
        rt = reg_type(t)
        if eb == 2:
            other = Lanes(t, self.other, self.other).packed(em)
            first = [em.instr(ptx.SelpOp, "b32", [w, other, whole], i32) for w in words[: vec // 2]]
        else:
            values = words if rt == i32 else [em.instr(ptx.MovOp, "b32", [w], rt) for w in words]
            first = [em.instr(ptx.SelpOp, selp_spec(t), [v, self.other, whole], rt) for v in values]
        results = [em.reg(r.type) for r in first]
        for reg, v in zip(results, first, strict=True):
            em.assign(reg, v)
        skip = em.label("whole_vector")
        em.branch(skip, or_pred(em, [whole, self.access.none_inside(off, vec)]))
        tails = []
        for e in range(vec):
            each = list(off)
            each[-1] += e
            ok = self.access.ok_here(tuple(each))
            one = ptx.LdOp(f"global.{mem_spec(t)}", [addr], [rt], guard=ok, offset=e * eb)
            em.emit(one)
            tails.append(em.instr(ptx.SelpOp, selp_spec(t), [one.outs[0], self.other, ok], rt))
        if eb == 2:
            tails = [Lanes(t, tails[i], tails[i + 1]).packed(em) for i in range(0, vec, 2)]
        for reg, v in zip(results, tails, strict=True):
            em.assign(reg, v)
        em.place_label(skip)
        return [Lanes(t, word=w) for w in results] if eb == 2 else results

    def value(self, r: int) -> SSAValue:
        if r % self.vec == 0:
            self.group = self.load(r)
        if self.words:
            return self.group[(r % self.vec) // 2].scalars(self.em)[r % 2]
        return self.group[r % self.vec]

    def pair(self, r: int) -> Lanes:
        """Registers r and r+1 (r even)."""
        if not self.words:
            return Lanes(self.t, self.value(r), self.value(r + 1))
        if r % self.vec == 0:
            self.group = self.load(r)
        return self.group[(r % self.vec) // 2]


STREAMED_INPUTS[tile.LoadOp] = LoadGroups  # a load only a map uses: the map reads it (lower_load defers it)


@lowering(tile.LoadOp)
def lower_load(em: PtxEmitter, op: tile.LoadOp) -> None:
    if _streamable(op):
        em.deferred.add(op.result)  # the map that uses it loads it (lower_map)
        return
    groups = LoadGroups(em, op)
    parts: list[SSAValue] = []
    for r in range(0, groups.dist.registers, groups.vec):
        group = groups.load(r)
        if not groups.words:
            parts += group
            continue
        for k, lanes in enumerate(group):
            if lanes.word is not None:
                em.packed[(op.result, r + 2 * k)] = lanes.word
            parts += lanes.scalars(em)
    em.bind(op.result, parts)


def selp_spec(t: Attribute) -> str:
    if t in (f32, f64):
        return "f32" if t == f32 else "f64"
    bits = {f16: 16, bf16: 16}.get(t) or max(element_bytes(t) * 8, 16)
    return f"b{bits}"


@lowering(tile.StoreOp)
def lower_store(em: PtxEmitter, op: tile.StoreOp) -> None:
    view = view_of(op.view)
    dist = distribution(em, op.value.type)
    access = ViewAccess(em, view, dist)
    t = access.t
    vec, ragged = _vector(view, dist, t)
    require_alignment(em, view.array, vec * access.eb)
    spec, _, _ = _word_spec(t, vec)
    words = access.eb == 2 and vec >= 2  # 16-bit pairs go as packed words
    element, pair = tile_elements(em, op.value)
    owner = owner_predicate(em, dist)
    runs = _store_runs(view, dist, t)
    if runs:
        vec = 16 // access.eb
        words = access.eb == 2
    if runs:
        groups = []
        for r in range(0, dist.registers, vec):
            if words:
                data = [pair(r + i).packed(em) for i in range(0, vec, 2)]
            else:
                group = [element(r + i) for i in range(vec)]
                data = group if group[0].type == i32 else [em.instr(ptx.MovOp, "b32", [v], i32) for v in group]
            groups.append((dist.offsets[r], data))
        handoff = _RunHandoff(em, dist, runs, vec, groups, owner)
        for off, data in groups:
            _realigned_store(em, access, off, data, runs, owner, access.eb * _vector(view, dist, t)[0], handoff)
        return
    for r in range(0, dist.registers, vec):
        off = dist.offsets[r]
        if words:
            lanes = [pair(r + i) for i in range(0, vec, 2)]
            data = [w.packed(em) for w in lanes]
        else:
            group = [element(r + i) for i in range(vec)]
            data = _pack(em, group, t, vec)
        addr, imm = access.address(off)
        if not ragged:
            ok = and_pred(em, [access.ok(off), owner])
            em.emit(ptx.StOp(f"global.{spec}", [addr, *data], guard=ok, offset=imm))
            continue
        full, elements_ok = access.split(off, vec)
        em.emit(ptx.StOp(f"global.{spec}", [addr, *data], guard=and_pred(em, [full, owner]), offset=imm))
        if words:
            group = [v for w in lanes for v in w.scalars(em)]
        for e, (v, ok) in enumerate(zip(group, elements_ok, strict=True)):
            guard = and_pred(em, [ok, owner])
            em.emit(ptx.StOp(f"global.{mem_spec(t)}", [addr, v], guard=guard, offset=imm + e * access.eb))


def _store_runs(view: tile.ViewOp, dist: Distribution, t: Attribute) -> int:
    """For a store whose 16-byte alignment is not proven: how many consecutive lanes hold
    consecutive 16-byte groups of a row (lane bit 0 the column bit above a thread's 16 bytes),
    so that a lane can build the aligned chunk below its bytes from its own and the previous
    lane's (``_realigned_store``); 0 when that does not apply."""
    full = _realigned(view, dist, t)
    last = len(dist.shape) - 1
    if not full or dist.contiguous(last) != full:
        return 0
    k, m = full.bit_length() - 1, 0
    while m < len(dist.lane) and dist.lane[m] == (last, k + m):
        m += 1
    return 1 << m if m else 0


class _RunHandoff:
    """The last lane of each run of lanes hands its 16 bytes to the first lane of the next run
    of the same row through shared memory (one barrier for the whole store), so that lane too
    can store the aligned chunk below its bytes. Only for 1-D and 2-D tiles with a small
    scratch; otherwise the first lanes of runs store their first bytes one element at a time."""

    MAX_BYTES = 8192

    def __init__(self, em: PtxEmitter, dist: Distribution, runs: int, vec: int,
                 groups: list[tuple[tuple[int, ...], list[SSAValue]]], owner: SSAValue | None):  # fmt: skip
        self.em, self.ok = em, False
        rank = len(dist.shape)
        span = vec * runs  # columns of one run
        per_row = dist.shape[-1] // span
        rows = dist.shape[0] if rank == 2 else 1
        if rank > 2 or per_row < 2 or rows * per_row * 16 > self.MAX_BYTES:
            return
        self.ok, self.span, self.per_row = True, span, per_row
        self.base = thread_base(em, dist)
        self.scratch = em.shared("runs", rows * per_row * 16, 16)
        position = em.instr(ptx.AndOp, "b32", [em.special("laneid"), em.const(runs - 1, i32)], i32)
        writer = and_pred(em, [em.instr(ptx.SetpOp, "eq.u32", [position, em.const(runs - 1, i32)], i1), owner])
        em.barrier()  # earlier readers of the scratch are done
        for off, data in groups:
            em.emit(ptx.StOp("shared.v4.b32", [self.slot(off, 0), *data], guard=writer))
        em.barrier()

    def run_index(self, off: tuple[int, ...]) -> SSAValue:
        col = add32(self.em, self.base[-1], off[-1])
        return self.em.instr(ptx.ShrOp, "u32", [col, self.em.const(self.span.bit_length() - 1, i32)], i32)

    def slot(self, off: tuple[int, ...], back: int) -> SSAValue:
        em = self.em
        run = add32(em, self.run_index(off), -back)
        if len(off) == 2:
            row = add32(em, self.base[0], off[0])
            run = em.instr(ptx.MadOp, "lo.s32", [row, em.const(self.per_row, i32), run], i32)
        return em.instr(ptx.MadOp, "lo.s32", [run, em.const(16, i32), self.scratch], i32)

    def previous(self, off: tuple[int, ...]) -> tuple[SSAValue, list[SSAValue]]:
        """(this group's run is not its row's first in the tile, the previous run's last 16 bytes)."""
        em = self.em
        has = em.instr(ptx.SetpOp, "ne.u32", [self.run_index(off), em.const(0, i32)], i1)
        load = ptx.LdOp("shared.v4.b32", [self.slot(off, 1)], [i32] * 4, guard=has)
        em.emit(load)
        return has, list(load.outs)

    def has_next(self, off: tuple[int, ...]) -> SSAValue:
        em = self.em
        return em.instr(ptx.SetpOp, "lt.u32", [self.run_index(off), em.const(self.per_row - 1, i32)], i1)


def _realigned_store(em: PtxEmitter, access: ViewAccess, off: tuple[int, ...], data: list[SSAValue], runs: int,
                     owner: SSAValue | None, proven: int, handoff: _RunHandoff) -> None:  # fmt: skip
    """16 bytes (4 words) at an address known only at run time, ``sh`` bytes past an aligned chunk.
    ``sh == 0``: one aligned store. Else each lane stores the aligned chunk that starts below its
    bytes (the previous lane's last ``sh`` bytes, by a shuffle, then its own first ``16 - sh``)
    when every element of that chunk is in the view and the previous lane holds the group before;
    the elements no such store covers (the ends of each row; the first lane of a run when no
    ``_RunHandoff`` applies) are stored one by one, in a branch a warp takes only when one of
    its lanes needs it. No store writes a byte outside the view."""
    eb = access.eb
    vec = 16 // eb
    last = len(off) - 1
    addr, imm = access.address(off)
    if imm:
        addr = em.instr(ptx.AddOp, "s64", [addr, em.const(imm, i64)], i64)
    low = em.instr(ptx.CvtOp, "u32.u64", [addr], i32)
    sh = em.instr(ptx.AndOp, "b32", [low, em.const(15, i32)], i32)
    aligned = em.instr(ptx.SetpOp, "eq.u32", [sh, em.const(0, i32)], i1)
    below = em.instr(ptx.ShrOp, "u32", [sh, em.const(eb.bit_length() - 1, i32)], i32)  # the chunk's elements before ours
    col = add32(em, access.start[last], off[last])
    first = em.instr(ptx.SubOp, "s32", [col, below], i32)  # the chunk's first column

    def pos() -> SSAValue:
        return em.instr(ptx.AndOp, "b32", [em.special("laneid"), em.const(runs - 1, i32)], i32)

    position = em.invariant(("store-run", runs), pos)
    run_start = em.invariant(("run-start", runs), lambda: em.instr(ptx.SetpOp, "eq.u32", [position, em.const(0, i32)], i1))
    run_end = em.invariant(("run-end", runs), lambda: em.instr(ptx.SetpOp, "eq.u32", [position, em.const(runs - 1, i32)], i1))
    mask = em.const(-1, i32)
    prev = [shuffle(em, "up", w, em.const(1, i32), 32, mask) for w in data]
    after_start, before_end = em.instr(ptx.NotOp, "pred", [run_start], i1), em.instr(ptx.NotOp, "pred", [run_end], i1)
    if handoff.ok:  # the first lane of a run: the previous run's last bytes, from shared memory
        has_prev, handed = handoff.previous(off)
        prev = [em.instr(ptx.SelpOp, "b32", [h, p, run_start], i32) for h, p in zip(handed, prev, strict=True)]
        after_start = em.instr(ptx.OrOp, "pred", [after_start, has_prev], i1)
        before_end = em.instr(ptx.OrOp, "pred", [before_end, handoff.has_next(off)], i1)
    start = em.instr(ptx.SubOp, "s32", [em.const(16, i32), sh], i32)
    chunk = _window(em, prev + data, start, eb == 2 and proven < 4)
    out = [em.instr(ptx.SelpOp, "b32", [d, c, aligned], i32) for d, c in zip(data, chunk, strict=True)]
    rows_ok = access.ok(off, upto=last)
    bound = access.bounds[last]
    tail = list(off)
    tail[-1] += vec - 1
    whole = and_pred(em, [access.ok(off), access.ok(tuple(tail)), aligned])  # sh == 0 and every element inside

    def run_inside(first_col: SSAValue, count: int) -> SSAValue:  # both ends of the run inside
        ends = [inside(em, first_col, bound), inside(em, add32(em, first_col, count - 1), bound)]
        return em.instr(ptx.AndOp, "pred", ends, i1)

    unaligned = em.instr(ptx.NotOp, "pred", [aligned], i1)
    mine = and_pred(em, [rows_ok, unaligned, after_start, run_inside(first, vec)])
    nexts = and_pred(em, [rows_ok, unaligned, before_end, run_inside(add32(em, first, vec), vec)])
    chunk_ok = em.instr(ptx.OrOp, "pred", [whole, mine], i1)  # type: ignore[list-item]
    aligned_addr = em.instr(ptx.AndOp, "b64", [addr, em.const(-16, i64)], i64)
    em.emit(ptx.StOp("global.v4.b32", [aligned_addr, *out], guard=and_pred(em, [chunk_ok, owner])))
    spec = "b16" if eb == 2 else "b32"
    skip = em.label("stored")
    done = em.instr(ptx.OrOp, "pred", [whole, em.instr(ptx.AndOp, "pred", [mine, nexts], i1)], i1)  # type: ignore[list-item]
    done = or_pred(em, [done, access.none_inside(off, vec)])
    em.branch(skip, done)  # the element stores run only where a lane of the warp needs them
    lanes: list[SSAValue] = []
    for w in data:  # the elements themselves
        if eb == 2:
            unpack = ptx.MovOp("b32", [w], [access.t, access.t])
            em.emit(unpack)
            lanes += list(unpack.outs)
        else:
            lanes.append(w)
    for e, v in enumerate(lanes):
        each = list(off)
        each[-1] += e
        head = em.instr(ptx.SetpOp, "lt.u32", [below, em.const(vec - e, i32)], i1)  # in the chunk below
        by_chunk = em.instr(ptx.OrOp, "pred", [
            em.instr(ptx.AndOp, "pred", [head, mine], i1),
            em.instr(ptx.AndOp, "pred", [em.instr(ptx.NotOp, "pred", [head], i1), nexts], i1),
        ], i1)  # fmt: skip
        covered = em.instr(ptx.OrOp, "pred", [by_chunk, whole], i1)  # type: ignore[list-item]
        guard = and_pred(em, [access.ok_here(tuple(each)), em.instr(ptx.NotOp, "pred", [covered], i1), owner])
        em.emit(ptx.StOp(f"global.{spec}", [addr, v], guard=guard, offset=e * eb))
    em.place_label(skip)


def indexed_address(em: PtxEmitter, array: SSAValue, index: SSAValue, t: Attribute) -> SSAValue:
    return em.instr(ptx.MadOp, "wide.u32", [index, em.const(element_bytes(t), i32), em.value(array)], i64)


def constant_terms(index: SSAValue, depth: int = 8) -> tuple[list[SSAValue], int]:
    """``index`` as ``x_1 + ... + x_n + c``: the constants its adds and subtracts bring, in either
    summand of an add (``block + 1 + 2 * u``: ``block`` and 1 + 2u; ``row * k + (k0 + j)``: the
    terms ``row * k`` and ``k0``, and j). Index arithmetic is taken not to overflow i32 (an
    index that does is out of bounds, as C's signed overflow is undefined), so the sum of the
    x_i plus c is the element c after element x_1 + ... + x_n, wherever that is."""
    if not depth or type(owner := index.owner) not in (ptx.AddOp, ptx.SubOp) or index.type != i32:
        return [index], 0
    if "guard" in owner.properties or len(owner.srcs) != 2:  # type: ignore[union-attr]
        return [index], 0
    a, b = owner.srcs  # type: ignore[union-attr]
    ka, kb = const_int(a), const_int(b)
    if type(owner) is ptx.SubOp:  # x - k only: a subtracted sum would need its terms negated
        if kb is None:
            return [index], 0
        terms, c = constant_terms(a, depth - 1)
        return terms, c - signed(kb, 32)
    if ka is not None or kb is not None:
        terms, c = constant_terms(b if ka is not None else a, depth - 1)
        return terms, c + signed(ka if ka is not None else kb, 32)  # type: ignore[arg-type]
    ta, ca = constant_terms(a, depth - 1)
    tb, cb = constant_terms(b, depth - 1)
    if ca == 0 and cb == 0:  # no constant inside: the sum as it is
        return [index], 0
    return ta + tb, ca + cb


def indexed_access(em: PtxEmitter, array: SSAValue, index: SSAValue, t: Attribute) -> tuple[SSAValue, int]:
    """(address, immediate byte offset) of element ``index`` of a global ``array``: the constant
    terms of the index become the offset, so the elements of one block at known distances
    (a GGUF block's fields, the words of a row, the columns j of a strided row ``k0 + 8 i + j``)
    share one 64-bit address, as nvcc's ``&block->qs[2 * u]`` do."""
    terms, c = constant_terms(index)
    if c == 0:
        return indexed_address(em, array, index, t), 0
    eb = element_bytes(t)
    if not -(1 << 31) <= c * eb < 1 << 31:  # beyond ld's immediate: the index as it is
        return indexed_address(em, array, index, t), 0
    x = terms[0]
    for term in terms[1:]:  # the same sum for every c: ptxas computes it once
        x = em.instr(ptx.AddOp, "s32", [x, term], i32)
    # signed: x may be below 0 when x + c is not (the widened x + c must be the element's)
    return em.instr(ptx.MadOp, "wide.s32", [x, em.const(eb, i32), em.value(array)], i64), c * eb


@lowering(tile.GatherOp)
def lower_gather(em: PtxEmitter, op: tile.GatherOp) -> None:
    t = op.result.type.element_type  # type: ignore[attr-defined]
    other = em.value(op.other)
    out = []
    for idx, ok in zip(em.parts(op.index), em.parts(op.mask), strict=True):
        addr, imm = indexed_access(em, op.array, idx, t)
        out += masked_load(em, f"global.{mem_spec(t)}", addr, imm, [reg_type(t)], other, ok)
    em.bind(op.result, out)


@lowering(tile.ScatterOp)
def lower_scatter(em: PtxEmitter, op: tile.ScatterOp) -> None:
    t = op.value.type.element_type  # type: ignore[attr-defined]
    owner = owner_predicate(em, distribution(em, op.value.type))
    for idx, v, ok in zip(em.parts(op.index), em.parts(op.value), em.parts(op.mask), strict=True):
        guard = and_pred(em, [ok, owner])
        addr, imm = indexed_access(em, op.array, idx, t)
        em.emit(ptx.StOp(f"global.{mem_spec(t)}", [addr, v], guard=guard, offset=imm))


__all__ = ["LoadGroups", "indexed_access", "indexed_address", "masked_load", "selp_spec"]
