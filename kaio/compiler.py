"""``kaio.compile``: kernel -> kernel-dialect IR -> pass pipeline -> PTX text.

This module resolves what a compile is (arch, specialization, pipeline) and asks the disk
cache; the compile itself (:mod:`kaio.module_compiler`: the IR, the passes, the printer) loads
only when the cache has no answer.

Stages can be watched three ways: ``compiled.stages`` (ordered stage name -> IR text, produced
on first access), a ``dump_ir`` callback or directory, and ``KAIO_DUMP_IR=<dir>`` (one numbered
file per stage). Watching costs a print per stage, so the plain compile path does not do it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline

from kaio import cache as disk_cache
from kaio.compiled import ARG_FACTS, CompiledKernel, Specialization
from kaio.errors import KaioCompileError, KaioError, KaioTypeError
from kaio.pipeline import Pipeline, as_pipeline, kernel_pipeline
from kaio.targets.ptx.arch import DEFAULT_ARCH, get_arch

if TYPE_CHECKING:
    from kaio.module_compiler import DumpCallback

class Compilable(Protocol):
    """Anything ``kaio.compile`` accepts besides a raw module: a ``@kaio.gpu_kernel`` or an
    ops_library op. ``build`` returns an object with ``module``, ``params`` and ``constexprs``."""

    name: str

    def build(self, constexprs: dict[str, Any]) -> Any: ...

    def source_key(self) -> str: ...


def _check_kernel(kernel: Any) -> None:
    if isinstance(kernel, ModuleOp) or callable(getattr(kernel, "build", None)):
        return
    hint = "decorate it with @kaio.gpu_kernel" if callable(kernel) else None
    raise KaioTypeError(
        "kaio.compile: `kernel` must be a @kaio.gpu_kernel, an ops_library op or a module "
        f"holding one kernel.func, got {type(kernel).__name__}" + (f" ({hint})" if hint else "")
    )


def compile(
    kernel: Compilable | ModuleOp,
    arch: str | None = None,
    pipeline: str | PassPipeline | list[ModulePass] | None = None,
    dump_ir: str | os.PathLike[str] | DumpCallback | None = None,
    specialization: Specialization | Sequence[tuple[str, int]] | Mapping[str, int] | None = None,
    timing: bool = False,
    print_after_change: bool = False,
    **constexprs: Any,
) -> CompiledKernel:
    """Compile a ``@kaio.gpu_kernel`` (or a module holding one ``kernel.func``) to PTX.

    ``arch``: ``"sm_80"`` by default. ``pipeline``: the kernel's default pipeline unless given
    (a :class:`~kaio.pipeline.Pipeline`, an xDSL ``PassPipeline``, a list of passes, or a
    pipeline string). ``dump_ir``: a directory or a ``callback(stage, text)``; the environment
    variable ``KAIO_DUMP_IR=<dir>`` does the same (a directory gets one folder per
    specialization: see :mod:`kaio.dump_folders`). ``constexprs``: values of ``kaio.constexpr``
    parameters.

    ``specialization``: what a launch specialized on, to compile exactly what it ran: a
    :class:`kaio.Specialization` (``kernel.specializations(dev)`` lists those launches compiled;
    ``compiled.specialization`` is any compile's), or just the argument facts, ``(name, n)``
    pairs or a mapping: n divides the integer argument, or the array argument's base address
    in bytes (tile kernels). ``__divisible__=`` is the older spelling of the facts, kept for old
    code.

    ``timing``: print each pass's wall time and op counts to stderr (``compiled.pass_times``
    holds them for every compile). ``print_after_change``: print the IR to stderr after each
    pass that changed it. The pipeline runs as :mod:`kaio.pass_manager` says: the IR verified
    after every pass (``Pipeline(..., verify_each=False)`` turns it off), pass contracts
    checked, the pipeline's ``callback`` called around every pass.

    Kernels (not raw modules) go through the disk cache (:mod:`kaio.cache`): a hit returns the
    stored PTX without building any IR; its ``stages`` and ``pass_times`` are recompiled on
    first access. Watching the stages (``dump_ir``, ``KAIO_DUMP_IR``), ``timing``,
    ``print_after_change`` and a pipeline with a callback always compile, and refresh the entry.
    """
    _check_kernel(kernel)
    if dump_ir is not None and not (callable(dump_ir) or isinstance(dump_ir, (str, os.PathLike))):
        raise KaioTypeError(
            f"kaio.compile: `dump_ir` must be a directory or a callback(stage, text), "
            f"got {type(dump_ir).__name__}"
        )
    arch_name = get_arch(arch or DEFAULT_ARCH).name
    constexprs, facts = _specialized(kernel, specialization, constexprs)
    pipeline = _resolve_pipeline(kernel, arch_name, pipeline)  # a default one: deferred, not parsed yet
    if print_after_change:
        from kaio.pass_manager import chained, print_after_change

        pipeline = pipeline.configured(callback=chained(pipeline.callback, print_after_change()))
    watched = dump_ir is not None or timing or pipeline.callback is not None
    key = None
    if not isinstance(kernel, ModuleOp) and disk_cache.enabled():
        key = disk_cache.compile_key(kernel, arch_name, pipeline, constexprs)
    if key is not None and not watched and not os.environ.get("KAIO_DUMP_IR"):
        hit = disk_cache.load(key)
        if hit is not None:
            hit.specialization = Specialization(hit.constexprs, facts)
            hit._recompile = lambda: _compiled(kernel, arch_name, pipeline, None, constexprs, keep_stages=True)
            return hit
    compiled = _compiled(kernel, arch_name, pipeline, dump_ir, constexprs)
    if key is not None:
        compiled.cache_key = key
        disk_cache.store(key, compiled)
    if timing:
        from kaio.pass_manager import timing_table

        print(f"kaio.compile timing: {compiled.name} ({arch_name})\n{timing_table(compiled.pass_times)}", file=sys.stderr)
    return compiled


def _specialized(
    kernel: Any, specialization: Any, constexprs: dict[str, Any]
) -> tuple[dict[str, Any], tuple[tuple[str, int], ...]]:
    """The constexprs a compile builds with (the argument facts under ``ARG_FACTS``, in
    parameter order, as a launch passes them) and the facts alone."""
    constexprs = dict(constexprs)
    facts: Any = constexprs.pop(ARG_FACTS, ())  # the older spelling
    if specialization is not None:
        if not isinstance(specialization, Specialization):
            specialization = Specialization(facts=specialization)
        if facts and tuple(map(tuple, facts)) != specialization.facts:
            raise KaioTypeError(
                "kaio.compile: `specialization` and `__divisible__` both give argument facts; "
                "give them once (specialization=)"
            )
        for name, value in specialization.constexprs.items():
            if name in constexprs and Specialization(constexprs={name: constexprs[name]}) != Specialization(constexprs={name: value}):  # fmt: skip
                raise KaioTypeError(
                    f"kaio.compile: constexpr `{name}={constexprs[name]!r}` contradicts the "
                    f"specialization's {name}={value!r}"
                )
            constexprs.setdefault(name, value)
        facts = specialization.facts
    else:
        facts = Specialization(facts=facts).facts  # checked: (name, power of two) pairs
    if facts:
        facts = _ordered_facts(kernel, facts)
        constexprs[ARG_FACTS] = facts
    return constexprs, facts


def _ordered_facts(kernel: Any, facts: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """Facts checked against the kernel's runtime parameters, in their order (so one
    specialization builds the same IR however its facts were listed)."""
    if isinstance(kernel, ModuleOp) or (
        hasattr(kernel, "constexpr_params") and not callable(getattr(kernel, "arg_specialization", None))
    ):
        raise KaioTypeError(
            f"kaio.compile: `specialization` gives argument facts {facts!r}, but "
            f"{'a module' if isinstance(kernel, ModuleOp) else f'`{kernel.name}`'} does not "
            "specialize on its arguments (only tile kernels do)"
        )
    runtime = getattr(kernel, "runtime_params", None)
    if runtime is None:
        return facts
    position = {p.name: i for i, p in enumerate(runtime)}
    for name, n in facts:
        param = runtime[position[name]] if name in position else None
        if param is None or not (param.is_array or (param.dtype.is_int and param.dtype.bits == 32)):
            raise KaioTypeError(
                f"kaio.compile: `specialization` names `{name}`, which is not an array or a 32-bit "
                f"integer argument of `{kernel.name}` (its arguments: {', '.join(position)})"
            )
    return tuple(sorted(facts, key=lambda fact: position[fact[0]]))


def _resolve_pipeline(kernel: Any, arch_name: str, pipeline: Any) -> Pipeline:
    """The pipeline a compile runs: the given one, else the kernel's default."""
    if pipeline is None:
        default = getattr(kernel, "default_pipeline", None)
        if not callable(default):
            return kernel_pipeline(arch_name)
        what = f"the pipeline of `{getattr(kernel, 'name', kernel)}` for {arch_name} (default_pipeline / with_pipeline)"
        try:
            chosen = default(arch_name)
        except KaioError:
            raise
        except Exception as e:  # a with_pipeline callable that fails
            raise KaioCompileError(f"{what} raised {type(e).__name__}: {e}") from e
        return as_pipeline(chosen, what)
    return as_pipeline(pipeline)


def _compiled(kernel: Any, arch_name: str, pipeline: Pipeline, dump_ir: Any, constexprs: dict[str, Any], *,
              keep_stages: bool = False) -> CompiledKernel:  # fmt: skip
    """The compile itself, loading the IR, the passes and the printer on first use
    (``keep_stages``: every stage printed and kept, as a cache hit's ``.stages`` asks)."""
    from kaio.module_compiler import compile_kernel, ignore_stage

    return compile_kernel(kernel, arch_name, pipeline, ignore_stage if keep_stages else dump_ir, constexprs)
