"""``@kaio.tile_kernel(num_warps=4, num_stages=3, maxnreg=None)``: a kernel written over tiles.

The function is one *program*, run by one CTA of ``32 * num_warps`` threads; ``kernel[grid]``
launches ``grid`` programs. It is parsed and checked when decorated, exactly like a
``@kaio.gpu_kernel`` (the same parameters, constexprs, errors and launch), and compiled through
the tile stack: ``tile-layout`` -> ``promote-to-shared`` -> ``pipeline-cp-async`` ->
``lower-to-mma-sync`` -> ``lower-to-ptx``. ``num_warps`` is the block size (``32 *
num_warps`` threads); ``num_stages`` and ``maxnreg`` go on the built module once, as its
``kaio.launch`` attribute, where the ring passes read their depth and ``lower-to-ptx`` its
cap (a pipeline that gives those passes the option overrides it). ``maxnreg`` caps the
registers per thread (PTX ``.maxnreg``), as Triton's option of that name does: more warps fit
on an SM, at the risk of spills when the cap is below what the kernel needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kaio.compiled import ARG_FACTS
from kaio.dialects import stage_attrs
from kaio.errors import KaioCompileError
from kaio.launch_limits import (
    DEFAULT_STAGES, MAX_MAXNREG, MAX_STAGES, MAX_WARPS, MAXNREG_RULE, MIN_MAXNREG, STAGES_RULE,
)  # fmt: skip
from kaio.frontend.context import BuildState
from kaio.frontend.kernel import GpuKernel, KernelIR
from kaio.frontend.scope import Scope
from kaio.frontend.tiles import TileCompiler
from kaio.frontend import tile_atomics  # noqa: F401  (registers kt.atomic_*)
from kaio.frontend.values import ArrayRef, Scalar

# a launch's facts: (name, the power of two up to this dividing the argument). 16 makes views
# vectorise (Triton's divisibility); 64, a 128-byte swizzle span of 16-bit elements, lets a
# tensor map load a tile several spans wide as one box (passes/tensor_map_views.py)
MAX_DIVISOR = 64


class TileKernel(GpuKernel):
    compiler_class = TileCompiler
    kind = "tile_kernel"
    stand_in_int = 16  # a tile size without a default is checked as 16 (the smallest mma tile)

    def __init__(self, fn: Callable[..., Any], num_warps: int = 4, num_stages: int = DEFAULT_STAGES,
                 maxnreg: int | None = None):  # fmt: skip
        self.num_warps = _checked("num_warps", num_warps, fn, lambda n: 1 <= n <= MAX_WARPS and not n & (n - 1),
                                  f"a power of two from 1 to {MAX_WARPS}")  # fmt: skip
        self.num_stages = _checked("num_stages", num_stages, fn, lambda n: 0 <= n <= MAX_STAGES,
                                   STAGES_RULE)  # fmt: skip
        self.maxnreg = None if maxnreg is None else _checked(
            "maxnreg", maxnreg, fn, lambda n: MIN_MAXNREG <= n <= MAX_MAXNREG, f"None or {MAXNREG_RULE}"
        )
        super().__init__(fn, 32 * self.num_warps)
        # the 32-bit integer runtime arguments a launch inspects: (position, name)
        self._int_args = tuple(
            (i, p.name) for i, p in enumerate(self.runtime_params)
            if not p.is_array and p.dtype.is_int and p.dtype.bits == 32
        )  # fmt: skip

    def build(self, constexprs: Any = None) -> KernelIR:
        values = dict(constexprs or {})
        divisible = tuple(values.pop(ARG_FACTS, ()))
        built = self._build(self._constexpr_values(values), unknown=(), facts=divisible)
        stage_attrs.set_module_launch(built.module, self.num_stages, self.maxnreg)  # the passes read them here
        return built

    def arg_specialization(self, runtime: Any) -> tuple[tuple[str, int], ...]:
        """What a launch specializes on besides constexprs (as Triton does): the largest power
        of two up to 64 dividing each 32-bit integer argument, so views on them vectorise and
        tensor maps take wide tiles in one box (:data:`MAX_DIVISOR`). (The
        launch adds the base alignment of each array argument below 16 bytes: see
        :meth:`_bind_facts`.)"""
        facts = []
        for i, name in self._int_args:
            v = runtime[i]
            if v.__class__ is int and v:
                d = min(v & -v, MAX_DIVISOR)
                if d > 1:
                    facts.append((name, d))
        return tuple(facts)

    def _bind_facts(self, scope: Scope, state: BuildState, facts: Any) -> None:
        """``(name, n)``: n divides the integer argument, or the array argument's base address
        (bytes; an array without a fact is 16-byte aligned). Every tile view of an array takes
        its base alignment from here, so vector copies, cp.async sizes and tensor maps are only
        as wide as the launch proved."""
        from kaio.dialects.tile import MultipleOfOp

        for name, divisor in facts or ():
            v = scope.get(name)
            if isinstance(v, Scalar) and v.type.is_int and v.type.bits == 32:
                scope.bind(name, Scalar(state.emitter.value(MultipleOfOp(v.ssa, divisor)), v.type))
            elif isinstance(v, ArrayRef):
                scope.bind(name, replace(v, align=min(v.align, divisor)))

    def default_pipeline(self, arch: str = "sm_80") -> Any:
        if self._pipeline is not None:
            return self._pipeline(arch)
        from kaio.pipeline import TilePipelineOptions, build_pipeline

        return build_pipeline(arch, TilePipelineOptions())  # stages and maxnreg: the module's kaio.launch

    def with_options(self, num_warps: int | None = None, num_stages: int | None = None,
                     maxnreg: int | None = None) -> TileKernel:  # fmt: skip
        """The same kernel with other launch options (checked, parsed again); a pipeline given
        by :meth:`with_pipeline` stays."""
        other = TileKernel(
            self.fn,
            self.num_warps if num_warps is None else num_warps,
            self.num_stages if num_stages is None else num_stages,
            self.maxnreg if maxnreg is None else maxnreg,
        )
        other._pipeline = self._pipeline
        return other

    def source_key(self) -> str:
        return f"{super().source_key()}|stages={self.num_stages}|maxnreg={self.maxnreg}"

    def __repr__(self) -> str:
        params = ", ".join(p.name for p in self.params)
        cap = f" maxnreg={self.maxnreg}" if self.maxnreg else ""
        return f"<kaio.tile_kernel {self.name}({params}) num_warps={self.num_warps} num_stages={self.num_stages}{cap}>"


def _checked(name: str, value: Any, fn: Callable[..., Any], ok: Callable[[int], bool], what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
        where = getattr(fn, "__qualname__", repr(fn))
        raise KaioCompileError(f"@kaio.tile_kernel of `{where}`: {name}={value!r} is not {what}")
    return value


def tile_kernel(fn: Callable[..., Any] | None = None, *, num_warps: int = 4, num_stages: int = DEFAULT_STAGES,
                maxnreg: int | None = None) -> Any:  # fmt: skip
    """Compile a Python function over tiles into a GPU kernel: ``@kaio.tile_kernel(num_warps=4)``."""
    if fn is not None:
        return TileKernel(fn, num_warps, num_stages, maxnreg)
    return lambda f: TileKernel(f, num_warps, num_stages, maxnreg)


__all__ = ["TileKernel", "tile_kernel"]
