"""Layout assignment regressions: kernels tile-layout once compiled to wrong results.

A map of a 1-D tile ``x`` (itself a map of a load, with other users) and a range, expanded into
a 2-D tile laid out by another load: tile-layout remade the map in the 2-D tile's slice layout
input by input, retyped the range in place, then found ``x`` could not be remade (its clone
would load a second time) and gave up, leaving the range retyped under a map still in its old
layout. lower-to-ptx reads a map's inputs register by register in the map's layout, so the
range's registers were read as other columns' values: in a cross-entropy backward, columns
4-7 and 12-15 of every 16 came out masked off. Every kernel runs on the sm_80 and the sm_90a
simulators, against numpy on fresh random inputs, into outputs poisoned before launch.
"""

from __future__ import annotations

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio.prelude import Array, MutArray, exp, f16, f32, i32, i64

from .conftest import poisoned


@pytest.fixture(params=["sm_80", "sm_90a"])
def device(request: pytest.FixtureRequest) -> kaio.Device:
    return kaio.Device("sim", arch=request.param)


# ------------------------------------------------------------------ the reduced kernels


@kaio.tile_kernel(num_warps=4)
def scaled_rows(xs: Array[f32], grid: Array[f32], out: MutArray[f32], R: kaio.constexpr = 64, C: kaio.constexpr = 32):
    x = kt.load(xs, (0,), (C,), (C,)) + 1.0  # a map of a load, used twice
    scaled = kt.expand_dims(x * f32(kt.arange(C)), 0)  # x and a range in one map
    kt.store(out, (0, 0), scaled + kt.load(grid, (0, 0), (R, C), (R, C)) + kt.expand_dims(x, 0), (R, C))


@pytest.mark.parametrize(("rows", "cols"), [(64, 32), (16, 64), (128, 16)])
def test_a_map_of_a_shared_tile_and_a_range_keeps_its_columns(device, rng, rows, cols):
    xs = rng.standard_normal(cols).astype(np.float32)
    grid = rng.standard_normal((rows, cols)).astype(np.float32)
    out = poisoned(device, (rows, cols), np.float32)
    scaled_rows[1](device.alloc_from(xs), device.alloc_from(grid), out, R=rows, C=cols)
    x = xs + np.float32(1)
    np.testing.assert_allclose(out.to_host(), (x * np.arange(cols, dtype=np.float32)) + grid + x, rtol=1e-6, atol=1e-6)


@kaio.tile_kernel(num_warps=4)
def masked_rows(xs: Array[i32], grid: Array[i32], out: MutArray[i32], R: kaio.constexpr = 64, C: kaio.constexpr = 32):
    x = kt.load(xs, (0,), (C,), (C,)) + 1
    keep = kt.expand_dims((x > kt.arange(C)) & (x != 7), 0)  # a predicate tile, made the same way
    data = kt.load(grid, (0, 0), (R, C), (R, C))
    kt.store(out, (0, 0), kt.where(keep, data, -1) + kt.expand_dims(x, 0), (R, C))


def test_a_predicate_of_a_shared_tile_and_a_range_keeps_its_columns(device, rng):
    rows, cols = 64, 32
    xs = rng.integers(-4, cols + 4, cols).astype(np.int32)
    xs[:4] = 6  # x == 7 somewhere
    grid = rng.integers(-1000, 1000, (rows, cols)).astype(np.int32)
    out = poisoned(device, (rows, cols), np.int32)
    masked_rows[1](device.alloc_from(xs), device.alloc_from(grid), out, R=rows, C=cols)
    x = xs + 1
    keep = (x > np.arange(cols)) & (x != 7)
    np.testing.assert_array_equal(out.to_host(), np.where(keep, grid, -1) + x)


# ------------------------------------------------------------------ the kernel it was found in


@kaio.tile_kernel(num_warps=4)
def cross_entropy_grad(logits_t: Array[f32], targets: Array[i64], grad_loss: Array[f32], dlogits_t: MutArray[f32],
                       r0: i32, end: i32, chunk: i32, vocab: i32, ignore: i32,
                       BV: kaio.constexpr = 64, BR: kaio.constexpr = 32):
    """The gradient of a cross-entropy over a transposed (vocab, chunk) slice of logits: the
    target's column gets +1, rows past ``end`` or with an ignored or out-of-range target 0."""
    v0 = i32(kt.program_id(0)) * BV
    entry = kt.expand_dims(kt.arange(BV) + v0, 1)
    for j0 in range(0, chunk, BR):
        target = i32(kt.load(targets, (r0 + j0,), (BR,), (end,)))
        inside = kt.arange(BR) + (r0 + j0) < end
        keep = kt.expand_dims(inside & (target != ignore) & (target >= 0) & (target < vocab), 0)
        g = kt.expand_dims(kt.load(grad_loss, (r0 + j0,), (BR,), (end,)), 0)
        t = kt.load(logits_t, (v0, j0), (BV, BR), (vocab, chunk))
        t = t + kt.where(entry == kt.expand_dims(target, 0), 1.0, 0.0)
        kt.store(dlogits_t, (v0, j0), kt.where(keep, g * t, 0.0), (vocab, chunk))


