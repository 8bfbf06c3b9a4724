"""What varies between the default tile pipelines: one typed options record.

A tile kernel's, a matmul config's, an attention config's and the others' default pipelines are
``kaio.pipeline.build_pipeline`` of an arch and a :class:`TilePipelineOptions` (the one
builder; ``build_pipeline(arch)`` alone is a ``@kaio.gpu_kernel``'s). What the pipeline does not say, the module does: its
``kaio.target`` (the arch, which ``lower-to-ptx`` and the printer read) and its ``kaio.launch``
(the tile kernel's ``num_stages`` and ``maxnreg``, which ``pipeline-tma``, ``pipeline-cp-async``
and ``lower-to-ptx`` read where the pipeline gives them no option). So a default pipeline
repeats none of them, and ``str(pipeline)`` is a pipeline string that compiles any kernel with
that kernel's own ring depth and register cap; ``stages=`` or ``maxnreg=`` given here are
written into the pipeline as pass options, which override the module's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kaio.dialects.smem_layout_kinds import LAYOUT_KINDS
from kaio.dtypes import is_int_value
from kaio.errors import KaioTypeError, KaioValueError
from kaio.launch_limits import (
    MAX_MAXNREG, MAX_STAGES, MAX_THREADS, MAXNREG_RULE, MIN_MAXNREG, STAGES_RULE,
)  # fmt: skip

__all__ = ["TilePipelineOptions"]

@dataclass(frozen=True)
class TilePipelineOptions:
    """What varies between the default tile pipelines, each field checked once, here.

    The ring depth and the register cap are the kernel's launch options and live on the module
    (``kaio.launch``): leave ``stages`` and ``maxnreg`` None and the passes read them there."""

    layout: str | None = None
    """The shared layout of staged dot operands (``promote-to-shared{layout}``: swizzle, wgmma,
    pad, none); None: wgmma where the dots run on warpgroup tensor cores, else swizzle."""

    tensor_cores: bool = True
    """Dots on tensor cores (``tile-layout{mma}``, ``lower-to-mma-sync``); False: FMA."""

    warps: tuple[int, int] | None = None
    """The dots' warp grid (``tile-layout{warps=WM,WN}``); None: picked from the tile shape (on
    sm_90a, [num_warps, 1] for the dots wgmma can take)."""

    wgmma: bool | None = None
    """On sm_90a, dots on Hopper's warpgroup tensor cores (``lower-to-wgmma``); None: wherever
    the arch has them. Elsewhere the dots stay on mma.sync whatever this says."""

    tma: bool = True
    """With wgmma: fill the K loops' rings by TMA (``pipeline-tma``) and store dot outputs by
    TMA (``store-tma``) where a tensor map can describe them; False: cp.async and st.global."""

    warp_specialize: bool = False
    """With TMA: a producer warpgroup issues the loads (``pipeline-tma{warp_specialize}``)."""

    fast_math: bool = False
    """exp2 and reciprocals as approximate MUFU instructions (``fast-math``)."""

    reuse_dead_shared: bool = False
    """Shared buffers of one loop take the bytes of buffers dead there (``reuse-dead-shared``)."""

    stages: int | None = None
    """An override of the module's ring depth (``{stages=N}`` on the ring passes; 0 or 1: no
    ring passes); None: the module's ``kaio.launch`` num_stages."""

    maxnreg: int | None = None
    """An override of the module's register cap (``lower-to-ptx{maxnreg=N}``, and the budget
    of a warp-specialised ``pipeline-tma``); None: the module's ``kaio.launch`` maxnreg."""

    def __post_init__(self) -> None:
        owner = "TilePipelineOptions"
        if self.layout is not None:
            if not isinstance(self.layout, str) or self.layout not in LAYOUT_KINDS:
                rule = f"None or one of {', '.join(LAYOUT_KINDS)}"
                _wrong(owner, "layout", self.layout, rule, isinstance(self.layout, str))
        for name in ("tensor_cores", "tma", "warp_specialize", "fast_math", "reuse_dead_shared"):
            if not isinstance(getattr(self, name), bool):
                raise KaioTypeError(f"{owner}: `{name}` is True or False, got {getattr(self, name)!r}")
        if self.wgmma is not None and not isinstance(self.wgmma, bool):
            raise KaioTypeError(f"{owner}: `wgmma` is None, True or False, got {self.wgmma!r}")
        if self.warps is not None:
            warps = self.warps
            if not isinstance(warps, (tuple, list)) or len(warps) != 2 or not all(is_int_value(w) for w in warps):
                raise KaioTypeError(f"{owner}: `warps` is None or (WM, WN), two powers of two, got {warps!r}")
            warps = (int(warps[0]), int(warps[1]))
            if not all(w > 0 and not w & (w - 1) for w in warps) or 32 * warps[0] * warps[1] > MAX_THREADS:
                raise KaioValueError(
                    f"{owner}: `warps` is (WM, WN), powers of two of at most {MAX_THREADS} threads in all, got {warps}"
                )
            object.__setattr__(self, "warps", warps)  # a list made a tuple: the options stay hashable
        _check_int(owner, "stages", self.stages, 0, MAX_STAGES, f"None or {STAGES_RULE}")
        _check_int(owner, "maxnreg", self.maxnreg, MIN_MAXNREG, MAX_MAXNREG, f"None or {MAXNREG_RULE}")


def _wrong(owner: str, name: str, value: Any, rule: str, right_type: bool) -> None:
    error = KaioValueError if right_type else KaioTypeError
    raise error(f"{owner}: `{name}` is {rule}, got {value!r}")


def _check_int(owner: str, name: str, value: Any, low: int, high: int, rule: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not is_int_value(value) or not low <= int(value) <= high:
        _wrong(owner, name, value, rule, is_int_value(value) and not isinstance(value, bool))
