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


# Names that pull in xDSL load on first use, so `import kaio` stays light.
_LAZY = {
    "compile": ("kaio.compiler", "compile"),
    "Pipeline": ("kaio.pipeline", "Pipeline"),
    "gpu_kernel": ("kaio.frontend", "gpu_kernel"),
    "device": ("kaio.frontend", "device"),
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'kaio' has no attribute {name!r}")


__all__ = [
    "compile",
    "Pipeline",
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
