"""Extend kaio in plain Python: a new op, a pass that introduces it, and its PTX lowering.

`docs/extending.md` walks through this file. The kernel below clamps values to [0, 1] with
`min(max(v, 0.0), 1.0)`; the `use-saturate` pass recognizes that pattern and replaces it by a
new `demo.saturate` op, whose lowering is a single PTX instruction, `cvt.sat.f32.f32`.

    python examples/custom_op.py
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, f32
from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def, traits_def
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.traits import Pure

import kaio
from kaio.dialects import ptx
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter
from kaio.prelude import Array, MutArray, block_dim_x, block_idx_x, thread_idx_x, u32
from kaio.prelude import f32 as F32

# --------------------------------------------------------------------------- 1. the op


@irdl_op_definition
class SaturateOp(IRDLOperation):
    """``%y = demo.saturate %x : f32``: clamp to [0, 1] (NaN becomes 0)."""

    name = "demo.saturate"
    input = operand_def(f32)
    result = result_def(f32)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($result)"

    def __init__(self, value):
        super().__init__(operands=[value], result_types=[f32])


Demo = Dialect("demo", [SaturateOp])


# --------------------------------------------------------------------------- 2. a pass


def _constant(value, expected: float) -> bool:
    owner = value.owner
    return isinstance(owner, arith.ConstantOp) and owner.value.value.data == expected


class UseSaturate(RewritePattern):
    """``minnumf(maxnumf(x, 0.0), 1.0)`` -> ``demo.saturate x``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: arith.MinnumfOp, rewriter: PatternRewriter) -> None:
        inner = op.lhs.owner
        if not (isinstance(inner, arith.MaxnumfOp) and _constant(op.rhs, 1.0) and _constant(inner.rhs, 0.0)):
            return
        rewriter.replace(op, SaturateOp(inner.lhs))
        if not inner.result.uses:
            rewriter.erase(inner)


@dataclass(frozen=True)
class UseSaturatePass(ModulePass):
    name = "use-saturate"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(UseSaturate()).rewrite_module(op)


# --------------------------------------------------------------------------- 3. its lowering


@lowering(SaturateOp)
def lower_saturate(em: PtxEmitter, op: SaturateOp) -> None:
    clamped = em.instr(ptx.CvtOp, "sat.f32.f32", [em.value(op.input)], f32)
    em.bind(op.result, clamped)


# --------------------------------------------------------------------------- 4. use it


@kaio.gpu_kernel(block_size=128)
def clamp01(x: Array[F32], y: MutArray[F32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        y[i] = min(max(x[i], 0.0), 1.0)


def pipeline(arch: str) -> kaio.Pipeline:
    """The kernel's default pipeline with our pass inserted before the lowering."""
    return clamp01.default_pipeline(arch).insert(UseSaturatePass(), before="lower-to-ptx")


def main() -> None:
    compiled = kaio.compile(clamp01, "sm_80", pipeline=pipeline("sm_80"))
    print("pipeline:", compiled.pipeline)
    line = next(text for text in compiled.ptx.splitlines() if "cvt.sat" in text)
    print("PTX:", line.strip())

    dev = kaio.Device()
    n = 1000
    x = np.random.default_rng().normal(0.5, 1.0, n).astype(np.float32)
    xs, ys = dev.alloc_from(x), dev.alloc_from(np.full(n, np.nan, np.float32))
    saturating = clamp01.with_pipeline(pipeline)  # launches compile with our pipeline
    saturating[kaio.cdiv(n, 128)](xs, ys, n)
    assert np.array_equal(ys.to_host(), np.clip(x, 0.0, 1.0))
    print(f"ran on {dev.name}: matches numpy.clip")


if __name__ == "__main__":
    main()
