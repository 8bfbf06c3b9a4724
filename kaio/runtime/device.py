"""``kaio.Device``: a GPU through the CUDA driver, or kaio's CPU simulator, behind one API.

``Device()`` is the default device: the first CUDA device when the driver loads, else the
simulator (announced once on stderr). ``KAIO_DEVICE`` overrides the choice (``sim``,
``sim:sm_90``, ``0``, ``cuda:1``). ``Device(0)`` / ``Device("cuda:0")`` is a CUDA device (a
KaioDriverError without a driver); ``Device("sim")`` (optionally ``arch="sm_90"``) is a simulated
one. The same identity always gives the same object, so devices compare with ``is``.

The architecture kaio compiles for (``compile_arch``) is the GPU's own, or the newest portable
one kaio knows below it, except on Hopper: an sm_90 GPU compiles for :data:`HOPPER_DEFAULT`.
``Device(0, arch="sm_90")`` or ``KAIO_ARCH=sm_90`` (read when a GPU device is first created)
chooses another target the GPU can run; one it cannot run is a KaioTargetError.
"""

from __future__ import annotations

import contextlib

import os
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from kaio.errors import KaioDriverError, KaioTargetError, KaioTypeError
from kaio.runtime import device_lookup, driver
from kaio.runtime.backend import Backend, DeviceInfo
from kaio.runtime.buffer import Buffer, host_array
from kaio.runtime.modules import ModuleCache

if TYPE_CHECKING:
    from kaio.runtime.graphs import Graph
    from kaio.runtime.streams import Event, Stream

# What an sm_90 GPU (H100, H200) compiles for unless asked otherwise: "sm_90a", the Hopper paths
# (wgmma, TMA, warp specialisation, setmaxnreg). They passed every sm_90a case of
# tests/ops_library/test_ops_gpu.py on an H200 (`python -m kaio.hwcheck`, 2026-12-04, in
# docs/benchmarks.md) and ran matmul at 4096^3 and 8192^3 at 1.05-1.11x cuBLAS, prefill attention
# at (4, 32, 4096, 128) at 1.3-1.4x torch's FLASH backend, where the portable "sm_90" path
# (mma.sync + cp.async) ran 0.58x and 0.75x. "sm_90" stays one `arch=` or KAIO_ARCH away.
HOPPER_DEFAULT = "sm_90a"

# ("cuda", ordinal, the compile target asked for or None) or ("sim", arch, None)
Identity = tuple[str, Any, str | None]

_lock = threading.RLock()
_devices: dict[Identity, Device] = {}
_default: Device | None = None
_announced = False


def _identity(which: Any, arch: str | None) -> Identity:
    from kaio.targets.ptx.arch import DEFAULT_ARCH, get_arch

    if isinstance(which, str):
        text = which.strip().lower()
        if text == "sim" or text.startswith("sim:"):
            wanted = arch or (text[4:] if text.startswith("sim:") else None) or DEFAULT_ARCH
            return ("sim", get_arch(wanted).name, None)
        if text == "cuda":
            text = "0"
        elif text.startswith("cuda:"):
            text = text[5:]
        if text.isdigit():
            which = int(text)
    if isinstance(which, (int, np.integer)) and not isinstance(which, bool) and which >= 0:
        return ("cuda", int(which), None if arch is None else get_arch(arch).name)
    raise KaioTypeError(
        f"unknown device {which!r}: use Device() (default), Device(0) / Device('cuda:0') for a "
        "GPU, "
        "or Device('sim')"
    )


def _announce(reason: str) -> None:
    global _announced
    if not _announced:
        _announced = True
        print(f"kaio: {reason}, using the CPU simulator", file=sys.stderr)


def default_device() -> Device:
    """The first CUDA device, else the simulator; ``KAIO_DEVICE`` overrides."""
    global _default
    if _default is not None:
        return _default
    with _lock:
        if _default is None:
            chosen = os.environ.get("KAIO_DEVICE", "").strip()
            if chosen:
                _default = Device(chosen)
            else:
                try:
                    _default = _get(("cuda", 0, None))
                except driver.DriverUnavailable as exc:
                    _announce(str(exc))
                    _default = _get(_identity("sim", None))
    return _default


def _get(identity: Identity) -> Device:
    with _lock:
        device = _devices.get(identity)
        if device is None:
            device = object.__new__(Device)
            device._setup(identity)
            _devices[identity] = device
        return device


def cuda_device_count() -> int:
    """CUDA devices on this machine (0 without a driver)."""
    try:
        drv = driver.load()
    except driver.DriverUnavailable:
        return 0
    return int(driver.check("cuDeviceGetCount", drv.cuDeviceGetCount()))


