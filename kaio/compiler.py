"""``kaio.compile``: kernel -> kernel-dialect IR -> pass pipeline -> PTX text.

Stages can be watched three ways: ``compiled.stages`` (ordered stage name -> IR text, produced
on first access), a ``dump_ir`` callback or directory, and ``KAIO_DUMP_IR=<dir>`` (one numbered
file per stage). Watching costs a print per stage, so the plain compile path does not do it.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Protocol

from xdsl.dialects.builtin import IntegerType, ModuleOp
from xdsl.ir import Attribute
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.exceptions import VerifyException

from kaio import cache as disk_cache
from kaio import dtypes
from kaio.compiled import ARG_FACTS, CompiledKernel, KernelParam, Specialization, TensorMapParam
from kaio.dialects import kernel as kernel_dialect
from kaio.dialects import stage_attrs
from kaio.dialects import ptx
from kaio.dump_folders import dump_directory
from kaio.errors import KaioCompileError, KaioError, KaioTypeError
from kaio.ir_walk import ops_within
from kaio.locations import print_with_locations
from kaio.pass_manager import chained, run_pipeline, timing_table
from kaio.pass_manager import kaio_context as kaio_context  # its home until the pass manager took it
from kaio.pass_manager import print_after_change as ir_after_change
from kaio.pipeline import Pipeline, as_pipeline, kernel_pipeline
from kaio.targets.ptx.arch import DEFAULT_ARCH, get_arch
from kaio.targets.ptx.printer import print_ptx

DumpCallback = Callable[[str, str], None]


class Compilable(Protocol):
    """Anything ``kaio.compile`` accepts besides a raw module: a ``@kaio.gpu_kernel`` or an
    ops_library op. ``build`` returns an object with ``module``, ``params`` and ``constexprs``."""

    name: str

    def build(self, constexprs: dict[str, Any]) -> Any: ...

    def source_key(self) -> str: ...


def _scalar_of(t: Attribute) -> dtypes.ScalarType:
    """kaio type of an IR type (signless integers read as signed)."""
    if isinstance(t, IntegerType):
        return {1: dtypes.bool_, 8: dtypes.i8, 16: dtypes.i16, 32: dtypes.i32, 64: dtypes.i64}[t.width.data]
    for s in dtypes.ALL_TYPES:
        if s.is_float and s.ir_type == t:
            return s
    raise KaioCompileError(f"parameter type {t} has no kaio scalar type")


def params_of(func: kernel_dialect.KernelFuncOp) -> tuple[KernelParam, ...]:
    """Runtime parameters read off a kernel.func (for modules built without the frontend)."""
    params = []
    for name, t in zip(func.param_names.data, func.function_type.inputs.data):
        if isinstance(t, kernel_dialect.ArrayType):
            params.append(KernelParam(name.data, _scalar_of(t.element_type), True, t.mutable))
        elif isinstance(t, kernel_dialect.TensorMapType):
            continue  # built by the runtime from its recipe (kaio.tensor_maps), not passed
        else:
            params.append(KernelParam(name.data, _scalar_of(t), False))
    return tuple(params)


def _the_kernel(module: ModuleOp) -> kernel_dialect.KernelFuncOp:
    funcs = kernel_dialect.kernel_funcs(module)
    if len(funcs) != 1:
        raise KaioCompileError(f"expected one kernel.func in the module, found {len(funcs)}")
    return funcs[0]


def _with_alignment(params: tuple[KernelParam, ...], entry: ptx.EntryOp) -> tuple[KernelParam, ...]:
    """Record the base-address alignment vector accesses need (``kaio.align`` on the entry)."""
    from kaio.dialects.stage_attrs import ALIGN_ATTR

    if ALIGN_ATTR not in entry.attributes:
        return params
    needed = {key: value.value.data for key, value in entry.attributes[ALIGN_ATTR].data.items()}  # type: ignore[attr-defined]
    return tuple(replace(p, align=max(p.align, needed[p.name])) if p.name in needed else p for p in params)


def _tensor_maps(entry: ptx.EntryOp) -> tuple[TensorMapParam, ...]:
    """The tensor maps passes added as parameters (``kaio.tensor_maps`` on the entry)."""
    recipes = entry.attributes.get(stage_attrs.TENSOR_MAPS_ATTR)
    if recipes is None:
        return ()
    return tuple(TensorMapParam.from_recipe(name, text.data) for name, text in recipes.data.items())  # type: ignore[attr-defined]


def _callback(dump: DumpCallback) -> DumpCallback:
    """A user's dump callback whose failure names the stage it was shown."""

    def call(stage: str, text: str) -> None:
        try:
            dump(stage, text)
        except KaioError:
            raise
        except Exception as e:
            raise KaioCompileError(
                f"the dump_ir callback raised {type(e).__name__}: {e} (at stage '{stage}')"
            ) from e

    return call


