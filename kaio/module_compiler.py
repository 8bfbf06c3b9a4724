"""One kernel's compile once its disk-cache lookup missed: build the IR, run the pipeline on
it, check that only the one PTX kernel is left, print it, and describe the result (a
:class:`~kaio.compiled.CompiledKernel`). :func:`kaio.compile` (``kaio/compiler.py``) resolves the
arch, the specialization and the pipeline and consults the cache without importing this module,
its dialects or the printer; :func:`kaio.load_ir` runs an edited stage through
:func:`lower_module`.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from xdsl.dialects.builtin import IntegerType, ModuleOp
from xdsl.ir import Attribute
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import VerifyException

from kaio import dtypes
from kaio.compiled import CompiledKernel, KernelParam, Specialization, TensorMapParam
from kaio.dialects import kernel as kernel_dialect
from kaio.dialects import ptx, stage_attrs
from kaio.dump_folders import dump_directory
from kaio.errors import KaioCompileError, KaioError
from kaio.ir_walk import ops_within
from kaio.locations import print_with_locations
from kaio.pass_manager import run_pipeline
from kaio.pipeline import Pipeline, as_pipeline
from kaio.targets.ptx.arch import get_arch
from kaio.targets.ptx.printer import print_ptx

DumpCallback = Callable[[str, str], None]


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


def check_pipeline_arch(pipeline: PassPipeline, arch_name: str) -> None:
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


def ignore_stage(stage: str, text: str) -> None:
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


@_cycle_collection_paused()
def compile_kernel(
    kernel: Any,
    arch_name: str,
    pipeline: Pipeline,
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
    chosen = as_pipeline(pipeline)  # kaio.compile resolved it (the kernel's default, or the given one)
    check_pipeline_arch(chosen, arch_name)  # here, not before the cache: parsing imports the passes

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
        return compile_kernel(kernel, arch_name, chosen, ignore_stage, constexprs)

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
