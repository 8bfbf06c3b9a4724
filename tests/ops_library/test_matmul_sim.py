"""kaio.ops_library.matmul on the simulator: correct for every dtype and ragged shape, with the
memory behaviour the design promises (no bank conflicts, coalesced loads)."""

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio.ops_library import MatmulConfig, matmul
from kaio.ops_library.matmul_config import GpuModel, candidates, choose_config

SHAPES = [(128, 128, 128), (256, 128, 64), (200, 136, 72), (1, 1, 8)]
HALF = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def rel_error(got: np.ndarray, a: np.ndarray, b: np.ndarray, c0=None, alpha=1.0, beta=0.0) -> float:
    ref = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if c0 is not None:
        ref += beta * c0.astype(np.float64)
    return float(np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))


def run(dev, a_host, b_host, out_dtype, rng, **kw):
    m, n = a_host.shape[0], b_host.shape[1]
    out = dev.alloc_from(np.full((m, n), np.nan, dtype=out_dtype))  # poisoned: must be written
    matmul(dev.alloc_from(a_host), dev.alloc_from(b_host), out, **kw)
    return out.to_host()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("out_kind", ["f32", "input"])
def test_tensor_core_matmul_matches_float64(dev, shape, dtype, out_kind):
    rng = np.random.default_rng()
    m, n, k = shape
    t = HALF[dtype]
    a, b = rng.standard_normal((m, k)).astype(t), rng.standard_normal((k, n)).astype(t)
    out_dtype = np.float32 if out_kind == "f32" else t
    got = run(dev, a, b, out_dtype, rng)
    assert got.dtype == np.dtype(out_dtype)
    assert rel_error(got, a, b) <= (1e-5 if out_kind == "f32" else 5e-3)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_f32_simt_matmul_matches_float64(dev, shape):
    rng = np.random.default_rng()
    m, n, k = shape
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    assert rel_error(run(dev, a, b, np.float32, rng), a, b) <= 1e-5


def test_alpha_beta_update_c(dev):
    rng = np.random.default_rng()
    a = rng.standard_normal((96, 40)).astype(np.float16)
    b = rng.standard_normal((40, 72)).astype(np.float16)
    c0 = rng.standard_normal((96, 72)).astype(np.float32)
    c = dev.alloc_from(c0)
    matmul(dev.alloc_from(a), dev.alloc_from(b), c, alpha=1.5, beta=0.5)
    assert rel_error(c.to_host(), a, b, c0, alpha=1.5, beta=0.5) <= 1e-5


def test_host_arrays_in_host_array_out_bf16():
    rng = np.random.default_rng()
    a = rng.standard_normal((33, 24)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((24, 40)).astype(ml_dtypes.bfloat16)
    c = matmul(a, b, device="sim")
    assert isinstance(c, np.ndarray) and c.shape == (33, 40) and c.dtype == np.float32
    assert rel_error(c, a, b) <= 1e-5


@pytest.mark.parametrize(
    "config",
    [MatmulConfig(stages=0), MatmulConfig(layout="pad"), MatmulConfig((64, 64, 32), (2, 2), 2, "none"),
     MatmulConfig((32, 16, 32), (2, 2), 2)],
    ids=["no-cp-async", "pad", "unswizzled-2-stage", "8-column-warp-tiles"],
)
def test_other_pipelines_stay_correct(dev, config):
    rng = np.random.default_rng()
    a = rng.standard_normal((130, 96)).astype(np.float16)
    b = rng.standard_normal((96, 70)).astype(np.float16)
    assert rel_error(run(dev, a, b, np.float32, rng, config=config), a, b) <= 1e-5


def profile(dev, config=None):
    rng = np.random.default_rng()
    a = dev.alloc_from(rng.standard_normal((128, 128)).astype(np.float16))
    b = dev.alloc_from(rng.standard_normal((128, 128)).astype(np.float16))
    with dev.profiling():
        matmul(a, b, config=config)
    return dev.last_launch_report


def test_default_config_has_no_bank_conflicts_and_coalesced_loads(dev):
    report = profile(dev)
    print(report)
    ldmatrix, writes = report.shared_totals("ldmatrix"), report.shared_totals("cp.async write")
    assert ldmatrix.requests > 0 and ldmatrix.bank_conflicts == 0
    assert writes.requests > 0 and writes.bank_conflicts == 0
    loads = [row for row in report.global_memory if "cp.async" in row.text]
    efficiency = sum(r.bytes for r in loads) / (32 * sum(r.sectors for r in loads))
    assert efficiency >= 0.9


def test_unswizzled_layout_shows_the_conflicts_the_swizzle_removes(dev):
    plain = profile(dev, MatmulConfig(layout="none"))
    assert plain.shared_totals("ldmatrix").bank_conflicts > 0
    assert plain.shared_totals("ldmatrix").ways >= 2


def test_auto_on_the_simulator_uses_the_cost_model(dev):
    rng = np.random.default_rng()
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    assert rel_error(matmul(a, b, config="auto", device=dev), a, b) <= 1e-5
    small = choose_config(64, 64, 64, 2, True, (8, 8, 2), GpuModel(sms=dev.sm_count))
    large = choose_config(8192, 8192, 8192, 2, True, (8, 8, 2), GpuModel(sms=dev.sm_count))
    assert small in candidates(True, (8, 8, 2), 2) and large in candidates(True, (8, 8, 2), 2)
    # a tiny problem wants small tiles (more CTAs), a big one the big tiles
    assert small.block[0] * small.block[1] < large.block[0] * large.block[1]


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "kw", "message"),
    [
        ((4, 8), (9, 4), {}, "inner sizes differ"),
        ((4, 8), (8, 4), {"acc": np.float16}, "accumulates in f32"),
        ((4, 8, 1), (8, 4), {}, "2-D"),
    ],
)
def test_bad_arguments_are_named_before_launch(dev, a_shape, b_shape, kw, message):
    a = dev.zeros(a_shape, np.float16)
    b = dev.zeros(b_shape, np.float16)
    with pytest.raises(kaio.KaioTypeError, match=message):
        matmul(a, b, **kw)


def test_mismatched_types_and_outputs_are_refused(dev):
    a, b = dev.zeros((4, 8), np.float16), dev.zeros((8, 4), ml_dtypes.bfloat16)
    with pytest.raises(kaio.KaioTypeError, match="one type"):
        matmul(a, b)
    with pytest.raises(kaio.KaioTypeError, match="out must be f32 or f16"):
        matmul(a, dev.zeros((8, 4), np.float16), dev.zeros((4, 4), np.int32))
    with pytest.raises(kaio.KaioTypeError, match=r"shape \(4, 4\)"):
        matmul(a, dev.zeros((8, 4), np.float16), dev.zeros((4, 5), np.float32))
