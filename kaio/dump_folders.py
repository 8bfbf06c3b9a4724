"""Dump folders: ``dump_ir=<dir>`` and ``KAIO_DUMP_IR=<dir>`` write one folder per compiled
specialization, one numbered file per stage inside it.

The folder is ``<kernel>.<arch>`` for a kernel with nothing to specialize on, else
``<kernel>.<arch>-<key>`` (:attr:`kaio.Specialization.key`), so two launches that specialize
differently (other constexprs, other argument divisibility) no longer overwrite each other.
``specialization.txt`` beside the stages says what they were compiled for: the kernel, the arch,
its parameters, block, pipeline and specialization, one ``field: value`` line each (a line
starting with ``#`` is a comment). :func:`kaio.load_ir` reads it back to run an edited stage.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kaio.compiled import KernelParam, Specialization
from kaio.dtypes import BY_NAME
from kaio.errors import KaioCompileError

INFO_FILE = "specialization.txt"
_PARAM = re.compile(r"(?P<name>\w+): (?:(?P<kind>MutArray|Array)\[(?P<elem>\w+)\]|(?P<scalar>\w+))(?: align (?P<align>\d+))?")


def folder_name(kernel_name: str, arch: str, spec: Specialization) -> str:
    """``<kernel>.<arch>``, with ``-<key>`` when the compile is specialized on anything."""
    base = f"{kernel_name}.{arch}"
    return base if spec.empty else f"{base}-{spec.key}"


def _param_text(p: KernelParam) -> str:
    return f"{p!r} align {p.align}" if p.is_array and p.align > 1 else repr(p)


def info_text(
    kernel_name: str,
    arch: str,
    params: Sequence[KernelParam],
    block: Sequence[int],
    pipeline: str,
    spec: Specialization,
) -> str:
    lines = [
        "# What the stages in this folder were compiled for (kaio.load_ir reads it).",
        f"kernel: {kernel_name}",
        f"arch: {arch}",
        *(f"param: {_param_text(p)}" for p in params),
        f"block: {' '.join(map(str, block))}",
        f"pipeline: {pipeline}",
        f"specialization: {spec!r}",
        *(f"# {line}" for line in spec.describe(params)),
    ]
    return "\n".join(lines) + "\n"


def dump_directory(
    path: str | os.PathLike[str],
    kernel_name: str,
    arch: str,
    what: str,
    info: tuple[Sequence[KernelParam], Sequence[int], str, Specialization],
) -> Callable[[str, str], None]:
    """A callback writing one numbered file per stage into this specialization's folder under
    ``path``; ``what`` names the setting (``dump_ir`` or ``KAIO_DUMP_IR``) in the error an
    unusable path gives; ``info`` is (params, block, pipeline, specialization)."""
    params, block, pipeline, spec = info
    folder = Path(path) / folder_name(kernel_name, arch, spec)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / INFO_FILE).write_text(info_text(kernel_name, arch, params, block, pipeline, spec))
    except OSError as e:
        raise KaioCompileError(
            f"{what}: cannot create the dump folder {folder}: {e.strerror or e}",
            hint=f"give {what} a directory kaio can create and write",
        ) from None
    counter = iter(range(1000))

    def write(stage: str, text: str) -> None:
        suffix = "ptx" if stage == "ptx" else "mlir"
        target = folder / f"{next(counter):02d}-{stage}.{suffix}"
        try:
            target.write_text(text)
        except OSError as e:
            raise KaioCompileError(f"{what}: cannot write {target}: {e.strerror or e}") from None

    return write


@dataclass(frozen=True)
class FolderInfo:
    """``specialization.txt`` read back."""

    kernel: str
    arch: str
    params: tuple[KernelParam, ...]
    block: tuple[int, int, int]
    pipeline: str


def read_info(folder: Path) -> FolderInfo | None:
    """The folder's ``specialization.txt``, or None where there is none; a damaged one is a
    KaioCompileError naming the file and line."""
    path = folder / INFO_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise KaioCompileError(f"cannot read {path}: {e}") from None
    fields: dict[str, str] = {}
    params: list[KernelParam] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition(": ")
        if not sep:
            raise KaioCompileError(f"{path}:{number}: expected `field: value`, got {line!r}")
        if key == "param":
            params.append(_read_param(path, number, value))
        else:
            fields[key] = value
    missing = [k for k in ("kernel", "arch", "block", "pipeline") if k not in fields]
    if missing:
        raise KaioCompileError(f"{path}: no {', '.join(missing)} line")
    dims = fields["block"].split()
    if len(dims) != 3 or not all(d.isdigit() and int(d) >= 1 for d in dims):
        raise KaioCompileError(f"{path}: block must be three positive ints, got {fields['block']!r}")
    return FolderInfo(fields["kernel"], fields["arch"], tuple(params), (int(dims[0]), int(dims[1]), int(dims[2])),
                      fields["pipeline"])  # fmt: skip


def _read_param(path: Path, number: int, text: str) -> KernelParam:
    match = _PARAM.fullmatch(text.strip())
    elem = match and (match["elem"] or match["scalar"])
    if match is None or elem not in BY_NAME:
        raise KaioCompileError(
            f"{path}:{number}: a parameter reads `name: Array[f32]`, `name: MutArray[f32]` or "
            f"`name: i32`, got {text!r}"
        )
    is_array = match["kind"] is not None
    align = int(match["align"] or 1)
    return KernelParam(match["name"], BY_NAME[elem], is_array, match["kind"] == "MutArray", align)
