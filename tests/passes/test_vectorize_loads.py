"""vectorize-loads: neighbouring loads become one vector load only where that is legal."""

# ruff: noqa: F405
import pytest
from acceptance_kernels import scale4
from kaio.targets.ptx import toolchain

import kaio
from kaio.prelude import *  # noqa: F403


@kaio.gpu_kernel(block_size=128)
def unaligned(x: Array[f32], y: MutArray[f32]):
    i = thread_idx_x()
    y[i] = x[i] + x[i + 1] + x[i + 2] + x[i + 3]


@kaio.gpu_kernel(block_size=128)
def store_between(x: MutArray[f32], y: MutArray[f32]):
    i = thread_idx_x() * 2
    a = x[i]
    x[i] = 0.0  # a later load of x[i + 1] must not move above this store
    b = x[i + 1]
    y[i] = a + b


@kaio.gpu_kernel(block_size=128)
def pairs(x: Array[f64], y: MutArray[f64]):
    i = thread_idx_x() << 1
    y[i] = x[i] * x[i + 1]


def global_loads(compiled) -> list[str]:
    return [line.strip().split(" ")[0] for line in compiled.ptx.splitlines() if "ld.global" in line]


def test_four_neighbours_become_one_vector_load_and_need_alignment():
    compiled = kaio.compile(scale4, "sm_80")
    assert global_loads(compiled) == ["ld.global.v4.f32"]
    x = compiled.params[0]
    assert x.name == "x" and x.align == 16
    assert compiled.params[1].align == 1  # y is only stored to


def test_unproven_alignment_stays_scalar():
    compiled = kaio.compile(unaligned, "sm_80")
    assert global_loads(compiled) == ["ld.global.f32"] * 4
    assert compiled.params[0].align == 1


def test_loads_do_not_move_across_a_store():
    assert global_loads(kaio.compile(store_between, "sm_80")) == ["ld.global.f32"] * 2


def test_64_bit_pairs():
    compiled = kaio.compile(pairs, "sm_80")
    assert global_loads(compiled) == ["ld.global.v2.f64"]
    assert compiled.params[0].align == 16


@pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")
@pytest.mark.parametrize("kernel", [scale4, pairs], ids=lambda k: k.name)
def test_ptxas_accepts_vector_loads(kernel):
    toolchain.assemble(kaio.compile(kernel, "sm_90").ptx, "sm_90")
