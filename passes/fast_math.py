"""``fast-math``: a kernel's float math may trade IEEE corner cases for speed.

kaio's math is exact where the language promises it (``a / b`` is the correctly rounded
``div.rn``; ``exp2`` keeps subnormal results). This pass opts a whole kernel out, as CUDA's
``--use_fast_math`` does: it sets MLIR's fast-math flags ``afn`` (approximate functions) and
``arcp`` (a reciprocal may stand for a division) on every float division and transcendental of
the module, and ``lower-to-ptx`` reads them (:mod:`kaio.passes.to_ptx.arith_math`):

- ``exp2``/``exp``/``log2``/``log``/``sin``/``cos`` take the ``.ftz`` SFU form (one MUFU
  instruction; subnormal inputs and results are flushed to zero);
- ``a / b`` on f32, f16 and bf16 becomes ``a * rcp.approx.ftz(b)`` (about 1 ulp; ``1 / b`` is the
  reciprocal alone); f64 stays exact.

Flags already set on an op are kept (the pass only adds). Put it anywhere before
``lower-to-ptx``: ``kaio.compile(kernel, pipeline=kernel.default_pipeline(arch).insert(
FastMathPass(), before="lower-to-ptx"))`` or ``"...,fast-math,lower-to-ptx"``.
FlashAttention's softmax (``ops_library.attention``) runs with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

# the ops whose lowering has a faster, less exact form, and the flags that allow it
FAST_OPS: dict[type[Operation], frozenset[arith.FastMathFlag]] = {
    **dict.fromkeys(
        (xmath.Exp2Op, xmath.ExpOp, xmath.Log2Op, xmath.LogOp, xmath.SinOp, xmath.CosOp),
        frozenset({arith.FastMathFlag.APPROX_FUNC}),
    ),
    arith.DivfOp: frozenset({arith.FastMathFlag.APPROX_FUNC, arith.FastMathFlag.ALLOW_RECIP}),
}


def with_fast_math(op: Operation) -> bool:
    """Add the flags ``op``'s fast lowering needs to its ``fastmath`` property; whether it is
    one of :data:`FAST_OPS`."""
    wanted = FAST_OPS.get(type(op))
    if wanted is None:
        return False
    old = op.properties.get("fastmath")
    have = {arith.FastMathFlag(f) for f in old.data} if isinstance(old, arith.FastMathFlagsAttr) else set()
    op.properties["fastmath"] = arith.FastMathFlagsAttr(tuple(sorted(f.value for f in have | wanted)))
    return True


@dataclass(frozen=True)
class FastMathPass(ModulePass):
    """Mark every float division and transcendental with the fast-math flags ``afn`` and ``arcp``."""

    name = "fast-math"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in op.walk():
            with_fast_math(inner)
