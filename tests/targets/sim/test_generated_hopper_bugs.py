"""Planted bugs in kaio's *own* sm_90a code: a tile matmul compiled by the default pipeline, with
one kind of fence or wait deleted from its PTX, must be rejected by the simulator, while the
unmodified kernel matches numpy. Before the simulator modelled the async proxy, deleting every
``fence.proxy.async`` from such a kernel still gave the right answer on it (and a wrong one, or
a hang, on an H100)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

import kaio
import kaio.module_compiler
import kaio.tile as kt
from kaio import KaioMemoryError, KaioSimError
from kaio.pipeline import Pipeline, tile_pipeline
from kaio.prelude import Array, MutArray, f16, f32, i32

M, N, K = 64, 64, 192  # three K tiles through a two-stage ring: every stage is refilled


def fresh_matmul():
    """A new kernel object per test, so no launch reuses another test's compiled variant."""

    @kaio.tile_kernel(num_warps=4, num_stages=2)
    def matmul(a: Array[f16], b: Array[f16], c: MutArray[f32], m: i32, n: i32, k: i32):
        a, b = kt.multiple_of(a, 16), kt.multiple_of(b, 16)
        m0 = i32(kt.program_id(0)) * 64
        acc = kt.zeros((64, 64), f32)
        for k0 in range(0, k, 64):
            acc = kt.dot(kt.load(a, (m0, k0), (64, 64), (m, k)), kt.load(b, (k0, 0), (64, 64), (k, n)), acc)
        kt.store(c, (m0, 0), acc, (m, n))

    return matmul


def without(pattern: str) -> Callable[[str], str]:
    regex = re.compile(pattern)
    return lambda ptx: "\n".join(line for line in ptx.splitlines() if not regex.search(line))


def without_fence_after(anchor: str) -> Callable[[str], str]:
    """The PTX without the first ``fence.proxy.async`` that follows a line matching ``anchor``."""
    regex = re.compile(anchor)

    def edit(ptx: str) -> str:
        lines = ptx.splitlines()
        start = next(i for i, line in enumerate(lines) if regex.search(line))
        fence = next(i for i in range(start, len(lines)) if "fence.proxy.async" in lines[i])
        return "\n".join(lines[:fence] + lines[fence + 1 :])

    return edit


def wait_passes_at_once(ptx: str) -> str:
    """Every mbarrier wait succeeds at its first try: the math reads a stage TMA may not have
    filled yet."""
    return re.sub(r"mbarrier\.try_wait\S* (%p\d+), [^;]*;", r"mov.pred \1, 1;", ptx)


def wait_answer_ignored(ptx: str) -> str:
    """Every mbarrier wait still polls, but its answer is replaced by "done": on a GPU the first
    poll of a phase TMA has not completed may say false, and the math then reads the stage early."""
    return re.sub(r"(mbarrier\.try_wait\S* (%p\d+), [^;]*;)", r"\1\n\tmov.pred \2, 1;", ptx)


def accumulator_touched_after_fence(ptx: str) -> str:
    """A move of the first wgmma's first accumulator register between its wgmma.fence and it."""
    lines = ptx.splitlines()
    first = next(i for i, line in enumerate(lines) if "wgmma.mma_async" in line)
    fence = max(i for i in range(first) if "wgmma.fence" in lines[i])
    reg = re.search(r"\{\s*(%f\d+)", lines[first]).group(1)  # type: ignore[union-attr]
    return "\n".join([*lines[: fence + 1], f"\tmov.f32 {reg}, {reg};", *lines[fence + 1 :]])


def mma_sync_on_tma(arch: str) -> Pipeline:
    """The dot on mma.sync while TMA fills the ring: ldmatrix (generic proxy) reads each stage
    before TMA (async proxy) refills it."""
    return Pipeline.parse(re.sub(r"lower-to-wgmma(\{[^}]*\})?,", "", str(tile_pipeline(arch, 2))))


def cp_async_wgmma(arch: str) -> Pipeline:
    """wgmma on a ring that cp.async (generic proxy) fills."""
    return tile_pipeline(arch, 2).without("pipeline-tma").without("store-tma")


def warp_specialised(arch: str) -> Pipeline:
    """A producer warpgroup fills the ring; each consumer warp releases a stage with one arrival."""
    return Pipeline.parse(str(tile_pipeline(arch, 2)).replace("warp_specialize=false", "warp_specialize=true"))


def overlap_past_refill(ptx: str) -> str:
    """The K loop's wgmmas left in flight (``wait_group 1``) although a 2-stage ring refills
    the stage they read at the top of the next iteration."""
    return ptx.replace("wgmma.wait_group.sync.aligned 0;", "wgmma.wait_group.sync.aligned 1;", 1)


