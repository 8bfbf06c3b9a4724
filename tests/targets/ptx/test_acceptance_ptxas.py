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


def test_ptx_comments_point_at_the_python_source():
    compiled = kaio.compile(ACCEPTANCE_KERNELS[1], "sm_80")  # saxpy
    assert "// acceptance_kernels.py:" in compiled.ptx
    assert "y[i] = alpha * x[i] + y[i]" in compiled.ptx


def test_f16_kernel_needs_no_newer_ptx_than_the_target_default():
    compiled = kaio.compile(ACCEPTANCE_KERNELS[-1], "sm_80")  # half_math
    assert ".version 7.0" in compiled.ptx


def test_source_comments_can_be_left_out():
    from kaio.compiler import run_pipeline
    from kaio.targets.ptx.printer import print_ptx

    module = ACCEPTANCE_KERNELS[1].build().module  # saxpy
    run_pipeline(module, ACCEPTANCE_KERNELS[1].default_pipeline("sm_80"))
    with_comments, without = print_ptx(module, "sm_80"), print_ptx(module, "sm_80", comments=False)
    assert "// acceptance_kernels.py:" in with_comments
    assert "// acceptance_kernels.py:" not in without
    strip = [line for line in with_comments.splitlines() if "acceptance_kernels.py" not in line]
    assert strip == without.splitlines()
