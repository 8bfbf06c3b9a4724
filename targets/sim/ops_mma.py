"""mma.sync.aligned: warp-wide matrix multiply-accumulate D = A B + C on tensor cores.

Supported (all ``.row.col``):

| shape    | A, B                          | C, D                   |
| -------- | ----------------------------- | ---------------------- |
| m16n8k16 | f16 f16 / bf16 bf16           | f32, or f16 with f16 inputs (D and C alike) |
| m16n8k8  | f16 f16 / bf16 bf16           | same                   |
| m16n8k32 | s8/u8 x s8/u8                 | s32 (``.satfinite`` clamps, otherwise wraps) |
| m16n8k16 | s8/u8 x s8/u8                 | s32                    |
| m16n8k32 | e4m3/e5m2 x e4m3/e5m2 (sm_89) | f32                    |

Fragment layout (PTX ISA, "Matrix fragments for mma.m16n8k*"), with g = lane / 4 and
t = lane % 4 and p = 32 / element bits elements per 32-bit register: A register r of a lane holds
row g + 8 (r % 2), columns (t + 4 (r / 2)) p .. + p - 1; B register r holds rows (k)
(t + 4 r) p .. + p - 1 of column g; accumulator element i (C and D) is row g + 8 (i / 2),
column 2t + i % 2 (an f16 accumulator packs elements 2j, 2j+1 in register j).

Accuracy: products are exact in float64 (int64 for integers), the K products and C are summed in
float64 and the sum is rounded once to the accumulator type. The float64 sum is exact unless the
terms span more than about 2^29 in magnitude (f16 products have 22 significant bits); hardware
tensor cores truncate intermediate sums, so results may differ from the GPU in the last bits.
fp8 products are exact in float64 as well; NaN operands (e4m3's S.1111.111, e5m2's NaNs) and
e5m2 infinities propagate through the sum as IEEE arithmetic says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .context import WARP, ExecContext
from .faults import DecodeError
from .floatmath import F16, round_f64
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .ops_warp import full_warps
from .program import Behaviour, Idx, Reader
from .ptx_types import PTX_TYPES
from .syntax import Instruction, Operand, VecOperand

_FLOAT_INPUTS = {"f16", "bf16"}
_INT_INPUTS = {"s8", "u8"}
_FP8_INPUTS = {"e4m3", "e5m2"}
_SHAPES = {  # shape -> (K, allowed input types)
    "m16n8k16": (16, _FLOAT_INPUTS | _INT_INPUTS),
    "m16n8k8": (8, _FLOAT_INPUTS),
    "m16n8k32": (32, _INT_INPUTS | _FP8_INPUTS),
}
# Input types one mma may mix (A and B of one family); f16 and bf16 never mix.
_FAMILIES = ({"f16"}, {"bf16"}, _INT_INPUTS, _FP8_INPUTS)
M, N = 16, 8

_LANE = np.arange(WARP)
_G, _T = _LANE // 4, _LANE % 4


@dataclass(frozen=True)
class FragmentLayout:
    """Where each element a warp holds sits in the matrix: ``gather[row * cols + col]`` is the
    position of element (row, col) in the warp's registers flattened as (lane, register, part)."""

    rows: int
    cols: int
    gather: np.ndarray


def _layout(rows: int, cols: int, lane_rc: tuple[np.ndarray, np.ndarray]) -> FragmentLayout:
    """``lane_rc`` gives (row, col) per (lane, register, part); invert it into a gather."""
    r, c = lane_rc
    gather = np.empty(rows * cols, dtype=np.int64)
    gather[(r * cols + c).reshape(-1)] = np.arange(r.size)
    assert np.array_equal(np.sort((r * cols + c).reshape(-1)), np.arange(rows * cols))
    return FragmentLayout(rows, cols, gather)


