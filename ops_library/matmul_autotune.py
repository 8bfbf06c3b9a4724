"""``matmul(..., config="auto")`` on a GPU: time the candidate configs once, remember the winner.

The winner is stored by :mod:`kaio.ops_library.autotune` (``autotune/matmul.json`` in the kaio
cache directory), keyed by the GPU name, its sm, the dtypes, the row alignments and the shape
rounded up to powers of two, so one measurement serves every shape of its bucket. Timing uses
``kaio.bench`` (CUDA events, median). Writing C is harmless: the candidates run with beta = 0
into a scratch output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kaio import dtypes
from kaio.ops_library import autotune as tuning
from kaio.ops_library.matmul_config import MatmulConfig, candidates


def bucket(size: int) -> int:
    return 1 << max(size - 1, 0).bit_length()


def _key(dev: Any, a_type: dtypes.ScalarType, c_type: dtypes.ScalarType, m: int, n: int, k: int,
         align: tuple[int, int, int]) -> str:  # fmt: skip
    shape = "x".join(str(bucket(s)) for s in (m, n, k))
    return f"{tuning.device_key(dev)}|{a_type.name}->{c_type.name}|align{align}|{shape}"


def autotune(launch: Callable[..., None], a: Any, b: Any, m: int, n: int, k: int, c_type: dtypes.ScalarType,
             align: tuple[int, int, int], tensor_cores: bool, dev: Any) -> MatmulConfig:  # fmt: skip
    """The best config for the call (``launch``: the op's launch of a kernel, handed in by
    ``matmul``, which imports this module)."""
    from kaio.ops_library.matmul_kernel import MatmulKernel, base_alignment
    from kaio.runtime.bench import bench

    key = _key(dev, a.dtype, c_type, m, n, k, align)
    if (known := tuning.remembered("matmul", key)) is not None:
        return known  # type: ignore[no-any-return]
    pool = candidates(tensor_cores, align, a.dtype.nbytes, (m, n, k), dev.sm_count, arch=dev.compile_arch,
                      shared_limit=dev.shared_memory_per_block_optin)  # fmt: skip
    scratch: list[Any] = []  # allocated once the first candidate is timed (not on a stored winner)

    def time_ms(config: MatmulConfig) -> float:
        if not scratch:
            scratch.append(dev.empty((m, n), c_type.np_dtype))
        bases = (base_alignment(a.ptr), base_alignment(b.ptr), base_alignment(scratch[0].ptr))
        kernel = MatmulKernel(a.dtype, c_type, bases, config)
        args = (a.value, b.value, scratch[0], None, m, n, k, 1.0, 0.0, dev)
        return bench(lambda: launch(kernel, *args), warmup=10, rep=50, device=dev).median

    try:
        return tuning.tuned("matmul", key, pool, time_ms, MatmulConfig.key)
    finally:
        for buffer in scratch:
            buffer.free()
