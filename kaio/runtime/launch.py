"""Launching a ``@kaio.gpu_kernel``: ``kernel[grid](...)``, ``kernel[grid, block](...)`` and
``kernel.launch(dev, ..., grid=...)``.

The first launch of a specialization (a set of constexpr values) on a device compiles it (through
the disk cache), loads the module, and builds one checker per parameter and the backend's packed
launch. Every later launch is: bind the arguments, one dict lookup, the checkers, one pack and
one driver call.

The launch device is the device of the kaio Buffers among the arguments (all must agree), else
that of the first torch tensor (``cuda:i``: ``Device(i)``; a CPU tensor: ``kaio.Device()``), else
``kaio.Device()``; ``kernel.launch(dev, ...)`` names it explicitly.

The stream: ``stream=`` when given; else, inside ``dev.capture()``, the capture's stream; else,
on a GPU with a CUDA torch tensor among the arguments, torch's current stream (so the launch is
ordered with torch's work and captured by ``torch.cuda.graph``); else the legacy default stream.

``kernel[4, 2]`` is a 2-D grid, as in Triton (``kernel[(4, 2)]`` is the same Python
expression). A block is recognized when the subscript is a pair whose items are not both ints:
``kernel[4, (128,)]``, ``kernel[(gx, gy), (16, 16)]``, ``kernel[grid_fn, 128]``.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kaio.compiled import ARG_FACTS, CompiledKernel, Specialization
from kaio.errors import KaioLaunchError, KaioTypeError
from kaio.runtime import graphs, tensor_maps, tensors
from kaio.runtime.args import Check, apply_each, array_checker, scalar_checker
from kaio.runtime.backend import LaunchFn
from kaio.runtime.buffer import Buffer
from kaio.runtime.device import Device, default_device
from kaio.runtime.grid import Dim3, resolve_block, resolve_grid
from kaio.runtime.signature import DeclaredParam, Signature, constexpr_key
from kaio.runtime.streams import stream_handle

if TYPE_CHECKING:
    from kaio.frontend.kernel import GpuKernel

_CACHED_SHAPES = 64  # validated grids/blocks remembered per specialization
_torch_streams: dict[tuple[Device, int], Any] = {}  # (device, torch's raw stream) -> handle
_launchers: weakref.WeakSet[Launcher] = weakref.WeakSet()  # every kernel's, for forget_loaded


def forget_loaded(device: Device | None = None) -> None:
    """Drop every kernel's loaded specializations on ``device`` (None: on every device): the
    next launch looks its module up again. For when a device's modules were unloaded
    (``dev._modules.clear()``: the handles the specializations hold are gone) and for tools that
    change the PTX a device loads (kaio.tools.sync_mutants)."""
    for launcher in list(_launchers):
        launcher.forget(device)


def _cacheable(shape: Any) -> bool:
    """Whether ``shape`` may key a cache of validated shapes: only exact ints (and tuples of
    them), since Python's ``2.0 == 2`` and ``True == 1`` would otherwise let an invalid shape hit
    the entry of a valid one."""
    if shape.__class__ is int:
        return True
    if shape.__class__ is tuple:
        for d in shape:
            if d.__class__ is not int and not (d.__class__ is tuple and _cacheable(d)):
                return False
        return True
    return False


@dataclass
class Loaded:
    """A kernel compiled for one specialization (constexpr values and argument facts) and
    loaded on one device."""

    compiled: CompiledKernel
    device: Device
    checks: tuple[Check, ...]
    check_all: Callable[[Sequence[Any], Any, list[Any]], tuple[Any, ...]]  # apply_each(checks)
    run: LaunchFn
    block: Dim3
    on_gpu: bool  # launches follow torch's current stream when given torch tensors
    with_maps: Callable[[Sequence[Any]], tuple[Any, ...]] | None = None  # appends the TMA maps
    grids: dict[Any, Dim3] = field(default_factory=dict)
    blocks: dict[Any, Dim3] = field(default_factory=dict)


def split_key(key: Any) -> tuple[Any, Any]:
    """``kernel[key]`` -> (grid, block or None); see the module doc for the rule."""
    if isinstance(key, tuple) and len(key) == 2:
        if not all(isinstance(k, (int, np.integer)) for k in key):
            return key[0], key[1]
    return key, None


class BoundLaunch:
    """``kernel[grid]`` / ``kernel[grid, block]``: call it with the kernel's arguments."""

    __slots__ = ("_launcher", "grid", "block")

    def __init__(self, launcher: Launcher, grid: Any, block: Any) -> None:
        self._launcher = launcher
        self.grid = grid
        self.block = block

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self._launcher.launch(self.grid, self.block, args, kwargs)

    def __getitem__(self, key: Any) -> BoundLaunch:
        raise KaioLaunchError(
            "a launch takes one subscript: kernel[grid] or kernel[grid, block], then the arguments"
        )

    def __repr__(self) -> str:
        return f"<launch of {self._launcher.name} grid={self.grid!r} block={self.block!r}>"


