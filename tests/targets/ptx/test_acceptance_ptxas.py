"""Every acceptance kernel goes through the whole stack and the wheel's ptxas accepts the PTX for
sm_80 and sm_90, with no register spills."""

import pytest
from acceptance_kernels import ACCEPTANCE_KERNELS

import kaio
from kaio.targets.ptx import toolchain

pytestmark = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("kernel", ACCEPTANCE_KERNELS, ids=lambda k: k.name)
def test_ptxas_assembles_without_spills(kernel, arch):
    compiled = kaio.compile(kernel, arch)
    report = toolchain.assemble(compiled.ptx, arch)
    assert report.spill_stores[kernel.name] == 0
    assert report.spill_loads[kernel.name] == 0
    assert 0 < report.registers[kernel.name] <= 255


def test_f16_kernel_needs_no_newer_ptx_than_the_target_default():
    compiled = kaio.compile(ACCEPTANCE_KERNELS[-1], "sm_80")  # half_math
    assert ".version 7.0" in compiled.ptx
