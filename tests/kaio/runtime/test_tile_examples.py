"""The tile-kernel examples (examples/tile_*.py) on the simulator against numpy: fresh random
inputs, outputs poisoned with NaN before the launch (the examples' ``run`` helpers do it), sizes
that are and are not multiples of the tiles; and their PTX assembles with the wheel's ptxas for
sm_80 and sm_90 without spills."""

from __future__ import annotations

import numpy as np
import pytest
import tile_layer_norm
import tile_matmul_bias_gelu
import tile_softmax
import tile_vector_add

import kaio
from kaio.targets.ptx import toolchain

needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")


@pytest.mark.parametrize("n", [1, 700, 1024, 2500])
def test_vector_add(sim, rng, n):
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    c = tile_vector_add.add(sim, a, b, block=512)
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize(("rows", "cols", "per_program"), [(1, 1, 4), (37, 200, 4), (8, 64, 8), (3, 1000, 1)])
def test_softmax(sim, rng, rows, cols, per_program):
    x = (4 * rng.standard_normal((rows, cols))).astype(np.float32)
    y = tile_softmax.run(sim, x, rows_per_program=per_program)
    np.testing.assert_allclose(y, tile_softmax.reference(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(("rows", "cols"), [(1, 3), (37, 200), (16, 128)])
def test_layer_norm(sim, rng, rows, cols):
    x = (3 + 2 * rng.standard_normal((rows, cols))).astype(np.float16)
    w, b = rng.standard_normal(cols).astype(np.float16), rng.standard_normal(cols).astype(np.float16)
    y = tile_layer_norm.run(sim, x, w, b, eps=1e-5)
    expected = tile_layer_norm.reference(x, w, b, eps=1e-5)
    np.testing.assert_allclose(y.astype(np.float32), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    ("m", "n", "k", "out", "block"),
    [
        (100, 72, 80, np.float32, (64, 64, 32)),  # ragged in every dim
        (64, 64, 64, np.float32, (64, 64, 32)),  # exact tiles: the launch specializes, loads vectorise
        (33, 40, 24, np.float16, (32, 32, 16)),  # f16 out, k shorter than one step of 32
        (48, 80, 48, np.float16, (32, 64, 16)),  # multiples of 16, not of the tiles
    ],
)
def test_matmul_bias_gelu(sim, rng, m, n, k, out, block):
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float16)
    c = tile_matmul_bias_gelu.run(sim, a, b, bias, out=out, block=block)
    assert c.dtype == out
    expected = tile_matmul_bias_gelu.reference(a, b, bias)
    np.testing.assert_allclose(c.astype(np.float32), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("example", [tile_vector_add, tile_softmax, tile_layer_norm, tile_matmul_bias_gelu])
def test_example_main_runs(example, sim, monkeypatch, capsys):
    monkeypatch.setattr(kaio, "Device", lambda *args: sim)  # the example's default device
    example.main()
    assert "matches numpy" in capsys.readouterr().out


DIVISIBLE = {"__divisible__": (("m", 16), ("n", 16), ("k", 16))}  # what a launch with such sizes adds
KERNELS = {
    "vector_add": (tile_vector_add.vector_add, {}),
    "softmax": (tile_softmax.softmax, {}),
    "softmax-1024": (tile_softmax.softmax, {"ROWS": 1, "BLOCK": 1024}),
    "layer_norm": (tile_layer_norm.layer_norm, {}),
    "layer_norm-1024": (tile_layer_norm.layer_norm, {"ROWS": 1, "BLOCK": 1024}),
    "matmul_bias_gelu": (tile_matmul_bias_gelu.matmul_bias_gelu, {}),
    "matmul_bias_gelu-aligned": (tile_matmul_bias_gelu.matmul_bias_gelu, DIVISIBLE),
    "matmul_bias_gelu-f16": (tile_matmul_bias_gelu.matmul_bias_gelu_f16, {}),
}


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", list(KERNELS))
def test_example_ptx_assembles_without_spills(case, arch):
    kernel, constexprs = KERNELS[case]
    report = toolchain.assemble(kaio.compile(kernel, arch, **constexprs).ptx, arch)
    name = kernel.name
    print(f"{case} {arch}: {report.registers[name]} registers")
    assert report.spill_stores[name] == 0 and report.spill_loads[name] == 0
    assert report.registers[name] <= 255
