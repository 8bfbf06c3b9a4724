"""A third-party kaio extension, as a user's package would be: a dialect with one op, a kernel
builtin that makes it (a SIMT builtin and, lifted over tiles, a tile function), a pass over it,
its PTX lowering, and the ``xdsl.universe`` object its entry point names. Public API only."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp, f32
from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def, traits_def
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.traits import Pure
from xdsl.universe import Universe

import kaio
from kaio.dialects import ptx
from kaio.passes.to_ptx import lowering
from kaio.prelude import f32 as F32


@irdl_op_definition
class SaturateOp(IRDLOperation):
    """``%y = demo.saturate %x : f32``: clamp to [0, 1]."""

    name = "demo.saturate"
    input = operand_def(f32)
    result = result_def(f32)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($result)"

    def __init__(self, value):
        super().__init__(operands=[value], result_types=[f32])


Demo = Dialect("demo", [SaturateOp])


@kaio.builtin("saturate(x)")
def saturate(call: kaio.BuiltinCall, x):
    v = call.scalar(x, "saturate's argument", F32)
    return call.result(SaturateOp(v.ssa), F32)


class _SaturateTwice(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: SaturateOp, rewriter: PatternRewriter) -> None:
        if isinstance(op.input.owner, SaturateOp):
            rewriter.replace(op, [], [op.input])


@dataclass(frozen=True)
class FoldSaturate(ModulePass):
    """``saturate(saturate(x))`` -> ``saturate(x)``."""

    name = "demo-fold-saturate"

    def apply(self, ctx, op: ModuleOp) -> None:
        PatternRewriteWalker(_SaturateTwice()).rewrite_module(op)


@lowering(SaturateOp)
def _lower_saturate(em, op: SaturateOp) -> None:
    em.bind(op.result, em.instr(ptx.CvtOp, "sat.f32.f32", [em.value(op.input)], f32))


UNIVERSE = Universe(all_dialects={"demo": lambda: Demo}, all_passes={"demo-fold-saturate": lambda: FoldSaturate})
