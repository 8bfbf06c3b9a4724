"""``kaio.ops_library.matmul``: ``C = alpha * A @ B + beta * C`` on tensor cores.

    from kaio.ops_library import matmul
    c = matmul(a, b)                        # A (MxK) @ B (KxN), f16/bf16 in, f32 out
    matmul(a, b, out=c16)                   # output in the input type (f16 or bf16)
    matmul(a, b, out=c, alpha=2.0, beta=1.0)
    print(matmul.pipeline())                # the pass pipeline of the default config

A and B are row-major device arrays (kaio buffers, ``__cuda_array_interface__`` or DLPack
objects) or numpy arrays (bf16 as ``ml_dtypes.bfloat16``: copied to the device, the result comes
back as numpy). f16 and bf16 inputs run on tensor cores with f32 accumulation; f32 inputs run
the SIMT variant (same tiling and shared-memory passes, FMAs instead of mma.sync). Any M, N, K
work: edge tiles are masked and zero-filled. Rows whose length (K for A, N for B and C) or base
address is not a multiple of 16 bytes get narrower copies (and a config suited to them).

``config``: None (the default for the dtypes and alignment), ``"auto"`` (on a GPU: time the
candidates once per GPU, dtypes and shape bucket, and remember the winner on disk; on the
simulator: a static cost model, nothing is timed), or a :class:`MatmulConfig`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library.matmul_config import (
    GpuModel,
    MatmulConfig,
    choose_config,
    default_config,
)
from kaio.ops_library.matmul_kernel import INPUT_TYPES, MatmulKernel, row_alignment
from kaio.pipeline import Pipeline


@dataclass
class _Operand:
    """An array argument as the op sees it: where it lives, its shape and kaio type."""

    value: Any  # what is passed to the kernel
    shape: tuple[int, ...]
    dtype: dtypes.ScalarType
    ptr: int
    host: np.ndarray | None = None  # the numpy array it came from


def _operand(name: str, value: Any, device: Any) -> _Operand:
    from kaio.runtime.buffer import Buffer
    from kaio.runtime.interop import InteropError, external_array

    if isinstance(value, np.ndarray):
        kind = _kaio_type(name, value.dtype)
        buf = device.alloc_from(np.ascontiguousarray(value))
        return _Operand(buf, value.shape, kind, buf.ptr, value)
    if isinstance(value, Buffer):
        return _Operand(value, value.shape, _kaio_type(name, value.dtype), value.ptr)
    try:
        ext = external_array(value, None)
    except InteropError as exc:
        raise KaioTypeError(f"matmul: `{name}`: {exc}") from None
    if ext is None:
        raise KaioTypeError(f"matmul: `{name}` must be a device array or a numpy array, got {type(value).__name__}")
    return _Operand(value, ext.shape, _kaio_type(name, ext.dtype), ext.ptr)


def _kaio_type(name: str, dtype: Any) -> dtypes.ScalarType:
    try:
        return dtypes.from_numpy(dtype)
    except TypeError:
        raise KaioTypeError(f"matmul: `{name}` has dtype {dtype}, which kaio has no type for") from None


def _check(a: _Operand, b: _Operand, out: _Operand | None, acc: Any) -> tuple[int, int, int]:
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise KaioTypeError(f"matmul takes 2-D A and B, got shapes {a.shape} and {b.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise KaioTypeError(f"matmul: A is {m}x{k} but B is {k2}x{n}: the inner sizes differ")
    if a.dtype not in INPUT_TYPES or a.dtype != b.dtype:
        raise KaioTypeError(
            f"matmul takes A and B of one type among f16, bf16, f32; got {a.dtype.name} and {b.dtype.name}"
        )
    if acc not in (None, dtypes.f32, np.float32, "f32"):
        raise KaioTypeError(f"matmul accumulates in f32; acc={acc!r} is not supported")
    if out is not None:
        if out.shape != (m, n):
            raise KaioTypeError(f"matmul: out must have shape ({m}, {n}), got {out.shape}")
        if out.dtype not in (dtypes.f32, a.dtype):
            raise KaioTypeError(f"matmul: out must be f32 or {a.dtype.name} (the input type), got {out.dtype.name}")
    if max(m, n, k) >= 2**31:
        raise KaioTypeError("matmul: sizes must be below 2**31")
    for name, source in (("a", a), ("b", b)):
        if out is not None and _overlaps(out, source):
            raise KaioTypeError(
                f"matmul: `out` overlaps `{name}`: the kernel would read what it already wrote; "
                "pass a separate output array"
            )
    return m, n, k


def _overlaps(x: _Operand, y: _Operand) -> bool:
    """Whether two operands share memory: host arrays by numpy, device arrays by address range."""
    if x.host is not None or y.host is not None:
        return x.host is not None and y.host is not None and bool(np.may_share_memory(x.host, y.host))
    x_end = x.ptr + math.prod(x.shape) * x.dtype.nbytes
    y_end = y.ptr + math.prod(y.shape) * y.dtype.nbytes
    return x.ptr < y_end and y.ptr < x_end


@lru_cache(maxsize=256)
def _launcher(kernel: MatmulKernel) -> Any:
    from kaio.runtime.launch import Launcher

    return Launcher(kernel)  # type: ignore[arg-type]  (MatmulKernel speaks the GpuKernel protocol)


class Matmul:
    """The matmul op: call it, or ask for its pipeline and kernels."""

    def __call__(
        self, a: Any, b: Any, out: Any = None, *, acc: Any = None, alpha: float = 1.0,
        beta: float = 0.0, config: MatmulConfig | str | None = None, device: Any = None,
    ) -> Any:  # fmt: skip
        from kaio.runtime.device import Device, default_device

        dev = Device(device) if device is not None else _device_of(a, b, out) or default_device()
        oa, ob = _operand("a", a, dev), _operand("b", b, dev)
        oc = _operand("out", out, dev) if out is not None else None
        m, n, k = _check(oa, ob, oc, acc)
        host_result = oa.host is not None or ob.host is not None
        if oc is None:
            buf = dev.zeros((m, n), np.float32)
            oc = _Operand(buf, (m, n), dtypes.f32, buf.ptr)
        if m == 0 or n == 0:
            return _result(oc, out, host_result)
        kernel = self.kernel(oa, ob, oc, m, n, k, config, dev)
        tiles = math.ceil(m / kernel.config.block[0]) * math.ceil(n / kernel.config.block[1])
        _launcher(kernel).launch((tiles,), None, (oa.value, ob.value, oc.value, m, n, k, alpha, beta), {}, dev)
        return _result(oc, out, host_result)

    def kernel(self, a: _Operand, b: _Operand, c: _Operand, m: int, n: int, k: int,
               config: MatmulConfig | str | None, dev: Any) -> MatmulKernel:  # fmt: skip
        """The specialization a call runs: dtypes, proven row alignments, chosen config."""
        eb = a.dtype.nbytes
        align = (
            row_alignment(k, a.ptr, eb),
            row_alignment(n, b.ptr, eb),
            min(row_alignment(n, c.ptr, c.dtype.nbytes), 2),
        )
        tensor_cores = a.dtype != dtypes.f32
        if config is None:
            chosen = default_config(tensor_cores, align, eb)
        elif config == "auto":
            chosen = self._auto(a, b, c, m, n, k, align, tensor_cores, dev)
        elif isinstance(config, MatmulConfig):
            chosen = config
        else:
            raise KaioTypeError(f"matmul: config is None, 'auto' or a MatmulConfig, not {config!r}")
        return MatmulKernel(a.dtype, c.dtype, align, chosen)

    def _auto(self, a: _Operand, b: _Operand, c: _Operand, m: int, n: int, k: int,
              align: tuple[int, int, int], tensor_cores: bool, dev: Any) -> MatmulConfig:  # fmt: skip
        eb = a.dtype.nbytes
        if dev.is_simulator:
            model = GpuModel(sms=dev.sm_count)
            return choose_config(m, n, k, eb, tensor_cores, align, model)
        from kaio.ops_library.matmul_autotune import autotune

        return autotune(self, a, b, m, n, k, c.dtype, align, tensor_cores, dev)

    def pipeline(self, config: MatmulConfig | None = None, arch: str = "sm_80") -> Pipeline:
        """The pass pipeline of ``config`` (default: the f16/bf16 tensor-core default)."""
        return (config or default_config(True, (8, 8, 2), 2)).pipeline(arch)

    def __repr__(self) -> str:
        return "<kaio.ops_library.matmul>"


def _device_of(*values: Any) -> Any:
    from kaio.runtime.buffer import Buffer

    for v in values:
        if isinstance(v, Buffer):
            return v.device
    return None


def _result(c: _Operand, out: Any, host: bool) -> Any:
    if not host:
        return c.value
    result = c.value.to_host()
    if isinstance(out, np.ndarray):
        out[...] = result
        return out
    return result


matmul = Matmul()
