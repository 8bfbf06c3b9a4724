"""setmaxnreg against the CTA register pool: a warp-specialised kernel whose consumers ask for
more registers than the producer frees is a deadlock reported with its arithmetic; the
satisfiable budget runs; the ISA's rules on the counts are enforced."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.targets.ptx.registers import entry_registers
from kaio.targets.sim import Simulator

from kaio.errors import KaioSimError

from .conftest import Device, check_ptx

THREADS = 384  # two consumer warpgroups, then the producer warpgroup (as kaio's kernels)
CONSUMERS = 256


def warp_specialised(bound: str, inc: int = 232, dec: int = 40, producer_exit: str = "exit;", before_inc: str = "") -> str:
    """Modelled on kaio's warp-specialised matmul: the producer warpgroup (threads 256..383)
    gives registers back and leaves; the consumers take them, meet at a 256-thread barrier and
    write out[tid] = 2 * tid."""
    return f"""
.version 8.0
.target sm_90a
.address_size 64

.visible .entry ws(.param .u64 out)
{bound}
{{
  .reg .pred %p<4>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, %tid.x;
  setp.lt.u32 %p1, %r1, {CONSUMERS};
  @%p1 bra CONSUMER;
  setmaxnreg.dec.sync.aligned.u32 {dec};
  {producer_exit}
CONSUMER:
  {before_inc}
  setmaxnreg.inc.sync.aligned.u32 {inc};
  bar.sync 1, {CONSUMERS};
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  shl.b32 %r2, %r1, 1;
  st.global.u32 [%rd3], %r2;
  ret;
}}
"""


def run(sim: Simulator, ptx: str, registers: int | None = None) -> np.ndarray:
    check_ptx(ptx, "sm_90a")
    dev = Device(sim)
    out = dev.empty(CONSUMERS, np.uint32)
    sim.load(ptx).launch("ws", 1, THREADS, dev.params(out), registers_per_thread=registers)
    return dev.read(out)


def test_entry_count_comes_from_maxnreg() -> None:
    # ptxas -v where the wheel is installed, else the bound: both say 128 under .maxnreg 128
    assert entry_registers(warp_specialised(".maxnreg 128"), "ws", "sm_90a", THREADS, 128) == 128
    assert entry_registers(warp_specialised(".maxnreg 168"), "ws", "sm_90a", THREADS, 168) == 168


def test_overflow_is_a_deadlock_with_the_reason(sim: Simulator) -> None:
    """.maxnreg 128: the consumers' .inc to 232 needs 2 x 128 x 104 = 26624 registers, the
    producer's .dec to 40 frees 128 x 88 = 11264: a hang on a GPU."""
    with pytest.raises(KaioSimError) as info:
        run(sim, warp_specialised(".maxnreg 128"))
    message = str(info.value)
    assert "setmaxnreg.inc.sync.aligned.u32 232" in message
    assert "need 26624 more registers" in message
    assert "the pool holds 11264 after every .dec" in message
    assert "entry: 128 registers x 384 threads" in message
    assert info.value.ptx_line == 19  # type: ignore[attr-defined]


def test_satisfiable_budget_runs(sim: Simulator) -> None:
    """Entry 168 x 384: the producer frees 128 x 128 = 16384, exactly the 2 x 128 x 64 the
    consumers take."""
    got = run(sim, warp_specialised(".maxnreg 168"))
    np.testing.assert_array_equal(got, 2 * np.arange(CONSUMERS, dtype=np.uint32))


def test_explicit_entry_count_overrides(sim: Simulator) -> None:
    """The launch's registers_per_thread wins over the kernel's bound."""
    with pytest.raises(KaioSimError, match="entry: 160 registers"):
        run(sim, warp_specialised(".maxnreg 168"), registers=160)


def test_inc_waits_for_a_later_dec(sim: Simulator) -> None:
    """Consumers that reach their .inc before the producer frees anything wait, then run."""
    ptx = warp_specialised(".maxnreg 168").replace("@%p1 bra CONSUMER;", "@!%p1 bra PRODUCER;\n  bra.uni CONSUMER;\nPRODUCER:")
    got = run(sim, ptx)
    np.testing.assert_array_equal(got, 2 * np.arange(CONSUMERS, dtype=np.uint32))


def test_exited_warps_keep_their_registers(sim: Simulator) -> None:
    """A producer that exits without .dec frees nothing: the pool never fills."""
    ptx = warp_specialised(".maxnreg 168").replace("setmaxnreg.dec.sync.aligned.u32 40;", "")
    with pytest.raises(KaioSimError, match="the pool holds 0 after every .dec"):
        run(sim, ptx)


def test_a_warp_that_skips_the_inc_is_reported(sim: Simulator) -> None:
    """Warp 3 of warpgroup 0 exits instead of executing the warpgroup's .inc."""
    skip = "setp.ge.u32 %p2, %r1, 96;\n  setp.lt.u32 %p3, %r1, 128;\n  and.pred %p2, %p2, %p3;\n  @%p2 exit;"
    with pytest.raises(KaioSimError, match="warp 3 of warpgroup 0 exited without executing it"):
        run(sim, warp_specialised(".maxnreg 168", before_inc=skip))


@pytest.mark.parametrize(
    ("inc", "dec", "message"),
    [(160, 40, "setmaxnreg.inc to 160 registers, fewer than the warp's current 168"),
     (232, 176, "setmaxnreg.dec to 176 registers, more than the warp's current 168")],
)  # fmt: skip
def test_counts_against_the_current_one(sim: Simulator, inc: int, dec: int, message: str) -> None:
    with pytest.raises(KaioSimError, match=message):
        run(sim, warp_specialised(".maxnreg 168", inc=inc, dec=dec), registers=168)  # ptxas would pick 160


def test_ignored_where_ptxas_drops_it(sim: Simulator) -> None:
    """No .maxnreg and no block bound with .minnctapersm: ptxas cannot know the count at entry,
    drops setmaxnreg (C7508), and so does the simulator: the overflowing trade runs."""
    got = run(sim, warp_specialised(".reqntid 384, 1, 1"))
    np.testing.assert_array_equal(got, 2 * np.arange(CONSUMERS, dtype=np.uint32))


def test_launch_bounds_make_it_count(sim: Simulator) -> None:
    """__launch_bounds__(384, 1): 168 registers at entry; 2 x 128 x 80 for an .inc to 248 is more
    than the 128 x 144 a .dec to 24 frees."""
    with pytest.raises(KaioSimError, match="entry: 168 registers x 384 threads"):
        run(sim, warp_specialised(".maxntid 384, 1, 1\n.minnctapersm 1", inc=248, dec=24))
