"""kaio: write NVIDIA GPU kernels as Python functions.

kaio compiles them itself to PTX through a stack of xDSL dialects and runs them through the CUDA
driver, or on a CPU simulator of PTX when no GPU is present.
"""

from typing import TYPE_CHECKING

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
    KaioValueError,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and IDEs
    from kaio.compiled import Specialization
    from kaio.compiler import compile
    from kaio.frontend import device, gpu_kernel, tile_kernel
    from kaio.ir_loader import LoadedKernel, load_ir
    from kaio.dialect_registry import register_dialect
    from kaio.frontend.user_builtins import BuiltinCall, builtin
    from kaio.pass_registry import register_pass
    from kaio.pipeline import Pipeline
    from kaio.runtime.bench import BenchResult, bench
    from kaio.runtime.buffer import Buffer
    from kaio.runtime.device import Device
    from kaio.prelude import cdiv
    from kaio.runtime.streams import Event, Stream


# Names that pull in xDSL load on first use, so `import kaio` stays light.
_LAZY = {
    "compile": ("kaio.compiler", "compile"),
    "Specialization": ("kaio.compiled", "Specialization"),
    "load_ir": ("kaio.ir_loader", "load_ir"),
    "LoadedKernel": ("kaio.ir_loader", "LoadedKernel"),
    "Pipeline": ("kaio.pipeline", "Pipeline"),
    "register_pass": ("kaio.pass_registry", "register_pass"),
    "register_dialect": ("kaio.dialect_registry", "register_dialect"),
    "builtin": ("kaio.frontend.user_builtins", "builtin"),
    "BuiltinCall": ("kaio.frontend.user_builtins", "BuiltinCall"),
    "gpu_kernel": ("kaio.frontend", "gpu_kernel"),
    "tile_kernel": ("kaio.frontend", "tile_kernel"),
    "device": ("kaio.frontend", "device"),
    # The runtime imports numpy only; cuda-python loads when a CUDA device is first asked for.
    "Device": ("kaio.runtime.device", "Device"),
    "Buffer": ("kaio.runtime.buffer", "Buffer"),
    "Stream": ("kaio.runtime.streams", "Stream"),
    "Event": ("kaio.runtime.streams", "Event"),
    "bench": ("kaio.runtime.bench", "bench"),
    "BenchResult": ("kaio.runtime.bench", "BenchResult"),
    "cdiv": ("kaio.prelude", "cdiv"),  # a kernel builtin that also runs on the host
}


def __getattr__(name: str) -> object:
    if name == "torch":  # kaio.torch imports torch: only when asked for
        import importlib

        return importlib.import_module("kaio.torch")
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'kaio' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the lazy names too, so dir(kaio) and tab completion show the whole public API
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "compile",
    "Specialization",
    "load_ir",
    "LoadedKernel",
    "Pipeline",
    "register_pass",
    "register_dialect",
    "builtin",
    "BuiltinCall",
    "Array",
    "MutArray",
    "constexpr",
    "gpu_kernel",
    "tile_kernel",
    "device",
    "Device",
    "Buffer",
    "Stream",
    "Event",
    "bench",
    "BenchResult",
    "cdiv",
    "KaioError",
    "KaioCompileError",
    "KaioTypeError",
    "KaioValueError",
    "KaioTargetError",
    "KaioLaunchError",
    "KaioDriverError",
    "KaioMemoryError",
    "KaioSimError",
]
