"""Launch forms, constexpr binding, grids, blocks, devices, specializations."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from acceptance_kernels import histogram, reference_histogram, saxpy, vector_add

import kaio
from kaio import KaioTypeError, cdiv
from kaio.runtime.launch import split_key
from kaio.runtime.signature import constexpr_key

KERNELS = """
@kaio.gpu_kernel(block_size=64)
def fill(out: MutArray[i32], n: u32, VALUE: kaio.constexpr = 7, STRIDE: kaio.constexpr = 1):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        out[i * STRIDE] = VALUE

@kaio.gpu_kernel(block_size=(8, 4))
def coords(out: MutArray[u32], width: u32):
    x = thread_idx_x() + block_idx_x() * block_dim_x()
    y = thread_idx_y() + block_idx_y() * block_dim_y()
    out[y * width + x] = y * 1000 + x

@kaio.gpu_kernel(block_size=32)
def middle(a: Array[f32], BLOCK: kaio.constexpr, out: MutArray[f32]):
    i = thread_idx_x() + block_idx_x() * u32(BLOCK)
    out[i] = a[i] + 1.0
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    import importlib.util

    path = tmp_path_factory.mktemp("kernels") / "launch_test_kernels.py"
    path.write_text("import kaio\nfrom kaio.prelude import *\n" + KERNELS)
    spec = importlib.util.spec_from_file_location("launch_test_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_subscript_rule() -> None:
    f = lambda meta: 1  # noqa: E731
    assert split_key(4) == (4, None)
    assert split_key((4, 2)) == ((4, 2), None), "two ints are a 2-D grid, as in Triton"
    assert split_key((4, 2, 1)) == ((4, 2, 1), None)
    assert split_key((4, (128,))) == (4, (128,))
    assert split_key(((2, 2), (8, 4))) == ((2, 2), (8, 4))
    assert split_key((f, 128)) == (f, 128)


def test_constexprs_by_default_keyword_and_position(sim: kaio.Device, kernels: ModuleType) -> None:
    out = sim.zeros(20, np.int32)
    kernels.fill[1](out, 10)
    assert list(out.to_host()[:11]) == [7] * 10 + [0]
    kernels.fill[1](out, 10, VALUE=3)
    assert list(out.to_host()[:11]) == [3] * 10 + [0]
    kernels.fill[1](out, 10, 5, 2)  # constexprs by position, Triton style
    host = out.to_host()
    assert list(host[0:20:2]) == [5] * 10 and list(host[1:20:2]) == [3] * 5 + [0] * 5
    kernels.fill[1](out=out, n=1, STRIDE=1, VALUE=-2)
    assert out.to_host()[0] == -2
    with pytest.raises(kaio.KaioTypeError, match="constexpr `VALUE` must be an int, float or bool"):
        kernels.fill[1](out, 10, VALUE="seven")


def test_a_constexpr_between_runtime_parameters(sim: kaio.Device, kernels: ModuleType) -> None:
    a = sim.alloc_from(np.arange(64, dtype=np.float32))
    out = sim.zeros(64, np.float32)
    kernels.middle[2](a, 32, out)
    np.testing.assert_array_equal(out.to_host(), np.arange(64) + 1)
    with pytest.raises(KaioTypeError, match="missing: BLOCK"):
        kernels.middle[2](a, out=out)


def test_each_specialization_compiles_once(
    sim: kaio.Device, kernels: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kaio.compiler

    calls: list[dict[str, Any]] = []
    original = kaio.compiler.compile

    def spy(kernel: Any, arch: Any = None, **kw: Any) -> Any:
        calls.append(kw)
        return original(kernel, arch, **kw)

    monkeypatch.setattr(kaio.compiler, "compile", spy)
    out = sim.zeros(8, np.int32)
    for _ in range(3):
        kernels.fill[1](out, 8, VALUE=11)
        kernels.fill[1](out, 8, VALUE=12)
    kernels.fill[1](out, 4, VALUE=11, STRIDE=2)
    kernels.fill[1](out, 4, 11, 2)  # the same specialization, bound by position
    assert calls == [
        {"VALUE": 11, "STRIDE": 1},
        {"VALUE": 12, "STRIDE": 1},
        {"VALUE": 11, "STRIDE": 2},
    ]
    # Python says 1 == 1.0 == True; specializations do not.
    assert len({constexpr_key([1]), constexpr_key([1.0]), constexpr_key([True])}) == 3


def test_grid_callable_sees_constexprs_and_arguments(sim: kaio.Device, kernels: ModuleType) -> None:
    out = sim.zeros(200, np.int32)
    seen: list[dict[str, Any]] = []

    def grid(meta: dict[str, Any]) -> tuple[int]:
        seen.append(meta)
        return (cdiv(meta["n"], 64),)

    kernels.fill[grid](out, 200, VALUE=4)
    assert (out.to_host() == 4).all()
    assert (
        seen[0]["VALUE"] == 4
        and seen[0]["STRIDE"] == 1
        and seen[0]["n"] == 200
        and seen[0]["out"] is out
    )


def test_two_dimensional_grid_and_block(sim: kaio.Device, kernels: ModuleType) -> None:
    width, height = 16, 8
    out = sim.zeros(width * height, np.uint32)
    kernels.coords[2, 2](out, width)  # grid (2, 2) of the kernel's (8, 4) blocks
    ys, xs = np.mgrid[0:height, 0:width]
    np.testing.assert_array_equal(out.to_host().reshape(height, width), ys * 1000 + xs)
    out2 = sim.zeros(width * height, np.uint32)
    kernels.coords[(4, 4), (4, 2)](out2, width)  # a smaller explicit block, more blocks
    np.testing.assert_array_equal(out2.to_host(), out.to_host())


def test_launch_method_with_device_block_and_stream(
    sim: kaio.Device, rng: np.random.Generator
) -> None:
    n = 1000
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    c = sim.zeros(n, np.float32)
    stream = sim.stream()
    vector_add.launch(
        sim, sim.alloc_from(a), sim.alloc_from(b), c, n, grid=cdiv(n, 128), block=128, stream=stream
    )
    stream.synchronize()
    np.testing.assert_array_equal(c.to_host(), a + b)
    with pytest.raises(KaioTypeError, match="the simulator takes kaio streams only"):
        vector_add.launch(sim, c, c, c, n, grid=4, stream=12345)
    with pytest.raises(KaioTypeError, match="the stream belongs to"):
        vector_add.launch(sim, c, c, c, n, grid=4, stream=kaio.Device("sim", arch="sm_90").stream())


def test_the_device_comes_from_the_buffers(rng: np.random.Generator) -> None:
    hopper = kaio.Device("sim", arch="sm_90")
    data = rng.integers(0, 1000, 5000, dtype=np.uint32)
    bins = hopper.zeros(64, np.uint32)
    histogram[8](hopper.alloc_from(data), bins, data.size)
    np.testing.assert_array_equal(bins.to_host(), reference_histogram(data))
    assert hopper.last_launch_report.kernel == "histogram"
    compiled = histogram._launcher.specialization(hopper).compiled
    assert compiled.arch == "sm_90" and ".target sm_90" in compiled.ptx


def test_bound_launches_are_reused(sim: kaio.Device) -> None:
    assert saxpy[4] is saxpy[4] and saxpy[4] is not saxpy[5]
    assert "grid=4" in repr(saxpy[4])


def test_launches_are_checked_before_running(
    sim: kaio.Device, load_kernels: Callable[[str], ModuleType]
) -> None:
    """A failing check leaves the output untouched: nothing reached the simulator."""
    y = sim.zeros(16, np.float32)
    report_before = sim.last_launch_report
    with pytest.raises(KaioTypeError):
        saxpy[1](sim.zeros(16, np.float32), y, 2.0, -5)
    assert sim.last_launch_report is report_before
