"""The matmul kernels assemble with the wheel's ptxas (no spills) and use the tensor-core
instructions in SASS (cuobjdump from the wheel)."""

import re

import pytest

import kaio
from kaio import dtypes
from kaio.ops_library.matmul_kernel import MatmulKernel
from kaio.ops_library.matmul_config import (
    DEFAULT_CONFIG,
    DEFAULT_SIMT_CONFIG,
    MatmulConfig,
    default_config,
)
from kaio.targets.ptx import toolchain

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")
needs_sass = pytest.mark.skipif(
    toolchain.find_cuobjdump() is None or toolchain.find_nvdisasm() is None,
    reason="nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm not installed",
)


def assemble(kernel: MatmulKernel, arch: str) -> toolchain.PtxasReport:
    compiled = kaio.compile(kernel, arch)
    return toolchain.assemble(compiled.ptx, arch)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", [dtypes.f16, dtypes.bf16])
def test_tensor_core_matmul_has_no_spills(arch, dtype, record_property):
    kernel = MatmulKernel(dtype, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG)
    report = assemble(kernel, arch)
    name = kernel.name
    record_property("registers", report.registers[name])
    print(f"{name} {arch}: {report.registers[name]} registers")
    assert report.spill_stores[name] == 0 and report.spill_loads[name] == 0
    assert report.registers[name] <= 255


@needs_ptxas
@pytest.mark.parametrize("out", [dtypes.f16, dtypes.f32])
@pytest.mark.parametrize("align", [(16, 16, 16), (2, 2, 2)])
def test_edge_variants_assemble(out, align):
    """Aligned, and misaligned bases with ragged sizes (element-wise copies and stores)."""
    divisible = () if align == (2, 2, 2) else (("m", 16), ("n", 16), ("k", 16))
    row = tuple(a // 2 for a in align)
    kernel = MatmulKernel(dtypes.f16, out, align, default_config(True, row, 2), divisible=divisible)
    report = assemble(kernel, "sm_80")
    assert report.spill_stores[kernel.name] == 0


@needs_ptxas
def test_simt_f32_matmul_has_no_spills():
    kernel = MatmulKernel(dtypes.f32, dtypes.f32, (16, 16, 16), DEFAULT_SIMT_CONFIG)
    report = assemble(kernel, "sm_80")
    assert report.spill_stores[kernel.name] == 0


@needs_ptxas
@needs_sass
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_sass_uses_tensor_cores_ldmatrix_and_async_copies(arch):
    kernel = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG)
    sass = toolchain.disassemble(assemble(kernel, arch).cubin)
    counts = {ins: len(re.findall(rf"\b{re.escape(ins)}", sass)) for ins in ("HMMA.16816", "LDSM", "LDGSTS", "LDL", "STL")}
    print(arch, counts)
    assert counts["HMMA.16816"] >= 64  # 64 mma.sync per K step, unrolled
    assert counts["LDSM"] >= 16
    assert counts["LDGSTS"] >= 8
    assert counts["LDL"] == 0 and counts["STL"] == 0


@needs_ptxas
@needs_sass
def test_without_pipelining_there_are_no_async_copies():
    config = MatmulConfig(stages=0)
    kernel = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), config)
    sass = toolchain.disassemble(assemble(kernel, "sm_80").cubin)
    assert "LDGSTS" not in sass and "HMMA.16816" in sass


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_candidate_config_and_its_split_k_variant_has_no_spills(arch):
    """The autotune space (small tiles and split-K variants included) and the split-K reduction."""
    from kaio.ops_library.matmul_config import TENSOR_CORE_CONFIGS
    from kaio.ops_library.matmul_kernel import HAS_BIAS, HAS_C, SCALED, splitk_reduce_kernel

    for config in (*TENSOR_CORE_CONFIGS, TENSOR_CORE_CONFIGS[-1].with_split_k(4)):
        kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config)
        report = assemble(kernel, arch)
        print(f"{config.key()} {arch}: {report.registers['matmul']} registers")
        assert report.spill_stores["matmul"] == 0 and report.spill_loads["matmul"] == 0
    reduce = kaio.compile(splitk_reduce_kernel(dtypes.f16, dtypes.f16), arch, BM=32, BN=128, TERMS=SCALED | HAS_C | HAS_BIAS, ACT=2)
    report = toolchain.assemble(reduce.ptx, arch)
    assert report.spill_stores["splitk_reduce"] == 0
