"""What a ``torch.ops.kaio`` custom op checks before it runs: one function per op, called by the
op's implementation and by its fake alike, so ``torch.compile`` (and FakeTensorMode, and
``torch.export``) refuses exactly the inputs the real op refuses, with the same kaio error.

The checks see only metadata (dtype, shape, contiguity, the scalar arguments): they take the
tensors as :class:`Operand` s through the ops' own helpers (``rows.take_float``,
``rows.check_eps``, ``matmul._check``...), with no address, so they run on fake tensors
(symbolic shapes included: a check on a size becomes a guard). What needs the data (targets
in range, ``out`` overlapping an input) is checked by the real op only.
"""

from __future__ import annotations

from typing import Any

from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operand, take_tensor

from kaio.errors import KaioTypeError


class TensorMetadata:
    """Stands in for ``Operands`` in the ops' check helpers: ``take`` checks a torch tensor's
    dtype and layout and returns its operand without reading its address."""

    def __init__(self, op: str) -> None:
        self.op = op

    def take(self, name: str, value: Any) -> Operand:
        return take_tensor(self.op, name, value, fake=True)


def take_vector(meta: TensorMetadata, op: str, name: str, value: Any, x: Operand, cols: int) -> Operand | None:
    """An optional per-column vector (a norm's weight or bias): x's type, shape ``(cols,)``."""
    if value is None:
        return None
    o = rowops.take_float(meta, op, name, value)  # type: ignore[arg-type]
    rowops.same_dtype(op, name, o, x)
    rowops.same_shape(op, name, o, (cols,))
    return o


def check_softmax(x: Any, log: bool) -> None:
    op = "log_softmax" if log else "softmax"
    ox = rowops.take_float(TensorMetadata(op), op, "x", x)  # type: ignore[arg-type]
    rowops.rows_cols(ox.shape, op)


def check_layer_norm(x: Any, weight: Any, bias: Any, eps: float) -> None:
    op = "layer_norm"
    meta = TensorMetadata(op)
    ox = rowops.take_float(meta, op, "x", x)  # type: ignore[arg-type]
    _, cols = rowops.rows_cols(ox.shape, op)
    take_vector(meta, op, "weight", weight, ox, cols)
    take_vector(meta, op, "bias", bias, ox, cols)
    rowops.check_eps(op, eps)


def check_rms_norm(x: Any, weight: Any, eps: float, residual: Any = None) -> None:
    op = "rms_norm"
    meta = TensorMetadata(op)
    ox = rowops.take_float(meta, op, "x", x)  # type: ignore[arg-type]
    _, cols = rowops.rows_cols(ox.shape, op)
    take_vector(meta, op, "weight", weight, ox, cols)
    if residual is not None:
        orr = rowops.take_float(meta, op, "residual", residual)  # type: ignore[arg-type]
        rowops.same_dtype(op, "residual", orr, ox)
        rowops.same_shape(op, "residual", orr, tuple(ox.shape))
    rowops.check_eps(op, eps)


def check_gated(x: Any, act: int) -> None:
    from kaio.ops_library.activations import SILU

    op = "silu_and_mul" if act == SILU else "gelu_and_mul"
    ox = rowops.take_float(TensorMetadata(op), op, "x", x)  # type: ignore[arg-type]
    _, cols = rowops.rows_cols(ox.shape, op)
    if cols % 2:
        raise KaioTypeError(f"{op}: the last dim of `x` must be even (gate and up halves), got shape {ox.shape}")


def check_cross_entropy(logits: Any, targets: Any) -> None:
    from kaio.ops_library.cross_entropy import TARGET_TYPES

    op = "cross_entropy"
    meta = TensorMetadata(op)
    ox = rowops.take_float(meta, op, "logits", logits)  # type: ignore[arg-type]
    ot = meta.take("targets", targets)
    if ot.dtype not in TARGET_TYPES:
        raise KaioTypeError(f"{op}: `targets` must be i32 or i64, got {ot.dtype.name}")
    if tuple(ot.shape) != tuple(ox.shape[:-1]):
        raise KaioTypeError(
            f"{op}: `targets` must have shape {tuple(ox.shape[:-1])} (the logits' without the last dim), "
            f"got {tuple(ot.shape)}"
        )
    rowops.rows_cols(ox.shape, op)


def check_rope(x: Any, cos: Any, sin: Any, layout: str | None) -> None:
    from kaio.ops_library.rope import _layout

    from kaio import dtypes

    op = "rope"
    meta = TensorMetadata(op)
    ox = rowops.take_float(meta, op, "x", x)  # type: ignore[arg-type]
    oc = rowops.take_float(meta, op, "cos", cos)  # type: ignore[arg-type]
    osn = rowops.take_float(meta, op, "sin", sin)  # type: ignore[arg-type]
    if len(ox.shape) != 4:
        raise KaioTypeError(f"rope: `x` must be 4-D, (B, S, H, D) or (B, H, S, D), got shape {tuple(ox.shape)}")
    dim = ox.shape[3]
    if dim % 2:
        raise KaioTypeError(f"rope: the head dim of `x` must be even, got {dim}")
    if len(oc.shape) != 2 or oc.shape[1] != dim // 2:
        raise KaioTypeError(f"rope: `cos` must have shape (S, {dim // 2}), got {tuple(oc.shape)}")
    rowops.same_shape(op, "sin", osn, tuple(oc.shape))
    if oc.dtype != osn.dtype:
        raise KaioTypeError(f"rope: `cos` is {oc.dtype.name} but `sin` is {osn.dtype.name}: pass one type")
    if oc.dtype not in (ox.dtype, dtypes.f32):
        raise KaioTypeError(f"rope: `cos` must be f32 or {ox.dtype.name} (x's type), got {oc.dtype.name}")
    _layout(tuple(ox.shape), oc.shape[0], layout)
    rowops.rows_cols(tuple(ox.shape), op)


def check_matmul(a: Any, b: Any, bias: Any, activation: str | None) -> None:
    from kaio.ops_library.matmul import _check, _check_epilogue

    meta = TensorMetadata("matmul")
    oa, ob = meta.take("a", a), meta.take("b", b)
    _, n, _ = _check(oa, ob, None, None)
    _check_epilogue(oa, meta.take("bias", bias) if bias is not None else None, n, activation)
