"""``matmul(..., config="auto")`` on a GPU: time the candidate configs once, remember the winner.

The winner is stored in the kaio cache directory (``autotune/matmul.json``), keyed by the GPU
name, its sm, the dtypes, the row alignments and the shape rounded up to powers of two, so one
measurement serves every shape of its bucket. Timing uses ``kaio.bench`` (CUDA events, median).
Writing C is harmless: the candidates run with beta = 0 into a scratch output.
"""

from __future__ import annotations

import json
from typing import Any

from kaio import cache, dtypes
from kaio.ops_library.matmul_config import MatmulConfig, candidates

_FILE = "autotune/matmul.json"


def bucket(size: int) -> int:
    return 1 << max(size - 1, 0).bit_length()


def _key(dev: Any, a_type: dtypes.ScalarType, c_type: dtypes.ScalarType, m: int, n: int, k: int,
         align: tuple[int, int, int]) -> str:  # fmt: skip
    shape = "x".join(str(bucket(s)) for s in (m, n, k))
    return f"{dev.name}|sm_{dev.sm}|{a_type.name}->{c_type.name}|align{align}|{shape}"


def _load() -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((cache.cache_dir() / _FILE).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # missing or corrupt: measure again


def _store(entries: dict[str, dict[str, Any]]) -> None:
    if cache.enabled():
        cache.write_atomic(cache.cache_dir() / _FILE, json.dumps(entries, indent=1, sort_keys=True))


def _config(data: dict[str, Any]) -> MatmulConfig:
    return MatmulConfig(
        block=tuple(data["block"]),  # type: ignore[arg-type]
        warps=tuple(data["warps"]),  # type: ignore[arg-type]
        stages=int(data["stages"]),
        layout=str(data["layout"]),
        group=int(data["group"]),
        tensor_cores=bool(data["tensor_cores"]),
        split_k=int(data.get("split_k", 1)),
        maxnreg=int(data.get("maxnreg", 0)),
    )


def autotune(op: Any, a: Any, b: Any, m: int, n: int, k: int, c_type: dtypes.ScalarType,
             align: tuple[int, int, int], tensor_cores: bool, dev: Any) -> MatmulConfig:  # fmt: skip
    from kaio.ops_library.matmul import launch
    from kaio.ops_library.matmul_kernel import MatmulKernel, base_alignment
    from kaio.runtime.bench import bench

    key = _key(dev, a.dtype, c_type, m, n, k, align)
    entries = _load()
    if key in entries:
        try:
            return _config(entries[key]["config"])
        except (KeyError, TypeError, ValueError):
            pass  # an entry from another kaio version: measure again
    scratch = dev.empty((m, n), c_type.np_dtype)
    timings: list[tuple[float, MatmulConfig]] = []
    for config in candidates(tensor_cores, align, a.dtype.nbytes, (m, n, k), dev.sm_count, arch=dev.compile_arch):
        if config.shared_bytes(a.dtype.nbytes) > dev.shared_memory_per_block_optin:
            continue
        bases = (base_alignment(a.ptr), base_alignment(b.ptr), base_alignment(scratch.ptr))
        kernel = MatmulKernel(a.dtype, c_type, bases, config)
        args = (a.value, b.value, scratch, None, m, n, k, 1.0, 0.0, dev)
        result = bench(lambda: launch(kernel, *args), warmup=10, rep=50, device=dev)
        timings.append((result.median, config))
    best = min(timings, key=lambda t: t[0])[1]
    entries[key] = {
        "config": {"block": list(best.block), "warps": list(best.warps), "stages": best.stages,
                   "layout": best.layout, "group": best.group, "tensor_cores": best.tensor_cores,
                   "split_k": best.split_k, "maxnreg": best.maxnreg},
        "median_ms": {c.key(): t for t, c in timings},
    }  # fmt: skip
    _store(entries)
    scratch.free()
    return best