def misaligned_arrays(runtime: Sequence[Any], arrays: Sequence[tuple[int, str]]) -> tuple[tuple[str, int], ...]:
    """``(name, bytes)`` of each array argument whose base address is not 16-byte aligned (a view
    at an odd offset), with the largest power of two dividing it: a kernel that specializes on
    its arguments compiles a variant that moves no more than that many bytes per access where it
    starts, instead of faulting. Aligned arrays add nothing (the common key stays the same)."""
    facts: tuple[tuple[str, int], ...] = ()
    for i, name in arrays:
        value = runtime[i]
        address = value._ptr if value.__class__ is Buffer else _address_bits(value)
        if address & 15:
            facts += ((name, address & -address),)
    return facts


def _address_bits(value: Any) -> int:
    """Bits of the address an array argument will have at launch (only its low four matter),
    found without checking it; 0 where it cannot be told (the argument check then refuses an
    address less aligned than the kernel needs, naming the parameter)."""
    if tensors.is_tensor(value):  # (a CPU tensor staged on the simulator keeps its address mod 256)
        return value.data_ptr()  # type: ignore[no-any-return]
    try:
        interface = getattr(value, "__cuda_array_interface__", None)
        return int(interface["data"][0]) if isinstance(interface, dict) else 0
    except (TypeError, KeyError, IndexError, ValueError):
        return 0


