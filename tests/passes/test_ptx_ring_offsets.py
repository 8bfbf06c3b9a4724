"""ptx-iv-reduce's stage counters: ``r = (r + 1 == N) ? 0 : r + 1`` read as ``r * C + base``
becomes a rotating byte offset (an xor for two stages), only where the counter provably stays in
``[0, N)`` and nothing else reads it.

Golden structure on hand-built loops (two and three stages; refusals: a counter read another
way, a start out of range, more scales than the update saves), tile matmuls with 2- and 3-stage
rings on the simulator against numpy, and a planted wrong start offset that must be caught."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.dialects import ptx
from kaio.passes import ptx_ring_offsets
from kaio.passes.ptx_optimize import PtxIvReducePass, PtxOptimizePass
from xdsl.dialects.builtin import ModuleOp, i1, i32
from xdsl.ir import Operation, SSAValue

import kaio
import kaio.tile as kt
from kaio.errors import KaioMemoryError
from kaio.pipeline import Pipeline, tile_pipeline
from kaio.prelude import Array, MutArray, f16, f32
from kaio.prelude import i32 as I32


class Ring:
    """``entry k(p)``: ``r = start``, ``L: ld [base + r*C]...; r = r+1 == N ? 0 : r+1; bra L``."""

    def __init__(self, stages: int, start: int = 0) -> None:
        self.entry = ptx.EntryOp("k", [("k_p", "u32")])
        self.block = self.entry.body.block
        self.stages = stages
        self.base = self.add(ptx.LdOp("param.u32", [], [i32], symbol="k_p"))
        self.r = self.add(ptx.RegOp(i32))
        self.add(ptx.AssignOp("b32", [self.r, self.const(start)]))
        self.add(ptx.LabelOp("L_head"))

    def add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def const(self, v: int) -> SSAValue:
        return self.add(ptx.ConstOp(v, i32))

    def read(self, scale: int) -> None:
        """``ld.shared [r*scale + base]``: a stage's address."""
        at = self.add(ptx.MadOp("lo.s32", [self.r, self.const(scale), self.base], [i32]))
        self.add(ptx.LdOp("shared.u32", [at], [i32]))

    def close(self) -> list[str]:
        bump = self.add(ptx.AddOp("s32", [self.r, self.const(1)], [i32]))
        wrap = self.add(ptx.SetpOp("eq.b32", [bump, self.const(self.stages)], [i1]))
        self.add(ptx.AssignOp("b32", [self.r, self.add(ptx.SelpOp("b32", [self.const(0), bump, wrap], [i32]))]))
        more = self.add(ptx.SetpOp("ne.s32", [self.base, self.const(0)], [i1]))
        self.add(ptx.BraOp("", guard=more, symbol="L_head"))
        module = ModuleOp([self.entry])
        PtxIvReducePass().apply(None, module)  # type: ignore[arg-type]
        module.verify()
        names = [f"{op.name[4:]}.{op.spec_text}" if isinstance(op, ptx.PtxInstr) else op.name[4:]
                 for op in self.block.ops if not isinstance(op, ptx.ConstOp | ptx.RegOp)]  # fmt: skip
        return names[names.index("label") :]


def test_two_stages_rotate_by_an_xor() -> None:
    ring = Ring(2, start=1)
    ring.read(4096)
    ring.read(4096)
    assert ring.close() == [
        "label", "add.s32", "ld.shared.u32", "add.s32", "ld.shared.u32", "xor.b32", "assign.b32", "setp.ne.s32", "bra.",
    ]  # fmt: skip
    first = next(op for op in ring.block.ops if isinstance(op, ptx.AssignOp))
    assert ptx_ring_offsets.const_int(first.operands[1]) == 4096  # the start stage's offset


def test_three_stages_wrap_the_offset() -> None:
    ring = Ring(3)
    ring.read(8192)
    after = ring.close()
    assert after == [
        "label", "add.s32", "ld.shared.u32", "add.s32", "setp.eq.s32", "selp.b32", "assign.b32",
        "setp.ne.s32", "bra.",
    ]  # fmt: skip
    wrap = next(op for op in ring.block.ops if isinstance(op, ptx.SetpOp) and op.spec_text == "eq.s32")
    assert ptx_ring_offsets.const_int(wrap.operands[1]) == 3 * 8192


def unchanged(ring: Ring) -> bool:
    return "mad.lo.s32" in ring.close()


