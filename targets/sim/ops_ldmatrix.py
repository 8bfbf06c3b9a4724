"""ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16: warp-wide loads of 8x8
matrices of 16-bit elements from shared memory, distributed as the PTX ISA's fragment layout.

Matrix i (0 <= i < x) has its eight 16-byte rows at the addresses held by lanes 8i .. 8i+7; the
other lanes' addresses are ignored. Destination register i of lane l receives, low half first:

* without .trans: row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1 of matrix i;
* with .trans: rows 2 (l % 4) and 2 (l % 4) + 1 of column l // 4 (the transposed matrix).

The instruction is warp-synchronous: all 32 lanes must execute it together.
"""

from __future__ import annotations

import numpy as np

from .context import WARP, ExecContext
from .faults import DecodeError, first_fault
from .memory import SHARED_WINDOW, WINDOW_SIZE
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .ops_memory import SPACE_NAMES
from .ops_warp import full_warps
from .program import Behaviour, Idx
from .ptx_types import PTX_TYPES
from .spaces import check_shared_written, locate
from .syntax import Instruction, VecOperand

_B32 = PTX_TYPES["b32"]
ROW_BYTES = 16

_LANE = np.arange(WARP)
# (row, column) of the two elements each lane receives from a matrix, low half first.
_PLAIN = ((_LANE // 4, 2 * (_LANE % 4)), (_LANE // 4, 2 * (_LANE % 4) + 1))
_TRANS = ((2 * (_LANE % 4), _LANE // 4), (2 * (_LANE % 4) + 1, _LANE // 4))


def make_ldmatrix(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    if not (mods.flag("sync") and mods.flag("aligned")):
        raise DecodeError(f"{ins.opcode}: ldmatrix needs .sync.aligned")
    if mods.take("m8n8") is None:
        raise DecodeError(f"{ins.opcode}: only the .m8n8 shape (16-bit elements) is supported")
    count = int(mods.require("x1", "x2", "x4")[1:])
    trans = mods.flag("trans")
    space = mods.take(*(m for m in SPACE_NAMES if SPACE_NAMES[m] == "shared"))
    mods.one_type({"b16"})
    d_op, a_op = operands(ins, 2)
    items = list(d_op.items) if isinstance(d_op, VecOperand) else [d_op]
    if len(items) != count:
        raise DecodeError(f"{ins.opcode} writes {count} register(s), {len(items)} named")
    writers = [dc.writer(item, _B32) for item in items]
    address = dc.address(a_op, "shared" if space else None)
    generic = space is None
    lo_pick, hi_pick = _TRANS if trans else _PLAIN
    name = ins.opcode
    row_offsets = np.arange(ROW_BYTES // 2, dtype=np.int64)

    def run(ctx: ExecContext, idx: Idx) -> None:
        full_warps(ctx, idx, name)
        threads = ctx.thread_index if idx is None else idx
        m = threads.size
        addr = np.broadcast_to(np.asarray(address(ctx, idx), dtype=np.uint64), (m,)).reshape(-1, WARP)
        rows = addr[:, : 8 * count]  # (warps, 8 * count): the row addresses, matrix-major
        row_threads = threads.reshape(-1, WARP)[:, : 8 * count].reshape(-1)
        flat = rows.reshape(-1)
        if generic:
            outside = (flat < np.uint64(SHARED_WINDOW)) | (flat >= np.uint64(SHARED_WINDOW + WINDOW_SIZE))
            if outside.any():
                raise first_fault(outside, row_threads, "memory", "ldmatrix address is not in shared memory", flat)
            flat = flat - np.uint64(SHARED_WINDOW)
        offsets = np.asarray(locate(ctx, "shared", row_threads, flat, ROW_BYTES, ROW_BYTES, "ldmatrix read"))
        if ctx.race is not None:  # each row is read on behalf of the lane that gave its address
            ctx.race.read(row_threads, offsets, ROW_BYTES)
        if ctx.async_proxy is not None:
            ctx.async_proxy.generic_read(ctx, row_threads, offsets, ROW_BYTES)
        for half in (0, 8):
            check_shared_written(ctx, row_threads, offsets + half, 8, flat + np.uint64(half))
        if ctx.profiler is not None:
            ctx.profiler.ldmatrix_access(ctx, row_threads, flat, count)
        elements = ctx.view("shared", 2)[(offsets // 2)[:, None] + row_offsets]  # (rows, 8) u16
        matrices = elements.reshape(-1, count, 8, 8)  # (warps, matrix, row, column)
        lo = matrices[:, :, lo_pick[0], lo_pick[1]].astype(np.uint32)  # (warps, matrix, lane)
        hi = matrices[:, :, hi_pick[0], hi_pick[1]].astype(np.uint32)
        packed = lo | (hi << np.uint32(16))
        for i, write in enumerate(writers):
            write(ctx, idx, packed[:, i, :].reshape(-1))

    return Behaviour(run=run, klass=f"ldmatrix.x{count}{'.trans' if trans else ''}", shared_access=ROW_BYTES)


TABLE = {("ldmatrix", "*"): make_ldmatrix}
