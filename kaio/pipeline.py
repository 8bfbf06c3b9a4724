"""Pass pipelines a user can print, edit and hand back to ``kaio.compile``.

A :class:`Pipeline` is an xDSL ``PassPipeline`` whose ``str()`` is its pipeline string, so
``Pipeline.parse(str(p)) == p``; editing returns a new pipeline (passes are frozen).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

from xdsl.passes import ModulePass, PassPipeline


@cache
def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """xDSL's passes plus kaio's, by pipeline name."""
    from xdsl.transforms import get_all_passes as xdsl_passes

    from kaio.passes import get_all_passes

    return {**xdsl_passes(), **get_all_passes()}


@dataclass(frozen=True)
class Pipeline(PassPipeline):
    @staticmethod
    def parse(spec: str) -> Pipeline:  # type: ignore[override]
        """``"canonicalize,cse,lower-to-ptx{arch=sm_90}"`` -> Pipeline (unknown pass -> ValueError)."""
        parsed = PassPipeline.parse_spec(available_passes(), spec)
        return Pipeline(parsed.passes)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    def __str__(self) -> str:
        return ",".join(_spec_text(p) for p in self.passes)

    def _index(self, name: str) -> int:
        if name not in self.names:
            raise ValueError(f"no pass '{name}' in pipeline {self}")
        return self.names.index(name)

    def without(self, name: str) -> Pipeline:
        """The pipeline minus every pass called ``name``."""
        self._index(name)
        return Pipeline(tuple(p for p in self.passes if p.name != name))

    def replace(self, name: str, new: ModulePass) -> Pipeline:
        i = self._index(name)
        return Pipeline((*self.passes[:i], new, *self.passes[i + 1 :]))

    def insert(self, new: ModulePass, *, before: str | None = None, after: str | None = None) -> Pipeline:
        if (before is None) == (after is None):
            raise ValueError("say where: before= or after= a pass name")
        i = self._index(before) if before is not None else self._index(after) + 1  # type: ignore[arg-type]
        return Pipeline((*self.passes[:i], new, *self.passes[i:]))


def _spec_text(p: ModulePass) -> str:
    """A pass as ``name{option=value ...}``, defaults included, unset options (None) left out."""
    spec = p.spec(include_default=True)
    set_options = {k: v for k, v in spec.parameters.items() if v != ()}
    return str(replace(spec, parameters=set_options))


def as_pipeline(pipeline: str | PassPipeline | list[ModulePass] | tuple[ModulePass, ...]) -> Pipeline:
    if isinstance(pipeline, Pipeline):
        return pipeline
    if isinstance(pipeline, str):
        return Pipeline.parse(pipeline)
    if isinstance(pipeline, PassPipeline):
        return Pipeline(pipeline.passes)
    return Pipeline(tuple(pipeline))


def kernel_pipeline(arch: str) -> Pipeline:
    """The default pipeline of a ``@kaio.gpu_kernel``: clean up, vectorize, lower to PTX."""
    from xdsl.transforms.canonicalize import CanonicalizePass
    from xdsl.transforms.common_subexpression_elimination import (
        CommonSubexpressionElimination,
    )

    from kaio.passes.lower_to_ptx import LowerToPtxPass
    from kaio.passes.vectorize_loads import VectorizeLoadsPass

    return Pipeline(
        (CanonicalizePass(), CommonSubexpressionElimination(), VectorizeLoadsPass(), LowerToPtxPass(arch))
    )


def has_wgmma(arch: str) -> bool:
    """Whether ``arch`` has Hopper's warpgroup tensor cores (wgmma: sm_90a only)."""
    from kaio.targets.ptx.arch import get_arch

    target = get_arch(arch)
    return target.sm == 90 and target.arch_specific


def tile_pipeline(arch: str, stages: int = 3, layout: str | None = None, maxnreg: int = 0) -> Pipeline:
    """The default pipeline of a ``@kaio.tile_kernel``: fused elementwise code, layouts,
    shared-memory staging of dot operands, the cp.async ring (``stages`` >= 2), tensor cores,
    clean up, PTX (with a ``.maxnreg`` cap when ``maxnreg`` > 0). On sm_90a the dots wgmma can
    take get its warp grid and shared layout and run on warpgroup tensor cores
    (``lower-to-wgmma``); the others keep mma.sync; and the K loops whose operands a tensor map
    can describe fill their ring by TMA (``pipeline-tma``), the others by cp.async; a dot's
    output tile a tensor map can describe leaves through shared memory by TMA (``store-tma``)."""
    hopper = has_wgmma(arch)
    layout = layout or ("wgmma" if hopper else "swizzle")
    spec = ["fuse-tile-maps", "tile-layout{wgmma=true}" if hopper else "tile-layout"]
    spec += ["store-tma"] if hopper else []
    spec.append(f"promote-to-shared{{layout={layout}}}")
    if stages >= 2:  # on Hopper TMA takes the loops it can describe, cp.async the others
        spec += [f"pipeline-tma{{stages={stages}}}"] if hopper else []
        spec.append(f"pipeline-cp-async{{stages={stages}}}")
    if hopper:
        spec.append("lower-to-wgmma")
    cap = f" maxnreg={maxnreg}" if maxnreg else ""
    spec += ["lower-to-mma-sync", "canonicalize", "cse", f"lower-to-ptx{{arch={arch}{cap}}}"]
    return Pipeline.parse(",".join(spec))
