"""kaio: write NVIDIA GPU kernels as Python functions.

kaio compiles them itself to PTX through a stack of xDSL dialects and runs them through the CUDA
driver, or on a CPU simulator of PTX when no GPU is present.
"""

from kaio.dtypes import Array, MutArray, constexpr
from kaio.errors import (
    KaioCompileError,
    KaioDriverError,
    KaioError,
    KaioLaunchError,
    KaioMemoryError,
    KaioSimError,
    KaioTargetError,
    KaioTypeError,
)

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The frontend imports xDSL; load it on first use so `import kaio` stays light.
    if name in ("gpu_kernel", "device"):
        from kaio import frontend

        return getattr(frontend, name)
    raise AttributeError(f"module 'kaio' has no attribute {name!r}")


__all__ = [
    "Array",
    "MutArray",
    "constexpr",
    "gpu_kernel",
    "device",
    "KaioError",
    "KaioCompileError",
    "KaioTypeError",
    "KaioTargetError",
    "KaioLaunchError",
    "KaioDriverError",
    "KaioMemoryError",
    "KaioSimError",
]
