"""``torch.ops.kaio.int8_matmul`` / ``fp8_matmul`` / ``quantize_int8`` / ``quantize_fp8``: the
8-bit GEMMs and their quantisers as custom ops, so that ``torch.compile`` sees one opaque op
each. They have no backward (quantised inference): tensors that require grad are refused at the
call. The fakes run the real ops' checks on the tensors' metadata.
``register()`` defines the ops (``torch_registration`` runs it); importing this imports torch.
"""

from __future__ import annotations

import torch
from kaio.ops_library import quantize
from kaio.ops_library.autograd import define_op, op_device
from kaio.ops_library.fp8_matmul import OP as FP8_OP
from kaio.ops_library.fp8_matmul import check_fp8
from kaio.ops_library.fp8_matmul import run as run_fp8
from kaio.ops_library.int8_matmul import OP as INT8_OP
from kaio.ops_library.int8_matmul import check_int8
from kaio.ops_library.int8_matmul import run as run_int8
from kaio.ops_library.torch_checks import TensorMetadata
from torch import Tensor

from kaio import dtypes
from kaio.runtime import tensors


def register() -> None:
    define_op("kaio::int8_matmul", _int8_matmul, _int8_matmul_fake)
    define_op("kaio::fp8_matmul", _fp8_matmul, _fp8_matmul_fake)
    define_op("kaio::quantize_int8", _quantize_int8, _quantize_int8_fake)
    define_op("kaio::quantize_fp8", _quantize_fp8, _quantize_fp8_fake)


def _int8_matmul(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Tensor | None, out_dtype: str, *, device: str | None = None) -> Tensor:
    return run_int8(a, b, scale_a, scale_b, bias, out_dtype, op_device(device))  # type: ignore[no-any-return]


def _int8_matmul_fake(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Tensor | None, out_dtype: str, *, device: str | None = None) -> Tensor:
    checked = check_int8(TensorMetadata(INT8_OP), a, b, scale_a, scale_b, bias, out_dtype)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=tensors.torch_dtype(checked.out))


def _fp8_matmul(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Tensor | None, out_dtype: str, *, device: str | None = None) -> Tensor:
    return run_fp8(a, b, scale_a, scale_b, bias, out_dtype, op_device(device))  # type: ignore[no-any-return]


def _fp8_matmul_fake(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Tensor | None, out_dtype: str, *, device: str | None = None) -> Tensor:
    checked = check_fp8(TensorMetadata(FP8_OP), a, b, scale_a, scale_b, bias, out_dtype)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=tensors.torch_dtype(checked.out))


def _quantize_int8(x: Tensor, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    return quantize.run("quantize_int8", x, dtypes.i8, True, op_device(device))  # type: ignore[return-value]


def _quantize_int8_fake(x: Tensor, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    quantize.check_x("quantize_int8", TensorMetadata("quantize_int8"), x)
    return x.new_empty(x.shape, dtype=torch.int8), x.new_empty(x.shape[:1], dtype=torch.float32)


def _quantize_fp8(x: Tensor, per_row: bool, dtype: str, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    q_type = quantize.fp8_type("quantize_fp8", dtype)
    return quantize.run("quantize_fp8", x, q_type, per_row, op_device(device))  # type: ignore[return-value]


def _quantize_fp8_fake(x: Tensor, per_row: bool, dtype: str, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    q_type = quantize.fp8_type("quantize_fp8", dtype)
    quantize.check_x("quantize_fp8", TensorMetadata("quantize_fp8"), x)
    scale = x.new_empty(x.shape[:1] if per_row else (1,), dtype=torch.float32)
    return x.new_empty(x.shape, dtype=tensors.torch_dtype(q_type)), scale
