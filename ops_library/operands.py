"""Array operands and results of library ops: what the caller passes decides what comes back.

    ops = Operands("matmul", a, b, out)          # picks the device and the result kind
    oa = ops.take("a", a)                         # shape, kaio type, address, kernel argument
    oc = ops.output("out", (m, n), dtypes.f32)    # a new result of the callers' kind
    return ops.result(oc)

Result kinds, from the inputs:

* **torch tensors** (any input is one): kernels receive the tensors themselves; new outputs are
  allocated by torch (``torch.zeros`` on the input's device, so torch's caching allocator owns
  them) and returned as tensors. CUDA tensors run on their GPU, CPU tensors on the simulator.
* **numpy arrays**: copied to the device; the result comes back as a new numpy array (or is
  written into a numpy ``out``).
* **kaio Buffers** (and other device arrays: CAI/DLPack): results are kaio Buffers.

The device: the op's ``device=`` argument, else the device of the first kaio Buffer or torch
tensor among the inputs, else ``kaio.Device()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from kaio import dtypes
from kaio.errors import KaioTypeError


@dataclass
class Operand:
    """An array argument as an op sees it."""

    value: Any  # what is passed to the kernel
    shape: tuple[int, ...]
    dtype: dtypes.ScalarType
    ptr: int  # the address the kernel will see modulo alignment (host address for CPU tensors)
    host: np.ndarray | None = None  # the numpy array it came from


def take_tensor(op: str, name: str, value: Any, *, fake: bool = False) -> Operand:
    """A torch tensor operand: a dtype kaio has a type for, contiguous. ``fake``: a tensor with
    no data (a torch.compile fake, a meta tensor): address 0 (checks only, nothing launches)."""
    from kaio.runtime import tensors

    kind = tensors.kaio_type(value.dtype)
    if kind is None:
        raise KaioTypeError(f"{op}: `{name}` has dtype {value.dtype}, which kaio has no type for")
    if not value.is_contiguous():
        raise KaioTypeError(
            f"{op}: `{name}` is not contiguous (shape {tuple(value.shape)}, strides "
            f"{tuple(value.stride())}); pass {name}.contiguous()"
        )
    return Operand(value, tuple(value.shape), kind, 0 if fake else value.data_ptr())


def device_of(*values: Any) -> Any:
    """The device of the first kaio Buffer or torch tensor among ``values``, else None."""
    from kaio.runtime import tensors
    from kaio.runtime.buffer import Buffer

    for v in values:
        if isinstance(v, Buffer):
            return v.device
        if tensors.is_tensor(v):
            return tensors.device_of(v)
    return None


class Operands:
    """The operands of one op call (see the module doc)."""

    def __init__(self, op: str, *inputs: Any, device: Any = None) -> None:
        from kaio.runtime import tensors
        from kaio.runtime.device import Device, default_device

        self.op = op
        present = [v for v in inputs if v is not None]
        if device is not None:
            self.device = Device(device)
        else:
            self.device = device_of(*present) or default_device()
        self.torch = tensors.any_tensor(present)
        self.host = not self.torch and any(isinstance(v, np.ndarray) for v in present)
        self._tensor_like: Any = next((v for v in present if tensors.is_tensor(v)), None)

    def take(self, name: str, value: Any) -> Operand:
        from kaio.runtime import tensors
        from kaio.runtime.buffer import Buffer
        from kaio.runtime.interop import InteropError, external_array

        if isinstance(value, np.ndarray):
            if self.torch:
                raise KaioTypeError(
                    f"{self.op}: `{name}` is a numpy array but other operands are torch "
                    "tensors; pass tensors (torch.from_numpy(x))"
                )
            kind = self.kaio_type(name, value.dtype)
            buf = self.device.alloc_from(np.ascontiguousarray(value))
            return Operand(buf, value.shape, kind, buf.ptr, value)
        if isinstance(value, Buffer):
            return Operand(value, value.shape, self.kaio_type(name, value.dtype), value.ptr)
        if tensors.is_tensor(value):
            return take_tensor(self.op, name, value)
        try:
            ext = external_array(value, None)
        except InteropError as exc:
            raise KaioTypeError(f"{self.op}: `{name}`: {exc}") from None
        if ext is None:
            raise KaioTypeError(
                f"{self.op}: `{name}` must be a device array, a torch tensor or a numpy array, "
                f"got {type(value).__name__}"
            )
        ext.done()
        return Operand(value, ext.shape, self.kaio_type(name, ext.dtype), ext.ptr)

    def kaio_type(self, name: str, dtype: Any) -> dtypes.ScalarType:
        try:
            return dtypes.from_numpy(dtype)
        except TypeError:
            raise KaioTypeError(
                f"{self.op}: `{name}` has dtype {dtype}, which kaio has no type for"
            ) from None

    @contextmanager
    def workspace(self, shape: tuple[int, ...], ktype: dtypes.ScalarType, *, zero: bool = False) -> Iterator[Operand]:
        """Scratch memory for the kernels this op queues inside the ``with`` block, on the stream
        they run on (:mod:`kaio.runtime.workspace`): a torch tensor for torch callers on a GPU,
        else a kaio Buffer; given back, in stream order, when the block ends."""
        from kaio.runtime.buffer import Buffer
        from kaio.runtime.workspace import workspace

        like = () if self._tensor_like is None else (self._tensor_like,)
        with workspace(self.device, shape, ktype, like=like, zero=zero) as value:
            yield Operand(value, shape, ktype, value.ptr if isinstance(value, Buffer) else value.data_ptr())

    def output(self, shape: tuple[int, ...], ktype: dtypes.ScalarType) -> Operand:
        """A new zero-filled result of the inputs' kind, on the op's device."""
        if self.torch:
            from kaio.runtime import tensors

            like = self._tensor_like
            t = like.new_zeros(shape, dtype=tensors.torch_dtype(ktype))
            return Operand(t, shape, ktype, t.data_ptr())
        buf = self.device.zeros(shape, ktype.np_dtype)
        return Operand(buf, shape, ktype, buf.ptr)

    def result(self, out: Operand, user_out: Any = None) -> Any:
        """What the op returns: ``user_out`` when given (filled), else the new output; numpy
        callers get numpy back."""
        if not self.host:
            return out.value
        host = out.value.to_host()
        if isinstance(user_out, np.ndarray):
            user_out[...] = host
            return user_out
        return host


def to_host(value: Any) -> np.ndarray | None:
    """A kaio Buffer's or a torch tensor's values as numpy; None for another array."""
    if hasattr(value, "to_host"):
        return value.to_host()  # type: ignore[no-any-return]
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().cpu().numpy()  # type: ignore[no-any-return]
    return None
