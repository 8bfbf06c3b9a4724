"""The fuzzer's programs on the simulator and on a real GPU (``pytest -m gpu``): integers,
loads and stores, f16/bf16/f32/f64 arithmetic rounded per op, conversions, control flow. Every
operation the fuzzer draws is exact IEEE or integer math, so both devices must produce the same
bits (NaN payloads aside). Skipped cleanly without a CUDA driver or device."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kaio
from kaio.runtime import driver

from .generate import input_rows, programs
from .harness import run_program
from .programs import Program, canonical

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not driver.available(), reason="no CUDA driver on this machine"),
]


def _bits(values: np.ndarray) -> np.ndarray:
    return canonical(values) if values.dtype.kind == "f" or values.dtype.name == "bfloat16" else values


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(programs(), st.integers(0, 2**32 - 1))
def test_random_programs_give_the_same_bits_on_the_simulator_and_the_gpu(program: Program, seed: int) -> None:
    if kaio.runtime.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    gpu = kaio.Device(0)
    arrays = input_rows(program, seed)
    on_gpu = run_program(program, arrays, gpu)
    on_sim = run_program(program, arrays, kaio.Device("sim", arch=gpu.compile_arch))
    for (name, _), g, s in zip(program.results, on_gpu, on_sim):
        assert np.array_equal(_bits(g), _bits(s)), f"{name}: the GPU and the simulator differ"
