"""f32 atomic min/max: PTX has none, so lower-to-ptx emits a compare-and-swap loop."""

# ruff: noqa: F405
import numpy as np
import pytest

import kaio
from kaio.prelude import *  # noqa: F403
from kaio.targets.ptx import toolchain
from kaio.targets.sim import Simulator


@kaio.gpu_kernel(block_size=128)
def absmax(x: Array[f32], out: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        atomic_max(out, 0, abs(x[i]))
        atomic_min(out, 1, x[i])


def test_cas_loop_in_ptx():
    ptx_text = kaio.compile(absmax, "sm_80").ptx
    assert ptx_text.count("atom.global.cas.b32") == 2
    assert "atom.global.max.f32" not in ptx_text
    if toolchain.find_ptxas() is not None:
        toolchain.assemble(ptx_text, "sm_80")


@pytest.mark.parametrize("n", [1, 1000])
def test_many_threads_racing_get_the_extremes(n):
    compiled = kaio.compile(absmax, "sm_80")
    sim = Simulator()
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    xs, out = sim.memory.alloc(x.nbytes), sim.memory.alloc(8)
    sim.memory.write(xs, x)
    sim.memory.write(out, np.array([0.0, np.inf], np.float32))
    params = [p.pack(v) for p, v in zip(compiled.params, [xs, out, n])]
    sim.load(compiled.ptx).launch("absmax", grid=(-(-n // 128), 1, 1), block=(128, 1, 1), params=params)
    got = sim.memory.read(out, 8).view(np.float32)
    assert got[0] == np.abs(x).max() and got[1] == x.min()
