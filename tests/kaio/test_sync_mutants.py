"""kaio.tools.sync_mutants: the synchronisation-mutant campaign. Its parts on small PTX; a kernel
whose barriers are all needed has every mutant killed and one whose barrier orders only a
thread's own accesses has it survive; CI's subset of the library campaign (matmul on sm_80 and
sm_90a in its TMA, warp-specialised and two-warpgroup paths, the row reductions and their
backward, the int4 matmul) leaves no survivor the cases module does not explain; every
library op passes the race check, synccheck and an adversarial schedule unmutated. The whole
campaign (every case, sm_80, sm_90, sm_90a) is ``-m slow``: each survivor there must be one the
cases module explains."""

from __future__ import annotations

import numpy as np
import pytest
from acceptance_kernels import matmul as tiled_matmul

import kaio
from kaio.prelude import Array, MutArray, bar_sync, block_dim_x, block_idx_x, f32, i32, shared_mem, thread_idx_x
from kaio.tools import sync_mutant_cases
from kaio.tools.sync_mutants import Site, campaign, loading, main, mutate, sites, strict, survivors, table, unexplained

PTX = """\
.visible .entry k()
{
\tcp.async.commit_group;
\tcp.async.wait_group 0;
\tbar.sync 0;
\t@%p1 bar.sync 0;
\tmbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], %r2;
\t@!%p2 bra $L;
\tfence.proxy.async.shared::cta;
\twgmma.fence.sync.aligned;
\tadd.s32 %r1, %r1, 1;
}
"""


def test_sites_are_the_synchronisation_instructions_named_by_occurrence():
    found = sites("k", PTX)
    assert [s.text.split()[0] for s in found] == [
        "cp.async.commit_group;", "cp.async.wait_group", "bar.sync", "@%p1",
        "mbarrier.try_wait.parity.shared::cta.b64", "fence.proxy.async.shared::cta;", "wgmma.fence.sync.aligned;",
    ]  # fmt: skip
    assert [s.line for s in found] == [3, 4, 5, 6, 7, 9, 10]
    assert [s.nth for s in found if "bar.sync" in s.text] == [0, 0]  # two texts, each the first of its kind
    assert Site("k", 1, "bar.sync 0;", 2).key == ("k", "bar.sync 0;", 2)


def test_a_mutant_deletes_its_line_and_a_wait_becomes_done_at_once():
    found = sites("k", PTX)
    barrier, wait = found[2], found[4]
    assert mutate(PTX, barrier).splitlines() == [line for i, line in enumerate(PTX.splitlines()) if i != 4]
    waited = mutate(PTX, wait).splitlines()
    assert waited[6] == "\tmov.pred %p2, 1;" and len(waited) == len(PTX.splitlines())


