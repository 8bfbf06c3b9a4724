"""Python source -> IR: ``@kaio.gpu_kernel``, ``@kaio.tile_kernel``, ``@kaio.device``.

Importing this package imports xDSL; ``import kaio`` reaches it lazily.
"""

from kaio.frontend.inline import DeviceFunction
from kaio.frontend.kernel import GpuKernel, KernelIR, ParamKind, ParamSpec, device, gpu_kernel
from kaio.frontend.tile_kernel import TileKernel, tile_kernel

__all__ = [
    "GpuKernel",
    "KernelIR",
    "ParamKind",
    "ParamSpec",
    "DeviceFunction",
    "gpu_kernel",
    "device",
    "TileKernel",
    "tile_kernel",
]