def test_a_counter_read_another_way_stays() -> None:
    ring = Ring(2)
    ring.read(4096)
    ring.add(ptx.StOp("shared.u32", [ring.base, ring.r]))  # the stage index itself is stored
    assert unchanged(ring)


def test_a_start_out_of_range_stays() -> None:
    ring = Ring(2, start=2)  # 2, then 3, 4, ...: never wraps, not a ring
    ring.read(4096)
    assert unchanged(ring)


def test_more_scales_than_the_update_saves_stay() -> None:
    ring = Ring(3)
    ring.read(4096)
    ring.read(8192)  # two offsets would take six instructions per trip instead of three
    assert unchanged(ring)


def ring_matmul(stages: int):  # type: ignore[no-untyped-def]
    @kaio.tile_kernel(num_warps=2, num_stages=stages)
    def ring_matmul(a: Array[f16], b: Array[f16], c: MutArray[f32], m: I32, n: I32, k: I32,
                    BM: kaio.constexpr = 32, BN: kaio.constexpr = 32, BK: kaio.constexpr = 16):  # fmt: skip
        m0, n0 = I32(kt.program_id(0)) * BM, I32(kt.program_id(1)) * BN
        acc = kt.zeros((BM, BN), f32)
        for k0 in range(0, k, BK):
            acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)
        kt.store(c, (m0, n0), acc, (m, n))

    return ring_matmul


TWO, THREE = ring_matmul(2), ring_matmul(3)


def compiled_loop(kernel) -> str:  # type: ignore[no-untyped-def]
    text = kaio.compile(kernel, "sm_80").ptx
    start = text.index("$L_for")
    return text[start : text.index("bra $L_for", start)]


def with_planted_start(kernel):  # type: ignore[no-untyped-def]
    class Planted(PtxIvReducePass):
        name = "test-planted-ring-offsets"  # its own pipeline string: no cached PTX is reused

    def pipeline(arch: str) -> Pipeline:
        return (
            tile_pipeline(arch, stages=2)
            .replace("ptx-optimize", PtxOptimizePass(iv_reduce=False, fold=False))
            .insert(Planted(), after="ptx-optimize")
            .insert(PtxOptimizePass(strength_reduce=False, licm=False, iv_reduce=False), after=Planted.name)
        )

    return kernel.with_pipeline(pipeline)


def run_matmul(dev: kaio.Device, kernel, rng: np.random.Generator, m: int, n: int, k: int) -> float:  # type: ignore[no-untyped-def]
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = dev.alloc_from(np.full((m, n), np.nan, np.float32))
    kernel[(kaio.cdiv(m, 32), kaio.cdiv(n, 32))](dev.alloc_from(a), dev.alloc_from(b), c, m, n, k)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = c.to_host()
    return float(np.abs(got - want).max() / np.abs(want).max()) if np.isfinite(got).all() else np.inf


def test_a_two_stage_ring_rotates_by_an_xor() -> None:
    loop = compiled_loop(TWO)
    assert "xor.b32" in loop and "setp.eq" not in loop  # the stage counters are gone


@pytest.mark.parametrize("kernel", [TWO, THREE], ids=["2 stages", "3 stages"])
@pytest.mark.parametrize(("m", "n", "k"), [(32, 32, 80), (17, 40, 37)])
def test_rings_multiply_right_on_the_simulator(
    dev: kaio.Device, rng: np.random.Generator, kernel, m: int, n: int, k: int  # type: ignore[no-untyped-def]
) -> None:
    assert run_matmul(dev, kernel, rng, m, n, k) < 1e-3  # 3 to 5 K steps: each ring wraps


def test_a_planted_wrong_start_is_caught(
    dev: kaio.Device, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    right = ptx_ring_offsets.find_rings

    def off_by_one_stage(ops, loop):  # type: ignore[no-untyped-def]
        rings = right(ops, loop)
        for ring in rings:
            ring.start = (ring.start + 1) % ring.stages
        return rings

    monkeypatch.setattr(ptx_ring_offsets, "find_rings", off_by_one_stage)
    kernel = with_planted_start(TWO)
    assert "xor.b32" in compiled_loop(kernel)
    try:
        caught = run_matmul(dev, kernel, rng, 32, 32, 80) > 1e-2
    except KaioMemoryError:  # the simulator sees a stage read before any copy filled it
        caught = True
    assert caught