def test_the_cross_entropy_gradient_masks_only_ignored_rows(device, rng):
    vocab, chunk, tokens, r0, ignore = 150, 48, 50, 16, -100  # rows 50-63 past the end
    logits_t = rng.standard_normal((vocab, chunk)).astype(np.float32)
    targets = rng.integers(0, vocab, tokens)
    targets[rng.choice(tokens - 8, 8, replace=False)] = ignore  # the rows just before `end` stay live
    grad = rng.standard_normal(tokens).astype(np.float32)
    out = poisoned(device, (vocab, chunk), np.float32)
    cross_entropy_grad[(3,)](device.alloc_from(logits_t), device.alloc_from(targets), device.alloc_from(grad), out,
                             r0, tokens, chunk, vocab, ignore)
    rows = r0 + np.arange(chunk)
    inside = rows < tokens
    target = np.where(inside, targets[np.minimum(rows, tokens - 1)], 0)
    keep = inside & (target != ignore) & (target >= 0) & (target < vocab)
    g = np.where(inside, grad[np.minimum(rows, tokens - 1)], 0)
    onehot = np.arange(vocab)[:, None] == target[None, :]
    want = np.where(keep[None, :], g[None, :] * (logits_t + onehot), 0).astype(np.float32)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-6, atol=1e-6)


@kaio.tile_kernel(num_warps=4)
def scaled_softmax_rows(x: Array[f32], targets: Array[i64], grad_loss: Array[f32], dx: MutArray[f32],
                        rows: i32, cols: i32, ignore: i32, R: kaio.constexpr = 4, C: kaio.constexpr = 64):  # fmt: skip
    """A (R,) scale widened by expand_dims(., 1) beside a (1, C) == (R, 1) comparison of the
    targets (unused by the store): every row once took row 0's scale."""
    r0 = i32(kt.program_id(0)) * R
    target = i32(kt.load(targets, (r0,), (R,), (rows,)))
    keep = (target != ignore) & (target >= 0) & (target < cols)
    hit = kt.expand_dims(kt.arange(C), 0) == kt.expand_dims(target, 1)  # noqa: F841 (unused; its layout mattered)
    scale = kt.where(keep, kt.load(grad_loss, (r0,), (R,), (rows,)), 0.0)
    t = kt.load(x, (r0, 0), (R, C), (rows, cols), other=-1e30)
    p = exp(t - kt.expand_dims(kt.max(t, 1), 1))
    kt.store(dx, (r0, 0), p * kt.expand_dims(scale, 1), (rows, cols))


@pytest.mark.parametrize("rows", [3, 9])
def test_a_widened_row_scale_keeps_each_rows_value(device, rng, rows):
    cols, ignore = 37, -100
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    targets = rng.integers(0, cols, rows)
    targets[rows // 2] = ignore
    grad = rng.standard_normal(rows).astype(np.float32)
    out = poisoned(device, (rows, cols), np.float32)
    scaled_softmax_rows[(kaio.cdiv(rows, 4),)](device.alloc_from(x), device.alloc_from(targets), device.alloc_from(grad),
                                               out, rows, cols, ignore)
    keep = targets != ignore
    p = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    want = p * np.where(keep, grad, 0)[:, None]
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ conversions the layout avoids


@kaio.tile_kernel(num_warps=4)
def picked_and_max(x: Array[f16], col: Array[i32], out: MutArray[f32], n: i32, C: kaio.constexpr = 1024):
    t = f32(kt.load(x, (0, 0), (1, C), (1, n), other=-60000.0))  # a full tile with two users
    column = kt.expand_dims(kt.load(col, (0,), (1,), (1,)), 1)
    hit = kt.expand_dims(kt.arange(C), 0) == column  # made of a range and a broadcast column
    picked = kt.sum(kt.where(hit, t, 0.0), 1)
    kt.store(out, (0,), picked + kt.max(t, 1), (1,))


def test_a_map_of_a_range_made_mask_and_a_loaded_tile_takes_the_loaded_tile_s_layout(device, rng):
    # the mask is remade in the load's layout (8 halves per thread); before, the (1, 1024) f32
    # tile went through shared memory into the range's layout (4 per thread) and back
    stages: dict[str, str] = {}
    kaio.compile(picked_and_max, device.compile_arch, dump_ir=lambda s, text: stages.__setitem__(s, text))
    assert "tile.convert_layout" not in stages["tile-layout"].split("tile.range")[1]
    n, target = 1000, int(rng.integers(0, 1000))
    x = rng.standard_normal(n).astype(np.float16)
    out = poisoned(device, (1,), np.float32)
    picked_and_max[1](device.alloc_from(x), device.alloc_from(np.array([target], np.int32)), out, n)
    want = np.float32(x[target]) + np.float32(x.max())
    np.testing.assert_allclose(out.to_host(), [want], rtol=1e-6)
