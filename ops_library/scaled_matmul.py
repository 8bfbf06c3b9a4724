"""The scaled matmul shared by ``int8_matmul`` and ``fp8_matmul``: ``(A @ B) * scale_a[:, None] *
scale_b[None, :] (+ bias)`` with 8-bit A (M, K) and B (K, N).

The K loop is a plain tile matmul whose ``kt.dot`` runs on 8-bit tensor cores (``mma.sync``
m16n8k32: s8/u8 into an exact i32 accumulator, wrapping modulo 2^32 as the hardware does, or
e4m3/e5m2 into f32); the epilogue converts the accumulator to f32, multiplies by the row and the
column scale (in that order, each product rounded to f32), adds the bias and rounds once to the
output type. A scale is per row/column or per tensor (one value): the kernel reads
``scale[i * STEP]`` with STEP 1 or 0, so both are the same gather.

B (K, N) may be row-major or column-major (the transpose of a row-major (N, K) array, as
``torch._scaled_mm`` takes it: ``w.T`` of a linear layer's weight). Column-major is what 8-bit
tensor cores read (K-major B columns): ``ldmatrix`` on sm_80/89, and wgmma on sm_90a for tiles
of 64 rows. A row-major B's fragments are gathered byte by byte from shared memory (see
``passes/to_ptx/mma_sync.py``) and it stays on ``mma.sync``.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTargetError, KaioTypeError, KaioValueError
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, f32, i32

OUT_TYPES = {"f16": dtypes.f16, "bf16": dtypes.bf16, "f32": dtypes.f32}


@cache
def scaled_matmul_kernel(A: dtypes.ScalarType, B: dtypes.ScalarType, ACC: dtypes.ScalarType,
                         OUT: dtypes.ScalarType, BIAS: dtypes.ScalarType) -> Any:  # fmt: skip
    """The tile kernel for one (A, B, accumulator, output, bias) type tuple."""

    @kaio.tile_kernel(num_warps=4, num_stages=3)
    def scaled_matmul(a: Array[A], b: Array[B], scale_a: Array[f32], scale_b: Array[f32], bias: Array[BIAS],
                      y: MutArray[OUT], m: i32, n: i32, k: i32,
                      BM: kaio.constexpr = 64, BN: kaio.constexpr = 128, BK: kaio.constexpr = 64,
                      SA_STEP: kaio.constexpr = 1, SB_STEP: kaio.constexpr = 1, HAS_BIAS: kaio.constexpr = False,
                      B_K_MAJOR: kaio.constexpr = False):  # fmt: skip
        m0, n0 = i32(kt.program_id(1)) * BM, i32(kt.program_id(0)) * BN
        acc = kt.zeros((BM, BN), ACC)
        for k0 in range(0, k, BK):
            if B_K_MAJOR:  # b holds B^T, (N, K) row-major
                b_tile = kt.trans(kt.load(b, (n0, k0), (BN, BK), (n, k)))
            else:
                b_tile = kt.load(b, (k0, n0), (BK, BN), (k, n))
            acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), b_tile, acc)
        rows, cols = m0 + kt.arange(BM), n0 + kt.arange(BN)
        sa = kt.expand_dims(kt.load(scale_a, rows * SA_STEP, rows < m), 1)  # STEP 0: the one scale
        sb = kt.expand_dims(kt.load(scale_b, cols * SB_STEP, cols < n), 0)
        out = f32(acc) * sa * sb
        if HAS_BIAS:
            out = out + kt.expand_dims(f32(kt.load(bias, (n0,), (BN,), (n,))), 0)
        kt.store(y, (m0, n0), OUT(out), (m, n))

    return scaled_matmul


@dataclass(frozen=True)
class Inputs:
    """A call's checked operands (bias: None when absent), sizes and output type."""

    a: Operand
    b: Operand
    scale_a: Operand
    scale_b: Operand
    bias: Operand | None
    out: dtypes.ScalarType
    m: int
    n: int
    k: int
    b_k_major: bool  # ``b`` holds B^T (N, K) row-major: B was given column-major


def column_major(b: Any) -> bool:
    """Whether a 2-D numpy array or torch tensor is stored column-major (and not also row-major)."""
    if isinstance(b, np.ndarray):
        return b.ndim == 2 and b.flags.f_contiguous and not b.flags.c_contiguous
    is_contiguous = getattr(b, "is_contiguous", None)
    if is_contiguous is None or getattr(b, "dim", lambda: 0)() != 2:
        return False
    return not is_contiguous() and b.t().is_contiguous()  # type: ignore[no-any-return]