class Device:
    """A device kaio can allocate on and launch to (see the module doc)."""

    _backend: Backend
    _identity: Identity
    _modules: ModuleCache

    def __new__(cls, which: Any = None, *, arch: str | None = None) -> Device:
        if isinstance(which, Device):
            return which
        if which is None and arch is None:
            return default_device()
        identity = _identity("sim" if which is None else which, arch)
        try:
            return _get(identity)
        except driver.DriverUnavailable as exc:
            raise KaioDriverError(
                "cuInit", "CUDA driver unavailable", f"{exc.summary}: {exc.detail}"
            ) from None

    def _setup(self, identity: Identity) -> None:
        kind, value, asked = identity
        if kind == "sim":
            from kaio.runtime.sim_backend import SimBackend

            self._backend = SimBackend(value)
            self._compile_arch = _simulator_compile_arch(self._backend.info)
        else:
            from kaio.runtime.cuda_backend import CudaBackend

            self._backend = CudaBackend(value)
            self._compile_arch = _gpu_compile_arch(self._backend.info, asked)
        self._identity = identity
        self._activate = self._backend.activate
        self._modules = ModuleCache(self._backend)

    # --- properties ------------------------------------------------------------------------------

    @property
    def info(self) -> DeviceInfo:
        return self._backend.info

    @property
    def name(self) -> str:
        return self._backend.info.name

    @property
    def arch(self) -> str:
        """The device's architecture, e.g. ``"sm_90"`` (the simulator's: the one it emulates)."""
        return self._backend.info.arch

    @property
    def sm(self) -> int:
        return self._backend.info.sm

    @property
    def compile_arch(self) -> str:
        """The architecture kaio compiles for: the device's own, or the newest kaio knows below
        it (PTX for an older target runs on newer GPUs: the driver JIT-compiles it); an sm_90 GPU
        gets :data:`HOPPER_DEFAULT` unless ``arch=`` or ``KAIO_ARCH`` chose another target (a
        simulator compiles for the arch it emulates, ``sm_90a`` included)."""
        return self._compile_arch

    @property
    def compile_targets(self) -> list[str]:
        """Every architecture whose code this device runs (the choices of ``arch=``)."""
        return _runnable_targets(self._backend.info)

    @property
    def sm_count(self) -> int:
        return self._backend.info.sm_count

    @property
    def total_memory(self) -> int:
        return self._backend.info.total_memory

    @property
    def shared_memory_per_block(self) -> int:
        return self._backend.info.shared_memory_per_block

    @property
    def shared_memory_per_block_optin(self) -> int:
        return self._backend.info.shared_memory_per_block_optin

    @property
    def max_threads_per_block(self) -> int:
        return self._backend.info.max_threads_per_block

    @property
    def is_simulator(self) -> bool:
        return self._backend.info.is_simulator

    @property
    def ordinal(self) -> int | None:
        return self._backend.info.ordinal

    @property
    def simulator(self) -> Any:
        """The ``kaio.targets.sim.Simulator`` behind a simulated device (its options can be set)."""
        if not self.is_simulator:
            raise AttributeError(f"{self!r} is not a simulator")
        return self._backend.simulator  # type: ignore[attr-defined]

    @property
    def last_launch_report(self) -> Any:
        """Simulator only: the ``LaunchReport`` of the latest launch (instruction counts, time)."""
        if not self.is_simulator:
            raise AttributeError(f"{self!r} is not a simulator")
        return self._backend.last_report  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def profiling(self) -> Iterator[None]:
        """Simulator only: launches inside the block collect the full metrics (instruction mix,
        global sectors per request, shared-memory bank conflicts per instruction); read them in
        ``last_launch_report``, a printable table."""
        if not self.is_simulator:
            raise AttributeError(f"{self!r} is not a simulator: profile GPU kernels with Nsight")
        backend = self._backend
        previous, backend.profile = backend.profile, True  # type: ignore[attr-defined]
        try:
            yield
        finally:
            backend.profile = previous  # type: ignore[attr-defined]

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory."""
        return self._backend.memory_info()

    # --- buffers ---------------------------------------------------------------------------------

    def empty(self, shape: Any, dtype: Any = np.float32) -> Buffer:
        """An uninitialized buffer; ``dtype``: a numpy dtype or name, ml_dtypes.bfloat16, or a
        kaio type."""
        return Buffer.allocate(self, shape, dtype)

    def zeros(self, shape: Any, dtype: Any = np.float32) -> Buffer:
        buf = Buffer.allocate(self, shape, dtype)
        if buf.nbytes:
            self._activate()
            self._backend.zero(buf._ptr, buf.nbytes)
        return buf

    def alloc_from(self, data: Any) -> Buffer:
        """A new buffer holding a copy of ``data``: a numpy array (or anything numpy converts), a
        host DLPack array, a kaio Buffer, or a device array of this device (CAI/DLPack)."""
        from kaio.runtime.interop import InteropError, external_array

        if isinstance(data, Buffer):
            buf = Buffer.allocate(self, data.shape, data.kaio_type)
            return buf.copy_from(data)
        if not isinstance(data, np.ndarray):
            host = _host_view(data)
            if host is None:
                try:
                    ext = external_array(data, None if self.is_simulator else 1)
                except InteropError as exc:
                    raise KaioTypeError(f"alloc_from: {exc}") from None
                if ext is not None:
                    try:
                        return self._copy_external(ext)
                    finally:
                        ext.done()
                host = host_array(data, "alloc_from: `data`")
            data = host
        buf = Buffer.allocate(self, data.shape, data.dtype)
        return buf.copy_from(data)  # copies through a contiguous array (a 0-d one stays 0-d)

    def _copy_external(self, ext: Any) -> Buffer:
        if self.is_simulator and ext.nbytes and not self._backend.owns(ext.ptr, ext.nbytes):
            raise KaioTypeError(f"alloc_from: pointer {ext.ptr:#x} is not memory of {self!r}")
        buf = Buffer.allocate(self, ext.shape, ext.dtype)
        if buf.nbytes:
            self._activate()
            self._backend.copy(buf._ptr, ext.ptr, buf.nbytes)
        return buf

    # --- work ------------------------------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait for all work queued on this device (immediate on the simulator)."""
        self._backend.synchronize()

    def stream(self) -> Stream:
        """A new stream on this device (``kaio.Stream(dev)``)."""
        from kaio.runtime.streams import Stream

        return Stream(self)

    def event(self, timing: bool = True) -> Event:
        """A new event on this device (``kaio.Event(dev)``)."""
        from kaio.runtime.streams import Event

        return Event(self, timing=timing)

    def capture(self) -> contextlib.AbstractContextManager[Graph]:
        """``with dev.capture() as graph:`` records the launches of the block into a graph;
        ``graph.replay()`` runs them again (CUDA graphs on a GPU; see ``kaio.runtime.graphs``)."""
        from kaio.runtime.graphs import capture

        return capture(self)

    def _sync_consumer_stream(self, stream: int) -> None:
        """DLPack export: make the consumer's stream wait for kaio's default-stream work."""
        if stream not in (0, 1):
            self._backend.wait_stream(stream, None)

    def __repr__(self) -> str:
        kind, value, asked = self._identity
        if kind == "cuda":
            return f"Device({value})" if asked is None else f'Device({value}, arch="{asked}")'
        from kaio.targets.ptx.arch import DEFAULT_ARCH

        return 'Device("sim")' if value == DEFAULT_ARCH else f'Device("sim", arch="{value}")'

    def __reduce__(self) -> Any:  # pickles as its identity: the same device on unpickling
        return (_get, (self._identity,))


