"""Errors found while lowering to PTX still point at the Python statement that caused them."""

import pytest
from xdsl.dialects.builtin import ModuleOp

import kaio
from kaio.errors import KaioCompileError, KaioTargetError

from .conftest import HEADER_LINES


def test_feature_missing_on_target_names_feature_min_sm_and_line(load):
    module = load(
        """
        @kaio.gpu_kernel(block_size=256)
        def square(x: Array[bf16], y: MutArray[bf16], n: u32):
            i = thread_idx_x()
            if i < n:
                y[i] = x[i] * x[i]
        """
    )
    with pytest.raises(KaioTargetError) as info:
        kaio.compile(module.square, "sm_75")
    err = info.value
    assert err.min_sm == 80 and err.arch == "sm_75"
    text = str(err)
    assert "bf16" in text and "sm_80" in text and "sm_75" in text
    assert f"{module.__file__}:{HEADER_LINES + 6}:" in text
    assert "y[i] = x[i] * x[i]" in text
    # the same kernel is fine where bf16 exists
    assert ".target sm_80" in kaio.compile(module.square, "sm_80").ptx


def test_partial_warp_reduction_points_at_the_call(load):
    module = load(
        """
        @kaio.gpu_kernel(block_size=48)
        def reduce(x: Array[f32], y: MutArray[f32]):
            i = thread_idx_x()
            y[i] = warp_reduce_sum(x[i])
        """
    )
    with pytest.raises(KaioCompileError) as info:
        kaio.compile(module.reduce, "sm_80")
    err = info.value
    assert err.filename == module.__file__ and err.line == HEADER_LINES + 5
    assert "multiple of 32" in str(err) and "warp_reduce_sum(x[i])" in str(err)


def test_unknown_arch_is_a_target_error():
    with pytest.raises(KaioTargetError, match="unknown GPU architecture 'sm_61'"):
        kaio.compile(ModuleOp([]), "sm_61")
