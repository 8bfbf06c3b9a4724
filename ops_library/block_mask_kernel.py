"""The block mask's classification kernel: a ``mask_mod`` evaluated on the device, one
(block_q, block_kv) tile of (query, key) pairs per program.

Program (kb, qb, bh) calls the mask function on every pair of its tile (the indices clamped into
range, as the attention kernel does, and the pairs past ``SQ`` or ``SK`` left out) and counts
the visible ones: none makes the block empty (:data:`EMPTY`: never loaded), all of the tile's
valid rows times all of its ``BKV`` keys (so no key past ``SK``) makes it full (:data:`FULL`:
no per-element mask), anything else partial (:data:`PARTIAL`). It writes one i32 class to
``classes[(bh * NQB + qb) * NKB + kb]``.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio.ops_library.attention_mods import AttentionMods
from kaio.prelude import Array, MutArray, i32

EMPTY, PARTIAL, FULL = 0, 1, 2


@cache
def block_classes_tile_kernel(mods: AttentionMods) -> Any:
    """The classification kernel of one mask function (``mods.mask``) and ``mod_args`` types."""
    MASK = mods.mask  # noqa: N806 (read by the kernel at compile time)
    A0, A1, A2, A3 = mods.arg_types  # noqa: N806

    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def block_classes(classes: MutArray[i32], x0: Array[A0], x1: Array[A1], x2: Array[A2], x3: Array[A3],
                      SQ: i32, SK: i32, MH: i32, NQB: i32, NKB: i32,
                      BQ: kaio.constexpr = 128, BKV: kaio.constexpr = 128):  # fmt: skip
        kb = i32(kt.program_id(0))
        qb = i32(kt.program_id(1))
        bh = i32(kt.program_id(2))
        b, h = bh // MH, bh % MH
        rows = kt.expand_dims(qb * BQ + kt.arange(BQ), 1)
        cols = kt.expand_dims(kb * BKV + kt.arange(BKV), 0)
        inside = (rows < SQ) & (cols < SK)
        seen = MASK(b, h, kt.minimum(rows, SQ - 1), kt.minimum(cols, SK - 1), x0, x1, x2, x3) & inside
        visible = kt.sum(kt.sum(kt.where(seen, 1, 0), 1), 0)
        cls = PARTIAL
        if visible == 0:
            cls = EMPTY
        if visible == min(SQ - qb * BQ, BQ) * BKV:  # every valid row sees every key (none past SK)
            cls = FULL
        total = NQB * NKB * (bh + 1)
        kt.store(classes, ((bh * NQB + qb) * NKB + kb,), kt.full((1,), cls, i32), (total,))

    return block_classes
