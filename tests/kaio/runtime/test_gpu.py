"""The same kernels on a real GPU (``pytest -m gpu``); skipped cleanly without a CUDA driver."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from run_kernels import CASES, Case, check

import kaio
from kaio.runtime import driver

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not driver.available(), reason="no CUDA driver on this machine"),
]


@pytest.fixture
def gpu() -> kaio.Device:
    if kaio.runtime.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    return kaio.Device(0)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_acceptance_kernel_on_the_gpu(
    case: Case, gpu: kaio.Device, rng: np.random.Generator
) -> None:
    n = int(rng.integers(10_000, 100_000))
    got, expected = case.run(gpu, rng, n)
    ok, error = check(case, got, expected, n)
    assert ok, f"{case.name}: max abs error {error}"


# Kernels whose results are the same bits on any correct device: IEEE ops rounded one by one
# (kaio emits add/sub/mul with .rn, so ptxas cannot contract them into an fma), integer
# atomics, sums in a fixed order. Transcendentals (silu_gate, half_math) and atomics on floats
# (warp_sum) are left to the tolerance checks above.
EXACT = [c for c in CASES if c.name in ("vector_add", "saxpy", "block_sum", "matmul", "histogram")]


@pytest.mark.parametrize("case", EXACT, ids=[c.name for c in EXACT])
def test_the_simulator_and_the_gpu_agree_bit_for_bit(case: Case, gpu: kaio.Device) -> None:
    seed = int(np.random.default_rng().integers(2**32))
    n = 5_000
    on_gpu, _ = case.run(gpu, np.random.default_rng(seed), n)
    on_sim, _ = case.run(kaio.Device("sim", arch=gpu.compile_arch), np.random.default_rng(seed), n)
    assert on_gpu.dtype == on_sim.dtype
    differ = np.flatnonzero(on_gpu.view(np.uint8) != on_sim.view(np.uint8))
    assert differ.size == 0, f"{case.name} (seed {seed}): bytes differ from offset {differ[:8]}"


def test_device_properties(gpu: kaio.Device) -> None:
    assert gpu.arch.startswith("sm_") and gpu.sm >= 70 and gpu.sm_count > 0
    assert gpu.total_memory > 0 and gpu.max_threads_per_block == 1024
    free, total = gpu.memory_info()
    assert 0 < free <= total == gpu.total_memory


def test_real_jit_failure(gpu: kaio.Device) -> None:
    ptx = ".version 8.0\n.target sm_80\n.address_size 64\n"
    ptx += ".visible .entry bad()\n{\n\tfrobnicate.b32 %r1;\n\tret;\n}\n"
    with pytest.raises(kaio.KaioLaunchError) as info:
        gpu._modules.function(ptx, "bad")
    assert info.value.log and info.value.ptx_path and Path(info.value.ptx_path).read_text() == ptx


def test_events_streams_and_bench(gpu: kaio.Device) -> None:
    from acceptance_kernels import vector_add

    n = 1 << 20
    a = gpu.alloc_from(np.ones(n, np.float32))
    c = gpu.empty(n, np.float32)
    stream = gpu.stream()
    start = stream.record()
    vector_add.launch(gpu, a, a, c, n, grid=kaio.cdiv(n, 256), stream=stream)
    end = stream.record()
    assert start.elapsed_ms(end) > 0
    result = kaio.bench(lambda: vector_add[kaio.cdiv(n, 256)](a, a, c, n))
    assert result.method == "cuda events" and 0 < result.median < 100
    assert (c.to_host() == 2).all()


def test_dlpack_round_trip_stays_on_the_device(gpu: kaio.Device) -> None:
    from kaio.runtime import dlpack

    buf = gpu.alloc_from(np.arange(10, dtype=np.float32))
    view = dlpack.consume(buf.__dlpack__(stream=1))
    assert view.ptr == buf.ptr and view.device == (dlpack.KDL_CUDA, gpu.ordinal)
    view.release()
