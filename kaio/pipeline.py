"""Pass pipelines a user can print, edit and hand back to ``kaio.compile``.

A :class:`Pipeline` is an xDSL ``PassPipeline`` whose ``str()`` is its pipeline string, so
``Pipeline.parse(str(p)) == p``; editing returns a new pipeline (passes are frozen) with the
same ``callback`` and ``verify_each``. How a pipeline runs (verification after every pass, pass
contracts, the callback, timing) is :mod:`kaio.pass_manager`'s business.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from xdsl.passes import ModulePass, PassPipeline

from kaio.errors import KaioPipelineError, KaioTypeError
from kaio.pass_contracts import check_options
from kaio.pass_registry import available_passes, register_pass
from kaio.launch_limits import MIN_RING_STAGES
from kaio.pipeline_options import TilePipelineOptions
from kaio.pipeline_text import parse_passes

__all__ = [
    "SCALAR_PASSES", "SCALAR_STAGE", "Pipeline", "TilePipelineOptions", "as_pipeline", "available_passes",
    "build_pipeline", "kernel_pipeline", "register_pass", "tile_pipeline",
]  # fmt: skip

SCALAR_PASSES: tuple[str, ...] = ("ptx-strength-reduce", "ptx-licm", "ptx-iv-reduce", "ptx-fold", "ptx-sync-cleanup")
"""The scalar passes on PTX, in order: turn multiplies, divisions and remainders by constants
into shifts, masks and multiply-highs, move loop-invariant instructions out of loops, give
values linear in a loop counter registers advanced with it, fold constants, merge repeats and
drop what nobody reads, then drop the waits and barriers that order nothing (see
``docs/dialect_stack.md``).
Every default pipeline runs them after ``lower-to-ptx`` as the one stage
:data:`SCALAR_STAGE` (one verification instead of three); name them separately to see the IR
between them."""

SCALAR_STAGE = "ptx-optimize"
"""The stage every default pipeline ends with: :data:`SCALAR_PASSES` in one pass."""


@dataclass(frozen=True)
class Pipeline(PassPipeline):
    """An immutable list of passes. ``callback(previous_pass, module, next_pass)`` is called
    before the first pass, between passes and after the last, as xDSL's ``PassPipeline`` does;
    ``verify_each`` (on by default, as in MLIR) verifies the IR after every pass, naming the
    pass that broke it; turn it off for speed with ``Pipeline(p.passes, verify_each=False)``
    or ``p.configured(verify_each=False)``.

    Every pass is checked when the pipeline is made: it must be a ``ModulePass`` and its options
    within the bounds its contract declares (``pipeline-cp-async{stages}``: 2..8)."""

    verify_each: bool = field(default=True, kw_only=True)

    def __post_init__(self) -> None:
        if isinstance(self.passes, (str, bytes)) or not hasattr(self.passes, "__iter__"):
            raise KaioPipelineError(
                f"Pipeline: `passes` must be a sequence of passes, got {type(self.passes).__name__} "
                "(a pipeline string goes to Pipeline.parse)"
            )
        passes = tuple(self.passes)
        for i, p in enumerate(passes):
            _check_pass(p, f"Pipeline: passes[{i}]")
            check_options(p)
        object.__setattr__(self, "passes", passes)
        if self.callback is not None and not callable(self.callback):
            raise KaioPipelineError(
                f"Pipeline: `callback` must be callable(previous_pass, module, next_pass), got "
                f"{type(self.callback).__name__}"
            )
        if not isinstance(self.verify_each, bool):  # "yes" or 0 would read as a choice
            raise KaioTypeError(f"Pipeline: `verify_each` must be True or False, got {self.verify_each!r}")

    @staticmethod
    def parse(spec: str) -> Pipeline:  # type: ignore[override]
        """``"canonicalize,cse,lower-to-ptx{maxnreg=128}"`` -> Pipeline. Any pass of
        :func:`available_passes` may be named (xDSL's, kaio's, entry points', registered ones).
        A malformed string, an unknown pass or a bad option raises :class:`KaioPipelineError`
        (a ``ValueError``) pointing at the column."""
        return Pipeline(parse_passes(spec, available_passes()))

    @staticmethod
    def deferred(spec: str) -> Pipeline:
        """The pipeline ``spec`` names, parsed when its passes are first needed, as
        :meth:`parse` would (its errors then): what kaio's default pipelines are, so that a
        compile answered by the disk cache, keyed by :attr:`key_text`, imports no pass."""
        if not isinstance(spec, str):
            raise KaioPipelineError(f"Pipeline.deferred: a pipeline string must be a str, got {type(spec).__name__}")
        pipeline = object.__new__(Pipeline)
        object.__setattr__(pipeline, "callback", None)
        object.__setattr__(pipeline, "verify_each", True)
        object.__setattr__(pipeline, "_text", spec)
        return pipeline

    def __getattr__(self, name: str) -> Any:
        # only reached for an attribute not set: a deferred pipeline's passes, parsed once
        text = self.__dict__.get("_text")
        if name != "passes" or text is None:
            raise AttributeError(name)
        passes = Pipeline.parse(text).passes
        object.__setattr__(self, "passes", passes)
        return passes

    @property
    def key_text(self) -> str:
        """What the pipeline's disk-cache key quotes: a deferred pipeline's own string (read
        without parsing it), else :meth:`__str__`."""
        text = self.__dict__.get("_text")
        return text if text is not None else str(self)

    @property
    def pass_names(self) -> list[str]:
        """The pass names, in order, read from a deferred pipeline's string without importing
        its passes."""
        text = self.__dict__.get("_text")
        if text is None or "passes" in self.__dict__:
            return self.names
        from xdsl.utils.arg_spec import parse_pipeline

        return [spec.name for spec in parse_pipeline(text)]

    @property
    def names(self) -> list[str]:
        """The pass names, in order."""
        return [p.name for p in self.passes]

    def __str__(self) -> str:
        return ",".join(_spec_text(p) for p in self.passes)

    def configured(self, *, callback: Any = ..., verify_each: bool | None = None) -> Pipeline:
        """The same passes with another ``callback`` (None: no callback) or ``verify_each``."""
        changes: dict[str, Any] = {}
        if callback is not ...:
            changes["callback"] = callback
        if verify_each is not None:
            changes["verify_each"] = verify_each  # both checked by __post_init__
        return replace(self, **changes)

    def without(self, name: str) -> Pipeline:
        """The pipeline minus every pass called ``name`` (one it lacks: KaioPipelineError)."""
        self._index(name, "without", "name")
        return self._with_passes(p for p in self.passes if p.name != name)

    def replace(self, name: str, new: ModulePass) -> Pipeline:
        """The pipeline with its first pass called ``name`` swapped for the pass ``new``."""
        i = self._index(name, "replace", "name")
        _check_pass(new, "Pipeline.replace: `new`")
        return self._with_passes((*self.passes[:i], new, *self.passes[i + 1 :]))

    def insert(self, new: ModulePass, *, before: str | None = None, after: str | None = None) -> Pipeline:
        """The pipeline with the pass ``new`` added just ``before=`` or just ``after=`` the first
        pass of that name (exactly one of the two)."""
        _check_pass(new, "Pipeline.insert: `new`")
        i = self._where("insert", before, after)
        return self._with_passes((*self.passes[:i], new, *self.passes[i:]))

    def move(self, name: str, *, before: str | None = None, after: str | None = None) -> Pipeline:
        """The pipeline with its first pass called ``name`` taken out and put back just
        ``before=`` or just ``after=`` the first pass of another name:
        ``p.move("tile-layout", after="fuse-tile-maps")``."""
        i = self._index(name, "move", "name")
        moved = self.passes[i]
        rest = Pipeline(self.passes[:i] + self.passes[i + 1 :])
        if name in (before, after):
            raise KaioPipelineError(f"Pipeline.move: cannot move '{name}' relative to itself")
        j = rest._where("move", before, after)
        return self._with_passes((*rest.passes[:j], moved, *rest.passes[j:]))

    def _with_passes(self, passes: Any) -> Pipeline:
        return replace(self, passes=tuple(passes))

    def _where(self, method: str, before: str | None, after: str | None) -> int:
        if (before is None) == (after is None):
            raise KaioPipelineError(f"Pipeline.{method}: say where, with exactly one of before= or after= a pass name")
        if before is not None:
            return self._index(before, method, "before")
        return self._index(after, method, "after") + 1  # type: ignore[arg-type]

    def _index(self, name: Any, method: str, argument: str) -> int:
        if not isinstance(name, str):
            raise KaioPipelineError(
                f"Pipeline.{method}: `{argument}` must be a pass name (str), got {type(name).__name__}"
            )
        if name not in self.names:
            raise KaioPipelineError(f"Pipeline.{method}: `{argument}`: no pass '{name}' in pipeline {self}")
        return self.names.index(name)


def _check_pass(p: Any, what: str) -> None:
    if not isinstance(p, ModulePass):
        hint = " (a pass class: make an instance, e.g. MyPass())" if isinstance(p, type) and issubclass(p, ModulePass) else ""
        raise KaioPipelineError(f"{what} must be a ModulePass, got {p!r}{hint}")


def _spec_text(p: ModulePass) -> str:
    """A pass as ``name{option=value ...}``, defaults included, unset options (None) left out."""
    spec = p.spec(include_default=True)
    set_options = {k: v for k, v in spec.parameters.items() if v != ()}
    return str(replace(spec, parameters=set_options))


def as_pipeline(pipeline: Any, what: str = "pipeline") -> Pipeline:
    """A :class:`Pipeline` from a pipeline string, an xDSL ``PassPipeline`` (its callback kept)
    or a sequence of passes; anything else is a KaioPipelineError naming ``what``."""
    if isinstance(pipeline, Pipeline):
        return pipeline
    if isinstance(pipeline, str):
        return Pipeline.parse(pipeline)
    if isinstance(pipeline, PassPipeline):
        return Pipeline(pipeline.passes, pipeline.callback)
    if isinstance(pipeline, (list, tuple)):
        for i, p in enumerate(pipeline):
            _check_pass(p, f"{what}[{i}]")
        return Pipeline(tuple(pipeline))
    raise KaioPipelineError(
        f"{what} must be a Pipeline, a pipeline string, an xDSL PassPipeline or a list of passes, "
        f"got {pipeline!r}"
    )


def kernel_pipeline(arch: str) -> Pipeline:
    """The default pipeline of a ``@kaio.gpu_kernel``: clean up, vectorize, lower to PTX, the
    scalar passes (:data:`SCALAR_STAGE`; an arch kaio does not know: KaioTargetError).
    :func:`build_pipeline` without options."""
    return build_pipeline(arch)


def has_wgmma(arch: str) -> bool:
    """Whether ``arch`` has Hopper's warpgroup tensor cores (wgmma: sm_90a only)."""
    from kaio.targets.ptx.arch import get_arch

    target = get_arch(arch)
    return target.sm == 90 and target.arch_specific


def tile_pipeline(arch: str, stages: int | None = None, layout: str | None = None, maxnreg: int | None = 0) -> Pipeline:
    """The default pipeline of a ``@kaio.tile_kernel``: fused elementwise code, layouts,
    shared-memory staging of dot operands, the copy rings, tensor cores, clean up, PTX, the
    scalar passes (:data:`SCALAR_STAGE`). On sm_90a the dots wgmma can
    take get its warp grid and shared layout and run on warpgroup tensor cores
    (``lower-to-wgmma``); the others keep mma.sync; and the K loops whose operands a tensor map
    can describe fill their ring by TMA (``pipeline-tma``), the others by cp.async; a dot's
    output tile a tensor map can describe leaves through shared memory by TMA (``store-tma``).

    The ring depth and the register cap are the kernel's (``num_stages``, ``maxnreg``: the
    module's ``kaio.launch``); ``stages`` (0 or 1: no ring) or ``maxnreg`` (0: the kernel's)
    given here are written into the pipeline as pass options, which override the kernel's.
    :func:`build_pipeline` of a :class:`TilePipelineOptions`."""
    return build_pipeline(arch, TilePipelineOptions(layout=layout, stages=stages, maxnreg=maxnreg or None))


def build_pipeline(arch: str, options: TilePipelineOptions | None = None) -> Pipeline:
    """The default pipeline for ``arch`` (an arch kaio does not know: KaioTargetError),
    deferred (:meth:`Pipeline.deferred`: parsed when its passes are first needed).

    Without ``options``, a ``@kaio.gpu_kernel``'s: clean up, vectorize, lower to PTX, the scalar
    passes (``SCALAR_STAGE``). With them, a tile kernel's: fused elementwise code, layouts,
    shared-memory staging of dot operands, the copy rings (TMA where it can describe the loop's
    copies, else cp.async), tensor cores (wgmma on sm_90a, else mma.sync), clean up, PTX, the
    scalar passes."""
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
