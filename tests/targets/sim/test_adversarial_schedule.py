"""The seeded adversarial schedule: a kernel that counts on warps running in lockstep passes the
default schedule and fails under every seed; with the barrier it needs it passes under every
seed; a seed replays the same schedule."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.targets.sim import Simulator

from kaio.errors import KaioLaunchError, KaioMemoryError

from .conftest import Device, check_ptx

SEEDS = (0, 1, 2)
WARPS = 8  # four writer/reader pairs per block
BLOCKS = 4


def handoff(sync: str) -> str:
    """Warp 2k stores v[lane] (its lane's input plus 1) to shared memory, then warp 2k+1 reads
    the slot its partner wrote and stores it to out; ``sync`` sits between the two."""
    return f"""
.version 8.0
.target sm_80
.address_size 64

.visible .entry handoff(.param .u64 src, .param .u64 out)
{{
  .reg .pred %writer, %reader;
  .reg .b32 %r<12>;
  .reg .b64 %rd<8>;
  .shared .align 4 .b32 slots[{WARPS * 32}];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  shr.u32 %r3, %r1, 5;
  and.b32 %r4, %r3, 1;
  setp.eq.u32 %writer, %r4, 0;
  setp.ne.u32 %reader, %r4, 0;
  mad.lo.u32 %r5, %r2, {WARPS * 32}, %r1;
  ld.param.u64 %rd1, [src];
  mul.wide.u32 %rd2, %r5, 4;
  add.s64 %rd3, %rd1, %rd2;
  @%writer ld.global.u32 %r6, [%rd3];
  @%writer add.u32 %r6, %r6, 1;
  mov.u32 %r7, slots;
  shl.b32 %r8, %r1, 2;
  add.u32 %r9, %r7, %r8;
  @%writer st.shared.u32 [%r9], %r6;
  {sync}
  @%reader sub.u32 %r10, %r9, 128;
  @%reader ld.shared.u32 %r11, [%r10];
  ld.param.u64 %rd4, [out];
  add.s64 %rd5, %rd4, %rd2;
  @%reader st.global.u32 [%rd5], %r11;
  ret;
}}
"""


def run(sim: Simulator, sync: str, rng: np.random.Generator) -> None:
    """Launch and check every reader's output against its writer's input (+1)."""
    ptx = handoff(sync)
    check_ptx(ptx)
    dev = Device(sim)
    n = BLOCKS * WARPS * 32
    src = rng.integers(0, 1 << 30, n, dtype=np.uint32)
    out = dev.empty(n, np.uint32)
    dev.launch(sim.load(ptx), "handoff", BLOCKS, WARPS * 32, dev.array(src), out)
    got = dev.read(out).reshape(BLOCKS, WARPS // 2, 2, 32)[:, :, 1]
    want = (src.reshape(BLOCKS, WARPS // 2, 2, 32)[:, :, 0] + 1).astype(np.uint32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sync", ["", "bar.warp.sync -1;"])
def test_lockstep_assumption_passes_the_default_schedule(sync: str, rng: np.random.Generator) -> None:
    """What the adversarial mode exists for: lockstep hides the missing barrier."""
    run(Simulator(schedule_seed=None), sync, rng)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("sync", ["", "bar.warp.sync -1;"])
def test_lockstep_assumption_fails_under_every_seed(sync: str, seed: int, rng: np.random.Generator) -> None:
    """A reader warp that runs ahead of its writer reads shared memory nothing stored yet."""
    with pytest.raises(KaioMemoryError, match="uninitialized shared"):
        run(Simulator(schedule_seed=seed), sync, rng)


@pytest.mark.parametrize("seed", SEEDS)
def test_barrier_makes_it_pass_under_every_seed(seed: int, rng: np.random.Generator) -> None:
    run(Simulator(schedule_seed=seed), "bar.sync 0;", rng)


def test_a_seed_replays_its_schedule(rng: np.random.Generator) -> None:
    """Same seed, same steps; the adversarial schedule splits warps (more steps than lockstep)."""
    steps = {}
    for seed in (None, 7, 7, 8):
        sim = Simulator(schedule_seed=seed)
        ptx = handoff("bar.sync 0;")
        dev = Device(sim)
        src = dev.array(rng.integers(0, 1 << 30, BLOCKS * WARPS * 32, dtype=np.uint32))
        out = dev.empty(BLOCKS * WARPS * 32, np.uint32)
        report = dev.launch(sim.load(ptx), "handoff", BLOCKS, WARPS * 32, src, out)
        steps.setdefault(seed, []).append(report.steps)
    assert steps[7][0] == steps[7][1]
    assert steps[None][0] < steps[7][0]
    assert steps[7][0] != steps[8][0]


def test_seed_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """KAIO_SIM_SCHEDULE_SEED applies to simulators not given a seed, read at each launch."""
    sim = Simulator()
    monkeypatch.setenv("KAIO_SIM_SCHEDULE_SEED", "5")
    assert sim.schedule_seed == 5
    assert Simulator(schedule_seed=None).schedule_seed is None
    monkeypatch.setenv("KAIO_SIM_SCHEDULE_SEED", "")
    assert sim.schedule_seed is None
    monkeypatch.setenv("KAIO_SIM_SCHEDULE_SEED", "five")
    with pytest.raises(KaioLaunchError, match="KAIO_SIM_SCHEDULE_SEED"):
        _ = sim.schedule_seed
    sim.schedule_seed = 3  # an attribute, like race_check
    assert sim.schedule_seed == 3
