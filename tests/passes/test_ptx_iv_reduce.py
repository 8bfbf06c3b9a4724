"""ptx-iv-reduce: values linear in a loop counter become registers advanced with it, only where
that is exact.

Golden structure on hand-built loops (what gets a register, what is refused: two updates of the
counter, a step that changes inside the loop, widenings that may wrap, a loop entered from
outside, a rewrite that would not pay), and strided SIMT sums on the simulator against numpy
(negative strides, zero trips, 64-bit offsets), with a planted wrong step that must be caught
and the SASS of the strided loop assembled without spills."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.dialects import ptx
from kaio.passes import ptx_iv_reduce
from kaio.passes.ptx_iv_reduce import Linear
from kaio.passes.ptx_optimize import PtxIvReducePass, PtxOptimizePass
from xdsl.dialects.builtin import ModuleOp, i1, i32, i64
from xdsl.ir import Operation, SSAValue

import kaio
from kaio.pipeline import Pipeline, kernel_pipeline
from kaio.prelude import Array, MutArray, block_idx_x, f32, thread_idx_x
from kaio.prelude import i32 as I32
from kaio.prelude import i64 as I64


class Loop:
    """``entry k(p, n, s)``: ``k = start``, then ``L_head: body; k += step; @(k < n) bra L_head``."""

    def __init__(self, start: int = 0) -> None:
        self.entry = ptx.EntryOp("k", [("k_p", "u64"), ("k_n", "u32"), ("k_s", "u32")])
        self.block = self.entry.body.block
        self.p = self.add(ptx.LdOp("param.u64", [], [i64], symbol="k_p"))
        self.n = self.add(ptx.LdOp("param.u32", [], [i32], symbol="k_n"))
        self.s = self.add(ptx.LdOp("param.u32", [], [i32], symbol="k_s"))
        self.k = self.add(ptx.RegOp(i32))
        self.add(ptx.AssignOp("b32", [self.k, self.const(start)]))
        self.add(ptx.LabelOp("L_head"))

    def add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def const(self, v: int, t=i32) -> SSAValue:  # type: ignore[no-untyped-def]
        return self.add(ptx.ConstOp(v, t))

    def address(self, index: SSAValue) -> None:
        """``st [p + index*4]``: a widening of ``index`` the loop reads."""
        offset = self.add(ptx.MulOp("wide.s32", [index, self.const(4)], [i64]))
        self.add(
            ptx.StOp("global.u32", [self.add(ptx.AddOp("s64", [self.p, offset], [i64])), self.n])
        )

    def close(
        self, step: SSAValue | int = 1, test: str = "lt.s32", extra_update: bool = False
    ) -> list[str]:
        """Add the latch, run ptx-iv-reduce; returns the op names from the label on."""
        nxt = self.add(
            ptx.AddOp(
                "s32", [self.k, step if isinstance(step, SSAValue) else self.const(step)], [i32]
            )
        )
        self.add(ptx.AssignOp("b32", [self.k, nxt]))
        if extra_update:
            self.add(
                ptx.AssignOp(
                    "b32", [self.k, self.add(ptx.AddOp("s32", [self.k, self.const(1)], [i32]))]
                )
            )
        more = self.add(ptx.SetpOp(test, [self.k, self.n], [i1]))
        self.add(ptx.BraOp("", guard=more, symbol="L_head"))
        module = ModuleOp([self.entry])
        PtxIvReducePass().apply(None, module)  # type: ignore[arg-type]
        module.verify()
        names = self.names()
        return names[names.index("label") :]

    def names(self) -> list[str]:
        return [f"{op.name[4:]}.{op.spec_text}" if isinstance(op, ptx.PtxInstr) else op.name[4:]
                for op in self.block.ops if not isinstance(op, ptx.ConstOp | ptx.RegOp)]  # fmt: skip


def strided(lp: Loop) -> SSAValue:
    """``k*s + n``: the 32-bit index of ``x[k*stride + col]``."""
    return lp.add(ptx.AddOp("s32", [lp.add(ptx.MulOp("lo.s32", [lp.k, lp.s], [i32])), lp.n], [i32]))


LATCH = ["add.s32", "assign.b32", "setp.lt.s32", "bra."]
CARRIED = ["add.s32", "assign.b32"]  # a new register's advance, right after the counter's


def test_a_strided_index_is_carried_and_its_widening_stays() -> None:
    lp = Loop()
    lp.address(strided(lp))
    after = lp.close()
    # k*s + n may wrap in 32 bits: the 32-bit index is carried, the widening is not
    assert after == [
        "label",
        "mul.wide.s32",
        "add.s64",
        "st.global.u32",
        "add.s32",
        "assign.b32",
        *CARRIED,
        "setp.lt.s32",
        "bra.",
    ]
    before = lp.names()[: lp.names().index("label")]
    assert before[-3:] == ["mul.lo.s32", "add.s32", "assign.b32"]  # f(k) on entry


def test_a_counter_that_cannot_wrap_is_widened_in_64_bits() -> None:
    lp = Loop()
    lp.address(lp.k)  # x[k] with k < n checked before each increment: k + 1 never wraps
    after = lp.close()
    assert after == [
        "label",
        "st.global.u32",
        "add.s32",
        "assign.b32",
        "add.s64",
        "assign.b64",
        "setp.lt.s32",
        "bra.",
    ]


@pytest.mark.parametrize("case", ["le", "step2", "unsigned", "start_max"])
def test_widenings_that_may_wrap_are_refused(case: str) -> None:
    lp = Loop(start=2**31 - 1 if case == "start_max" else 0)
    lp.address(lp.k)
    test = {"le": "le.s32", "unsigned": "lt.u32"}.get(case, "lt.s32")
    after = lp.close(step=2 if case == "step2" else 1, test=test)
    assert after[1:3] == ["mul.wide.s32", "add.s64"]  # still computed from k in the loop
    assert "assign.b64" not in after


def test_a_counter_with_two_updates_is_refused() -> None:
    lp = Loop()
    lp.address(strided(lp))
    after = lp.close(extra_update=True)
    assert "mul.lo.s32" in after and after.count("assign.b32") == 2


def test_a_step_that_changes_in_the_loop_is_refused() -> None:
    lp = Loop()
    step = lp.add(ptx.RegOp(i32))  # assigned in the loop: not invariant
    lp.block.insert_op_before(
        ptx.AssignOp("b32", [step, lp.n]),
        next(o for o in lp.block.ops if isinstance(o, ptx.LabelOp)),
    )
    lp.address(strided(lp))
    lp.add(ptx.AssignOp("b32", [step, lp.add(ptx.AddOp("s32", [step, lp.const(1)], [i32]))]))
    after = lp.close(step=step)
    assert "mul.lo.s32" in after


def test_an_invariant_step_is_multiplied_once_before_the_loop() -> None:
    lp = Loop()
    lp.address(strided(lp))
    after = lp.close(step=lp.n)  # k += n: the index advances by n*s, computed on entry
    assert "mul.lo.s32" not in after
    before = lp.names()[: lp.names().index("label")]
    assert before.count("mul.lo.s32") == 2  # f(k) on entry, and the step n*s


def test_a_loop_entered_from_outside_is_left_alone() -> None:
    lp = Loop()
    head = next(op for op in lp.block.ops if isinstance(op, ptx.LabelOp))
    lp.block.insert_op_before(ptx.BraOp("", symbol="L_inside"), head)
    lp.add(ptx.LabelOp("L_inside"))
    lp.address(strided(lp))
    assert "mul.lo.s32" in lp.close()


def test_a_rewrite_that_saves_nothing_is_skipped() -> None:
    lp = Loop()
    lp.address(
        lp.add(ptx.AddOp("s32", [lp.k, lp.n], [i32]))
    )  # one add: a carried register would cost the same
    after = lp.close()
    assert after[1:3] == ["add.s32", "mul.wide.s32"] and "assign.b64" not in after


def test_uses_after_the_counter_update_keep_the_value() -> None:
    lp = Loop()
    index = strided(lp)
    nxt = lp.add(ptx.AddOp("s32", [lp.k, lp.const(1)], [i32]))
    lp.add(ptx.AssignOp("b32", [lp.k, nxt]))
    lp.address(index)  # read after k moved: a carried register would already be one step ahead
    more = lp.add(ptx.SetpOp("lt.s32", [lp.k, lp.n], [i1]))
    lp.add(ptx.BraOp("", guard=more, symbol="L_head"))
    PtxIvReducePass().apply(None, ModuleOp([lp.entry]))  # type: ignore[arg-type]
    names = lp.names()
    assert "mul.lo.s32" in names[names.index("label") :]


# --------------------------------------------------------------------------- on the simulator


@kaio.gpu_kernel(block_size=32)
def column_sums(x: Array[f32], out: MutArray[f32], n: I32, stride: I32, start: I32, ncols: I32):  # type: ignore[no-untyped-def]
    col = I32(block_idx_x() * 32 + thread_idx_x())
    if col < ncols:
        acc = f32(0.0)
        for j in range(n):
            acc += x[start + j * stride + col]
        out[col] = acc


@kaio.gpu_kernel(block_size=32)
def wide_sums(x: Array[f32], out: MutArray[f32], n: I32, stride: I64, start: I64, ncols: I32):  # type: ignore[no-untyped-def]
    col = I32(block_idx_x() * 32 + thread_idx_x())
    if col < ncols:
        acc = f32(0.0)
        for j in range(n):
            acc += x[start + I64(j) * stride + I64(col)] + x[j]
        out[col] = acc


def with_iv(kernel, on: bool = True, planted: bool = False):  # type: ignore[no-untyped-def]
    class Planted(PtxIvReducePass):
        name = "test-planted-iv-reduce"  # its own pipeline string: no cached PTX is reused

    def pipeline(arch: str) -> Pipeline:
        base = kernel_pipeline(arch).without("ptx-optimize").passes
        if planted:
            return Pipeline(
                (
                    *base,
                    PtxOptimizePass(iv_reduce=False, fold=False),
                    Planted(),
                    PtxOptimizePass(strength_reduce=False, licm=False, iv_reduce=False),
                )
            )
        return Pipeline((*base, PtxOptimizePass(iv_reduce=on)))

    return kernel.with_pipeline(pipeline)


def loop_text(ptx_text: str) -> str:
    start = ptx_text.index("$L_for")
    return ptx_text[start : ptx_text.index("bra $L_for", start)]


def test_the_strided_loop_loses_its_multiply() -> None:
    before = loop_text(kaio.compile(with_iv(column_sums, on=False), "sm_80").ptx)
    after = loop_text(kaio.compile(column_sums, "sm_80").ptx)
    assert before.count("mul.lo") == 1 and after.count("mul.lo") == 0
    assert after.count("\n") < before.count("\n")


def run_sums(
    dev: kaio.Device, kernel, rng: np.random.Generator, n: int, stride: int, wide: bool = False
) -> bool:  # type: ignore[no-untyped-def]
    ncols = 40
    rows = max(n, 1)
    size = rows * abs(stride) + ncols + 8
    x = rng.standard_normal(size).astype(np.float32)
    start = (rows - 1) * -stride if stride < 0 else 3
    idx = start + np.arange(n)[:, None] * stride + np.arange(ncols)[None, :]
    want = x[idx].sum(axis=0) if n else np.zeros(ncols, np.float32)
    if wide:
        want = want + x[np.arange(n)].sum() if n else want
    out = dev.alloc_from(np.full(ncols, np.nan, np.float32))
    kernel[(2,), (32,)](dev.alloc_from(x), out, n, stride, start, ncols)
    return bool(np.allclose(out.to_host(), want, rtol=1e-5, atol=1e-5))


@pytest.mark.parametrize(("n", "stride"), [(5, 41), (6, -43), (0, 41), (1, -40)])
def test_strided_sums_on_the_simulator(
    dev: kaio.Device, rng: np.random.Generator, n: int, stride: int
) -> None:
    assert run_sums(dev, column_sums, rng, n, stride)


@pytest.mark.parametrize("stride", [45, -45])
def test_64_bit_offsets_on_the_simulator(
    dev: kaio.Device, rng: np.random.Generator, stride: int
) -> None:
    text = loop_text(kaio.compile(wide_sums, "sm_80").ptx)
    assert "mul.lo.s64" not in text and "mul.wide" not in text  # both indexes carried in 64 bits
    assert run_sums(dev, wide_sums, rng, 4, stride, wide=True)


def test_a_planted_wrong_step_is_caught(
    dev: kaio.Device, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    right = ptx_iv_reduce._RULES[ptx.MulOp]

    def forgetful_mul(ch, op, g, word):  # type: ignore[no-untyped-def]
        if op.spec_text != "lo.s32":
            return right(ch, op, g, word)
        return Linear(g[0].step if g[0].step != 0 else g[1].step, word[0])  # k*stride advances by 1

    monkeypatch.setitem(ptx_iv_reduce._RULES, ptx.MulOp, forgetful_mul)
    kernel = with_iv(column_sums, planted=True)
    assert "mul.lo" not in loop_text(kaio.compile(kernel, "sm_80").ptx)
    assert not run_sums(dev, kernel, rng, 5, 41)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_strided_loop_assembles_without_spills(arch: str) -> None:
    from kaio.targets.ptx import sass

    if not sass.tools_available():
        pytest.skip("no ptxas wheel")
    report = sass.analyze(kaio.compile(column_sums, arch).ptx, arch)["column_sums"]
    assert report.spill_bytes == 0 and report.main_loop() is not None
