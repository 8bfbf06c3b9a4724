"""The matmul kernel: a tile kernel, ``C = act(alpha * A @ B + beta * C + bias)``.

One program computes a BM x BN tile of C, walking K in BK steps; programs walk C in groups of
GROUP tile-rows (Triton's grouped ordering) so programs that run together share A and B tiles
in L2. The epilogue (scale, C update, bias, activation, cast) is fused: C is written once.
The tile stack does the rest: ``promote-to-shared`` stages the A and B tiles in swizzled
shared memory, ``pipeline-cp-async`` turns the K loop's loads into a cp.async ring,
``lower-to-mma-sync`` puts the dot on tensor cores (f16/bf16; f32 runs FMAs), or on sm_90a
``lower-to-wgmma`` on warpgroup tensor cores.

:class:`MatmulKernel` is one specialization (dtypes, row alignments, config, epilogue). It
speaks the compiler's protocol (``build``, ``source_key``, ``default_pipeline``, ``params``),
so ``kaio.compile(MatmulKernel(...))`` shows every stage, and it launches the tile kernel.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from dataclasses import dataclass
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.compiled import ARG_FACTS
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.pipeline import Pipeline
from kaio.prelude import Array, MutArray, exp, f32, i32, tanh

INPUT_TYPES = (dtypes.f16, dtypes.bf16, dtypes.f32)
OUTPUT_TYPES = (dtypes.f32, dtypes.f16, dtypes.bf16)
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "silu": 3}


@cache
def matmul_tile_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType, BIAS: dtypes.ScalarType) -> Any:  # noqa: N803
    """The tile kernel for one (input, output, bias) type triple."""

    @kaio.tile_kernel(num_warps=4, num_stages=3)
    def matmul(a: Array[IN], b: Array[IN], c: MutArray[OUT], bias: Array[BIAS],
               m: i32, n: i32, k: i32, alpha: f32, beta: f32,
               BM: kaio.constexpr = 128, BN: kaio.constexpr = 128, BK: kaio.constexpr = 32,
               GROUP: kaio.constexpr = 8, BASE_A: kaio.constexpr = 16, BASE_B: kaio.constexpr = 16,
               BASE_C: kaio.constexpr = 16, HAS_BIAS: kaio.constexpr = False, ACT: kaio.constexpr = 0):  # fmt: skip
        a, b, c = kt.multiple_of(a, BASE_A), kt.multiple_of(b, BASE_B), kt.multiple_of(c, BASE_C)
        # which tile of C this program owns, in grouped order
        pid = i32(kt.program_id(0))
        tiles_n = (n + BN - 1) // BN
        first_m = pid // (GROUP * tiles_n) * GROUP
        group_rows = min((m + BM - 1) // BM - first_m, GROUP)
        m0 = (first_m + pid % (GROUP * tiles_n) % group_rows) * BM
        n0 = pid % (GROUP * tiles_n) // group_rows * BN

        acc = kt.zeros((BM, BN), f32)
        for k0 in range(0, k, BK):
            acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)

        c_rows = m if beta != 0.0 else 0  # C is read only where beta != 0 (no branch: one fused epilogue)
        acc = alpha * acc + beta * f32(kt.load(c, (m0, n0), (BM, BN), (c_rows, n)))
        if HAS_BIAS:
            acc = acc + f32(kt.load(bias, (n0,), (BN,), (n,)))
        if ACT == 1:
            acc = kt.maximum(acc, 0.0)
        elif ACT == 2:  # GELU, tanh form
            acc = 0.5 * acc * (1.0 + tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)))
        elif ACT == 3:
            acc = acc / (1.0 + exp(-acc))
        kt.store(c, (m0, n0), OUT(acc), (m, n))

    return matmul


@cache
def configured_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType, BIAS: dtypes.ScalarType, config: MatmulConfig) -> Any:
    """The tile kernel with a config's warps, stages and pipeline (made once per config)."""
    kernel = matmul_tile_kernel(IN, OUT, BIAS)
    kernel = kernel.with_options(num_warps=config.warps[0] * config.warps[1], num_stages=config.stages)
    return kernel.with_pipeline(config.pipeline)


def row_alignment(leading_dim: int, address: int, elem_bytes: int) -> int:
    """Largest power of two (elements, at most 16 bytes) every row start is a multiple of."""
    align = 16 // elem_bytes
    while align > 1 and (leading_dim % align or address % (align * elem_bytes)):
        align //= 2
    return align


def base_alignment(address: int) -> int:
    """Largest power of two (bytes, at most 16) the address is a multiple of."""
    align = 16
    while align > 1 and address % align:
        align //= 2
    return align


@dataclass(frozen=True)
class MatmulKernel:
    """One specialization: dtypes, base alignments (bytes of A, B, C), config, epilogue."""

    in_dtype: dtypes.ScalarType
    out_dtype: dtypes.ScalarType
    align: tuple[int, int, int]
    config: MatmulConfig
    bias_dtype: "dtypes.ScalarType | None" = None
    activation: str | None = None
    divisible: tuple[tuple[str, int], ...] = (("m", 16), ("n", 16), ("k", 16))
    """What a compile without a launch assumes of m, n, k (a launch specializes on the real ones)."""

    @property
    def name(self) -> str:
        return "matmul"

    @property
    def tile_kernel(self) -> Any:
        return configured_kernel(self.in_dtype, self.out_dtype, self.bias_dtype or self.out_dtype, self.config)

    @property
    def constexprs(self) -> dict[str, Any]:
        bm, bn, bk = self.config.block
        return {
            "BM": bm, "BN": bn, "BK": bk, "GROUP": max(self.config.group, 1),
            "BASE_A": self.align[0], "BASE_B": self.align[1], "BASE_C": self.align[2],
            "HAS_BIAS": self.bias_dtype is not None, "ACT": ACTIVATIONS[self.activation],
        }  # fmt: skip

    # -- the compiler's protocol (kaio.compile(MatmulKernel(...)) shows every stage)

    def build(self, constexprs: dict[str, Any]) -> Any:
        return self.tile_kernel.build({**self.constexprs, ARG_FACTS: self.divisible, **constexprs})

    @property
    def params(self) -> Any:
        return self.tile_kernel.params

    @property
    def runtime_params(self) -> Any:
        return self.tile_kernel.runtime_params

    def default_pipeline(self, arch: str) -> Pipeline:
        return self.config.pipeline(arch)

    def source_key(self) -> str:
        return f"{self.tile_kernel.source_key()}|{sorted(self.constexprs.items())}|{self.divisible}"

    def launch(self, grid: int, args: tuple[Any, ...], device: Any) -> None:
        self.tile_kernel.launch(device, *args, grid=(grid,), **self.constexprs)
