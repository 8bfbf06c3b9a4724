"""``kaio.ops_library.GGUFLinear``: one weight of a GGUF file as a linear layer, ``x @ W.T``.

    import gguf
    from kaio.ops_library import GGUFLinear
    reader = gguf.GGUFReader("model.gguf")
    q_proj = GGUFLinear(reader, "blk.0.attn_q.weight")  # or gguf_linear(reader, name)
    y = q_proj(x)                                         # x (M, in_features) -> (M, out_features)

The tensor is taken as the reader hands it over: its ``tensor_type`` picks the format (any
``gguf_matmul`` takes: the quantised ones and F32/F16/BF16), its ``shape`` is GGUF's
(``ne0`` first: ``(in_features, out_features)``, the reverse of numpy's), and its ``data`` (a
read-only view of the file: uint8 block bytes ``(N, K_bytes)``, or an F16/F32 tensor as its own
type ``(N, K)``) is used as it is, never dequantised. Everything is checked before any launch:
an unsupported type, a tensor that is not 2-D, or data whose byte count is not what the type
and shape take raise a kaio error naming the argument. The ``gguf`` package is never imported
here: the reader is used through those three attributes.

Each call runs :func:`~kaio.ops_library.gguf_matmul.gguf_matmul`; numpy callers get numpy back,
torch callers a tensor (the bytes are copied to x's device once and kept), and :meth:`to`
uploads the bytes to a kaio device once for Buffer callers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from kaio.ops_library.gguf_blocks import BlockFormat, block_format
from kaio.ops_library.gguf_matmul import dequantize, gguf_matmul

from kaio.errors import KaioTypeError, KaioValueError

OP = "GGUFLinear"


def find_tensor(reader: Any, name: Any) -> Any:
    """The reader's tensor called ``name``; ``reader`` may also be one tensor (``name`` None)."""
    if name is None and hasattr(reader, "tensor_type") and hasattr(reader, "data"):
        return reader
    tensors = getattr(reader, "tensors", None)
    if tensors is None:
        raise KaioTypeError(f"{OP}: `reader` must be a gguf.GGUFReader (or one of its tensors), got {type(reader).__name__}")
    if not isinstance(name, str):
        raise KaioTypeError(f"{OP}: `name` must be a tensor's name (str), got {type(name).__name__}")
    for t in tensors:
        if t.name == name:
            return t
    near = [t.name for t in tensors if name.split(".")[-1] in t.name][:5]
    hint = f"; tensors named like it: {', '.join(near)}" if near else ""
    raise KaioValueError(f"{OP}: `name` {name!r} is not a tensor of `reader` ({len(tensors)} tensors{hint})")


def tensor_bytes(tensor: Any, fmt: BlockFormat) -> tuple[np.ndarray, int, int]:
    """The tensor's data as uint8 rows of blocks ``(N, K_bytes)`` (a view, no copy), and its K
    and N from GGUF's shape; an error naming ``reader``'s tensor where they disagree."""
    name = getattr(tensor, "name", "?")
    shape = [int(s) for s in np.asarray(tensor.shape).ravel()]
    if len(shape) != 2:
        raise KaioValueError(
            f"{OP}: tensor {name!r} of `reader` has GGUF shape {tuple(shape)}; a linear layer's weight is 2-D "
            "(in_features, out_features)"
        )
    k, n = shape
    if k % fmt.elements:
        raise KaioValueError(f"{OP}: tensor {name!r} of `reader`: {k} input features are not whole {fmt.name} blocks of {fmt.elements}")
    data = np.asarray(tensor.data)
    row_bytes = k // fmt.elements * fmt.nbytes
    if data.nbytes != n * row_bytes:
        raise KaioValueError(
            f"{OP}: tensor {name!r} of `reader` holds {data.nbytes} bytes, but {fmt.name} of GGUF shape ({k}, {n}) "
            f"takes {n * row_bytes} ({n} rows of {row_bytes})"
        )
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    return data.reshape(-1).view(np.uint8).reshape(n, row_bytes), k, n


class GGUFLinear:
    """``x @ W.T`` for the GGUF tensor ``name`` of ``reader`` (see the module doc).
    ``in_features``/``out_features`` are K and N, ``qtype`` the format's name, ``weight`` the
    block bytes (uint8 ``(N, K_bytes)``)."""

    def __init__(self, reader: Any, name: str | None = None) -> None:
        tensor = find_tensor(reader, name)
        ttype = tensor.tensor_type
        try:
            fmt = block_format(OP, ttype)
        except (KaioTypeError, KaioValueError):
            raise KaioValueError(
                f"{OP}: tensor {tensor.name!r} of `reader` has GGUF type {getattr(ttype, 'name', ttype)!r}, "
                "which gguf_matmul does not take"
            ) from None
        self.name: str = tensor.name
        self.qtype: str = fmt.name
        self.weight, self.in_features, self.out_features = tensor_bytes(tensor, fmt)
        self._copies: dict[Any, Any] = {}  # x's torch device -> the bytes there

    def __repr__(self) -> str:
        return f"GGUFLinear({self.name!r}, {self.qtype}, in_features={self.in_features}, out_features={self.out_features})"

    def to(self, device: Any) -> GGUFLinear:
        """The bytes on a kaio device (a ``kaio.Device`` or its name), uploaded once: calls
        with Buffers then read them there."""
        from kaio.runtime.device import Device

        dev = Device(device)
        self.weight = dev.alloc_from(np.ascontiguousarray(self.weight) if isinstance(self.weight, np.ndarray) else self.weight.to_host())
        self._copies.clear()
        return self

    def weight_for(self, x: Any) -> Any:
        """The bytes in the kind ``x`` is (a torch tensor on x's device, copied once)."""
        if type(x).__module__.startswith("torch") and isinstance(self.weight, np.ndarray):
            import torch

            if x.device not in self._copies:
                self._copies[x.device] = torch.from_numpy(np.array(self.weight)).to(x.device)
            return self._copies[x.device]
        return self.weight

    def __call__(self, x: Any, *, device: Any = None) -> Any:
        return gguf_matmul(x, self.weight_for(x), self.qtype, device=device)

    def dequantize(self, *, device: Any = None) -> Any:
        """W itself, f32 (out_features, in_features), bit for bit gguf's decoding."""
        return dequantize(self.weight, self.qtype, device=device)


def gguf_linear(reader: Any, name: str | None = None) -> GGUFLinear:
    """The tensor ``name`` of a ``gguf.GGUFReader`` as a linear layer: :class:`GGUFLinear`."""
    return GGUFLinear(reader, name)
