"""fast-math: the pass sets afn/arcp on float divisions and transcendentals, lower-to-ptx picks
the .ftz SFU forms and rcp.approx for them, and kernels without it keep exact math. On the
simulator: the fast forms agree with numpy within their documented error, flush subnormal
exponentials to zero, and a planted bug (the flag ignored, or honoured where it was not set)
shows in the PTX and in the results."""

import numpy as np
import pytest
from kaio.dialects import kernel as k
from kaio.passes.fast_math import FastMathPass, with_fast_math
from kaio.targets.ptx import toolchain
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import FloatAttr, f32

import kaio
from kaio.pipeline import Pipeline, kernel_pipeline
from kaio.prelude import (
    Array,
    MutArray,
    block_dim_x,
    block_idx_x,
    exp,
    exp2,
    i32,
    log2,
    thread_idx_x,
)
from kaio.prelude import f32 as F32

from .test_lower_to_ptx import lower, make_kernel, specs


@kaio.gpu_kernel
def softmax_bits(x: Array[F32], d: Array[F32], e2: MutArray[F32], e: MutArray[F32], q: MutArray[F32],
                 r: MutArray[F32], l2: MutArray[F32], n: i32):  # fmt: skip
    i = i32(thread_idx_x() + block_idx_x() * block_dim_x())
    if i < n:
        e2[i] = exp2(x[i])
        e[i] = exp(x[i])
        q[i] = x[i] / d[i]
        r[i] = 1.0 / d[i]
        l2[i] = log2(d[i])


def fast(arch: str) -> Pipeline:
    return kernel_pipeline(arch).insert(FastMathPass(), before="lower-to-ptx")


def lowered_specs(fast_math: bool) -> dict[str, list[str]]:
    """exp2(a) and a / b, b / a... on IR built by hand, through fast-math (or not) and lower-to-ptx."""

    def body(b, args):  # type: ignore[no-untyped-def]
        a, y = args
        one = b.insert(arith.ConstantOp(FloatAttr(1.0, f32))).result
        e = b.insert(xmath.Exp2Op(a)).result
        q = b.insert(arith.DivfOp(e, a)).result
        r = b.insert(arith.DivfOp(one, q)).result
        zero = b.insert(arith.ConstantOp.from_int_and_width(0, 64)).result
        b.insert(k.StoreOp(r, y, [zero]))

    module = make_kernel([("a", f32), ("y", k.ArrayType(f32, True))], body)
    if fast_math:
        FastMathPass().apply(None, module)  # type: ignore[arg-type]
    lower(module)
    return {name: specs(module, f"ptx.{name}") for name in ("ex2", "div", "rcp", "mul")}


def test_the_pass_sets_the_flags_and_the_lowering_reads_them():
    assert "fast-math" in Pipeline.parse("fast-math,lower-to-ptx").names
    assert lowered_specs(False) == {"ex2": ["approx.f32"], "div": ["rn.f32", "rn.f32"], "rcp": [], "mul": []}
    assert lowered_specs(True) == {"ex2": ["approx.ftz.f32"], "div": [], "rcp": ["approx.ftz.f32"] * 2, "mul": ["rn.f32"]}


def test_the_pass_only_adds_flags():
    one = arith.ConstantOp(FloatAttr(1.0, f32))
    div = arith.DivfOp(one, one, flags=arith.FastMathFlagsAttr(("nnan",)))
    assert with_fast_math(div)
    assert {arith.FastMathFlag(f).value for f in div.fastmath.data} == {"nnan", "afn", "arcp"}
    assert with_fast_math(xmath.Exp2Op(one)) and not with_fast_math(arith.AddfOp(one, one))


@pytest.mark.parametrize("bug", ["flag ignored", "flag assumed"])
def test_a_planted_bug_in_the_flag_reading_is_caught(monkeypatch, bug):
    """The lowering's flag test, broken either way, fails the spec check above."""
    from kaio.passes.to_ptx import arith_math

    monkeypatch.setattr(arith_math, "_fast", lambda op, wanted: bug == "flag assumed")
    with pytest.raises(AssertionError):
        test_the_pass_sets_the_flags_and_the_lowering_reads_them()


def test_ptx_has_the_fast_forms_only_with_the_pass():
    exact = kaio.compile(softmax_bits, "sm_80").ptx
    quick = kaio.compile(softmax_bits, "sm_80", pipeline=fast("sm_80")).ptx
    assert "ex2.approx.f32" in exact and "div.rn.f32" in exact and ".ftz" not in exact
    assert "rcp" not in exact
    assert quick.count("ex2.approx.ftz.f32") == 2 and "lg2.approx.ftz.f32" in quick
    assert "div.rn.f32" not in quick and quick.count("rcp.approx.ftz.f32") == 2  # x / d and 1 / d
    assert quick.count("mul.rn.f32") == 1  # x * rcp(d); 1 / d is the reciprocal alone
    if toolchain.find_ptxas() is not None:
        toolchain.assemble(quick, "sm_80")


def run(dev, pipeline, x, d):  # type: ignore[no-untyped-def]
    kernel = softmax_bits.with_pipeline(pipeline) if pipeline else softmax_bits
    n = x.size
    outs = [dev.alloc_from(np.full(n, np.nan, np.float32)) for _ in range(5)]
    kernel[(1,), (n,)](dev.alloc_from(x), dev.alloc_from(d), *outs, n)
    return [o.to_host() for o in outs]


def test_fast_math_on_the_simulator_against_numpy(dev, rng):
    x = rng.uniform(-20, 20, 64).astype(np.float32)
    x[:4] = [-130.0, -140.0, -149.0, 0.0]  # exp2: subnormal results (flushed with .ftz)
    d = rng.uniform(0.5, 4.0, 64).astype(np.float32) * rng.choice([-1, 1], 64).astype(np.float32)
    d = np.abs(d)  # log2 wants positive
    e2, e, q, r, l2 = run(dev, fast, x, d)
    want_e2 = np.exp2(x.astype(np.float64))
    normal = want_e2 >= 2.0**-126
    assert np.allclose(e2[normal], want_e2[normal], rtol=2e-6)
    assert (e2[~normal] == 0).all() and (~normal).sum() == 3  # flushed
    assert np.allclose(e, np.exp(x.astype(np.float64)), rtol=1e-5)
    assert np.allclose(q, x.astype(np.float64) / d, rtol=2e-6, atol=0)
    assert np.allclose(r, 1.0 / d.astype(np.float64), rtol=2e-6)
    assert np.allclose(l2, np.log2(d.astype(np.float64)), rtol=1e-5, atol=1e-6)
    exact = run(dev, None, x, d)[0]
    assert (exact[~normal] > 0).all()  # without the pass subnormal results stay
