"""wgmma: warpgroup-wide asynchronous matrix multiply-accumulate (sm_90a).

Supported: ``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}`` (N = 8..256 by
8) with A from a shared-memory matrix descriptor or from four registers, B from a descriptor,
the ``scale-d`` predicate (or immediate), imm-scale-a/b (1 or -1) and imm-trans-a/b;
8-bit inputs, K-major only (no imm-trans), K = 32: ``m64nNk32{.satfinite}.s32.{s8,u8}.{s8,u8}``
(N = 8, 16, 24, then 32..256 by 16; only scale-d: exact int32 sums, wrapping modulo 2^32 or
clamped with ``.satfinite``) and ``m64nNk32.f32.{e4m3,e5m2}.{e4m3,e5m2}`` (N = 8..256 by 8;
scale-d, imm-scale-a/b); ``wgmma.fence``, ``wgmma.commit_group`` and ``wgmma.wait_group N``.

A warpgroup is four consecutive warps (128 threads, the first warp's number a multiple of 4);
all of its threads execute each wgmma instruction together, with the same descriptors.

Matrix descriptors (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29
leading dimension byte offset (LBO) >> 4, 32-45 stride dimension byte offset (SBO) >> 4,
49-51 base offset (must be 0 here), 62-63 swizzle (0 none, 1 128B, 2 64B, 3 32B). The operand
is read as the canonical layouts of the ISA (and CUTLASS's GMMA atoms), in units of 8x16-byte
core matrices, for a 64x16 A or Nx16 B slice indexed (row r of M or N, column k):

* K-major (imm-trans 0), no swizzle: ``start + (r/8) SBO + (r%8) 16 + (kb/16) LBO + kb%16``
  (kb = k * element bytes: a slice is 32 bytes deep, 16 elements of 16 bits or 32 of 8);
  swizzled with span S: ``start + (r/8) SBO + (r%8) S + kb`` (kb = k * 2 bytes)
* MN-major (imm-trans 1), no swizzle: ``start + (rb/16) SBO + rb%16 + (k%8) 16 + (k/8) LBO``;
  swizzled: ``start + (rb/S) LBO + rb%S + (k%8) S + (k/8) SBO`` (rb = r * 2 bytes)

and the swizzle then XORs address bits 4.. with bits 7.. (``tensor_map.swizzle``), on the
absolute shared address as the hardware does, so TMA's swizzled boxes read back unchanged.

Register fragments: A register j of warp w's lane holds the m16n8k16 (8-bit: m16n8k32) A
fragment of rows 16w..16w+15; accumulator register i of that lane holds row 16w + g + 8 ((i % 4) / 2), column
8 (i / 4) + 2t + i % 2 (g = lane / 4, t = lane % 4).

Asynchrony: the product is computed when the instruction issues and lands in the accumulator
registers at the ``wgmma.wait_group`` that retires its group; until then any other
instruction that reads or writes one of those registers is reported (a later wgmma on the
same accumulators is fine: it chains on the in-flight value). The hardware reads the
descriptor operands from shared memory any time until then: the async proxy
(``async_proxy.py``) holds them read until the retiring wait, so a write to them in between
is reported (and computing at issue is then exact); they must not be in flight (a bulk copy
not yet waited for), and generic writes to them need a ``fence.proxy.async`` before the
wgmma. Products and sums are exact in float64 (int64 for integers) and rounded once to f32
(an s32 accumulator wraps or, with ``.satfinite``, clamps); the queue carries every
accumulator as its 32 raw bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from .context import WARP, ExecContext
from .faults import DecodeError, SimFault
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .ops_mma import a_layout
from .program import Behaviour, Idx, Op, OpKind
from .ptx_types import PTX_TYPES
from .syntax import ImmOperand, Instruction, Operand, RegOperand, VecOperand
from .tensor_map import swizzle

WARPGROUP = 4 * WARP
M, K = 64, 16  # K of the 16-bit shapes; an operand slice is always 32 bytes deep
DESCRIPTOR_SWIZZLE = {0: 0, 1: 128, 2: 64, 3: 32}  # descriptor bits 62-63 -> span in bytes
_HALF = {"f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
_FP8 = {"e4m3": np.dtype(ml_dtypes.float8_e4m3fn), "e5m2": np.dtype(ml_dtypes.float8_e5m2)}
_INT8 = {"s8": np.dtype(np.int8), "u8": np.dtype(np.uint8)}
_INPUTS = {**_HALF, **_FP8, **_INT8}
_B32, _B64, _F32, _PRED = (PTX_TYPES[t] for t in ("b32", "b64", "f32", "pred"))
_INT_N = (8, 16, 24, *range(32, 257, 16))  # the N the ISA allows for s8/u8
_SHAPES = {**{f"m64n{n}k16": (n, 16) for n in range(8, 257, 8)}, **{f"m64n{n}k32": (n, 32) for n in range(8, 257, 8)}}


# --------------------------------------------------------------------------- descriptors


@dataclass(frozen=True)
class Descriptor:
    start: int
    lbo: int
    sbo: int
    base_offset: int
    span: int  # swizzle span in bytes, 0 for none

    @classmethod
    def decode(cls, desc: int) -> Descriptor:
        return cls(
            start=(desc & 0x3FFF) << 4,
            lbo=((desc >> 16) & 0x3FFF) << 4,
            sbo=((desc >> 32) & 0x3FFF) << 4,
            base_offset=(desc >> 49) & 0x7,
            span=DESCRIPTOR_SWIZZLE[(desc >> 62) & 0x3],
        )

    def addresses(self, rows: int, elem: int, mn_major: bool) -> np.ndarray:
        """(rows, 32 / elem) shared byte addresses of the operand's elements (row of M or N, k)."""
        r = np.arange(rows, dtype=np.int64)[:, None]
        k = np.arange(32 // elem, dtype=np.int64)[None, :]
        s = self.span
        if not mn_major:
            kb = k * elem
            inner = (r % 8) * 16 + (kb // 16) * self.lbo + kb % 16 if not s else (r % 8) * s + kb
            addr = self.start + (r // 8) * self.sbo + inner
        else:
            rb = r * elem
            if not s:
                addr = self.start + (rb // 16) * self.sbo + rb % 16 + (k % 8) * 16 + (k // 8) * self.lbo
            else:
                addr = self.start + (rb // s) * self.lbo + rb % s + (k % 8) * s + (k // 8) * self.sbo
        return swizzle(addr, s)


# --------------------------------------------------------------------------- fragments


def _gather(rows: int, cols: int, r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Invert a (lane, register) -> (row, col) map into a gather over the flattened registers."""
    flat = (r * cols + c).reshape(-1)
    gather = np.empty(rows * cols, dtype=np.int64)
    gather[flat] = np.arange(flat.size)
    assert np.array_equal(np.sort(flat), np.arange(rows * cols))
    return gather


def accumulator_gather(n: int) -> np.ndarray:
    """Per warp: gather from (lane, register) to the row-major 16 x n accumulator slice."""
    i = np.arange(n // 2)[None, :]
    lane = np.arange(WARP)[:, None]
    g, t = lane // 4, lane % 4
    return _gather(16, n, g + 8 * ((i % 4) // 2), 8 * (i // 4) + 2 * t + i % 2)


_A_REGS = {2: a_layout(16, 2), 1: a_layout(32, 4)}  # element bytes -> one warp's A fragment, 16 x 32 bytes


# --------------------------------------------------------------------------- the async queue


@dataclass
class _InFlight:
    threads: np.ndarray
    group: np.ndarray
    slots: list[int]
    values: np.ndarray  # (threads, registers) float32
    line: int
    reads: list[int] = field(default_factory=list)  # A-fragment register slots it still reads


@dataclass
class WgmmaQueue:
    """Results of issued wgmmas not yet retired by a wait, per thread and register slot."""

    committed: np.ndarray
    pending: list[_InFlight] = field(default_factory=list)
    busy: dict[int, np.ndarray] = field(default_factory=dict)  # slot -> per thread: in flight
    latest: dict[int, np.ndarray] = field(default_factory=dict)  # slot -> newest in-flight value
    line: dict[int, int] = field(default_factory=dict)  # slot -> PTX line of that wgmma
    # wgmma.fence: per thread, how many it executed; per operand register slot and thread, that
    # count when another instruction last named the register (a wgmma needs a fence since)
    fences: np.ndarray | None = None
    touched_at: dict[int, np.ndarray] = field(default_factory=dict)

    def fence(self, ctx: ExecContext, idx: Idx) -> None:
        if self.fences is None:
            self.fences = np.zeros(ctx.n, dtype=np.int64)
        self.fences[ctx.thread_index if idx is None else idx] += 1

    def touch(self, ctx: ExecContext, slots: list[int], idx: Idx) -> None:
        count = self.fences if self.fences is not None else np.zeros(ctx.n, dtype=np.int64)
        for slot in slots:
            at = self.touched_at.get(slot)
            if at is None:
                at = self.touched_at[slot] = np.full(ctx.n, -1, dtype=np.int64)
            if idx is None:
                at[:] = count
            else:
                at[idx] = count[idx]

    def unfenced(self, threads: np.ndarray, slots: list[int]) -> tuple[int, int | None] | None:
        """(thread, slot) of the first operand register of a wgmma about to issue that another
        instruction named since the thread's last wgmma.fence (slot None: no fence at all yet)."""
        if self.fences is None or not (self.fences[threads] > 0).all():
            first = threads if self.fences is None else threads[self.fences[threads] == 0]
            return int(first[0]), None
        count = self.fences[threads]
        for slot in slots:
            at = self.touched_at.get(slot)
            if at is not None:
                late = at[threads] >= count
                if late.any():
                    return int(threads[np.flatnonzero(late)[0]]), slot
        return None

    def issue(self, ctx: ExecContext, threads: np.ndarray, slots: list[int], values: np.ndarray, line: int,
              reads: list[int] = ()) -> None:  # type: ignore[assignment]  # fmt: skip
        self.pending.append(_InFlight(threads, self.committed[threads], slots, values, line, list(reads)))
        for j, slot in enumerate(slots):
            self.busy.setdefault(slot, np.zeros(ctx.n, dtype=bool))[threads] = True
            self.latest.setdefault(slot, np.zeros(ctx.n, dtype=np.float32))[threads] = values[:, j]
            self.line[slot] = line
        for slot in reads:
            self.busy.setdefault(slot, np.zeros(ctx.n, dtype=bool))[threads] = True
            self.line[slot] = line

    def current(self, ctx: ExecContext, slot: int, threads: np.ndarray) -> np.ndarray:
        """The accumulator a chained wgmma reads: the in-flight value where there is one."""
        raw = ctx.regs[slot][threads]
        value = raw.view(np.float32) if raw.dtype != np.float32 else raw
        busy = self.busy.get(slot)
        if busy is None:
            return value.astype(np.float32)
        return np.where(busy[threads], self.latest[slot][threads], value)

    def land(self, ctx: ExecContext, idx: Idx, keep: int) -> None:
        limit = self.committed - keep
        waiting = np.ones(ctx.n, dtype=bool) if idx is None else np.isin(np.arange(ctx.n), idx)
        remaining = []
        for p in self.pending:
            due = (p.group < limit[p.threads]) & waiting[p.threads]
            if due.any():
                for j, slot in enumerate(p.slots):
                    reg = ctx.regs[slot]
                    reg[p.threads[due]] = p.values[due, j].view(reg.dtype)
            if not due.all():
                keep_rows = ~due
                remaining.append(_InFlight(p.threads[keep_rows], p.group[keep_rows], p.slots, p.values[keep_rows], p.line, p.reads))
        self.pending = remaining
        for busy in self.busy.values():
            busy[:] = False
        for p in remaining:
            for slot in (*p.slots, *p.reads):
                self.busy[slot][p.threads] = True


def queue(ctx: ExecContext) -> WgmmaQueue:
    if ctx.wgmma is None:
        ctx.wgmma = WgmmaQueue(np.zeros(ctx.n, dtype=np.int64))
    return ctx.wgmma


def warpgroups(ctx: ExecContext, idx: Idx, name: str) -> np.ndarray:
    """The executing threads as (warpgroups, 128); faults unless whole warpgroups execute."""
    threads = ctx.thread_index if idx is None else idx
    if ctx.cta_threads % WARPGROUP:
        raise SimFault("sim", f"{name} needs blocks of whole warpgroups (a multiple of 128 threads), not {ctx.cta_threads}", int(threads[0]))
    whole = threads.size % WARPGROUP == 0
    if whole:
        groups = threads.reshape(-1, WARPGROUP)
        whole = bool(((groups[:, 0] % WARPGROUP == 0) & (groups[:, -1] - groups[:, 0] == WARPGROUP - 1)).all())
    if not whole:
        present = np.bincount(threads // WARPGROUP)
        lacking = int(np.flatnonzero((present > 0) & (present < WARPGROUP))[0])
        raise SimFault("sim", f"{name} is warpgroup-wide: only {int(present[lacking])} of the 128 threads of a warpgroup execute it", lacking * WARPGROUP)
    return groups


# --------------------------------------------------------------------------- wgmma.mma_async


def _read_late(ctx: ExecContext, warpgroup: np.ndarray, where: np.ndarray, what: str) -> None:
    """The async proxy reads a descriptor operand from issue until the wait_group that retires
    the wgmma (``async_proxy.py``): it must not be in flight, generic writes to it need a
    fence.proxy.async, and writes before the retiring wait are errors. The race check sees it
    as a read by the warpgroup: at issue, a writer outside it not ordered before by a barrier
    races; from the retiring wait on (``RaceChecker.retire_async_read``), a writer outside it
    not ordered after by a barrier does."""
    if ctx.race is not None:
        ctx.race.async_read(int(warpgroup[0]), int(warpgroup[-1]), where.reshape(-1), f"wgmma.mma_async {what} operand read",
                            own_writes=True)  # fmt: skip
    if ctx.async_proxy is not None:
        group = int(queue(ctx).committed[warpgroup[0]])
        ctx.async_proxy.async_read(ctx, warpgroup, where.reshape(-1), "wgmma", group)



def _registers(op: Operand, count: int, what: str, ins: Instruction) -> list[Operand]:
    if not isinstance(op, VecOperand) or len(op.items) != count:
        raise DecodeError(f"{ins.opcode}: {what} is a vector of {count} registers")
    return list(op.items)


def _immediate(op: Operand, allowed: tuple[int, ...], what: str, ins: Instruction) -> int:
    if not isinstance(op, ImmOperand) or op.kind != "int" or int(op.value) not in allowed:
        raise DecodeError(f"{ins.opcode}: {what} is an immediate among {allowed}")
    return int(op.value)


def _input_types(ins: Instruction, mods: Modifiers, k: int) -> tuple[str, str, str]:
    """(accumulator, A, B) type names of a shape of depth ``k``, or a DecodeError."""
    types = [t.name for t in mods.types()]
    if len(types) != 3:
        raise DecodeError(f"{ins.opcode} names the types of D, A and B")
    d, a, b = types
    ok = (
        (k == 16 and d == "f32" and a == b and a in _HALF)
        or (k == 32 and d == "f32" and a in _FP8 and b in _FP8)
        or (k == 32 and d == "s32" and a in _INT8 and b in _INT8)
    )
    if not ok:
        raise DecodeError(
            f"{ins.opcode}: the simulator supports k16 .f32.f16.f16 / .f32.bf16.bf16 and k32 "
            ".f32.{e4m3,e5m2}.{e4m3,e5m2} / .s32.{s8,u8}.{s8,u8}"
        )
    return d, a, b


def _mma_async(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    shape = mods.take(*_SHAPES)
    if shape is None:
        raise DecodeError(f"{ins.opcode}: supported shapes are m64nNk16 and m64nNk32, N = 8..256 by 8")
    n, k = _SHAPES[shape]
    satfinite = mods.flag("satfinite")
    d_name, a_name, b_name = _input_types(ins, mods, k)
    integer = d_name == "s32"
    if integer and n not in _INT_N:
        raise DecodeError(f"{ins.opcode}: integer wgmma takes N in {_INT_N}, not {n}")
    if satfinite and not integer:
        raise DecodeError(f"{ins.opcode}: .satfinite applies to integer wgmma only")
    a_elem, b_elem = _INPUTS[a_name], _INPUTS[b_name]
    # operands after d, a, b-desc: scale-d, then imm-scale-a/b (floats), then imm-trans-a/b (16-bit)
    immediates = 0 if integer else 2
    transposes = 2 if k == 16 else 0
    ops = operands(ins, tuple(range(4, 9)))
    a_in_regs = isinstance(ops[1], VecOperand)
    want = 4 + immediates + (transposes - (1 if a_in_regs and transposes else 0))
    if len(ops) != want:
        form = "d, a, b-desc, scale-d" + (", imm-scale-a, imm-scale-b" if immediates else "")
        form += (", [imm-trans-a,] imm-trans-b" if transposes else "")
        raise DecodeError(f"{ins.opcode}: {form}")
    d_ops = [dc.as_register(r) for r in _registers(ops[0], n // 2, "d", ins)]
    if not all(isinstance(r, RegOperand) for r in d_ops):
        raise DecodeError(f"{ins.opcode}: the accumulators are registers")
    slots = [dc.slot(r.name) for r in d_ops]  # type: ignore[union-attr]
    for r, slot in zip(d_ops, slots):
        if dc.register_types[slot].itemsize != 4:
            raise DecodeError(f"{ins.opcode}: accumulator {r} is not a 32-bit register")  # type: ignore[union-attr]
        dc.async_registers[slot] = r.name  # type: ignore[union-attr]
    a_ops = [dc.as_register(r) for r in _registers(ops[1], 4, "a", ins)] if a_in_regs else []
    a_regs = [dc.reader(r, _B32) for r in a_ops]
    a_slots = [dc.slot(r.name) for r in a_ops if isinstance(r, RegOperand)]
    for r in a_ops:
        if isinstance(r, RegOperand):
            dc.async_registers[dc.slot(r.name)] = r.name
    fenced_slots = slots + a_slots
    for slot in fenced_slots:
        dc.wgmma_operands.add(slot)
    dc_names = dict(dc.async_registers)
    a_desc = None if a_in_regs else dc.reader(ops[1], _B64)
    b_desc = dc.reader(ops[2], _B64)
    scale_d = dc.reader(ops[3], _PRED)
    scale_a = _immediate(ops[4], (1, -1), "imm-scale-a", ins) if immediates else 1
    scale_b = _immediate(ops[5], (1, -1), "imm-scale-b", ins) if immediates else 1
    trans_a = _immediate(ops[6], (0, 1), "imm-trans-a", ins) if transposes and not a_in_regs else 0
    trans_b = _immediate(ops[-1], (0, 1), "imm-trans-b", ins) if transposes else 0
    acc_gather = accumulator_gather(n)
    acc_scatter = np.argsort(acc_gather)
    wide = np.dtype(np.int64) if integer else np.dtype(np.float64)
    name, line = ins.opcode, ins.line

    def operand(ctx: ExecContext, groups: np.ndarray, reader, rows: int, mn_major: bool, what: str, elem: np.dtype) -> np.ndarray:  # type: ignore[no-untyped-def]
        raw = np.asarray(reader(ctx, groups.reshape(-1))).astype(np.uint64).reshape(groups.shape)
        if (raw != raw[:, :1]).any():
            g = int(np.flatnonzero((raw != raw[:, :1]).any(axis=1))[0])
            raise SimFault("sim", f"{name}: the {what} descriptor differs between threads of a warpgroup", int(groups[g, 0]))
        out = np.empty((groups.shape[0], rows, k), dtype=wide)
        for g, desc in enumerate(raw[:, 0].tolist()):
            d = Descriptor.decode(int(desc))
            if d.base_offset:
                raise SimFault("sim", f"{name}: {what} descriptor base offset {d.base_offset} is not supported (align swizzled tiles to the pattern)", int(groups[g, 0]))
            addr = d.addresses(rows, elem.itemsize, mn_major)
            if int(addr.max()) + elem.itemsize > ctx.shared_bytes:
                raise SimFault("memory", f"{name}: the {what} operand reaches past shared memory ({ctx.shared_bytes} bytes)", int(groups[g, 0]), int(addr.max()))
            base = int(ctx.shared_base[groups[g, 0]])
            where = base + addr[..., None] + np.arange(elem.itemsize)
            _read_late(ctx, groups[g], where, what)
            if ctx.shared_written is not None and not ctx.shared_written[where].all():
                raise SimFault("memory", f"{name}: the {what} operand reads shared memory nothing stored in this launch (check the descriptor)", int(groups[g, 0]))
            data = ctx.shared[where]
            out[g] = np.ascontiguousarray(data).view(elem)[..., 0].astype(wide)
        return out

    def a_from_registers(ctx: ExecContext, groups: np.ndarray) -> np.ndarray:
        idx = groups.reshape(-1)
        raw = np.stack([np.asarray(r(ctx, idx)).astype(np.uint32) for r in a_regs], axis=-1)  # (threads, 4)
        layout = _A_REGS[a_elem.itemsize]
        values = np.ascontiguousarray(raw).view(a_elem).reshape(-1, layout.gather.size)  # per warp
        tiles = values[:, layout.gather].astype(wide).reshape(-1, 4, 16, k)
        return tiles.reshape(-1, M, k)

    def accumulated(old: np.ndarray) -> np.ndarray:
        """The accumulator registers' raw bits (threads, n/2) as values."""
        return old.view(np.int32).astype(wide) if integer else old.astype(wide)

    def rounded(d: np.ndarray) -> np.ndarray:
        """(threads, n/2) results as the f32 bits the queue carries."""
        if not integer:
            return d.astype(np.float32)
        if satfinite:
            d = np.clip(d, -(2**31), 2**31 - 1)
        return d.astype(np.int32).view(np.float32)  # wraps modulo 2^32 without .satfinite

    def run(ctx: ExecContext, idx: Idx) -> None:
        groups = warpgroups(ctx, idx, name)
        threads = groups.reshape(-1)
        state = queue(ctx)
        unfenced = state.unfenced(threads, fenced_slots)
        if unfenced is not None:
            thread, slot = unfenced
            what = ("no wgmma.fence came before it" if slot is None else
                    f"register {dc_names[slot]} was accessed by another instruction since the last wgmma.fence")  # fmt: skip
            raise SimFault("sim", f"{name}: {what}; the PTX ISA requires wgmma.fence before the first wgmma.mma_async "
                                  "and between any other access to its accumulator or A registers and the wgmma", thread)  # fmt: skip
        a = a_from_registers(ctx, groups) if a_in_regs else operand(ctx, groups, a_desc, M, bool(trans_a), "A", a_elem)
        b = operand(ctx, groups, b_desc, n, bool(trans_b), "B", b_elem)  # (G, n, k)
        scale = np.broadcast_to(np.asarray(scale_d(ctx, threads)), threads.shape).reshape(groups.shape)[:, 0]
        d = np.matmul(scale_a * a, scale_b * np.swapaxes(b, 1, 2))  # (G, 64, n), exact products
        if scale.any():
            old = np.stack([state.current(ctx, s, threads) for s in slots], axis=-1)  # (threads, n/2)
            per_warp = accumulated(np.ascontiguousarray(old)).reshape(-1, WARP * (n // 2))[:, acc_gather].reshape(-1, M, n)
            d += np.where(scale[:, None, None], per_warp, 0)
        per_thread = rounded(d.reshape(-1, 16 * n)[:, acc_scatter].reshape(-1, n // 2))
        state.issue(ctx, threads, slots, per_thread, line, a_slots)

    return Behaviour(run=run, klass=f"wgmma.{shape}.{d_name}.{a_name}")


# --------------------------------------------------------------------------- fence, commit, wait


def make_wgmma(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    if not (mods.flag("sync") and mods.flag("aligned")):
        raise DecodeError(f"{ins.opcode}: wgmma instructions are .sync.aligned")
    form = mods.require("mma_async", "fence", "commit_group", "wait_group")
    name = ins.opcode
    if form == "mma_async":
        return _mma_async(ins, mods, dc)
    if form == "fence":
        operands(ins, 0)

        def fence(ctx: ExecContext, idx: Idx) -> None:
            warpgroups(ctx, idx, name)
            queue(ctx).fence(ctx, idx)

        return Behaviour(run=fence, klass="wgmma.fence")
    if form == "commit_group":
        operands(ins, 0)

        def commit(ctx: ExecContext, idx: Idx) -> None:
            warpgroups(ctx, idx, name)
            q = queue(ctx)
            if idx is None:
                q.committed += 1
            else:
                q.committed[idx] += 1

        return Behaviour(run=commit, klass="wgmma.commit_group")
    (n_op,) = operands(ins, 1)
    keep = _immediate(n_op, tuple(range(8)), "the group count", ins)

    def wait(ctx: ExecContext, idx: Idx) -> None:
        warpgroups(ctx, idx, name)
        if ctx.wgmma is not None:
            ctx.wgmma.land(ctx, idx, keep)
            if ctx.async_proxy is not None:  # the operand reads of the retired groups are done
                ctx.async_proxy.retire(ctx, idx, "wgmma", ctx.wgmma.committed, keep)
        if ctx.race is not None:  # an mbarrier arrival from now on releases them (race.py)
            ctx.race.wgmma_waited(ctx.thread_index if idx is None else idx)

    return Behaviour(run=wait, klass="wgmma.wait_group")


# --------------------------------------------------------------------------- in-flight registers


def guard_in_flight(ops: list[Op], touched: list[set[int]], async_registers: dict[int, str], operands: set[int]) -> None:
    """Make every instruction (but wgmma's own) that names a register some wgmma updates
    asynchronously (an accumulator) or reads (A fragments) check, when it runs, that no wgmma
    using it is still in flight, and record the access: the next wgmma using the register needs
    a ``wgmma.fence`` after it."""
    if not async_registers:
        return
    for op, regs in zip(ops, touched):
        hit = sorted(regs & async_registers.keys())
        if not hit or op.kind != OpKind.SIMPLE or op.run is None or op.klass.startswith("wgmma"):
            continue
        op.run = _checked(op.run, hit, [s for s in hit if s in operands], async_registers)


def _checked(run, slots: list[int], fenced: list[int], names: dict[int, str]):  # type: ignore[no-untyped-def]
    def checked(ctx: ExecContext, idx: Idx) -> None:
        q = ctx.wgmma
        if q is not None and q.pending:
            for slot in slots:
                busy = q.busy.get(slot)
                if busy is None:
                    continue
                mine = busy if idx is None else busy[idx]
                if mine.any():
                    k = int(np.flatnonzero(mine)[0])
                    raise SimFault(
                        "sim",
                        f"register {names[slot]} {'is the accumulator' if slot in q.latest else 'holds the A fragments'} "
                        f"of a wgmma.mma_async still in flight "
                        f"(PTX line {q.line[slot]}): wait for it with wgmma.wait_group first",
                        k if idx is None else int(idx[k]),
                    )
        run(ctx, idx)
        if fenced:
            queue(ctx).touch(ctx, fenced, idx)

    return checked


TABLE = {("wgmma", "*"): make_wgmma}
