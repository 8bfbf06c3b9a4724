"""``tile-layout``: a tile made of ranges, splats and broadcasts alone (``rows * k + cols``)
takes its full shape's own layout, not a row's or a column's: the layout of a (1, 16) row
broadcast down 16 rows spreads one row over the warps, so each element of the tile is held,
and a gather by it loaded, by several threads."""

from __future__ import annotations

import re

import numpy as np

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, f16, i32


@kaio.tile_kernel(num_warps=4)
def strided_gather(x: Array[f16], out: MutArray[f16], k: i32, R: kaio.constexpr = 16, C: kaio.constexpr = 16):
    cols = kt.expand_dims(kt.arange(C), 0)  # (1, C): the row first, as a kernel reads
    rows = kt.expand_dims(kt.arange(R), 1)  # (R, 1)
    at = cols * 8 + rows * k  # (R, C) from two broadcasts
    kt.store(out, (0, 0), kt.load(x, at, at < k * R), (R, C))


def test_a_broadcast_made_index_is_spread_over_every_thread(rng):
    text = kaio.compile(strided_gather, "sm_80").ptx
    loads = re.findall(r"ld\.global\S* %rs\d+", text)
    assert len(loads) == 16 * 16 // 128  # two elements per thread, none loaded twice (was 8)
    dev = kaio.Device("sim")
    k = 128
    x = rng.standard_normal(16 * k).astype(np.float16)
    out = dev.alloc_from(np.full((16, 16), np.nan, np.float16))
    strided_gather[1](dev.alloc_from(x), out, k)
    np.testing.assert_array_equal(out.to_host(), x.reshape(16, k)[:, 8 * np.arange(16)])
