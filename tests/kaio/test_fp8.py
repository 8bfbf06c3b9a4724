"""The OCP FP8 types f8e4m3 / f8e5m2: host arrays, kernel arguments, conversions in SIMT and tile
kernels on the simulator (sm_89), the arch gate, and what fp8 refuses (arithmetic)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from kaio.targets.ptx.toolchain import assemble, find_ptxas

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.prelude import (
    Array,
    MutArray,
    block_dim_x,
    block_idx_x,
    f8e4m3,
    f8e5m2,
    f16,
    f32,
    i32,
    thread_idx_x,
    u8,
)

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)


def satfinite(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """numpy's (ml_dtypes') conversion made satfinite: overflow and infinities saturate, NaN is 0x7F."""
    wide = x.astype(np.float64)
    largest = float(ml_dtypes.finfo(dt).max)
    with np.errstate(over="ignore", invalid="ignore"):
        bits = np.clip(wide, -largest, largest).astype(dt).view(np.uint8)
    return np.where(np.isnan(wide), np.uint8(0x7F), bits)


def edge_values(rng: np.random.Generator, n: int) -> np.ndarray:
    edges = np.array([0.0, -0.0, 1.0, -1.5, 448.0, 464.0, 465.0, 500.0, -1e9, 57344.0, 61440.0, 1e-3, 2.0**-9, 2.0**-10,
                      2.0**-17, np.inf, -np.inf, np.nan], np.float32)  # fmt: skip
    rand = (rng.standard_normal(n - len(edges)) * np.exp2(rng.integers(-10, 12, n - len(edges)))).astype(np.float32)
    return np.concatenate([edges, rand])


@kaio.gpu_kernel(block_size=64)
def fp8_round_trip(x: Array[f32], q4: MutArray[f8e4m3], q5: MutArray[f8e5m2], back: MutArray[f32], half: MutArray[f16], n: i32):
    i = i32(thread_idx_x() + block_idx_x() * block_dim_x())
    if i < n:
        a = f8e4m3(x[i])
        q4[i] = a
        q5[i] = f8e5m2(f16(x[i]))  # from f16: one rounding either way (f16 -> f32 is exact)
        back[i] = f32(a)
        half[i] = f16(q5[i])


@pytest.fixture
def dev() -> kaio.Device:
    return kaio.Device("sim", arch="sm_89")


def test_fp8_types_are_ml_dtypes_and_ptx_types() -> None:
    assert f8e4m3.np_dtype == E4M3 and f8e5m2.np_dtype == E5M2
    assert dtypes.from_numpy(E4M3) is f8e4m3 and dtypes.from_numpy(E5M2) is f8e5m2
    assert (f8e4m3.ptx, f8e5m2.ptx, f8e4m3.nbytes) == ("e4m3", "e5m2", 1)
    assert f8e4m3.is_fp8 and not f16.is_fp8 and not u8.is_fp8
    assert float(f8e4m3(1.5)) == 1.5  # calling the type on the host converts, as for f16


def test_simt_conversions_round_saturate_and_keep_nan(dev: kaio.Device, rng: np.random.Generator) -> None:
    x = edge_values(rng, 200)
    n = len(x)
    outs = [dev.alloc_from(np.full(n, 0x55, np.uint8).view(dt)) for dt in (E4M3, E5M2)]  # poison
    back, half = dev.alloc_from(np.full(n, np.nan, np.float32)), dev.alloc_from(np.full(n, np.nan, np.float16))
    fp8_round_trip[(n + 63) // 64](dev.alloc_from(x), outs[0], outs[1], back, half, n)
    q4, q5 = outs[0].to_host().view(np.uint8), outs[1].to_host().view(np.uint8)
    np.testing.assert_array_equal(q4, satfinite(x, E4M3))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(q5, satfinite(x.astype(np.float16), E5M2))
    want_back = satfinite(x, E4M3).view(E4M3).astype(np.float32)
    np.testing.assert_array_equal(back.to_host(), want_back)  # NaN == NaN positions too
    np.testing.assert_array_equal(half.to_host(), q5.view(E5M2).astype(np.float16))


def test_fp8_to_and_from_integers_go_by_f32(dev: kaio.Device, rng: np.random.Generator) -> None:
    @kaio.gpu_kernel(block_size=32)
    def via_int(x: Array[i32], y: MutArray[f8e4m3], z: MutArray[i32], n: i32):
        i = i32(thread_idx_x())
        if i < n:
            y[i] = f8e4m3(x[i])
            z[i] = i32(f8e4m3(x[i]))

    x = np.concatenate([np.array([0, 1, -17, 300, 1 << 30, -(1 << 30)], np.int32), rng.integers(-600, 600, 26).astype(np.int32)])
    y, z = dev.alloc_from(np.zeros(32, E4M3)), dev.alloc_from(np.full(32, -7, np.int32))
    via_int[1](dev.alloc_from(x), y, z, 32)
    want = satfinite(x.astype(np.float64), E4M3)
    np.testing.assert_array_equal(y.to_host().view(np.uint8), want)
    np.testing.assert_array_equal(z.to_host(), want.view(E4M3).astype(np.float32).astype(np.int32))


@kaio.tile_kernel(num_warps=4)
def scale_fp8(x: Array[f8e4m3], scale: f32, y: MutArray[f8e5m2], n: i32, BLOCK: kaio.constexpr):
    offs = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    mask = offs < n
    v = f32(kt.load(x, offs, mask=mask))
    kt.store(y, offs, f8e5m2(v * scale), mask=mask)


def test_tile_kernel_loads_converts_and_stores_fp8(dev: kaio.Device, rng: np.random.Generator) -> None:
    n = 300
    codes = rng.integers(0, 256, n).astype(np.uint8)
    codes[:3] = [0x7F, 0xFF, 0x7E]  # NaN, -NaN, 448
    x = codes.view(E4M3)
    y = dev.alloc_from(np.full(n, 0x33, np.uint8).view(E5M2))
    scale_fp8[(n + 127) // 128](dev.alloc_from(x), 3.0, y, n, BLOCK=128)
    want = satfinite(x.astype(np.float32) * np.float32(3.0), E5M2)
    np.testing.assert_array_equal(y.to_host().view(np.uint8), want)


def test_fp8_scalar_parameters_and_constants(dev: kaio.Device) -> None:
    @kaio.gpu_kernel(block_size=32)
    def consts(s: f8e5m2, y: MutArray[f32]):
        if thread_idx_x() == 0:
            y[0] = f32(s)
            y[1] = f32(f8e4m3(500.0))  # folded as the runtime converts: satfinite
            y[2] = f32(f8e4m3(0.3))

    y = dev.alloc_from(np.full(3, np.nan, np.float32))
    consts[1](1000.0, y)
    assert list(y.to_host()) == [1024.0, 448.0, float(np.float32(0.3).astype(E4M3))]
    with pytest.raises(kaio.KaioTypeError, match="overflows f8e5m2"):
        consts[1](1e6, y)


def test_fp8_conversion_needs_sm_89() -> None:
    with pytest.raises(kaio.KaioTargetError, match="sm_89"):
        kaio.compile(fp8_round_trip, arch="sm_80")


@pytest.mark.skipif(find_ptxas() is None, reason="needs the ptxas wheel")
@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
def test_ptxas_assembles_fp8_kernels(arch: str) -> None:
    for k, kw in ((fp8_round_trip, {}), (scale_fp8, {"BLOCK": 128})):
        report = assemble(kaio.compile(k, arch=arch, **kw).ptx, arch)
        assert not any(report.spill_stores.values()) and not any(report.spill_loads.values()), report.log


def test_fp8_storage_only_loads_and_stores_on_any_arch(dev: kaio.Device) -> None:
    @kaio.gpu_kernel(block_size=32)
    def copy8(x: Array[f8e4m3], y: MutArray[f8e4m3]):
        i = thread_idx_x()
        y[i] = x[i]

    kaio.compile(copy8, arch="sm_80")  # bytes move on any arch: no conversion needed
    x = np.arange(32, dtype=np.uint8).view(E4M3)
    y = dev.alloc_from(np.zeros(32, E4M3))
    copy8[1](dev.alloc_from(x), y)
    np.testing.assert_array_equal(y.to_host().view(np.uint8), x.view(np.uint8))


def test_fp8_literals_adapt_but_never_saturate_silently(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import importlib.util

    src = (
        "import kaio\nfrom kaio.prelude import *\n"
        "@kaio.gpu_kernel(block_size=32)\n"
        "def ok(y: MutArray[f8e4m3]):\n    y[0] = 1.5\n    y[1] = 464.0\n"  # 464 rounds (to even) to 448
        "@kaio.gpu_kernel(block_size=32)\n"
        "def bad(y: MutArray[f8e4m3]):\n    y[0] = 465.0\n"
    )
    path = tmp_path / "fp8_literals.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("fp8_literals", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(kaio.KaioCompileError, match=r"out of range for f8e4m3(.|\n)*saturation"):
        spec.loader.exec_module(module)
        kaio.compile(module.bad, arch="sm_89")
    dev = kaio.Device("sim", arch="sm_89")
    y = dev.alloc_from(np.zeros(2, E4M3))
    module.ok[1](y)
    assert list(y.to_host().astype(np.float32)) == [1.5, 448.0]


def test_launch_checks_fp8_array_dtypes(dev: kaio.Device) -> None:
    x = dev.alloc_from(np.zeros(8, np.float32))
    q4, q5 = dev.alloc_from(np.zeros(8, E4M3)), dev.alloc_from(np.zeros(8, E5M2))
    back, half = dev.alloc_from(np.zeros(8, np.float32)), dev.alloc_from(np.zeros(8, np.float16))
    with pytest.raises(kaio.KaioTypeError, match="q4"):
        fp8_round_trip[1](x, dev.alloc_from(np.zeros(8, np.uint8)), q5, back, half, 8)
    with pytest.raises(kaio.KaioTypeError, match="q5"):
        fp8_round_trip[1](x, q4, q4, back, half, 8)  # e4m3 where e5m2 is declared


def test_torch_fp8_cpu_tensors_run_on_the_simulator(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(edge_values(rng, 64))
    q4 = torch.full((64,), 0.5).to(torch.float8_e4m3fn)
    q5 = torch.full((64,), 0.5).to(torch.float8_e5m2)
    back, half = torch.full((64,), float("nan")), torch.full((64,), float("nan"), dtype=torch.float16)
    fp8_round_trip.launch(kaio.Device("sim", arch="sm_89"), x, q4, q5, back, half, 64, grid=1)
    np.testing.assert_array_equal(q4.view(torch.uint8).numpy(), satfinite(x.numpy(), E4M3))
    np.testing.assert_array_equal(back.numpy(), satfinite(x.numpy(), E4M3).view(E4M3).astype(np.float32))


@pytest.mark.parametrize("body", ["y[0] = x[0] + x[1]", "y[0] = -x[0]", "b = x[0] < x[1]", "y[0] = max(x[0], x[1])", "y[0] = x[0] * 2.0"])
def test_fp8_arithmetic_is_refused_with_a_hint(body: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import importlib.util

    src = (
        "import kaio\nfrom kaio.prelude import *\n"
        "@kaio.gpu_kernel(block_size=32)\n"
        f"def k(x: Array[f8e4m3], y: MutArray[f8e4m3]):\n    {body}\n"
    )
    path = tmp_path / "fp8_kernel.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("fp8_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(kaio.KaioCompileError, match="fp8 is a storage type") as info:
        spec.loader.exec_module(module)  # kernels are checked when defined
        kaio.compile(module.k, arch="sm_89")
    assert "f32(x)" in str(info.value)


def test_torch_and_dlpack_fp8_dtypes() -> None:
    torch = pytest.importorskip("torch")
    from kaio.runtime import dlpack, tensors

    assert tensors.kaio_type(torch.float8_e4m3fn) is f8e4m3
    assert tensors.kaio_type(torch.float8_e5m2) is f8e5m2
    assert tensors.torch_dtype(f8e5m2) is torch.float8_e5m2
    for dt in (E4M3, E5M2):
        assert dlpack.numpy_dtype(*dlpack.dtype_code(dt), 1) == dt


def test_every_kaio_type_has_a_tma_element_type() -> None:
    """fp8 tiles reach TMA as bytes (CU_TENSOR_MAP_DATA_TYPE_UINT8): a wgmma fp8 kernel's maps encode."""
    from kaio.runtime import cuda_backend

    assert {t.name for t in dtypes.ALL_TYPES} <= set(cuda_backend.TMA_DATA_TYPES)
    assert cuda_backend.TMA_DATA_TYPES["f8e4m3"] == cuda_backend.TMA_DATA_TYPES["f8e5m2"] == "UINT8"