def _check_kernel(kernel: Any) -> None:
    if isinstance(kernel, ModuleOp) or callable(getattr(kernel, "build", None)):
        return
    hint = "decorate it with @kaio.gpu_kernel" if callable(kernel) else None
    raise KaioTypeError(
        "kaio.compile: `kernel` must be a @kaio.gpu_kernel, an ops_library op or a module "
        f"holding one kernel.func, got {type(kernel).__name__}" + (f" ({hint})" if hint else "")
    )


def _check_pipeline_arch(pipeline: PassPipeline, arch_name: str) -> None:
    """A pass lowering for one arch inside a compile for another would print one ``.target``
    over code chosen for the other: refuse it."""
    for p in pipeline.passes:
        wanted = getattr(p, "arch", None)
        if isinstance(wanted, str) and get_arch(wanted).name != arch_name:
            raise KaioCompileError(
                f"pass '{p.name}' lowers for {get_arch(wanted).name} but the compile is for "
                f"{arch_name}",
                hint=f"name one arch: kaio.compile(..., arch=\"{get_arch(wanted).name}\"), or drop the "
                f"pass's arch= (it lowers for the compile's)",
            )


def _where(pipeline: PassPipeline) -> str:
    last = pipeline.passes[-1].name if pipeline.passes else None
    return f"after pass '{last}'" if last else "with an empty pipeline"


def check_only_ptx(module: ModuleOp, pipeline: PassPipeline) -> None:
    """After the pipeline only PTX may be left: anything else has no printer and would vanish
    from the PTX silently (an empty pipeline leaves the whole kernel behind)."""
    for op in ops_within(module)[1:]:
        if not op.name.startswith("ptx."):
            raise KaioCompileError(
                f"the pipeline left `{op.name}` unlowered {_where(pipeline)}",
                hint="end the pipeline with lower-to-ptx (see kaio.pipeline.kernel_pipeline)",
            )


