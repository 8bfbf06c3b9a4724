"""What a compile produces and what a launch consumes: PTX text plus the kernel's signature.

This is the contract between the compiler (frontend + passes + printer) and the runtime
(devices, argument checking, parameter packing, launch). The runtime never looks at IR.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kaio.dtypes import ScalarType
from kaio.errors import KaioTypeError

# The constexpr entry through which a compile passes what a launch found about its arguments to
# a kernel that specializes on them (tile kernels: integer divisibility, array base alignment).
# Also accepted by ``kaio.compile`` as the older spelling of ``specialization=``.
ARG_FACTS = "__divisible__"

Fact = tuple[str, int]
"""``(name, n)``: n divides the integer argument ``name``, or the base address (bytes) of the
array argument ``name``."""


@dataclass(frozen=True)
class KernelParam:
    """One runtime parameter of a kernel, in PTX parameter order.

    Arrays are passed as 64-bit global addresses (``.param .u64``); scalars by value with the
    PTX type of their dtype (``.param .f32``, ``.param .u32``; f16/bf16 as ``.param .b16``).
    """

    name: str
    dtype: ScalarType
    is_array: bool
    mutable: bool = False  # arrays only: MutArray
    align: int = 1  # arrays only: bytes the base address must be a multiple of (vector loads)

    @property
    def ptx_type(self) -> str:
        if self.is_array:
            return "u64"
        if self.dtype.name in ("f16", "bf16"):
            return "b16"
        if self.dtype.is_bool:
            return "u8"
        return self.dtype.ptx

    @property
    def nbytes(self) -> int:
        return 8 if self.is_array else self.dtype.nbytes

    def pack(self, value: Any) -> bytes:
        """Little-endian bytes of an already-checked argument value (an address for arrays)."""
        if self.is_array:
            return struct.pack("<Q", value)
        return self.dtype.np_dtype.type(value).tobytes()

    def __repr__(self) -> str:
        if self.is_array:
            kind = "MutArray" if self.mutable else "Array"
            return f"{self.name}: {kind}[{self.dtype.name}]"
        return f"{self.name}: {self.dtype.name}"


@dataclass(frozen=True)
class TensorMapParam:
    """A parameter the runtime adds after the user's: a TMA tensor map (``CUtensorMap`` on a
    GPU, kaio's format on the simulator; 128 bytes by value) of the row-major tensor the
    array parameter ``array`` holds (rank 2, or more: groups of rows, column panels; see
    ``kaio.passes.tensor_map_views``), built at every launch from the arguments.

    ``dims`` (innermost first) and ``strides`` (elements between consecutive indices of the
    outer dims) are integer expressions (``+ - * //``, parentheses, integers, names of runtime
    scalar parameters) the compiler read off the kernel's view. ``box`` is the tile one copy
    moves (innermost first); ``swizzle`` its shared-memory swizzle span in bytes (0, 32, 64,
    128)."""

    name: str
    array: str
    dims: tuple[str, ...]
    strides: tuple[str, ...]
    box: tuple[int, ...]
    swizzle: int

    nbytes = 128  # a CUtensorMap, passed by value

    def recipe(self) -> str:
        """The JSON the IR carries (``kaio.tensor_maps`` on the kernel)."""
        return json.dumps({"array": self.array, "dims": list(self.dims), "strides": list(self.strides),
                           "box": list(self.box), "swizzle": self.swizzle})  # fmt: skip

    @classmethod
    def from_recipe(cls, name: str, text: str) -> TensorMapParam:
        data = json.loads(text)
        return cls(name, str(data["array"]), tuple(map(str, data["dims"])), tuple(map(str, data["strides"])),
                   tuple(int(b) for b in data["box"]), int(data["swizzle"]))  # fmt: skip

    def __repr__(self) -> str:
        return f"{self.name}: TensorMap[{self.array}, box={'x'.join(map(str, self.box))}]"


def _canonical(value: Any) -> Any:
    """A type-exact, hashable stand-in for a constexpr value (``2``, ``2.0`` and ``True`` differ;
    a list read back from JSON equals the tuple it was)."""
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_canonical(v) for v in value))
    return (type(value).__name__, repr(value))


def _checked_facts(facts: Iterable[Fact] | Mapping[str, int]) -> tuple[Fact, ...]:
    pairs = list(facts.items()) if isinstance(facts, Mapping) else list(facts)
    result = []
    for pair in pairs:
        ok = isinstance(pair, (tuple, list)) and len(pair) == 2
        name, n = pair if ok else (None, None)
        if not (isinstance(name, str) and isinstance(n, int) and not isinstance(n, bool)
                and n >= 1 and not n & (n - 1)):  # fmt: skip
            raise KaioTypeError(
                f"specialization: each fact is (argument name, power of two), got {pair!r}"
            )
        result.append((name, n))
    return tuple(result)


class Specialization:
    """What one compile of a kernel is specialized on: its constexpr values, and the facts a
    launch found about its arguments (``facts``: ``(name, n)`` pairs, n dividing an integer
    argument or an array argument's base address in bytes; see ``kaio.tile_kernel``).

    A value: two specializations are equal when their constexprs (type-exact) and facts are.
    ``kernel.specializations(dev)`` lists the ones launches compiled, each with its
    ``compiled`` kernel; ``kaio.compile(kernel, arch, specialization=s)`` compiles one again,
    and its ``repr`` is Python that builds it (``kaio.Specialization(...)``).
    """

    __slots__ = ("_canonical", "_compiled", "_constexprs", "_facts")

    def __init__(
        self,
        constexprs: Mapping[str, Any] | None = None,
        facts: Iterable[Fact] | Mapping[str, int] = (),
        compiled: CompiledKernel | None = None,
    ) -> None:
        if constexprs is not None and not isinstance(constexprs, Mapping):
            raise KaioTypeError(
                f"specialization: constexprs must be a mapping name -> value, got {type(constexprs).__name__}"
            )
        values = dict(sorted((constexprs or {}).items()))
        if not all(isinstance(k, str) for k in values):
            raise KaioTypeError("specialization: constexpr names must be strings")
        self._constexprs = MappingProxyType(values)
        self._facts = _checked_facts(facts)
        self._compiled = compiled
        self._canonical = (tuple((k, _canonical(v)) for k, v in values.items()), self._facts)

    @property
    def constexprs(self) -> Mapping[str, Any]:
        return self._constexprs

    @property
    def facts(self) -> tuple[Fact, ...]:
        return self._facts

    @property
    def compiled(self) -> CompiledKernel | None:
        """The kernel a launch compiled for this specialization (None for one built by hand)."""
        return self._compiled

    @property
    def empty(self) -> bool:
        """No constexpr and no fact: the kernel has one specialization per arch."""
        return not self._constexprs and not self._facts

    @property
    def key(self) -> str:
        """A short digest naming this specialization (dump folders are named by it)."""
        return hashlib.sha256(repr(self._canonical).encode()).hexdigest()[:10]

    def with_compiled(self, compiled: CompiledKernel | None) -> Specialization:
        return Specialization(self._constexprs, self._facts, compiled)

    def describe(self, params: Iterable[KernelParam] = ()) -> list[str]:
        """One line per constexpr and fact, in words (``params`` tells arrays from integers)."""
        arrays = {p.name for p in params if p.is_array}
        lines = [f"constexpr {name} = {value!r}" for name, value in self._constexprs.items()]
        for name, n in self._facts:
            what = f"base address a multiple of {n} bytes" if name in arrays else f"a multiple of {n}"
            lines.append(f"argument {name}: {what}")
        return lines

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Specialization) and self._canonical == other._canonical

    def __hash__(self) -> int:
        return hash(self._canonical)

    def __repr__(self) -> str:
        return f"Specialization(constexprs={dict(self._constexprs)!r}, facts={self._facts!r})"


@dataclass
class CompiledKernel:
    """A kernel compiled for one arch and one set of constexpr values.

    ``ptx`` is the module text (one ``.entry`` named ``name``); ``params`` are the runtime
    parameters (constexpr parameters are folded in and do not appear). ``ir`` is the
    kernel-dialect module the frontend built; ``stages`` maps each pipeline stage, in order, to
    the IR text after it. Both are produced on demand when the PTX came from the disk cache.
    """

    name: str
    ptx: str
    arch: str
    params: tuple[KernelParam, ...]
    block_size: tuple[int, int, int]
    shared_bytes: int = 0
    dynamic_shared_bytes: int = 0
    """Dynamic shared memory every launch passes (the kernel's buffers beyond 48 KiB)."""
    tensor_maps: tuple[TensorMapParam, ...] = ()
    """Parameters after ``params`` that the runtime builds at each launch (TMA tensor maps)."""
    constexprs: dict[str, Any] = field(default_factory=dict)
    pipeline: str = ""
    cache_key: str = ""
    specialization: Specialization = field(default_factory=Specialization)
    """What this compile was specialized on: pass it back as ``kaio.compile(...,
    specialization=)`` to compile the same kernel again."""
    _stages: dict[str, str] | None = None
    _recompile: Callable[[], "CompiledKernel"] | None = None
    _pass_times: tuple[Any, ...] | None = None

    @property
    def stages(self) -> dict[str, str]:
        if self._stages is None:
            if self._recompile is None:
                return {}
            self._stages = self._recompile().stages
        return self._stages

    @property
    def pass_times(self) -> tuple[Any, ...]:
        """Each pass's wall time and op counts (``kaio.pass_manager.PassTiming``), in order;
        recompiled on first access when the PTX came from the disk cache.
        ``kaio.pass_manager.timing_table(compiled.pass_times)`` prints them."""
        if self._pass_times is None:
            self._pass_times = self._recompile().pass_times if self._recompile is not None else ()
        return self._pass_times

    @property
    def ir(self) -> str:
        stages = self.stages
        return next(iter(stages.values()), "")

    def __repr__(self) -> str:
        params = ", ".join(map(repr, self.params))
        return f"<CompiledKernel {self.name}({params}) {self.arch} block={self.block_size}>"


@dataclass
class BuiltKernel:
    """What a kernel builder hands the compiler: a module with one ``kernel.func``, the runtime
    parameters, and the compile-time values it was specialized with."""

    module: Any
    params: tuple[KernelParam, ...]
    constexprs: dict[str, Any] = field(default_factory=dict)
