"""Every default tile pipeline from one typed options record and one builder.

A tile kernel's, a matmul config's, an attention config's and the others' default pipelines are
:func:`build_pipeline` of an arch and a :class:`TilePipelineOptions`; ``build_pipeline(arch)``
alone is a ``@kaio.gpu_kernel``'s. What the pipeline does not say, the module does: its
``kaio.target`` (the arch, which ``lower-to-ptx`` and the printer read) and its ``kaio.launch``
(the tile kernel's ``num_stages`` and ``maxnreg``, which ``pipeline-tma``, ``pipeline-cp-async``
and ``lower-to-ptx`` read where the pipeline gives them no option). So a default pipeline
repeats none of them, and ``str(pipeline)`` is a pipeline string that compiles any kernel with
that kernel's own ring depth and register cap; ``stages=`` or ``maxnreg=`` given here are
written into the pipeline as pass options, which override the module's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kaio.dtypes import is_int_value
from kaio.errors import KaioTypeError, KaioValueError
from kaio.launch_limits import (
    MAX_MAXNREG, MAX_STAGES, MAX_THREADS, MAXNREG_RULE, MIN_MAXNREG, MIN_RING_STAGES, STAGES_RULE,
)  # fmt: skip

if TYPE_CHECKING:
    from kaio.pipeline import Pipeline

__all__ = ["TilePipelineOptions", "build_pipeline"]

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
            from kaio.dialects.smem import LAYOUT_KINDS

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


def build_pipeline(arch: str, options: TilePipelineOptions | None = None) -> Pipeline:
    """The default pipeline for ``arch`` (an arch kaio does not know: KaioTargetError),
    deferred (:meth:`Pipeline.deferred`: parsed when its passes are first needed).

    Without ``options``, a ``@kaio.gpu_kernel``'s: clean up, vectorize, lower to PTX, the scalar
    passes (``SCALAR_STAGE``). With them, a tile kernel's: fused elementwise code, layouts,
    shared-memory staging of dot operands, the copy rings (TMA where it can describe the loop's
    copies, else cp.async), tensor cores (wgmma on sm_90a, else mma.sync), clean up, PTX, the
    scalar passes."""
    from kaio.pipeline import SCALAR_STAGE, Pipeline, has_wgmma

    hopper = has_wgmma(arch)  # checks the arch
    if options is None:
        return Pipeline.deferred(f"canonicalize,cse,vectorize-loads,lower-to-ptx,{SCALAR_STAGE}")
    o = options
    wgmma = hopper and o.tensor_cores and o.wgmma is not False
    tma = wgmma and o.tma
    layout = o.layout or ("wgmma" if wgmma else "swizzle")
    tile_layout = []
    if not o.tensor_cores:
        tile_layout.append("mma=false")
    if o.warps is not None:
        tile_layout.append(f"warps={o.warps[0]},{o.warps[1]}")
    elif wgmma:
        tile_layout.append("wgmma=true")  # warp grid [num_warps, 1] for the dots wgmma can take
    spec = ["fuse-tile-maps", _with("tile-layout", tile_layout)]
    if tma:
        spec.append("store-tma")
    spec.append(f"promote-to-shared{{layout={layout}}}")
    stages = [] if o.stages is None else [f"stages={o.stages}"]
    if o.stages is None or o.stages >= MIN_RING_STAGES:  # unset: the module's depth (below 2: the passes skip)
        if tma:
            ring = [*stages, "warp_specialize=true"] if o.warp_specialize else stages
            if o.warp_specialize and o.maxnreg is not None:
                ring = [*ring, f"maxnreg={o.maxnreg}"]  # the setmaxnreg counts start from the cap
            spec.append(_with("pipeline-tma", ring))
        spec.append(_with("pipeline-cp-async", stages))
    if wgmma:
        spec.append("lower-to-wgmma")
    if o.tensor_cores:
        spec.append("lower-to-mma-sync")
    spec += ["canonicalize", "cse"]
    if o.fast_math:
        spec.append("fast-math")  # the softmax's exp2 as one MUFU.EX2, 1 / l as one MUFU.RCP
    if o.reuse_dead_shared:
        spec.append("reuse-dead-shared")
    spec += [_with("lower-to-ptx", [] if o.maxnreg is None else [f"maxnreg={o.maxnreg}"]), SCALAR_STAGE]
    return Pipeline.deferred(",".join(spec))


def _with(name: str, options: list[str]) -> str:
    return f"{name}{{{' '.join(options)}}}" if options else name
