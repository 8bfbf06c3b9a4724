"""``kaio.ops_library.int8_matmul``: W8A8 (SmoothQuant) GEMM, ``(a @ b) * scale_a[:, None] *
scale_b[None, :] (+ bias)``, and ``quantize_int8`` (``kaio.ops_library.quantize``), the dynamic
per-token quantiser that makes ``a``.

    from kaio.ops_library import int8_matmul, quantize_int8
    q, s = quantize_int8(x)                               # x (M, K) f16/bf16/f32
    y = int8_matmul(q, w_q, s, w_scale, out_dtype="bf16")  # w_q (K, N) int8, w_scale (N,)

``a`` (M, K) and ``b`` (K, N) are int8; ``scale_a`` (M,) and ``scale_b`` (N,) f32; ``bias`` (N,)
f32 or the output type. The products accumulate exactly in int32 on tensor cores (``kt.dot`` of
i8 tiles: ``mma.sync`` m16n8k32, sm_80 and newer); like the hardware and ``torch._int_mm`` the
sum wraps modulo 2^32 if it overflows (it cannot while K < 2^17). The scales and the bias are
applied to the f32 conversion of the sum (see ``scaled_matmul``), then rounded once to
``out_dtype`` ("f16", "bf16" or "f32").
"""

from __future__ import annotations

from typing import Any

from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operands
from kaio.ops_library.scaled_matmul import Inputs, check, require_arch
from kaio.ops_library.scaled_matmul import run as run_scaled

from kaio import dtypes

OP = "int8_matmul"
INPUT_TYPES = (dtypes.i8,)


def check_int8(ops: Any, a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any, out_dtype: Any) -> Inputs:
    return check(OP, ops, a, b, scale_a, scale_b, bias, out_dtype, INPUT_TYPES, per_tensor=False)


def run(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any = None, out_dtype: str = "f16", device: Any = None) -> Any:
    """The op itself, without the torch custom-op routing of :func:`int8_matmul`."""
    ops = Operands(OP, a, b, scale_a, scale_b, bias, device=device)
    inputs = check_int8(ops, a, b, scale_a, scale_b, bias, out_dtype)
    require_arch(OP, ops.device, 80, "int8 tensor cores (mma.sync m16n8k32 s8)")
    return run_scaled(OP, ops, inputs, dtypes.i32)


def int8_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, bias: Any = None, out_dtype: str = "f16",
                device: Any = None) -> Any:  # fmt: skip
    """``(a @ b) * scale_a[:, None] * scale_b[None, :] (+ bias)`` for int8 ``a`` (M, K) and ``b``
    (K, N) with f32 per-row and per-column scales (see the module doc); numpy, kaio Buffer or
    torch tensor in and out."""
    if (ops := rowops.torch_op(a, b, scale_a, scale_b, bias, device=device)) is not None:
        return ops.int8_matmul(a, b, scale_a, scale_b, bias, out_dtype)
    return run(a, b, scale_a, scale_b, bias, out_dtype, device)