def _runnable_targets(info: DeviceInfo) -> list[str]:
    """The portable targets up to the device's sm, and the arch-specific ones of exactly its sm
    ("a" features exist on that one generation: sm_90a code does not run on later GPUs)."""
    from kaio.targets.ptx.arch import ARCHES

    return [
        a.name
        for a in ARCHES.values()
        if a.sm == info.sm or (a.sm < info.sm and not a.arch_specific)
    ]


def _newest_portable(info: DeviceInfo) -> str:
    from kaio.targets.ptx.arch import ARCHES

    fitting = [a for a in ARCHES.values() if a.sm <= info.sm and not a.arch_specific]
    if not fitting:
        raise KaioDriverError(
            "compile", "unsupported architecture", f"{info.arch} is older than every arch kaio targets"
        )
    return max(fitting, key=lambda a: a.sm).name


def _simulator_compile_arch(info: DeviceInfo) -> str:
    """A simulator compiles for the arch it emulates ("a" targets included)."""
    from kaio.targets.ptx.arch import ARCHES

    return info.arch if info.arch in ARCHES else _newest_portable(info)


def _gpu_compile_arch(info: DeviceInfo, asked: str | None) -> str:
    """``arch=``, else ``KAIO_ARCH``, else the default: HOPPER_DEFAULT on sm_90, the GPU's own
    arch or the newest portable one below it elsewhere. A choice the GPU cannot run is refused."""
    from kaio.targets.ptx.arch import get_arch

    source = "arch="
    if asked is None and os.environ.get("KAIO_ARCH", "").strip():
        asked, source = os.environ["KAIO_ARCH"].strip(), "KAIO_ARCH"
    if asked is not None:
        name = get_arch(asked).name
        runnable = _runnable_targets(info)
        if name not in runnable:
            raise KaioTargetError(
                "target",
                get_arch(name).sm,
                name,
                f"{source} {name}: {info.name} ({info.arch}) cannot run code for {name}; "
                f"it runs {', '.join(runnable)}",
            )
        return name
    if info.arch == "sm_90":
        return HOPPER_DEFAULT
    return _newest_portable(info)


def _host_view(data: Any) -> np.ndarray | None:
    """A zero-copy numpy view of host data exposed through DLPack, else None."""
    if not hasattr(data, "__dlpack__") or hasattr(data, "__cuda_array_interface__"):
        return None
    try:
        kind, _ = data.__dlpack_device__()
    except Exception:
        return None
    from kaio.runtime.dlpack import KDL_CPU

    return np.from_dlpack(data) if kind == KDL_CPU else None


# streams.py and tensors.py reach devices through this (they must not import this module back)
device_lookup.install(Device)
