"""``kaio.aot.export``: compile the variants, generate the files, write them all or none
(the package's doc says what an export holds)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kaio import __version__
from kaio.aot.c_source import header, source
from kaio.aot.rust_source import rust_module
from kaio.aot.variants import Variant, assemble_cubins, check_arches, compile_variants, kernel_for, specializations
from kaio.errors import KaioError, KaioTypeError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def export(kernel: Any, out_dir: str | os.PathLike[str], *, arch: str | Sequence[str] = ("sm_80",),
           constexprs: Mapping[str, Any] | None = None, specialization: Any = None, name: str | None = None,
           grid: Sequence[str] | str | None = None, cubin: bool | None = None, rust: bool = False) -> list[Path]:  # fmt: skip
    """Compile ``kernel`` for every arch and specialization and write the export; returns the
    paths written. ``cubin``: None (where a ptxas is installed), True (required), False."""
    arches = check_arches(arch)
    specs = specializations(specialization, constexprs)
    variants = compile_variants(kernel, arches, specs)
    variants = assemble_cubins(variants, cubin)
    base = _export_name(name, variants)
    rule = _grid_rule(grid, kernel_for(kernel, arches[0].name))
    if rule is not None and any(getattr(kernel_for(kernel, a.name), "grid_rule", rule) is None for a in arches):
        raise KaioTypeError("kaio.aot.export: `grid`: a kernel of this export has no grid rule (give `grid=`)")
    files = _files(base, variants, rule, rust)
    return _write(Path(out_dir), files)


def _export_name(name: str | None, variants: Sequence[Variant]) -> str:
    chosen = variants[0].compiled.name if name is None else name
    if not isinstance(chosen, str) or not _IDENTIFIER.match(chosen):
        raise KaioTypeError(f"kaio.aot.export: `name` must be a C identifier, got {chosen!r}")
    return chosen


def _grid_rule(grid: Any, kernel: Any) -> tuple[str, ...] | None:
    if grid is None:
        rule = getattr(kernel, "grid_rule", None)
        if rule is None and getattr(kernel, "split", False):
            raise KaioTypeError("kaio.aot.export: a split-K matmul runs two kernels and a workspace; export a "
                                "config with split_k=1")  # fmt: skip
        return None if rule is None else tuple(rule)
    rule = (grid,) if isinstance(grid, str) else grid
    if not isinstance(rule, Sequence) or not 1 <= len(rule) <= 3 or not all(isinstance(e, str) for e in rule):
        raise KaioTypeError(f"kaio.aot.export: `grid` must be 1 to 3 expression strings, got {grid!r}")
    return tuple(rule)


def _variant_record(i: int, v: Variant, ptx_file: str, cubin_file: str | None) -> dict[str, Any]:
    c = v.compiled
    return {
        "index": i, "arch": v.arch.name, "entry": c.name, "ptx": ptx_file, "cubin": cubin_file,
        "params": [{"name": p.name, "dtype": p.dtype.name, "array": p.is_array, "mutable": p.mutable,
                    "align": v.array_alignment.get(p.name, 1) if p.is_array else None} for p in c.params],
        "tensor_maps": [{"name": t.name, "array": t.array, "dims": list(t.dims), "strides": list(t.strides),
                         "box": list(t.box), "swizzle": t.swizzle} for t in c.tensor_maps],
        "block": list(c.block_size), "shared_bytes": c.shared_bytes, "dynamic_shared_bytes": c.dynamic_shared_bytes,
        "constexprs": {k: (v_ if isinstance(v_, (int, float, str, bool)) else repr(v_)) for k, v_ in c.constexprs.items()},
        "facts": [list(f) for f in v.facts], "cache_key": c.cache_key, "pipeline": str(c.pipeline),
        "sha256": hashlib.sha256(c.ptx.encode()).hexdigest(),
    }  # fmt: skip


def _files(base: str, variants: Sequence[Variant], rule: tuple[str, ...] | None, rust: bool) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    records, images = [], {}
    for i, v in enumerate(variants):
        stem = f"{base}_{v.arch.name}_{i}"
        files[stem + ".ptx"] = v.compiled.ptx.encode()
        if v.cubin is not None:
            files[stem + ".cubin"] = v.cubin
        images[i] = (v.compiled.ptx.encode(), v.cubin)
        records.append(_variant_record(i, v, stem + ".ptx", stem + ".cubin" if v.cubin is not None else None))
    params = variants[0].compiled.params
    files[base + ".h"] = header(base, variants[0].compiled.name, params, rule is not None).encode()
    files[base + ".c"] = source(base, variants, images, rule).encode()
    if rust:
        files[base + ".rs"] = rust_module(base, variants[0].compiled.name, params).encode()
    manifest = {
        "kaio_version": __version__, "kernel": variants[0].compiled.name, "name": base,
        "launch": f"{base}_launch", "unload": f"{base}_unload", "grid_rule": list(rule) if rule else None,
        "variants": records, "files": sorted([*files, base + ".json"]),
    }  # fmt: skip
    files[base + ".json"] = (json.dumps(manifest, indent=2) + "\n").encode()
    return files


def _write(out: Path, files: Mapping[str, bytes]) -> list[Path]:
    """All the files or none: written to a temporary folder beside ``out``, then moved in."""
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".kaio-aot-", dir=out))
    except OSError as e:
        raise KaioError(f"kaio.aot.export: `out_dir` {str(out)!r} cannot be written: {e.strerror or e}") from None
    moved: list[Path] = []
    try:
        for file, data in files.items():
            (staging / file).write_bytes(data)
        for file in files:
            target = out / file
            os.replace(staging / file, target)
            moved.append(target)
    except OSError as e:
        for path in moved:
            path.unlink(missing_ok=True)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise KaioError(f"kaio.aot.export: `out_dir` {str(out)!r} cannot be written: {e.strerror or e}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # (after a failure above: already gone with `out`)
    return moved