def a_layout(k: int, per: int) -> FragmentLayout:
    regs = M * k // WARP // per
    reg = np.arange(regs)[None, :, None]
    part = np.arange(per)[None, None, :]
    g, t = _G[:, None, None], _T[:, None, None]
    row = g + 8 * (reg % 2) + 0 * part
    col = (t + 4 * (reg // 2)) * per + part
    return _layout(M, k, (row, col))


def b_layout(k: int, per: int) -> FragmentLayout:
    regs = k * N // WARP // per
    reg = np.arange(regs)[None, :, None]
    part = np.arange(per)[None, None, :]
    g, t = _G[:, None, None], _T[:, None, None]
    row = (t + 4 * reg) * per + part
    col = g + 0 * row
    return _layout(k, N, (row, col))


def c_layout() -> FragmentLayout:
    i = np.arange(4)[None, :]
    g, t = _G[:, None], _T[:, None]
    return _layout(M, N, (g + 8 * (i // 2), 2 * t + i % 2))


_ACC = c_layout()
_SCATTER_ACC = np.argsort(_ACC.gather)  # matrix position of each (lane, element)


def _registers(op: Operand, count: int, what: str, ins: Instruction) -> list[Operand]:
    if not isinstance(op, VecOperand) or len(op.items) != count:
        raise DecodeError(f"{ins.opcode}: {what} is a vector of {count} registers")
    return list(op.items)


def make_mma(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    if not (mods.flag("sync") and mods.flag("aligned")):
        raise DecodeError(f"{ins.opcode}: mma needs .sync.aligned")
    shape = mods.take(*_SHAPES)
    if shape is None:
        raise DecodeError(f"{ins.opcode}: supported shapes are {', '.join(_SHAPES)}")
    if not (mods.flag("row") and mods.flag("col")):
        raise DecodeError(f"{ins.opcode}: {shape} takes the .row.col layout")
    satfinite = mods.flag("satfinite")
    types = mods.types()
    if len(types) != 4:
        raise DecodeError(f"{ins.opcode} names the types of D, A, B and C")
    td, ta, tb, tc = types
    k, inputs = _SHAPES[shape]
    integer = ta.name in _INT_INPUTS
    same_family = any(ta.name in f and tb.name in f for f in _FAMILIES)
    if ta.name not in inputs or tb.name not in inputs or not same_family:
        raise DecodeError(f"{ins.opcode}: unsupported input types .{ta.name}.{tb.name} for {shape}")
    accumulators = {"s32"} if integer else ({"f32", "f16"} if ta.name == "f16" else {"f32"})
    if td.name not in accumulators or tc.name not in accumulators:
        raise DecodeError(f"{ins.opcode}: accumulators of .{ta.name} inputs are .{'/.'.join(sorted(accumulators))}")
    if td != tc:
        raise DecodeError(f"{ins.opcode}: D and C have one type for {shape} (.{td.name} vs .{tc.name})")
    if satfinite and not integer:
        raise DecodeError(f"{ins.opcode}: .satfinite applies to integer mma only")

    per = 32 // ta.bits
    la, lb = a_layout(k, per), b_layout(k, per)
    d_op, a_op, b_op, c_op = operands(ins, 4)
    b32 = PTX_TYPES["b32"]
    a_regs = [dc.reader(r, b32) for r in _registers(a_op, M * k // WARP // per, "A", ins)]
    b_regs = [dc.reader(r, b32) for r in _registers(b_op, k * N // WARP // per, "B", ins)]
    c_type, d_type = (b32 if t.name == "f16" else t for t in (tc, td))  # f16 accumulators: f16x2 pairs
    c_regs = [dc.reader(r, c_type) for r in _registers(c_op, 2 if tc.name == "f16" else 4, "C", ins)]
    d_regs = [dc.writer(r, d_type) for r in _registers(d_op, 2 if td.name == "f16" else 4, "D", ins)]
    a_elem, b_elem = ta.value, tb.value
    wide = np.dtype(np.int64) if integer else np.dtype(np.float64)
    name = ins.opcode

    def fragment(ctx: ExecContext, idx: Idx, readers: list[Reader], elem: np.dtype, layout: FragmentLayout) -> np.ndarray:
        raw = np.stack([np.asarray(r(ctx, idx)).astype(np.uint32, copy=False) for r in readers], axis=-1)
        values = np.ascontiguousarray(raw).view(elem).reshape(-1, WARP * raw.shape[-1] * per)
        return values[:, layout.gather].astype(wide).reshape(-1, layout.rows, layout.cols)

    def accumulator(ctx: ExecContext, idx: Idx) -> np.ndarray:
        parts = [np.asarray(r(ctx, idx)) for r in c_regs]
        if tc.name == "f16":
            values = np.stack([p.astype(np.uint32, copy=False) for p in parts], axis=-1).view(np.float16)
        else:
            values = np.stack(parts, axis=-1)
        return values.reshape(-1, WARP * 4)[:, _ACC.gather].astype(wide).reshape(-1, M, N)

    def run(ctx: ExecContext, idx: Idx) -> None:
        full_warps(ctx, idx, name)
        a = fragment(ctx, idx, a_regs, a_elem, la)
        b = fragment(ctx, idx, b_regs, b_elem, lb)
        d = np.matmul(a, b) + accumulator(ctx, idx)  # (warps, 16, 8), exact products
        per_lane = d.reshape(-1, M * N)[:, _SCATTER_ACC].reshape(-1, 4)  # (threads, element)
        if integer:
            if satfinite:
                per_lane = np.clip(per_lane, -(2**31), 2**31 - 1)
            out = per_lane.astype(np.int32)  # wraps modulo 2^32 without .satfinite
            for j, write in enumerate(d_regs):
                write(ctx, idx, out[:, j])
        elif td.name == "f32":
            out = per_lane.astype(np.float32)
            for j, write in enumerate(d_regs):
                write(ctx, idx, out[:, j])
        else:
            halves = round_f64(per_lane.reshape(-1), F16, "rn").reshape(-1, 4).view(np.uint16).astype(np.uint32)
            for j, write in enumerate(d_regs):
                write(ctx, idx, halves[:, 2 * j] | (halves[:, 2 * j + 1] << np.uint32(16)))

    return Behaviour(run=run, klass=f"mma.{shape}.{td.name}.{ta.name}")


TABLE = {("mma", "*"): make_mma}