class Launcher:
    """The launch machinery of one kernel: its signature and its specializations."""

    def __init__(self, kernel: GpuKernel) -> None:
        self.kernel = kernel
        self.name = kernel.name
        declared = [
            DeclaredParam(p.name, p.is_constexpr, p.has_default, p.default)
            for p in kernel.params
        ]
        self.signature = Signature(kernel.name, declared)
        runtime = kernel.runtime_params
        self.array_positions = tuple(i for i, p in enumerate(runtime) if p.is_array)
        self._specs: dict[tuple[Device, tuple[Any, ...]], Loaded] = {}
        self._lock = threading.Lock()
        # The specialization of the latest launch: consecutive launches of the same one (the
        # common loop) skip hashing the constexpr key.
        self._last: tuple[Device | None, Any, Loaded | None] = (None, None, None)
        self._last_on: dict[Device, Loaded] = {}  # the latest launch's, per device
        self._bound: dict[Any, BoundLaunch] = {}
        _launchers.add(self)
        # Kernels that specialize on argument values (tile kernels: integer divisibility), and
        # the key and constexprs of each (key, facts) seen: the same objects every launch.
        self._arg_specialization = getattr(kernel, "arg_specialization", None)
        self._array_names = tuple((i, runtime[i].name) for i in self.array_positions)
        self._fact_keys: dict[Any, tuple[Any, Mapping[str, Any]]] = {}

    def __getitem__(self, key: Any) -> BoundLaunch:
        cacheable = _cacheable(key)
        if cacheable:
            bound = self._bound.get(key)
            if bound is not None:
                return bound
        grid, block = split_key(key)
        bound = BoundLaunch(self, grid, block)
        if cacheable and len(self._bound) < _CACHED_SHAPES:
            self._bound[key] = bound
        return bound

    def launch(
        self,
        grid: Any,
        block: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        device: Device | None = None,
        stream: Any = None,
        shared_bytes: int = 0,
    ) -> None:
        sig = self.signature
        if not kwargs and sig.fast_path and len(args) == sig.n_runtime:
            runtime, constexprs, key = args, sig.default_constexprs, sig.default_key
        else:
            runtime, constexprs, key = sig.bind(args, kwargs)
        if self._arg_specialization is not None:
            facts = self._arg_specialization(runtime)
            misaligned = misaligned_arrays(runtime, self._array_names)
            if misaligned:
                facts += misaligned
            keyed = self._fact_keys.get((key, facts))
            if keyed is None:
                keyed = self._fact_keys[(key, facts)] = ((key, facts), {**constexprs, ARG_FACTS: facts})
            key, constexprs = keyed
        if device is None:
            for i in self.array_positions:
                value = runtime[i]
                if value.__class__ is Buffer:
                    device = value._device
                    break
            else:
                device = self._device_of_tensors(runtime)
        last_device, last_key, spec = self._last
        if device is not last_device or key is not last_key:
            spec = self._specs.get((device, key))
            if spec is None:
                spec = self._specialize(device, constexprs, key)
            self._last = (device, key, spec)
            self._last_on[device] = spec
        assert spec is not None
        g = spec.grids.get(grid) if _cacheable(grid) else None
        if g is None:
            g = self._grid(spec, grid, runtime, constexprs)
        b = spec.block if block is None else self._block(spec, block)
        if shared_bytes:
            self._check_shared(spec.compiled, spec.device, shared_bytes)
        graph = graphs.capture_for(device) if graphs.active else None
        if stream is not None:
            handle = stream_handle(device, stream)
        elif graph is not None:
            handle = graph.stream
        elif sys.modules.get("torch") is not None and spec.on_gpu:
            handle = self._torch_stream(device, runtime)
        else:
            handle = None
        cleanups: list[Any] = []
        try:
            values = spec.check_all(runtime, handle, cleanups)
            if spec.with_maps is not None:  # tensor maps the compile added, built from the values
                values = spec.with_maps(values)
            if graph is not None and graph.stream is None:  # the simulator records, runs later
                graph.record(self._replay(grid, block, args, kwargs, device, stream, shared_bytes))
            else:
                # the kernel's own buffers beyond 48 KiB come on top (checked when specialized)
                spec.run(g, b, shared_bytes + spec.compiled.dynamic_shared_bytes, handle, values)
                if graph is not None:
                    graph.launches += 1
        finally:
            for release in cleanups:  # DLPack arguments: hand the tensors back; CPU tensors
                release()  # on the simulator: copy written storages back

    def _device_of_tensors(self, runtime: Sequence[Any]) -> Device:
        """No kaio Buffer among the arrays: the device of the first torch tensor, else the
        default device."""
        if sys.modules.get("torch") is not None:
            for i in self.array_positions:
                if tensors.is_tensor(runtime[i]):
                    return tensors.device_of(runtime[i])
        return default_device()

    def _torch_stream(self, device: Device, runtime: Sequence[Any]) -> Any:
        """torch's current stream when a torch tensor is among the arrays (cached handles: the
        backend's stream object for a raw handle is built once)."""
        raw = tensors.torch_stream(runtime, self.array_positions, device.ordinal or 0)
        if raw is None:
            return None
        handle = _torch_streams.get((device, raw))
        if handle is None:
            handle = device._backend.stream_handle(raw)
            if len(_torch_streams) < _CACHED_SHAPES:
                _torch_streams[(device, raw)] = handle
        return handle

    def _replay(
        self,
        grid: Any,
        block: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        device: Device,
        stream: Any,
        shared_bytes: int,
    ) -> Callable[[], None]:
        args, kwargs = tuple(args), dict(kwargs)

        def again() -> None:
            self.launch(grid, block, args, kwargs, device, stream, shared_bytes)

        return again

    def launch_on(
        self,
        device: Any,
        grid: Any,
        block: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        stream: Any,
        shared_bytes: int,
    ) -> None:
        """``kernel.launch(device, ...)``: ``device`` a Device, an identity, or None."""
        if device is not None and device.__class__ is not Device:
            device = Device(device)
        self.launch(grid, block, args, kwargs, device, stream, shared_bytes)

    def specialization(self, device: Device | None = None, **constexprs: Any) -> Loaded:
        """The compiled and loaded specialization for ``constexprs`` (defaults applied)."""
        device = Device(device) if device is not None else default_device()
        values = dict(self.signature.default_constexprs)
        values.update(constexprs)
        missing = [n for n in self.signature.constexpr_names if n not in values]
        if missing:
            raise KaioTypeError(
                f"kernel `{self.name}`: no value for constexpr {', '.join(missing)}"
            )
        key = constexpr_key([values[n] for n in self.signature.constexpr_names])
        return self._specs.get((device, key)) or self._specialize(device, values, key)

    def forget(self, device: Device | None = None) -> None:
        """Drop the loaded specializations on ``device`` (None: all); see :func:`forget_loaded`."""
        with self._lock:
            self._specs = {key: s for key, s in self._specs.items() if device is not None and key[0] is not device}
            self._last = (None, None, None)
            self._last_on = {} if device is None else {d: s for d, s in self._last_on.items() if d is not device}
            self._bound = {}

    def specializations(self, device: Any = None) -> list[Specialization]:
        """What launches (and ``specialization()``) compiled so far, on ``device`` or on any,
        each with its ``compiled`` kernel, in the order they were first compiled."""
        device = None if device is None else _as_device(device)
        with self._lock:
            loaded = [spec for (on, _), spec in self._specs.items() if device is None or on == device]
        return [spec.compiled.specialization.with_compiled(spec.compiled) for spec in loaded]

    def last_compiled(self, device: Any = None) -> CompiledKernel | None:
        """The compiled kernel the latest launch ran (on ``device``, or on any); None before
        the first launch."""
        if device is None:
            spec = self._last[2]
        else:
            spec = self._last_on.get(_as_device(device))
        return None if spec is None else spec.compiled

    # --- first launch of a specialization --------------------------------------------------------

    def _specialize(
        self, device: Device, constexprs: dict[str, Any], key: tuple[Any, ...]
    ) -> Loaded:
        with self._lock:
            spec = self._specs.get((device, key))
            if spec is not None:
                return spec
            compiled = self.kernel.compile_for_launch(device.compile_arch, constexprs)
            names = tuple(p.name for p in compiled.params)
            if names != self.signature.runtime_names:  # the compile contract was broken: a bug
                raise KaioLaunchError(
                    f"kernel `{self.name}` compiled with parameters {names}, declared "
                    f"{self.signature.runtime_names}"
                )
            self._check_shared(compiled, device, 0)
            function = device._modules.function(compiled.ptx, compiled.name)
            checks = tuple(
                array_checker(self.name, p, device) if p.is_array else scalar_checker(self.name, p)
                for p in compiled.params
            )
            run = device._backend.launcher(function, (*compiled.params, *compiled.tensor_maps), compiled.name)
            check_all = apply_each(checks, ("stream", "cleanups"))
            with_maps = None
            if compiled.tensor_maps:
                with_maps = tensor_maps.builders(self.name, compiled.tensor_maps, compiled.params, device)
            spec = Loaded(
                compiled, device, checks, check_all, run, compiled.block_size, not device.is_simulator,
                with_maps,
            )
            self._specs[(device, key)] = spec
            return spec

    def _grid(
        self, spec: Loaded, grid: Any, runtime: Sequence[Any], constexprs: Mapping[str, Any]
    ) -> Dim3:
        def meta() -> dict[str, Any]:
            return {**dict(zip(self.signature.runtime_names, runtime, strict=True)), **constexprs}

        g = resolve_grid(grid, meta, spec.device.info.max_grid)
        if _cacheable(grid) and len(spec.grids) < _CACHED_SHAPES:
            spec.grids[grid] = g
        return g

    def _block(self, spec: Loaded, block: Any) -> Dim3:
        cacheable = _cacheable(block)
        b = spec.blocks.get(block) if cacheable else None
        if b is not None:
            return b
        info = spec.device.info
        b = resolve_block(block, spec.block, self.name, info.max_block, info.max_threads_per_block)
        if cacheable and len(spec.blocks) < _CACHED_SHAPES:
            spec.blocks[block] = b
        return b

    def _check_shared(self, compiled: CompiledKernel, device: Device, shared_bytes: Any) -> None:
        if (
            not isinstance(shared_bytes, (int, np.integer))
            or isinstance(shared_bytes, bool)
            or shared_bytes < 0
        ):
            raise KaioLaunchError(f"shared_bytes must be a non-negative int, got {shared_bytes!r}")
        limit = device.shared_memory_per_block_optin
        own = compiled.shared_bytes + compiled.dynamic_shared_bytes
        total = own + int(shared_bytes)
        if total > limit:
            raise KaioLaunchError(
                f"kernel `{self.name}` needs {own} bytes of its own and {shared_bytes} more "
                f"dynamic shared memory per block; {device!r} allows {limit}"
            )


def _as_device(device: Any) -> Device:
    return device if device.__class__ is Device else Device(device)


def launcher_of(kernel: GpuKernel) -> Launcher:
    launcher: Launcher | None = getattr(kernel, "_launcher", None)
    if launcher is None:
        launcher = Launcher(kernel)
        kernel._launcher = launcher
    return launcher


def not_callable(kernel: GpuKernel) -> KaioTypeError:
    return KaioTypeError(
        f"`{kernel.name}` is a GPU kernel and cannot be called like a function: launch it with "
        f"{kernel.name}[grid](...) or {kernel.name}.launch(dev, ..., grid=...)"
    )
