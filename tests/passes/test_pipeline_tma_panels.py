"""pipeline-tma with paneled tensor maps: a tile several swizzle spans wide (the sm_90a matmul's
64 x 256 B tile, attention's K and V at head dim 128) whose column bound and offset are whole
panels loads as one box of a map that splits the columns in (panel elements, rows, panels); a
ragged column bound keeps one box per panel of the 2-D map (store-tma's C tiles likewise).
Results match numpy on the simulator either way, and a map whose panel stride is wrong does
not. (Attention's maps: tests/ops_library/test_attention_tma_panels.py.)"""

import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.compiled import TensorMapParam
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import WGMMA_CONFIGS
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.prelude import Array, MutArray, f16, f32, i32
from kaio.targets.ptx import sass
import kaio.tile as kt

CONFIG = WGMMA_CONFIGS[0]  # 128 x 256 x 64, 3 stages
LOAD = "cp.async.bulk.tensor.{}d.shared::cluster.global.mbarrier::complete_tx::bytes"
STORE = "cp.async.bulk.tensor.{}d.global.shared::cta.bulk_group"
WHOLE = (("m", 16), ("n", 64), ("k", 16))  # what a launch with n a multiple of 64 finds


@pytest.fixture(scope="module")
def hopper():
    return kaio.Device("sim", arch="sm_90a")


def _matmul(divisible):
    return kaio.compile(MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), CONFIG, divisible=divisible), "sm_90a")


def test_whole_panels_load_as_one_box_and_ragged_ones_as_one_box_each():
    assert CONFIG.block == (128, 256, 64) and CONFIG.stages == 3
    whole = _matmul(WHOLE)
    maps = {t.array: t for t in whole.tensor_maps}
    assert maps["a"] == TensorMapParam("a_tmap", "a", ("k", "m"), ("k",), (64, 128), 128)  # one panel: 2-D
    assert maps["b"] == TensorMapParam("b_tmap", "b", ("64", "k", "(n // 64)"), ("n", "64"), (64, 64, 4), 128)
    # two tiles in the prologue, one a trip: one box per operand each
    assert whole.ptx.count(LOAD.format(3)) == 3 and whole.ptx.count(LOAD.format(2)) == 3
    # store-tma's C (f16, 128 x 256) the same way: one box
    assert maps["c"] == TensorMapParam("c_tmap", "c", ("64", "(0 + m)", "(n // 64)"), ("n", "64"), (64, 128, 4), 128)
    assert whole.ptx.count(STORE.format(3)) == 1 and STORE.format(2) not in whole.ptx
    ragged = _matmul((("m", 16), ("n", 16), ("k", 16)))
    assert {t.array: t.box for t in ragged.tensor_maps}["b"] == (64, 64)
    assert LOAD.format(3) not in ragged.ptx and ragged.ptx.count(LOAD.format(2)) == 3 * (1 + 4)
    assert ragged.ptx.count(STORE.format(2)) == 4 and STORE.format(3) not in ragged.ptx


@pytest.mark.skipif(not sass.tools_available(), reason="ptxas / cuobjdump / nvdisasm wheels not installed")
def test_the_k_loop_issues_one_utmaldg_per_operand_without_spills():
    compiled = _matmul(WHOLE)
    report = sass.analyze(compiled.ptx, "sm_90a")[compiled.name]
    assert report.spill_stores == report.spill_loads == 0
    loop = report.main_loop()
    assert loop is not None and loop.counts["tma"] == 2 and loop.counts["mma"] == 4
    assert any(i.opcode.startswith("UTMALDG.3D") for i in loop.instructions)


@pytest.mark.parametrize("m, n, k", [
    (130, 256, 200),  # ragged M and K: rows of B past k read zero
    (17, 320, 72),  # the second tile's last three panels are past n: zeros, not stored
    (40, 264, 136),  # ragged N: the 2-D map's boxes
])  # fmt: skip
def test_paneled_maps_match_numpy(hopper, rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    with hopper.profiling():
        matmul(hopper.alloc_from(a), hopper.alloc_from(b), out)
    mix = hopper.last_launch_report.by_class
    assert (mix["cp.async.bulk.tensor.3d"] > 0) == (n % 64 == 0), "B by one box a tile exactly where n is whole panels"
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_a_wrong_panel_stride_gives_a_wrong_product(hopper, rng, monkeypatch):
    """The planted bug: panels 112 bytes apart instead of 128 (still inside every row). The
    simulator follows the map, so the product must come out wrong."""
    real = hopper._backend.encode_tensor_map

    def planted(dtype, base, dims, strides, box, swizzle):
        if tuple(box) == (64, 64, 4):  # B's paneled map (C's, f32: (32, 128, 8), stays right)
            strides = (strides[0], strides[1] - 16)
        return real(dtype, base, dims, strides, box, swizzle)

    monkeypatch.setattr(hopper._backend, "encode_tensor_map", planted)
    m, n, k = 64, 256, 64
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    matmul(hopper.alloc_from(a), hopper.alloc_from(b), out)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = out.to_host()
    np.testing.assert_allclose(got[:, :64], want[:, :64], rtol=1e-5, atol=1e-4)  # panel 0 does not use the stride
    assert not np.allclose(got[:, 64:], want[:, 64:], rtol=1e-3, atol=1e-2)


@kaio.tile_kernel(num_warps=4, num_stages=3)
def shifted_product(a: Array[f16], b: Array[f16], c: MutArray[f32], m: i32, n: i32, k: i32):
    """C[:, j] = A @ B[:, j - 64]: B's tiles start one panel left of C's, the first left of the
    tensor (its columns there read zero)."""
    n0 = i32(kt.program_id(0)) * 128
    acc = kt.zeros((64, 128), f32)
    for k0 in range(0, k, 64):
        acc = kt.dot(kt.load(a, (0, k0), (64, 64), (m, k)), kt.load(b, (k0, n0 - 64), (64, 128), (k, n)), acc)
    kt.store(c, (0, n0), acc, (m, n))


def test_a_box_starting_left_of_the_tensor_reads_zeros_there(hopper, rng):
    """The panel index of a negative column is negative (an arithmetic shift), not a huge
    unsigned one: the panels inside the tensor still read their columns."""
    m, n, k = 64, 128, 64  # one program: its B box starts at column -64
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = hopper.alloc_from(np.full((m, n), np.nan, np.float32))
    with hopper.profiling():
        shifted_product[n // 128, 128](hopper.alloc_from(a), hopper.alloc_from(b), out, m, n, k)
    assert hopper.last_launch_report.by_class["cp.async.bulk.tensor.3d"] > 0
    shifted = np.concatenate([np.zeros((k, 64)), b.astype(np.float64)[:, : n - 64]], axis=1)
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ shifted, rtol=1e-5, atol=1e-4)
