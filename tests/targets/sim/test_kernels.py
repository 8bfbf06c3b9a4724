"""Whole kernels (hand-written PTX in ptx/) against numpy references: fresh random inputs each
run, outputs poisoned before the launch."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from kaio.targets.sim import Simulator


def test_vector_add_v4(ptx_file, dev, rng):
    module = ptx_file("vector_add")
    n = 4 * 256 * 3
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    bufs = dev.array(a), dev.array(b), dev.empty(n, np.float32)
    dev.launch(module, "vadd4", (3, 1, 1), (256, 1, 1), *bufs)
    np.testing.assert_array_equal(dev.read(bufs[2]), a + b)


@pytest.mark.parametrize("n", [1, 1000, 4096])
def test_saxpy_with_bounds_guard(ptx_file, dev, rng, n):
    module = ptx_file("saxpy")
    assert module.entries["saxpy"].params == [
        ("saxpy_param_n", "u32", 4),
        ("saxpy_param_a", "f32", 4),
        ("saxpy_param_x", "u64", 8),
        ("saxpy_param_y", "u64", 8),
    ]
    a = np.float32(rng.standard_normal())
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    xb, yb = dev.array(x), dev.array(y)
    blocks = (n + 255) // 256 + 1  # one whole block past the end: all of it must do nothing
    dev.launch(module, "saxpy", (blocks, 1, 1), (256, 1, 1), np.uint32(n), a, xb, yb)
    expected = (x.astype(np.float64) * a + y).astype(np.float32)  # fma: one rounding
    np.testing.assert_array_equal(dev.read(yb), expected)


def test_divergence_and_reconvergence(ptx_file, dev, rng):
    module = ptx_file("divergence")
    n = 512
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    trips = rng.integers(0, 40, n).astype(np.uint32)
    out, ballot = dev.empty(n, np.int32), dev.empty(n, np.uint32)
    dev.launch(module, "branchy", (n // 128, 1, 1), (128, 1, 1), dev.array(x), dev.array(trips), out, ballot)

    y = np.where(x & 1, 3 * x + 1, x >> 1).astype(np.int64)
    expected = np.empty(n, dtype=np.int64)
    for i in range(n):
        acc = 0
        for k in range(int(trips[i])):
            acc = (acc + int(y[i])) if k & 1 else (acc ^ k)
        expected[i] = acc + int(y[i])
    np.testing.assert_array_equal(dev.read(out), expected.astype(np.int32))
    positive = (x > 0).reshape(-1, 32)
    bits = (positive * (1 << np.arange(32, dtype=np.uint64))).sum(axis=1).astype(np.uint32)
    np.testing.assert_array_equal(dev.read(ballot), np.repeat(bits, 32))


def test_warp_shuffle_collectives(ptx_file, dev, rng):
    module = ptx_file("warp_shuffle")
    n = 256
    x = rng.standard_normal(n).astype(np.float32)
    ints = rng.integers(-100, 100, n).astype(np.int32)
    sums, everyone, scan = dev.empty(n // 32, np.float32), dev.empty(n, np.float32), dev.empty(n, np.int32)
    dev.launch(module, "warp_collectives", (2, 1, 1), (128, 1, 1), dev.array(x), sums, everyone, dev.array(ints), scan)
    warps = x.reshape(-1, 32).astype(np.float64)
    np.testing.assert_allclose(dev.read(sums), warps.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dev.read(everyone), np.repeat(warps.sum(axis=1), 32), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(dev.read(scan), np.cumsum(ints.reshape(-1, 32), axis=1).reshape(-1))


def test_block_reduction_through_shared_memory(ptx_file, dev, rng):
    module = ptx_file("block_reduce")
    block, blocks = 128, 7
    n = block * blocks - 50  # the last block is partly out of range
    x = rng.standard_normal(n).astype(np.float32)
    out = dev.empty(blocks, np.float32)
    report = dev.launch(module, "block_sum", (blocks, 1, 1), (block, 1, 1), dev.array(x), out, np.uint32(n), shared_bytes=block * 4)
    padded = np.concatenate([x, np.zeros(blocks * block - n, np.float32)]).reshape(blocks, block)
    np.testing.assert_allclose(dev.read(out), padded.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
    assert report.barriers > 0


def test_generic_addressing_into_shared(ptx_file, dev, rng):
    module = ptx_file("generic_shared")
    block, blocks = 64, 3
    x = rng.standard_normal(block * blocks).astype(np.float32)
    out, flags = dev.empty(x.size, np.float32), dev.empty(x.size, np.uint8)
    dev.launch(module, "rotate", (blocks, 1, 1), (block, 1, 1), dev.array(x), out, flags)
    np.testing.assert_array_equal(dev.read(out), np.roll(x.reshape(blocks, block), -1, axis=1).reshape(-1))
    np.testing.assert_array_equal(dev.read(flags), np.ones(x.size, np.uint8))


@pytest.mark.parametrize("grid,block", [((3, 2, 1), (8, 4, 1)), ((2, 3, 4), (4, 2, 3)), ((5, 1, 2), (33, 1, 1))])
def test_multi_cta_grids_2d_3d(ptx_file, dev, grid, block):
    module = ptx_file("grid_coords")
    nb = int(np.prod(block))
    total = int(np.prod(grid)) * nb
    tids, ctas, lanes = dev.empty(total, np.uint32), dev.empty(total, np.uint32), dev.empty(total, np.uint32)
    dev.launch(module, "coords", grid, block, tids, ctas, lanes)
    z, y, x = np.meshgrid(*(np.arange(d) for d in block[::-1]), indexing="ij")
    tid = (x | y << 8 | z << 16).reshape(-1)
    cz, cy, cx = np.meshgrid(*(np.arange(d) for d in grid[::-1]), indexing="ij")
    cta = (cx | cy << 10 | cz << 20).reshape(-1)
    np.testing.assert_array_equal(dev.read(tids), np.tile(tid, cta.size))
    np.testing.assert_array_equal(dev.read(ctas), np.repeat(cta, nb))
    linear = np.arange(nb)
    np.testing.assert_array_equal(dev.read(lanes), np.tile(linear % 32 | (linear // 32) << 8, cta.size))


def test_atomic_histograms(ptx_file, dev, rng):
    module = ptx_file("atomics")
    n, nbins = 2048, 37
    x = rng.integers(0, 1 << 20, n).astype(np.uint32)
    bins = dev.array(np.zeros(nbins, np.uint32))
    old = dev.empty(n, np.uint32)
    dev.launch(module, "hist_global", (n // 256, 1, 1), (256, 1, 1), dev.array(x), bins, old, np.uint32(nbins))
    keys = x % nbins
    np.testing.assert_array_equal(dev.read(bins), np.bincount(keys, minlength=nbins))
    # atomics apply in thread order: each thread saw how many lower threads hit its bin
    seen = np.array([(keys[:i] == keys[i]).sum() for i in range(n)], dtype=np.uint32)
    np.testing.assert_array_equal(dev.read(old), seen)

    shared_bins = dev.array(np.zeros(64, np.uint32))
    dev.launch(module, "hist_shared", (n // 128, 1, 1), (128, 1, 1), dev.array(x), shared_bins)
    np.testing.assert_array_equal(dev.read(shared_bins), np.bincount(x & 63, minlength=64))


def test_atomic_float_sum_is_sequential_in_thread_order(ptx_file, dev, rng):
    module = ptx_file("atomics")
    x = (rng.standard_normal(1024) * 1000).astype(np.float32)
    total = dev.array(np.zeros(1, np.float32))
    dev.launch(module, "sum_f32", (4, 1, 1), (256, 1, 1), dev.array(x), total)
    assert dev.read(total)[0] == np.cumsum(x, dtype=np.float32)[-1]  # bit-exact: same order


def test_atomic_cas_retry_loop(ptx_file, dev):
    module = ptx_file("atomics")
    counter = dev.array(np.zeros(1, np.uint32))
    tickets = dev.empty(96, np.uint32)
    dev.launch(module, "cas_counter", (3, 1, 1), (32, 1, 1), counter, tickets)
    assert dev.read(counter)[0] == 96
    np.testing.assert_array_equal(np.sort(dev.read(tickets)), np.arange(96))


SCALE = (Path(__file__).parent / "ptx" / "scale.ptx").read_text()


def test_million_thread_launch_has_bounded_memory(dev, rng):
    sim = dev.sim
    module = sim.load(SCALE)
    n = (1 << 20) + 123
    x = rng.standard_normal(n).astype(np.float32)
    buf = dev.array(x)
    tracemalloc.start()
    report = dev.launch(module, "scale", ((n + 255) // 256, 1, 1), (256, 1, 1), buf, np.uint32(n))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(dev.read(buf), (x.astype(np.float64) * 2 + 1).astype(np.float32))
    assert report.batches > 1  # the launch really was split
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    assert report.threads == ((n + 255) // 256) * 256


def test_small_batches_give_the_same_answer(rng):
    sim = Simulator(max_batch_threads=64)
    module = sim.load(SCALE)
    x = rng.standard_normal(1000).astype(np.float32)
    addr = sim.memory.alloc(x.nbytes)
    sim.memory.write(addr, x)
    report = module.launch("scale", (4, 1, 1), (256, 1, 1), [addr.to_bytes(8, "little"), (1000).to_bytes(4, "little")])
    assert report.batches == 4  # a batch never splits a CTA
    np.testing.assert_array_equal(sim.memory.read(addr, x.nbytes).view(np.float32), (x.astype(np.float64) * 2 + 1).astype(np.float32))
