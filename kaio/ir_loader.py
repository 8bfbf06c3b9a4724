"""``kaio.load_ir(path_or_text, arch)``: run an edited stage of a dump.

A dump folder (``dump_ir=<dir>`` or ``KAIO_DUMP_IR=<dir>``, see :mod:`kaio.dump_folders`)
holds one file per stage, ``NN-<pass>.mlir`` after the pass that produced it, and
``specialization.txt`` naming the kernel's arch, parameters and pipeline. ``load_ir`` parses a
stage with every dialect kaio knows, runs the passes after it, and returns a kernel that
launches like the one it was dumped from::

    k = kaio.load_ir("dumps/saxpy.sm_80/03-lower-to-ptx.mlir")
    k[grid](x, y, out, n)           # or k.launch(dev, x, y, out, n, grid=...)

The arguments are checked against the kernel's parameters, as for the kernel itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.lexer import Span
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.exceptions import ParseError, VerifyException

from kaio.compiled import CompiledKernel, KernelParam
from kaio.compiler import _resolve_pipeline
from kaio.module_compiler import check_pipeline_arch, lower_module, params_of
from kaio.dialects import kernel as kernel_dialect
from kaio.dialects import ptx
from kaio.dump_folders import FolderInfo, read_info
from kaio.errors import KaioCompileError, KaioTypeError
from kaio.frontend.kernel import ParamKind, ParamSpec
from kaio.pass_manager import kaio_context, stage_names
from kaio.pipeline import Pipeline, as_pipeline, kernel_pipeline, tile_pipeline
from kaio.positioned_parser import PositionedParser
from kaio.verifier import first_failing_op, verify_module
from kaio.targets.ptx.arch import DEFAULT_ARCH, get_arch

_STAGE_FILE = re.compile(r"\d+-(?P<stage>.+)\.mlir")
_MAX_BYTES = 64 << 20  # a dumped stage is kilobytes; refuse to read a device or a huge file


class LoadedKernel:
    """A kernel compiled from IR text (:func:`load_ir`): ``k[grid](...)``,
    ``k[grid, block](...)`` or ``k.launch(dev, ..., grid=...)``, arguments checked against
    ``compiled.params``. It has no constexprs: the IR is already specialized."""

    kind = "loaded kernel"

    def __init__(self, compiled: CompiledKernel) -> None:
        self.compiled = compiled
        self.name = compiled.name
        self.params = tuple(
            ParamSpec(p.name, ParamKind.ARRAY if p.is_array else ParamKind.SCALAR, None) for p in compiled.params
        )
        self._launcher: Any = None

    @property
    def runtime_params(self) -> tuple[KernelParam, ...]:
        return self.compiled.params

    @property
    def ptx(self) -> str:
        return self.compiled.ptx

    def compile_for_launch(self, arch: str, constexprs: Any) -> CompiledKernel:
        """Every launch runs the loaded PTX (a device of another arch JIT-compiles it, or
        refuses it at load with a KaioLaunchError)."""
        return self.compiled

    def __getitem__(self, key: Any) -> Any:
        from kaio.runtime.launch import launcher_of

        return launcher_of(self)[key]  # type: ignore[arg-type]

    def launch(self, device: Any, *args: Any, grid: Any, block: Any = None, shared_bytes: int = 0,
               stream: Any = None) -> None:  # fmt: skip
        """Launch on ``device`` (None: the buffers' device, else ``kaio.Device()``)."""
        from kaio.runtime.launch import launcher_of

        launcher_of(self).launch_on(device, grid, block, args, {}, stream, shared_bytes)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise KaioTypeError(f"`{self.name}` is a GPU kernel: launch it with {self.name}[grid](...)")

    def __repr__(self) -> str:
        params = ", ".join(map(repr, self.compiled.params))
        return f"<kaio.LoadedKernel {self.name}({params}) {self.compiled.arch}>"


def load_ir(
    source: str | os.PathLike[str],
    arch: str | None = None,
    *,
    stage: str | None = None,
    pipeline: str | PassPipeline | list[ModulePass] | None = None,
) -> LoadedKernel:
    """Parse a dumped stage (a path to a ``.mlir`` file, or the IR text itself), run the rest of
    the pipeline on it and return a launchable kernel.

    ``arch``: the arch the dump was compiled for (read from ``specialization.txt`` beside a
    dumped file; else ``"sm_80"``). ``stage``: which pass produced the IR (read from the file
    name ``NN-<stage>.mlir``; ``"frontend"``, the kernel as the frontend built it, for text).
    The passes after that stage come from the dump's pipeline (``specialization.txt``), else
    from the default pipeline for the arch (the tile pipeline when the IR holds tile ops).
    ``pipeline``: run exactly these passes on the IR instead.
    """
    text, path = _read(source)
    info = read_info(path.parent) if path is not None else None
    if stage is None:
        named = _STAGE_FILE.fullmatch(path.name) if path is not None else None
        stage = named["stage"] if named else "frontend"
    if not isinstance(stage, str):
        raise KaioTypeError(f"load_ir: `stage` must be a stage name, got {type(stage).__name__}")
    arch_name = _arch(arch, info, pipeline is not None)
    module = _parse(text, str(path) if path is not None else "<ir>")
    rest = _rest_of_pipeline(module, arch_name, stage, info, pipeline)
    check_pipeline_arch(rest, arch_name)
    funcs = kernel_dialect.kernel_funcs(module)
    entries = [op for op in module.ops if isinstance(op, ptx.EntryOp)]
    if len(funcs) + len(entries) != 1:
        raise KaioCompileError(
            f"load_ir: expected one kernel (a kernel.func or a ptx.entry) in the IR, found "
            f"{len(funcs) + len(entries)}"
        )
    if funcs:
        func = funcs[0]
        name, params, block = func.sym_name.data, params_of(func), func.block_shape
    else:
        name, params, block = _entry_signature(entries[0], info)
    return LoadedKernel(lower_module(module, name, params, block, arch_name, rest))


def _read(source: Any) -> tuple[str, Path | None]:
    """The IR text, and the file it came from (None for text)."""
    if isinstance(source, str) and ("\n" in source or "{" in source):
        return source, None
    if not isinstance(source, (str, os.PathLike)):
        raise KaioTypeError(
            f"load_ir: `source` must be a path to a dumped stage or IR text, got {type(source).__name__}"
        )
    path = Path(source)
    if path.suffix == ".ptx":
        raise KaioCompileError(
            f"load_ir: {path} is PTX text; load_ir takes an IR stage",
            hint="edit the last .mlir stage (lower-to-ptx: one ptx op per instruction) instead",
        )
    try:
        if not path.is_file():
            raise KaioCompileError(f"load_ir: {path} is not a file")
        if path.stat().st_size > _MAX_BYTES:
            raise KaioCompileError(f"load_ir: {path} is over {_MAX_BYTES >> 20} MiB: not a dumped stage")
        return path.read_text(encoding="utf-8"), path
    except (OSError, UnicodeDecodeError) as e:
        raise KaioCompileError(f"load_ir: cannot read {path}: {e}") from None


def _arch(arch: str | None, info: FolderInfo | None, own_pipeline: bool) -> str:
    if arch is None:
        return get_arch(info.arch if info else DEFAULT_ARCH).name
    if not isinstance(arch, str):
        raise KaioTypeError(f"load_ir: `arch` must be a string like \"sm_80\", got {type(arch).__name__}")
    name = get_arch(arch).name
    if info is not None and not own_pipeline and info.arch != name:
        raise KaioCompileError(
            f"load_ir: the stage was dumped for {info.arch}, not {name}: the rest of its pipeline "
            f"lowers for {info.arch}",
            hint=f"load it with arch=\"{info.arch}\", or give pipeline= for {name}",
        )
    return name


def _parse(text: str, where: str) -> ModuleOp:
    parser = PositionedParser(kaio_context(), text, name=where)
    try:
        module = parser.parse_module()
    except ParseError as e:
        raise _at(e.span, f"load_ir: cannot parse the IR: {e.msg}") from None
    except VerifyException as e:  # an op built while parsing refused its operands
        raise _at(parser.op_start(), f"load_ir: cannot parse the IR: {e}") from None
    except Exception as e:  # noqa: BLE001  (xDSL's other parser failures: a bad attribute value, nesting)
        raise KaioCompileError(f"load_ir: cannot parse the IR in {where}: {type(e).__name__}: {e}") from None
    try:
        verify_module(module)
    except VerifyException as e:
        culprit = first_failing_op(module)
        span = parser.positions.get(culprit[0]) if culprit is not None else None
        message = f"load_ir: the IR in {where} does not verify: {culprit[1] if culprit else e}"
        raise (_at(span, message) if span is not None else KaioCompileError(message)) from None
    return module


def _at(span: Span, message: str) -> KaioCompileError:
    """``message`` at ``span``'s file:line:col, with its line of IR and a caret."""
    file, number, column = span.get_location()
    lines = span.input.content.splitlines()
    return KaioCompileError(
        message,
        filename=file, line=number, col=int(column) - 1,
        end_col=int(column) - 1 + max(len(span.text), 1),
        source_line=lines[number - 1] if 0 < number <= len(lines) else None,
    )


def _rest_of_pipeline(
    module: ModuleOp, arch_name: str, stage: str, info: FolderInfo | None, pipeline: Any
) -> Pipeline:
    """The passes to run: ``pipeline`` as given, else those after ``stage`` in the dump's (or
    the default) pipeline."""
    if pipeline is not None:
        return _resolve_pipeline(None, arch_name, pipeline)
    if info is not None:
        full = _resolve_pipeline(None, arch_name, info.pipeline)
    elif any(op.name.startswith("tile.") for op in module.walk()):
        full = tile_pipeline(arch_name)
    else:
        full = kernel_pipeline(arch_name)
    names = stage_names(full.passes)
    if stage == "frontend":
        return full
    if stage not in names:
        raise KaioCompileError(
            f"load_ir: unknown stage '{stage}': the pipeline's stages are frontend, {', '.join(names)}",
            hint="name the pass that produced the IR (stage=), or give the passes to run (pipeline=)",
        )
    return as_pipeline(list(full.passes[names.index(stage) + 1 :]))


def _entry_signature(entry: ptx.EntryOp, info: FolderInfo | None) -> tuple[str, tuple[KernelParam, ...], tuple[int, int, int]]:
    """A lowered stage has only PTX parameters (an address, no element type): the parameters
    come from the dump's ``specialization.txt``."""
    name = entry.sym_name.data
    if info is None:
        raise KaioCompileError(
            f"load_ir: `{name}` is already PTX and no specialization.txt beside the file says its "
            "parameters' types",
            hint="load the file from its dump folder, or an earlier stage (which holds kernel.func)",
        )
    def bits(ptx_type: str) -> str:  # an i32 may be declared .u32 or .s32: compare widths
        return ptx_type.lstrip("bfsu")

    given = [bits(t) for _, t in entry.params][: len(info.params)]
    if given != [bits(p.ptx_type) for p in info.params]:
        raise KaioCompileError(
            f"load_ir: the entry `{name}` takes ({', '.join(t for _, t in entry.params)}) but "
            f"specialization.txt lists ({', '.join(map(repr, info.params))})"
        )
    return name, info.params, info.block