def run(kernel, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    dev = kaio.Device("sim", arch="sm_90a")
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    out = dev.alloc_from(np.full((M, N), np.nan, np.float32))
    kernel[1](dev.alloc_from(a), dev.alloc_from(b), out, M, N, K)
    return out.to_host(), a.astype(np.float64) @ b.astype(np.float64)


@pytest.fixture
def edit_ptx(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[str], str]], None]:
    """Compile with the printed PTX edited (and no disk cache, so no edited kernel outlives the
    test)."""
    monkeypatch.setenv("KAIO_CACHE", "0")

    def install(edit: Callable[[str], str]) -> None:
        printer = kaio.module_compiler.print_ptx
        monkeypatch.setattr(kaio.module_compiler, "print_ptx", lambda module, arch=None: edit(printer(module, arch)))

    return install


PATHS = {
    "tma-wgmma": None,  # the default: TMA ring, wgmma, TMA store
    "tma-mma-sync": mma_sync_on_tma,
    "cp-async-wgmma": cp_async_wgmma,
    "tma-ws-wgmma": warp_specialised,
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", ["", "0"])
def test_the_generated_kernel_passes_every_rule(path, seed, edit_ptx, rng, monkeypatch):
    monkeypatch.setenv("KAIO_SIM_SCHEDULE_SEED", seed)
    pipeline = PATHS[path]
    kernel = fresh_matmul() if pipeline is None else fresh_matmul().with_pipeline(pipeline)
    got, want = run(kernel, rng)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


CASES = {
    # fence deleted (the first fence.proxy.async after the anchor), path, what the simulator says
    "mbarrier-init-fence": ("tma-wgmma", without_fence_after(r"mbarrier\.init"), r"initialised .* with no fence\.mbarrier_init"),
    # the refill's fence: the first after the prologue's loads, before or after the loop's ldmatrix reads
    # (a 2-stage ring refills before its math)
    "refill-fence": ("tma-mma-sync", without_fence_after(r"cp\.async\.bulk\.tensor"), r"missing fence\.proxy\.async: a generic-proxy read .* async-proxy write"),
    "c-store-fence": ("tma-wgmma", without_fence_after(r"st\.shared"), r"missing fence\.proxy\.async: a generic-proxy write"),
    "cp-async-operand-fence": ("cp-async-wgmma", without(r"fence\.proxy\.async"), r"missing fence\.proxy\.async: a generic-proxy write"),
    "mbarrier-wait": ("tma-wgmma", wait_passes_at_once, r"still writing: wait on its mbarrier"),
    "mbarrier-wait-answer-ignored": ("tma-wgmma", wait_answer_ignored, r"still writing: wait on its mbarrier"),
    "wgmma-wait": ("tma-wgmma", without(r"wgmma\.wait_group"), r"still being read asynchronously"),
    "wgmma-fence": ("tma-wgmma", without(r"wgmma\.fence"), r"no wgmma\.fence came before it"),
    "tma-store-wait": ("tma-wgmma", without(r"cp\.async\.bulk\.wait_group\.read"), r"exits while the TMA store .* still reads shared memory"),
    "tma-store-commit": ("tma-wgmma", without(r"cp\.async\.bulk\.commit_group"), r"exits while the TMA store .* still reads shared memory"),
    "wgmma-fence-cp-async": ("cp-async-wgmma", without(r"wgmma\.fence"), r"no wgmma\.fence came before it"),
    "accumulator-touched-after-fence": ("tma-wgmma", accumulator_touched_after_fence, r"accessed by another instruction since the last wgmma\.fence"),
    "wgmma-overlap-past-refill": ("tma-wgmma", overlap_past_refill, r"bulk copy into shared memory that is still being read asynchronously"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_kernel_missing_a_fence_or_wait_is_rejected(case, edit_ptx, rng, monkeypatch):
    path, edit, rule = CASES[case]
    edit_ptx(edit)
    monkeypatch.setenv("KAIO_SIM_SCHEDULE_SEED", "0")  # (a wait's first poll may then answer false)
    pipeline = PATHS[path]
    kernel = fresh_matmul() if pipeline is None else fresh_matmul().with_pipeline(pipeline)
    with pytest.raises((KaioSimError, KaioMemoryError), match=rule):
        run(kernel, rng)


def test_a_barrier_between_the_warpgroups_own_writes_and_its_wgmma_is_required(edit_ptx, rng):
    """The cp.async ring of a one-warpgroup wgmma GEMM: each thread's copies land at its own
    wait, and only the barrier after the waits orders them before the other warps' issue of the
    wgmma that reads them. The race check counted only writers outside the warpgroup, so the
    GEMM with its barriers deleted passed with race_check=True."""
    edit_ptx(without(r"bar\.sync"))
    kernel = fresh_matmul().with_pipeline(cp_async_wgmma)
    dev = kaio.Device("sim", arch="sm_90a")
    previous, dev.simulator.race_check = dev.simulator.race_check, True
    try:
        with pytest.raises(KaioMemoryError, match=r"wgmma\.mma_async .* operand read"):
            run(kernel, rng)
    finally:
        dev.simulator.race_check = previous
