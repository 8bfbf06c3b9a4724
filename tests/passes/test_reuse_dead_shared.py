"""reuse-dead-shared: a kernel with two K loops one after the other holds the shared memory of
one loop (the second loop's operand buffers take the first loop's dead bytes), stays correct on
the simulator, and the barrier before the reuse is what keeps it race-free."""

import numpy as np
import pytest

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

import kaio
import kaio.tile as kt
from kaio.dialects import kernel, smem
from kaio.errors import KaioMemoryError
from kaio.passes.reuse_dead_shared import ReuseDeadSharedPass
from kaio.dialects.stage_attrs import REUSE_DEAD_ATTR as REUSE_DEAD
from kaio.pipeline import Pipeline
from kaio.prelude import Array, MutArray, f16, f32, i32, static_range


@kaio.tile_kernel(num_warps=4, num_stages=2)
def two_loops(a: Array[f16], b: Array[f16], c: MutArray[f32], M: i32, N: i32, K: i32, SPLIT: i32,
              BM: kaio.constexpr = 32, BN: kaio.constexpr = 32, BK: kaio.constexpr = 16):  # fmt: skip
    """c = a @ b with the K dimension walked in two loops: [0, SPLIT) then [SPLIT, K)."""
    m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
    acc = kt.zeros((BM, BN), f32)
    for part in static_range(2):
        start, stop = 0, SPLIT
        if part == 1:
            start, stop = SPLIT, K
        for k0 in range(start, stop, BK):
            x = kt.load(a, (m0, k0), (BM, BK), (M, K), other=0.0)
            y = kt.load(b, (k0, n0), (BK, BN), (K, N), other=0.0)
            acc = kt.dot(x, y, acc)
    kt.store(c, (m0, n0), acc, (M, N))


class DropReuseBarriers(ModulePass):
    """Planted bug: the barrier the pass puts after the moved buffers is gone."""

    name = "drop-reuse-barriers"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in list(op.walk()):
            prev = inner.prev_op
            if isinstance(inner, kernel.BarrierOp) and isinstance(prev, smem.AllocOp) and REUSE_DEAD in prev.attributes:
                inner.detach()
                inner.erase()


def pipeline_for(arch: str, reuse: bool = True, planted: bool = False) -> Pipeline:
    pipeline = two_loops.default_pipeline(arch)
    if reuse:
        pipeline = pipeline.insert(ReuseDeadSharedPass(), before="lower-to-ptx")
    if planted:
        pipeline = pipeline.insert(DropReuseBarriers(), before="lower-to-ptx")
    return pipeline


def compile_for(arch: str, reuse: bool):  # type: ignore[no-untyped-def]
    return kaio.compile(two_loops, arch, pipeline=pipeline_for(arch, reuse))


def shared_bytes(compiled) -> int:  # type: ignore[no-untyped-def]
    return compiled.shared_bytes + compiled.dynamic_shared_bytes


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_second_loop_takes_the_first_loops_bytes(arch):
    plain, reused = compile_for(arch, False), compile_for(arch, True)
    assert shared_bytes(reused) * 2 == shared_bytes(plain), (shared_bytes(reused), shared_bytes(plain))
    ir = reused.stages["reuse-dead-shared"]
    assert ir.count("{kaio.reuse_dead}") == 2  # the second loop's A and B buffers, moved to their first use


def test_one_loop_is_left_as_it_was():
    @kaio.tile_kernel(num_warps=4, num_stages=2)
    def one_loop(a: Array[f16], b: Array[f16], c: MutArray[f32], K: i32):
        acc = kt.zeros((32, 32), f32)
        for k0 in range(0, K, 16):
            acc = kt.dot(kt.load(a, (0, k0), (32, 16), (32, K)), kt.load(b, (k0, 0), (16, 32), (K, 32)), acc)
        kt.store(c, (0, 0), acc, (32, 32))

    pipeline = one_loop.default_pipeline("sm_80")
    before = kaio.compile(one_loop, "sm_80", pipeline=pipeline)
    after = kaio.compile(one_loop, "sm_80", pipeline=pipeline.insert(ReuseDeadSharedPass(), before="lower-to-ptx"))
    assert before.ptx.split("\n", 3)[3] == after.ptx.split("\n", 3)[3]  # past the header


def run(arch: str, rng, planted: bool = False, m=40, n=36, k=88, split=48):  # type: ignore[no-untyped-def]
    dev = kaio.Device("sim", arch=arch)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = dev.alloc_from(np.full((m, n), np.nan, np.float32))
    kernel = two_loops.with_pipeline(lambda target: pipeline_for(target, planted=planted))
    previous, dev.simulator.race_check = dev.simulator.race_check, True  # shared-memory hazards are errors
    try:
        kernel.launch(dev, dev.alloc_from(a), dev.alloc_from(b), c, m, n, k, split, grid=(2, 2))
    finally:
        dev.simulator.race_check = previous
    return c.to_host(), a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_two_loops_sharing_bytes_match_numpy_without_races(rng, arch):
    got, want = run(arch, rng)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_without_the_barrier_the_simulator_sees_the_race(rng):
    """Planted bug: the second loop's first copies overwrite the first loop's last stage while
    other warps may still read it."""
    with pytest.raises(KaioMemoryError, match="shared memory race"):
        run("sm_80", rng, planted=True)