def _matmul_case(dev: kaio.Device, n: int = 40) -> None:
    """n = 40: three 16-wide tiles, the last ragged: both barriers of each trip matter."""
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    c = dev.alloc_from(np.full((n, n), np.nan, np.float32))
    tiles = -(-n // 16)
    tiled_matmul[(tiles, tiles)](dev.alloc_from(a), dev.alloc_from(b), c, n)
    got = c.to_host()
    assert np.isfinite(got).all() and np.abs(got - a.astype(np.float64) @ b).max() < 1e-3


@kaio.gpu_kernel(block_size=64)
def own_slot(x: Array[f32], y: MutArray[f32], n: i32):
    """Each thread reads back the shared word it wrote: the barrier orders nothing between
    threads, yet a compiler that does not track addresses must keep it."""
    slot = shared_mem(f32, 64)
    t = i32(thread_idx_x())
    i = i32(block_idx_x()) * i32(block_dim_x()) + t
    slot[t] = x[i] if i < n else 0.0
    bar_sync()
    if i < n:
        y[i] = slot[t] * 2.0


def _own_slot_case(dev: kaio.Device) -> None:
    x = np.random.default_rng(6).standard_normal(100).astype(np.float32)
    y = dev.alloc_from(np.full(100, np.nan, np.float32))
    own_slot[2](dev.alloc_from(x), y, 100)
    np.testing.assert_array_equal(y.to_host(), 2 * x)


def test_every_needed_barrier_is_killed_and_a_needless_one_survives():
    dev = kaio.Device("sim", arch="sm_80")
    results = campaign({"tiled matmul": _matmul_case, "own slot": _own_slot_case}, dev, seeds=(0,))
    matmul, slot = results
    assert not matmul.error and len(matmul.outcomes) == 2, table(results)
    assert {o.verdict for o in matmul.outcomes} <= {"rejected", "wrong"}, table(results)
    assert [o.verdict for o in slot.outcomes] == ["survived"], table(results)
    assert [o.site.text for o in survivors(results)] == ["bar.sync 0;"]
    text = table(results)
    assert "| tiled matmul | 2 |" in text and "Survivors:" in text and "own slot" in text


def test_a_failing_unmutated_case_is_reported_not_mutated():
    def broken(dev: kaio.Device) -> None:
        raise AssertionError("wrong before any mutation")

    (result,) = campaign({"broken": broken}, kaio.Device("sim"), seeds=(0,))
    assert result.error.startswith("AssertionError: wrong before") and not result.outcomes
    assert "unmutated case failed" in table([result])


def test_loading_edits_only_inside_and_strict_restores_the_simulator(monkeypatch):
    monkeypatch.delenv("KAIO_SIM_SCHEDULE_SEED", raising=False)
    dev = kaio.Device("sim", arch="sm_80")  # (a device shared with other tests: its settings as they are)
    before = dev.simulator.race_check, dev.simulator.synccheck
    with strict(dev, 3):
        assert dev.simulator.race_check and dev.simulator.synccheck
        with loading(dev, lambda ptx, name: ptx.replace("mul.rn.f32", "add.rn.f32")) as seen:
            x = np.ones(100, np.float32)
            y = dev.alloc_from(np.zeros(100, np.float32))
            own_slot[2](dev.alloc_from(x), y, 100)
        assert [name for name, _ in seen] == ["own_slot"]
        assert (y.to_host() == 3).all()  # x + 2.0: the edited kernel ran
    assert (dev.simulator.race_check, dev.simulator.synccheck) == before
    own_slot[2](dev.alloc_from(x), y, 100)
    assert (y.to_host() == 2).all()  # the original again: the edited specialization was forgotten


CI_SUBSET = {
    "sm_80": ["matmul mma.sync cp.async", "softmax", "cross_entropy", "rms_norm_backward", "layer_norm_backward",
              "w4a16 matmul"],
    "sm_90a": ["matmul wgmma tma", "matmul wgmma warp-specialised", "matmul wgmma 2 warpgroups"],
}  # fmt: skip


@pytest.mark.parametrize("arch", CI_SUBSET)
def test_the_library_subset_leaves_only_explained_survivors(arch):
    cases = sync_mutant_cases.cases(arch)
    results = campaign({name: cases[name] for name in CI_SUBSET[arch]}, kaio.Device("sim", arch=arch), seeds=(0,))
    assert all(not r.error and r.outcomes for r in results), table(results)
    explained = sync_mutant_cases.EXPLAINED[arch]
    assert not unexplained(results, explained), table(results, explained)
    assert all(any(o.verdict != "survived" for o in r.outcomes) for r in results), table(results, explained)


@pytest.mark.parametrize(
    "arch, name", [(arch, name) for arch in ("sm_80", "sm_90a") for name in sync_mutant_cases.cases(arch)]
)
def test_every_library_op_passes_the_race_check_and_synccheck(arch, name):
    dev = kaio.Device("sim", arch=arch)
    with strict(dev, 0):
        sync_mutant_cases.cases(arch)[name](dev)


@pytest.mark.slow
def test_the_whole_campaign_leaves_only_explained_survivors(capsys):
    status = main(["--seeds", "0"])
    out = capsys.readouterr().out
    assert "unmutated case failed" not in out and "**unexplained**" not in out, out
    assert status == 0, out


def test_a_survivor_without_a_reason_is_marked_and_one_with_a_reason_shows_it():
    results = campaign({"own slot": _own_slot_case}, kaio.Device("sim", arch="sm_80"), seeds=(0,))
    assert "**unexplained**" in table(results) and len(unexplained(results, {})) == 1
    key = ("own slot", *survivors(results)[0].site.key)
    assert "each thread its own word" in table(results, {key: "each thread its own word"})
    assert not unexplained(results, {key: "each thread its own word"})


def test_a_survivor_another_case_kills_is_reported_as_needed_there():
    """One 16-wide tile: the K loop runs one trip, so the barrier before the next trip's stores
    orders nothing; with three tiles (the same PTX: n a multiple of 16 both times) it does."""
    dev = kaio.Device("sim", arch="sm_80")
    cases = {"three tiles": lambda d: _matmul_case(d, 48), "one tile": lambda d: _matmul_case(d, 16)}
    three, one = results = campaign(cases, dev, seeds=(0,))
    assert not survivors([three]) and survivors([one]), table(results)
    assert [o.site.ptx for o in survivors([one])] == [three.outcomes[0].site.ptx] * len(survivors([one]))
    assert not unexplained(results, {}), table(results)
    assert "killed in 'three tiles'" in table(results)
