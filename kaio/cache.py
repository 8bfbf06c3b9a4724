"""The on-disk kernel cache: PTX plus the metadata a launch needs, keyed by everything that can
change the output.

``kaio.compile`` looks here first, so a kernel compiled in an earlier process is ready without
building any IR. The key is a sha256 over: the kernel's ``source_key()`` (its source, the sources
of the ``@kaio.device`` helpers it calls, the globals it reads, its block size), the constexpr
values (type-exact), the pipeline (or "the kernel's default"), the target arch, kaio's version,
xDSL's version, and a fingerprint of the compiler's own source files (so an edited pass in a
development checkout never serves stale PTX under an unchanged version number).

Each entry is one JSON file written atomically (a temporary file, then ``os.replace``), so
concurrent compiles never see or leave half an entry. An entry that is not a regular file (a
FIFO, a symlink to a device), larger than any entry ``store`` writes, truncated, not JSON, for
another key, whose PTX does not match its recorded hash, or whose parameters are not the PTX
entry's is ignored and rebuilt, never an error or a hang: ``load`` reads through
:mod:`kaio.cache_files` and checks every field it reads. Writing is best effort: an unwritable
directory only means no caching.

Environment: ``KAIO_CACHE_DIR`` (default ``$XDG_CACHE_HOME/kaio``, else ``~/.cache/kaio``);
``KAIO_CACHE=0`` disables the cache.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from kaio.cache_files import UnusableFile, parse_json, read_text, write_atomic
from kaio.compiled import CompiledKernel, KernelParam, TensorMapParam
from kaio.dtypes import BY_NAME

FORMAT = 2  # 2: parameters carry their base alignment
_OFF = {"0", "false", "no", "off"}


def enabled() -> bool:
    return os.environ.get("KAIO_CACHE", "1").strip().lower() not in _OFF


def cache_dir() -> Path:
    explicit = os.environ.get("KAIO_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kaio"


def entry_path(key: str) -> Path:
    return cache_dir() / "kernels" / f"{key}.json"


@functools.cache
def _xdsl_version() -> str:
    spec = importlib.util.find_spec("xdsl")
    if spec is not None and spec.origin:  # the installed dist-info's name: importlib.metadata costs ~20 ms
        infos = list(Path(spec.origin).parent.parent.glob("xdsl-*.dist-info"))
        if len(infos) == 1:
            return infos[0].name.removeprefix("xdsl-").removesuffix(".dist-info")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("xdsl")
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def compiler_fingerprint() -> str:
    """A digest of the names, sizes and modification times of kaio's installed source files."""
    h = hashlib.sha256()
    for package in ("kaio", "kaio.dialects", "kaio.passes", "kaio.targets", "kaio.ops_library"):
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            root = Path(location)
            for path in sorted(root.rglob("*.py")):
                st = path.stat()
                h.update(
                    f"{package}/{path.relative_to(root)} {st.st_size} {st.st_mtime_ns}\n".encode()
                )
    return h.hexdigest()


def extensions_fingerprint(pipeline: Any) -> str:
    """A digest of the files defining user passes in the pipeline and user lowering rules (code
    outside kaio and xDSL that changes the output without changing any name in the key). A
    deferred pipeline's passes are named from its string: kaio's and xDSL's by name, others
    by loading their class, so a default pipeline imports no pass here."""
    from kaio.passes.to_ptx import LOWERINGS  # the table only: rules register as they load

    modules = _pass_modules(pipeline)
    modules |= {rule.__module__ for rule in LOWERINGS.values()}
    h = hashlib.sha256()
    for name in sorted(m for m in modules if not m.startswith(("kaio.", "xdsl."))):
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path and os.path.exists(path):
            st = os.stat(path)
            h.update(f"{name} {st.st_size} {st.st_mtime_ns}\n".encode())
        else:
            h.update(f"{name} ?\n".encode())
    return h.hexdigest()