def _scale(op: str, ops: Any, name: str, value: Any, length: int, what: str, per_tensor: bool) -> Operand:
    o = ops.take(name, value)
    shapes = [(length,)] + ([(1,), ()] if per_tensor else [])
    if o.dtype != dtypes.f32 or o.shape not in shapes:
        allowed = " or ".join(str(s) for s in shapes)
        raise KaioTypeError(f"{op}: `{name}` must be f32 of shape {allowed} (one scale per {what}), got {o.dtype.name} {o.shape}")
    return o


def check(op: str, ops: Any, a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any, out_dtype: Any,
          inputs: tuple[dtypes.ScalarType, ...], per_tensor: bool) -> Inputs:  # fmt: skip
    """The operands the op requires, or an error naming the argument and the rule (``ops``: an
    ``Operands``, or ``torch_checks.TensorMetadata`` for a fake call)."""
    names = "/".join(t.name for t in inputs)
    if out_dtype not in OUT_TYPES:
        raise KaioValueError(f"{op}: `out_dtype` must be one of {', '.join(repr(t) for t in OUT_TYPES)}, got {out_dtype!r}")
    k_major = column_major(b)
    oa, ob = ops.take("a", a), ops.take("b", b.T if k_major else b)
    for name, o in (("a", oa), ("b", ob)):
        if o.dtype not in inputs or len(o.shape) != 2:
            raise KaioTypeError(f"{op}: `{name}` must be a 2-D {names} array, got {o.dtype.name} {o.shape}")
    (m, k), (k2, n) = oa.shape, (ob.shape[::-1] if k_major else ob.shape)
    if k != k2:
        raise KaioValueError(f"{op}: `a` is (M, K) = {oa.shape} and `b` is (K, N) = {(k2, n)}: K differs")
    osa = _scale(op, ops, "scale_a", scale_a, m, "row of a", per_tensor)
    osb = _scale(op, ops, "scale_b", scale_b, n, "column of b", per_tensor)
    obias = None
    out = OUT_TYPES[out_dtype]
    if bias is not None:
        obias = ops.take("bias", bias)
        if obias.shape != (n,) or obias.dtype not in (dtypes.f32, out):
            raise KaioTypeError(f"{op}: `bias` must be f32 or {out.name} of shape ({n},), got {obias.dtype.name} {obias.shape}")
    if any(size >= 2**31 for size in (m * k, k * n, m * n)):
        raise KaioValueError(f"{op}: arrays must have fewer than 2**31 elements")
    return Inputs(oa, ob, osa, osb, obias, out, m, n, k, k_major)


def require_arch(op: str, device: Any, min_sm: int, feature: str) -> None:
    """A KaioTargetError unless the device's arch has ``feature`` (sm ``min_sm`` on)."""
    from kaio.targets.ptx.arch import get_arch

    arch = get_arch(device.arch)
    if arch.sm < min_sm:
        raise KaioTargetError(f"{op}: {feature}", min_sm, arch.name)


def block_m(m: int) -> int:
    """Few rows (a decode step) take the smallest tile a tensor-core dot has."""
    return 16 if m <= 16 else 32 if m <= 32 else 64


def run(op: str, ops: Operands, a: Inputs, acc: dtypes.ScalarType) -> Any:
    """Launch the kernel on checked inputs; the result has the inputs' kind."""
    oy = ops.output((a.m, a.n), a.out)
    if a.m and a.n:  # K = 0 runs too: no K steps, y = bias (or 0)
        bias = a.bias or a.scale_a  # a stand-in the kernel does not read
        kernel = scaled_matmul_kernel(a.a.dtype, a.b.dtype, acc, a.out, bias.dtype)
        bm, bn = block_m(a.m), 128
        kernel.launch(ops.device, a.a.value, a.b.value, a.scale_a.value, a.scale_b.value, bias.value, oy.value,
                      a.m, a.n, a.k, grid=(math.ceil(a.n / bn), math.ceil(a.m / bm)), BM=bm, BN=bn, BK=64,
                      SA_STEP=int(a.scale_a.shape == (a.m,)), SB_STEP=int(a.scale_b.shape == (a.n,)),
                      HAS_BIAS=a.bias is not None, B_K_MAJOR=a.b_k_major)  # fmt: skip
    return ops.result(oy)