def _check_lowered(module: ModuleOp, pipeline: PassPipeline) -> None:
    """Only PTX left, and exactly the one kernel a compile makes."""
    check_only_ptx(module, pipeline)
    where = _where(pipeline)
    entries = sum(isinstance(op, ptx.EntryOp) for op in module.ops)
    if entries != 1:  # a pass emptied the module, or made a second kernel
        raise KaioCompileError(
            f"the pipeline left {entries} kernels (ptx.entry) {where}; a compile makes exactly one",
            hint="a pass of the pipeline removed the kernel or added another: check its rewrite patterns",
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
        pipeline = pipeline.configured(callback=chained(pipeline.callback, ir_after_change()))
    watched = dump_ir is not None or timing or pipeline.callback is not None
    key = None
    if not isinstance(kernel, ModuleOp) and disk_cache.enabled():
        key = disk_cache.compile_key(kernel, arch_name, pipeline, constexprs)
    if key is not None and not watched and not os.environ.get("KAIO_DUMP_IR"):
        hit = disk_cache.load(key)
        if hit is not None:
            hit.specialization = Specialization(hit.constexprs, facts)
            hit._recompile = lambda: _compile(
                kernel, arch_name, pipeline, _ignore_stage, constexprs
            )
            return hit
    compiled = _compile(kernel, arch_name, pipeline, dump_ir, constexprs)
    if key is not None:
        compiled.cache_key = key
        disk_cache.store(key, compiled)
    if timing:
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


def _ignore_stage(stage: str, text: str) -> None:
    return None


@contextmanager
def _cycle_collection_paused() -> Iterator[None]:
    """No cyclic garbage collection while compiling. A compile makes tens of thousands of IR
    objects, all in reference cycles (op <-> block <-> use), so the collector runs over and
    over, rescanning the live IR and the caller's heap (torch's, a model's) each time: ~8% of
    a compile. The garbage waits for the next collection after the compile; a caller that
    turned the collector off keeps it off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _compile(
    kernel: Compilable | ModuleOp,
    arch_name: str,
    pipeline: str | PassPipeline | list[ModulePass] | None,
    dump_ir: str | os.PathLike[str] | DumpCallback | None,
    constexprs: dict[str, Any],
) -> CompiledKernel:
    with _cycle_collection_paused():
        return _compile_unpaused(kernel, arch_name, pipeline, dump_ir, constexprs)


def _compile_unpaused(
    kernel: Compilable | ModuleOp,
    arch_name: str,
    pipeline: str | PassPipeline | list[ModulePass] | None,
    dump_ir: str | os.PathLike[str] | DumpCallback | None,
    constexprs: dict[str, Any],
) -> CompiledKernel:
    if isinstance(kernel, ModuleOp):
        module = kernel.clone()
        func = _the_kernel(module)
        name, params, values = func.sym_name.data, params_of(func), dict(constexprs)
        spec = Specialization()  # a module's facts are in its IR
    else:
        built = kernel.build(dict(constexprs))
        module, params, values = built.module, tuple(built.params), dict(built.constexprs)
        func = _the_kernel(module)
        name = func.sym_name.data
        spec = Specialization(values, getattr(built, "facts", ()))
    chosen = _resolve_pipeline(kernel, arch_name, pipeline)
    _check_pipeline_arch(chosen, arch_name)  # here, not before the cache: parsing imports the passes

    watchers: list[DumpCallback] = []
    info = (params, func.block_shape, str(chosen), spec)
    env_dir = os.environ.get("KAIO_DUMP_IR")
    if env_dir:
        watchers.append(dump_directory(env_dir, name, arch_name, "KAIO_DUMP_IR", info))
    if dump_ir is not None:
        watchers.append(
            _callback(dump_ir) if callable(dump_ir) else dump_directory(dump_ir, name, arch_name, "dump_ir", info)
        )

    def recompile() -> CompiledKernel:  # the same compile, watched: fills .stages
        return _compile(kernel, arch_name, chosen, _ignore_stage, constexprs)

    compiled = lower_module(module, name, params, func.block_shape, arch_name, chosen, watchers, "frontend")
    compiled.constexprs = values
    compiled.specialization = spec
    compiled._recompile = recompile
    return compiled


def lower_module(
    module: ModuleOp,
    name: str,
    params: tuple[KernelParam, ...],
    block_size: tuple[int, int, int],
    arch_name: str,
    chosen: Pipeline,
    watchers: Sequence[DumpCallback] = (),
    first_stage: str = "frontend",
) -> CompiledKernel:
    """What ``kaio.compile`` does once the kernel is IR: run ``chosen`` on the module (which it
    changes), check that only PTX is left and print it. ``watchers`` see ``first_stage`` (the
    module as given), every pass, and the PTX. :func:`kaio.load_ir` runs an edited stage
    through it."""
    try:  # the one place the compile's arch is given: passes and the printer read it from here
        stage_attrs.set_module_target(module, arch_name)
    except VerifyException as e:
        raise KaioCompileError(f"{e}", hint=f"compile it for {stage_attrs.module_target(module)}, or from an earlier stage") from None
    stages: dict[str, str] | None = None
    watch: DumpCallback | None = None
    if watchers:
        stages = {}

        def watch(stage: str, text: str) -> None:
            stages[stage] = text  # type: ignore[index]
            for w in watchers:
                w(stage, text)

        watch(first_stage, print_with_locations(module))
    times = run_pipeline(module, chosen, watch)
    _check_lowered(module, chosen)
    ptx_text = print_ptx(module)  # for the module's kaio.target, set above
    if watch is not None:
        watch("ptx", ptx_text)

    (entry,) = (op for op in module.ops if isinstance(op, ptx.EntryOp))  # one kernel.func, one entry
    if entry.maxntid is not None:  # passes may add threads (a producer warpgroup): the entry's bound
        block_size = tuple(int(d) for d in entry.maxntid.get_values())  # type: ignore[assignment]
    sizes = {"ptx.shared": 0, "ptx.dynamic_shared": 0}
    for op in ops_within(entry):
        if op.name in sizes:
            sizes[op.name] += op.size.value.data  # type: ignore[attr-defined]
    params = _with_alignment(params, entry)
    return CompiledKernel(
        name=name,
        ptx=ptx_text,
        arch=arch_name,
        params=params,
        block_size=block_size,
        shared_bytes=sizes["ptx.shared"],
        dynamic_shared_bytes=sizes["ptx.dynamic_shared"],
        tensor_maps=_tensor_maps(entry),
        pipeline=str(chosen),
        _stages=stages,
        _pass_times=times,
    )