def compile_key(kernel: Any, arch: str, pipeline: Any, constexprs: dict[str, Any]) -> str | None:
    """The cache key of a compile, or None when the kernel cannot say what its output depends on
    (no ``source_key``)."""
    source_key = getattr(kernel, "source_key", None)
    if not callable(source_key):
        return None
    try:
        source = source_key()
    except Exception:  # a kernel that cannot describe itself is simply not cached
        return None
    from kaio.pipeline import as_pipeline

    resolved = as_pipeline(pipeline)
    pipeline_text = resolved.key_text
    from kaio import __version__

    # The PTX quotes the kernel's file and line numbers in comments; source_key() covers the
    # text, this covers where it sits (a line inserted above the kernel shifts every comment).
    code = getattr(getattr(kernel, "fn", None), "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    kind = type(kernel)
    payload = {
        "format": FORMAT,
        "kernel": f"{kind.__module__}.{kind.__qualname__}:{getattr(kernel, 'name', '')}",
        "where": where,
        "source": source,
        "constexprs": sorted((k, type(v).__name__, repr(v)) for k, v in constexprs.items()),
        "pipeline": pipeline_text,
        "arch": arch,
        "kaio": __version__,
        "xdsl": _xdsl_version(),
        "compiler": compiler_fingerprint(),
        "extensions": extensions_fingerprint(resolved),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _pass_modules(pipeline: Any) -> set[str]:
    """The modules defining the pipeline's passes (kaio's and xDSL's own by name when the
    pipeline is deferred and not parsed yet)."""
    if "passes" in vars(pipeline) or not hasattr(pipeline, "pass_names"):
        return {type(p).__module__ for p in pipeline.passes}
    from kaio.pass_registry import available_passes, builtin_pass_names

    others = [name for name in pipeline.pass_names if name not in builtin_pass_names()]
    available = available_passes() if others else {}  # reading entry points costs ~20 ms
    # an unknown name: "?" (the compile's parse then names it)
    return {available[name]().__module__ if name in available else "?" for name in others}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class _Corrupt(Exception):
    """A cache entry that is not what ``store`` writes."""


# The largest values a sound entry can hold; anything else was not written by ``store``.
# Entries of kaio's largest kernels (sm_90a matmuls) are ~150 KB: 16 MiB leaves room for
# deep software pipelines and line info, and bounds what a hostile file costs to read.
MAX_ENTRY_BYTES = 16 << 20
_MAX_DIM = 2**31 - 1
_MAX_SHARED = 1 << 32
_MAX_CONSTEXPR_DEPTH = 8
_MAX_ALIGN = 256  # bytes: the most any access asks of a base address


def _field(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):  # no top-level field is a bool
        raise _Corrupt(name)
    return value


def _bounded_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _Corrupt(name)
    return value


def _param(row: Any) -> KernelParam:
    if not isinstance(row, list) or len(row) != 5:
        raise _Corrupt("params")
    name, dtype, is_array, mutable, align = row
    if not (isinstance(name, str) and name.isidentifier() and dtype in BY_NAME):
        raise _Corrupt("params")
    if not (isinstance(is_array, bool) and isinstance(mutable, bool)):
        raise _Corrupt("params")
    align = _bounded_int("params", align, 1, _MAX_ALIGN)
    if align & (align - 1):
        raise _Corrupt("params")
    return KernelParam(name, BY_NAME[dtype], is_array, mutable, align)


def _tensor_map(row: Any) -> TensorMapParam:
    if not isinstance(row, list) or len(row) != 2 or not all(isinstance(x, str) for x in row):
        raise _Corrupt("tensor_maps")
    try:
        return TensorMapParam.from_recipe(row[0], row[1])
    except (KeyError, TypeError, ValueError):
        raise _Corrupt("tensor_maps") from None


def _check_constexpr(value: Any, depth: int = 0) -> None:
    """A value ``json.dumps`` of a constexpr could have written: scalars and shallow lists."""
    if depth > _MAX_CONSTEXPR_DEPTH:
        raise _Corrupt("constexprs")
    if isinstance(value, list):
        for item in value:
            _check_constexpr(item, depth + 1)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise _Corrupt("constexprs")  # the compile would have refused it
    elif value is not None and not isinstance(value, (bool, int, str)):
        raise _Corrupt("constexprs")


def _entry_param_names(ptx: str, name: str) -> list[str]:
    """The names the PTX ``.entry`` of ``name`` declares its parameters under, in order."""
    header = re.search(rf"^\.visible \.entry {re.escape(name)}\(([^)]*)\)", ptx, re.MULTILINE)
    if header is None:
        raise _Corrupt("ptx has no .entry")
    decls = [d.strip() for d in header.group(1).split(",") if d.strip()]
    return [d.split()[-1].split("[")[0] for d in decls]


def _check_params_match_ptx(
    ptx: str, name: str, params: tuple[KernelParam, ...], tensor_maps: tuple[TensorMapParam, ...]
) -> None:
    """The recorded parameters are the ones the PTX entry takes (an entry with ``"params": []``
    for a kernel with parameters would launch with none, on every later run)."""
    expected = [f"{name}_{p.name}" for p in params] + [f"{name}_{t.name}" for t in tensor_maps]
    if _entry_param_names(ptx, name) != expected:
        raise _Corrupt("params")


def _parse(key: str, text: str) -> CompiledKernel:
    """The entry in ``text``, every field checked; _Corrupt names the first bad one."""
    from kaio.targets.ptx.arch import ARCHES

    data = parse_json(text)
    if not isinstance(data, dict):
        raise _Corrupt("entry")
    if _field(data, "format", int) != FORMAT or _field(data, "key", str) != key:
        raise _Corrupt("format/key")
    ptx = _field(data, "ptx", str)
    if _sha(ptx) != _field(data, "ptx_sha256", str):
        raise _Corrupt("ptx_sha256")
    name = _field(data, "name", str)
    arch = _field(data, "arch", str)
    if not name.isidentifier() or arch not in ARCHES:
        raise _Corrupt("name/arch")
    params = tuple(_param(row) for row in _field(data, "params", list))
    dims = _field(data, "block_size", list)
    if len(dims) != 3:
        raise _Corrupt("block_size")
    bx, by, bz = (_bounded_int("block_size", d, 1, _MAX_DIM) for d in dims)
    shared = _bounded_int("shared_bytes", data.get("shared_bytes"), 0, _MAX_SHARED)
    dynamic = _bounded_int("dynamic_shared_bytes", data.get("dynamic_shared_bytes", 0), 0, _MAX_SHARED)
    tensor_maps = tuple(_tensor_map(row) for row in data.get("tensor_maps", []))
    _check_params_match_ptx(ptx, name, params, tensor_maps)
    constexprs = _field(data, "constexprs", dict)
    for value in constexprs.values():
        _check_constexpr(value)
    return CompiledKernel(
        name=name,
        ptx=ptx,
        arch=arch,
        params=params,
        block_size=(bx, by, bz),
        shared_bytes=shared,
        dynamic_shared_bytes=dynamic,
        tensor_maps=tensor_maps,
        constexprs=dict(constexprs),
        pipeline=_field(data, "pipeline", str),
        cache_key=key,
    )


def load(key: str) -> CompiledKernel | None:
    """The cached compile for ``key``, or None (missing, unreadable or corrupt: rebuild it).

    Every field is checked against what ``store`` writes, so a damaged or hand-edited entry
    (a NaN or an infinity where a size belongs, nesting deep enough to exhaust the parser's
    recursion, parameters the PTX does not take) is a miss, never an exception; a FIFO or a
    device in its place is a miss without blocking or reading it."""
    try:
        return _parse(key, read_text(entry_path(key), MAX_ENTRY_BYTES))
    except (_Corrupt, UnusableFile):
        return None


def store(key: str, compiled: CompiledKernel) -> bool:
    """Write the entry atomically; False (and nothing written) when the directory is unusable."""
    data = {
        "format": FORMAT,
        "key": key,
        "name": compiled.name,
        "arch": compiled.arch,
        "ptx": compiled.ptx,
        "ptx_sha256": _sha(compiled.ptx),
        # align: the base alignment the launch checks (a hit without it would skip the check)
        "params": [[p.name, p.dtype.name, p.is_array, p.mutable, p.align] for p in compiled.params],
        "block_size": list(compiled.block_size),
        "shared_bytes": compiled.shared_bytes,
        "dynamic_shared_bytes": compiled.dynamic_shared_bytes,
        "tensor_maps": [[t.name, t.recipe()] for t in compiled.tensor_maps],
        "constexprs": compiled.constexprs,
        "pipeline": compiled.pipeline,
    }
    try:
        text = json.dumps(data)
    except (TypeError, ValueError):  # a constexpr value JSON cannot hold: do not cache it
        return False
    if len(text.encode()) > MAX_ENTRY_BYTES:  # ``load`` would refuse it: do not write it
        return False
    return write_atomic(entry_path(key), text)


def write_failed_ptx(ptx: str, name: str) -> str:
    """Put PTX the driver rejected where a user can open it: the cache's ``failed/`` folder, or
    a temporary file when the cache is off or unwritable. Returns the path."""
    filename = f"{name}-{_sha(ptx)[:16]}.ptx"
    if enabled():
        path = cache_dir() / "failed" / filename
        if write_atomic(path, ptx):
            return str(path)
    fd, tmp = tempfile.mkstemp(prefix=f"kaio-{name}-", suffix=".ptx")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(ptx)
    return tmp
