"""Devices, buffers, launches, streams, events and timing: one API over the CUDA driver and the
CPU simulator.

========================  =================================================================
``device.py``             ``Device``: the default device, identities, properties, allocation
``buffer.py``             ``Buffer``: device arrays, host copies, views, interop export
``interop.py``            reading ``__cuda_array_interface__`` and DLPack producers
``tensors.py``            PyTorch tensors read directly; CPU tensors staged on the simulator
``graphs.py``             ``dev.capture()``: recorded launches replayed (CUDA graphs on a GPU)
``dlpack.py``             DLPack capsules with ctypes (consume and export)
``args.py``               per-parameter argument checkers (the launch hot path)
``signature.py``          binding positional/keyword arguments and constexprs
``grid.py``               grids, blocks, ``cdiv``
``launch.py``             ``kernel[grid](...)``: specializations and the launch path
``modules.py``            per-device module cache; failed JIT -> KaioLaunchError with a PTX path
``streams.py``            ``Stream``, ``Event``
``bench.py``              ``bench``: events on a GPU, wall clock on the simulator
``backend.py``            the backend interface
``cuda_backend.py``       the CUDA driver backend
``sim_backend.py``        the simulator backend
``driver.py``             lazy cuda-python import; CUresult checking
========================  =================================================================

Importing this package does not import cuda-python (only ``Device(0)`` does), xDSL, nor torch
(never: a torch tensor is recognised only once its holder imported torch). The timing
function is ``kaio.bench`` (``kaio.runtime.bench.bench``; the submodule keeps its name here).
"""

from kaio.runtime.bench import BenchResult
from kaio.runtime.buffer import Buffer
from kaio.runtime.device import Device, cuda_device_count
from kaio.runtime.grid import cdiv
from kaio.runtime.streams import Event, Stream

__all__ = [
    "Device",
    "Buffer",
    "Stream",
    "Event",
    "BenchResult",
    "cdiv",
    "cuda_device_count",
]
