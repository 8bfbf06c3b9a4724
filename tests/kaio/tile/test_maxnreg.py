"""``maxnreg``: a cap on registers per thread (PTX ``.maxnreg``), from the tile-kernel option (on
the module, ``kaio.launch``) or the ``lower-to-ptx`` pass option, which overrides it; ptxas
honours it, the simulator runs the kernel unchanged."""

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioCompileError
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.pipeline import Pipeline
from kaio.prelude import Array, MutArray, f32, i32
from kaio.targets.ptx import toolchain

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")


@kaio.tile_kernel(num_warps=2, num_stages=0, maxnreg=32)
def scale_rows(x: Array[f32], y: MutArray[f32], n: i32, BN: kaio.constexpr = 64):
    row = i32(kt.program_id(0))
    t = kt.load(x, (row, 0), (1, BN), (row + 1, n))
    kt.store(y, (row, 0), t * 2.0 + 1.0, (row + 1, n))


def test_the_option_reaches_the_module_once_and_the_ptx():
    """The cap goes on the module (``kaio.launch``), where lower-to-ptx reads it: the default
    pipeline does not repeat it, and a pipeline that gives ``lower-to-ptx{maxnreg}`` overrides it."""
    compiled = kaio.compile(scale_rows, "sm_80")
    assert ".maxnreg 32" in compiled.ptx
    assert "maxnreg" not in compiled.pipeline
    assert "kaio.launch = {num_stages = 0 : i64, maxnreg = 32 : i64}" in compiled.stages["frontend"]
    assert Pipeline.parse(compiled.pipeline) == scale_rows.default_pipeline("sm_80")
    override = compiled.pipeline.replace("lower-to-ptx", "lower-to-ptx{maxnreg=64}")
    assert ".maxnreg 64" in kaio.compile(scale_rows, "sm_80", pipeline=override).ptx
    same = scale_rows.with_options(num_warps=4)
    assert same.maxnreg == 32 and "maxnreg=32" in repr(same)
    plain = kaio.tile_kernel(num_warps=2, num_stages=0)(scale_rows.fn)
    assert ".maxnreg" not in kaio.compile(plain, "sm_80").ptx


def test_a_capped_kernel_runs_on_the_simulator():
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 50)).astype(np.float32)
    dev = kaio.Device("sim")
    y = dev.alloc_from(np.full((3, 50), np.nan, np.float32))
    scale_rows[(3,)](dev.alloc_from(x), y, 50)
    np.testing.assert_allclose(y.to_host(), x * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("bad", [8, 256, True, 64.0])
def test_a_cap_ptxas_would_refuse_is_a_compile_error(bad):
    with pytest.raises(KaioCompileError, match="maxnreg"):
        kaio.tile_kernel(num_warps=1, maxnreg=bad)(scale_rows.fn)
    if isinstance(bad, int) and not isinstance(bad, bool):
        with pytest.raises(KaioCompileError, match="maxnreg"):
            Pipeline.parse(f"lower-to-ptx{{arch=sm_80 maxnreg={bad}}}").apply(*_empty_module())


def _empty_module():
    from xdsl.context import Context
    from xdsl.dialects.builtin import ModuleOp

    return Context(), ModuleOp([])


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_keeps_the_matmul_under_its_cap(arch):
    """The 8-warp 128x128 config needs ~120 registers: a cap of 128 costs nothing (no spills),
    and the 128 x 256 threads fit twice in an SM's 64K registers."""
    config = MatmulConfig((128, 128, 32), (4, 2), 3, maxnreg=128)
    kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config)
    assert config.key().endswith("-r128") and kernel.tile_kernel.maxnreg == 128  # its module's kaio.launch
    compiled = kaio.compile(kernel, arch)
    assert ".maxnreg 128" in compiled.ptx
    report = toolchain.assemble(compiled.ptx, arch)
    assert report.registers["matmul"] <= 128
    assert report.spill_stores["matmul"] == 0 and report.spill_loads["matmul"] == 0


def test_a_capped_matmul_matches_numpy():
    rng = np.random.default_rng()
    a = rng.standard_normal((40, 70)).astype(np.float16)
    b = rng.standard_normal((70, 30)).astype(np.float16)
    got = matmul(a, b, config=MatmulConfig((64, 64, 32), (2, 2), 2, maxnreg=96), device=kaio.Device("sim"))
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
