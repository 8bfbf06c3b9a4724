"""``kaio.ops_library.fp8_matmul``: fp8 GEMM, ``(a @ b) * scale_a * scale_b (+ bias)``, and
``quantize_fp8`` (``kaio.ops_library.quantize``), which makes its operands.

    from kaio.ops_library import fp8_matmul, quantize_fp8
    qa, sa = quantize_fp8(x)                    # per tensor: sa (1,)
    qb, sb = quantize_fp8(w_t.T.copy())         # (K, N)
    y = fp8_matmul(qa, qb, sa, sb)              # bf16 (M, N)

``a`` (M, K) and ``b`` (K, N) are e4m3 or e5m2 (one of each is fine: ``ml_dtypes.float8_e4m3fn``
/ ``float8_e5m2`` arrays, torch's ``float8_e4m3fn`` / ``float8_e5m2``); ``scale_a`` is f32 per
tensor (shape (1,) or ()) or per row (M,), ``scale_b`` per tensor or per column (N,); ``bias``
(N,) f32 or the output type. The products accumulate in f32 on fp8 tensor cores (``kt.dot`` of
fp8 tiles: ``mma.sync`` m16n8k32 e4m3/e5m2, sm_89 and newer: Ada, Hopper); NaN and e5m2
infinities propagate as the ISA says. The scales and bias apply to the f32 sum (see
``scaled_matmul``), rounded once to ``out_dtype`` ("bf16" by default, "f16" or "f32").
"""

from __future__ import annotations

from typing import Any

from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operands
from kaio.ops_library.scaled_matmul import Inputs, check, require_arch
from kaio.ops_library.scaled_matmul import run as run_scaled

from kaio import dtypes

OP = "fp8_matmul"


def input_types() -> tuple[dtypes.ScalarType, ...]:
    return (dtypes.BY_NAME["f8e4m3"], dtypes.BY_NAME["f8e5m2"])


def check_fp8(ops: Any, a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any, out_dtype: Any) -> Inputs:
    return check(OP, ops, a, b, scale_a, scale_b, bias, out_dtype, input_types(), per_tensor=True)


def run(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any = None, out_dtype: str = "bf16", device: Any = None) -> Any:
    """The op itself, without the torch custom-op routing of :func:`fp8_matmul`."""
    ops = Operands(OP, a, b, scale_a, scale_b, bias, device=device)
    inputs = check_fp8(ops, a, b, scale_a, scale_b, bias, out_dtype)
    require_arch(OP, ops.device, 89, "fp8 tensor cores (mma.sync m16n8k32 e4m3/e5m2)")
    return run_scaled(OP, ops, inputs, dtypes.f32)


def fp8_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, bias: Any = None, out_dtype: str = "bf16",
               device: Any = None) -> Any:  # fmt: skip
    """``(a @ b) * scale_a * scale_b (+ bias)`` for fp8 ``a`` (M, K) and ``b`` (K, N) with f32
    per-tensor or per-row/per-column scales (see the module doc); numpy, kaio Buffer or torch
    tensor in and out."""
    if (ops := rowops.torch_op(a, b, scale_a, scale_b, bias, device=device)) is not None:
        return ops.fp8_matmul(a, b, scale_a, scale_b, bias, out_dtype)
    return run(a, b, scale_a, scale_b, bias, out_dtype, device)
