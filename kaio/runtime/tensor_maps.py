"""Building the TMA tensor maps a compile asked for (``CompiledKernel.tensor_maps``) at launch.

A pass that moves a kernel's tile copies onto TMA (``pipeline-tma``) cannot know the tensor's
address, extents or row stride: they are launch arguments. It records a *recipe* instead (which
array parameter, and the extents and strides as expressions of the scalar parameters, read off
the kernel's view) and adds a 128-byte parameter. At each launch the runtime evaluates the
recipe on the checked arguments and has the backend encode the map: ``cuTensorMapEncodeTiled``
on a GPU, kaio's own format on the simulator. The last few maps are remembered, so a loop of
launches on the same tensors encodes nothing.

An empty tensor (an extent <= 0) cannot be described, but nothing inside it can be read either:
its map describes a 16-byte zero block on the device instead, so every box reads zeros.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kaio.compiled import KernelParam, TensorMapParam
from kaio.errors import KaioLaunchError

if TYPE_CHECKING:
    from kaio.runtime.device import Device

TENSOR_MAP_BYTES = 128
MAX_DIM = 1 << 32  # elements per dimension (cuTensorMapEncodeTiled's limit)
MAX_STRIDE = 1 << 40  # bytes
_REMEMBERED = 8  # encoded maps kept per tensor-map parameter
_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,  # a paneled map's panel count: the compile proved it exact
}  # fmt: skip

Values = Sequence[Any]


def compile_expression(text: str, names: Sequence[str]) -> Callable[[Values], int]:
    """``"(k + 7) * 2"`` -> a function of the runtime values (``names`` in parameter order).
    Only integers, parameter names, ``+ - * //``, unary minus and parentheses: what a recipe holds."""

    def build(node: ast.expr) -> Callable[[Values], int]:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            value = node.value
            return lambda v: value
        if isinstance(node, ast.Name) and node.id in names:
            index = names.index(node.id)
            return lambda v: int(v[index])
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            op, left, right = _OPERATORS[type(node.op)], build(node.left), build(node.right)
            return lambda v: op(left(v), right(v))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = build(node.operand)
            return lambda v: -inner(v)
        raise ValueError(f"not a tensor-map expression: {ast.unparse(node)!r}")

    return build(ast.parse(text, mode="eval").body)


class TensorMapBuilder:
    """``builder(values) -> bytes``: one tensor-map parameter of one loaded kernel."""

    def __init__(self, kernel: str, tmap: TensorMapParam, params: Sequence[KernelParam], device: Device) -> None:
        names = [p.name for p in params]
        self.kernel, self.tmap, self.device = kernel, tmap, device
        array = params[names.index(tmap.array)]
        self.dtype = array.dtype
        self.array_index = names.index(tmap.array)
        self.dims = [compile_expression(d, names) for d in tmap.dims]
        self.strides = [compile_expression(s, names) for s in tmap.strides]
        self.remembered: dict[tuple[int, ...], bytes] = {}

    def __call__(self, values: Values) -> bytes:
        base = int(values[self.array_index])
        dims = tuple(f(values) for f in self.dims)
        strides = tuple(f(values) * self.dtype.nbytes for f in self.strides)
        key = (base, *dims, *strides)
        blob = self.remembered.get(key)
        if blob is None:
            blob = self._encode(base, dims, strides)
            if len(self.remembered) >= _REMEMBERED:
                self.remembered.pop(next(iter(self.remembered)))
            self.remembered[key] = blob
        return blob

    def _encode(self, base: int, dims: tuple[int, ...], strides: tuple[int, ...]) -> bytes:
        t = self.tmap
        if min(dims) <= 0:  # nothing to read: a map of zeros of the same box
            base, dims, strides = zero_block(self.device), (1,) * len(dims), (16,) * len(strides)
        problems = []
        if base % 16:
            problems.append(f"its address {base:#x} is not 16-byte aligned")
        if any(s % 16 or not 0 < s < MAX_STRIDE for s in strides):
            problems.append(f"its row strides {strides} (bytes) are not positive multiples of 16")
        if max(dims) > MAX_DIM:
            problems.append(f"its extents {dims} exceed 2^32")
        if problems:  # the compile proved these from the arguments' facts: the call broke them
            raise KaioLaunchError(
                f"kernel `{self.kernel}`: argument `{t.array}` cannot be read through a tensor map: "
                + "; ".join(problems)
            )
        return self.device._backend.encode_tensor_map(self.dtype, base, dims, strides, t.box, t.swizzle)


def zero_block(device: Device) -> int:
    """A 16-byte block of zeros on ``device`` (allocated once) for the maps of empty tensors."""
    block = getattr(device, "_tensor_map_zeros", None)
    if block is None:
        block = device.zeros(16, np.uint8)
        device._tensor_map_zeros = block  # type: ignore[attr-defined]
    return int(block.ptr)


def builders(kernel: str, maps: Sequence[TensorMapParam], params: Sequence[KernelParam], device: Device) -> Callable[[Values], tuple[Any, ...]]:
    """``with_maps(values)``: the checked values followed by the kernel's tensor maps."""
    if not maps:
        return tuple
    built = [TensorMapBuilder(kernel, t, params, device) for t in maps]

    def with_maps(values: Values) -> tuple[Any, ...]:
        return (*values, *(b(values) for b in built))

    return with_maps
