"""PyTorch tensors as kernel arguments on the simulator (CPU tensors), without any CAI dict."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from acceptance_kernels import half_math, reference_half_math, saxpy, vector_add

import kaio
from kaio import KaioTypeError
from kaio.runtime import dlpack, tensors
from kaio.runtime.interop import InteropError, external_array

torch = pytest.importorskip("torch")

ALL_TYPES = """
@kaio.gpu_kernel(block_size=64)
def copy_{name}(x: Array[{name}], y: MutArray[{name}], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        y[i] = x[i]
"""
TYPES = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
    "i8": torch.int8,
    "u8": torch.uint8,
    "i16": torch.int16,
    "i32": torch.int32,
    "u32": torch.uint32,
    "i64": torch.int64,
}


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    import importlib.util

    path = tmp_path_factory.mktemp("kernels") / "torch_copy_kernels.py"
    code = "".join(ALL_TYPES.format(name=name) for name in TYPES)
    path.write_text("import kaio\nfrom kaio.prelude import *\n" + code)
    spec = importlib.util.spec_from_file_location("torch_copy_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _random(dtype: Any, n: int) -> Any:
    if dtype.is_floating_point:
        return torch.randn(n, dtype=torch.float32).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(2**31)), min(info.max, 2**31 - 1)
    return torch.randint(lo, hi, (n,), dtype=torch.int64).to(dtype)


@pytest.mark.parametrize("name", list(TYPES))
def test_every_kaio_type_as_a_cpu_tensor(name: str, copies: ModuleType) -> None:
    n = 100
    x = _random(TYPES[name], n)
    y = torch.zeros(n, dtype=TYPES[name])
    getattr(copies, f"copy_{name}")[kaio.cdiv(n, 64)](x, y, n)
    assert torch.equal(x, y), f"{name}: the simulator wrote back what it read"


def test_f32_and_f16_kernels_on_cpu_tensors(rng: np.random.Generator) -> None:
    n = 300
    a = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    c = torch.full((n,), float("nan"))
    vector_add[kaio.cdiv(n, 256)](a, b, c, n)
    assert torch.equal(c, a + b) and c.dtype == torch.float32 and c.device.type == "cpu"
    x = torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float16))
    y = torch.zeros(n, dtype=torch.float16)
    half_math[kaio.cdiv(n, 128)](x, y, 0.5, n)
    np.testing.assert_allclose(
        y.numpy().astype(np.float32), reference_half_math(x.numpy(), 0.5).astype(np.float32),
        rtol=1e-2, atol=1e-2,
    )  # fmt: skip


def test_aliased_and_overlapping_views_share_one_staged_storage() -> None:
    x = torch.arange(16, dtype=torch.float32)
    saxpy[1](x, x, 2.0, 16)  # y = 2x + y with x is y: each element read, then written
    assert torch.equal(x, 3 * torch.arange(16, dtype=torch.float32))
    base = torch.zeros(32)
    src, dst = base[:16], base[16:]  # two views of one storage
    src.copy_(torch.arange(16, dtype=torch.float32))
    saxpy[1](src, dst, 1.0, 16)
    assert torch.equal(dst, src) and torch.equal(src, torch.arange(16, dtype=torch.float32))


def test_read_only_parameters_are_not_copied_back(sim: kaio.Device) -> None:
    a, b, c = torch.ones(8), torch.ones(8), torch.zeros(8)
    before = sim.simulator.memory.bytes_allocated
    vector_add[1](a, b, c, 8)
    assert sim.simulator.memory.bytes_allocated == before, "staged storages are freed"
    assert torch.equal(c, torch.full((8,), 2.0))


def test_tensors_mix_with_buffers_and_requires_grad(sim: kaio.Device) -> None:
    a = torch.ones(8, requires_grad=True)
    b = sim.alloc_from(np.ones(8, np.float32))
    c = torch.zeros(8)
    vector_add[1](a, b, c, 8)
    assert torch.equal(c, torch.full((8,), 2.0))


def test_refusals_name_the_parameter() -> None:
    c = torch.zeros(8)

    def refused(pattern: str, *args: Any) -> None:
        with pytest.raises(KaioTypeError, match=pattern):
            vector_add[1](*args)

    refused(r"parameter `a: Array\[f32\]`: got a torch.float16 tensor \(f16\); expected f32",
            torch.ones(8, dtype=torch.float16), c, c, 8)  # fmt: skip
    refused(r"`c: MutArray\[f32\]`: the tensor is not contiguous \(shape \(8,\), strides \(2,\)\)",
            c, c, torch.zeros(16)[::2], 8)  # fmt: skip
    refused(r"got a torch.complex64 tensor, which kaio has no type for",
            torch.ones(8, dtype=torch.complex64), c, c, 8)  # fmt: skip
    refused(r"the tensor is on meta, but the launch runs on the simulator",
            torch.ones(8, device="meta"), c, c, 8)  # fmt: skip
    refused(r"expected f32", torch.ones(8, dtype=torch.float64), c, c, 8)


def test_the_checker_is_built_once_per_tensor_class(sim: kaio.Device) -> None:
    a, c = torch.ones(4), torch.zeros(4)
    vector_add[1](a, a, c, 4)
    spec = vector_add._launcher._last[2]
    param = torch.nn.Parameter(torch.ones(4))  # a subclass gets its own entry
    vector_add[1](param, a, c, 4)
    assert torch.equal(c, torch.full((4,), 2.0))
    assert spec is vector_add._launcher._last[2]


def test_cai_raw_bytes_typestr_falls_back_to_dlpack(sim: kaio.Device) -> None:
    """What a GPU bf16 tensor of torch or JAX offers: CAI with '<V2', and DLPack saying bf16."""
    import ml_dtypes

    buf = sim.alloc_from(np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16))

    class Bf16Array:
        __cuda_array_interface__ = {**buf.__cuda_array_interface__, "typestr": "<V2"}

    with pytest.raises(InteropError, match=r"typestr '<V2' is raw bytes.*through DLPack"):
        external_array(Bf16Array(), None)
    with pytest.raises(KaioTypeError, match=r"parameter `a: Array\[f32\]`: .*'<V2' is raw bytes"):
        vector_add[1](Bf16Array(), buf, buf, 4)

    class WithDlpack(Bf16Array):
        def __dlpack_device__(self) -> tuple[int, int]:
            return (dlpack.KDL_CUDA, 0)

        def __dlpack__(self, stream: Any = None, max_version: Any = None) -> Any:
            return dlpack.export(buf.ptr, (4,), buf.dtype, (dlpack.KDL_CUDA, 0), buf)

    ext = external_array(WithDlpack(), None)
    assert ext is not None and ext.dtype == np.dtype(ml_dtypes.bfloat16) and ext.ptr == buf.ptr
    ext.done()


def test_dtype_tables_cover_every_kaio_type() -> None:
    for ktype in kaio.dtypes.ALL_TYPES:
        assert tensors.kaio_type(tensors.torch_dtype(ktype)) is ktype


def test_import_kaio_does_not_import_torch() -> None:
    code = (
        "import sys, numpy as np, kaio\n"
        "from acceptance_kernels import vector_add\n"
        "d = kaio.Device('sim'); a = d.alloc_from(np.ones(4, np.float32))\n"
        "vector_add[1](a, a, a, 4)\n"
        "from kaio.ops_library import matmul\n"
        "assert 'torch' not in sys.modules, 'kaio imported torch'\n"
    )
    import os

    examples = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")
    env = {**os.environ, "PYTHONPATH": os.path.abspath(examples)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)


# --- dev.capture() on the simulator -------------------------------------------------------------


def test_simulator_capture_records_and_replays(sim: kaio.Device) -> None:
    x = torch.ones(64)
    y = torch.zeros(64)
    with sim.capture() as graph:
        for _ in range(100):
            saxpy[1](x, y, 1.0, 64)
    assert graph.launches == 100 and torch.equal(y, torch.zeros(64)), "recorded, not run"
    graph.replay()
    assert torch.equal(y, torch.full((64,), 100.0))
    x.fill_(2.0)  # a replay reads the memory's contents at replay time
    graph.replay()
    assert torch.equal(y, torch.full((64,), 300.0))


def test_simulator_capture_checks_arguments_at_capture(sim: kaio.Device) -> None:
    with pytest.raises(KaioTypeError, match="expected f32"), sim.capture():
        saxpy[1](torch.ones(4, dtype=torch.float16), torch.zeros(4), 1.0, 4)
    with sim.capture() as graph:  # the failed capture left nothing behind
        pass
    assert graph.launches == 0
    with pytest.raises(kaio.KaioError, match="already capturing"), sim.capture(), sim.capture():
        pass


def test_replay_inside_its_own_capture_is_refused(sim: kaio.Device) -> None:
    run: Callable[[], None]
    with sim.capture() as graph:
        run = graph.replay
        with pytest.raises(kaio.KaioError, match="inside its own capture"):
            run()
