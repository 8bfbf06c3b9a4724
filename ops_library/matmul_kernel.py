"""The matmul kernel: a tile kernel, ``C = act(alpha * A @ B + beta * C + bias)``.

One program computes a BM x BN tile of C, walking K in BK steps; programs walk C in groups of
GROUP tile-rows (Triton's grouped ordering) so programs that run together share A and B tiles
in L2. The epilogue (scale, C update, bias, activation, cast) is fused: C is written once.

Split-K (``SPLIT_K`` > 1, for problems with too few C tiles to fill the GPU): program
(tile, s) of a 2-D grid sums only the s-th of SPLIT_K chunks of K (each a whole number of BK
steps) and writes its raw f32 sums to rows ``s * m ..`` of a workspace (the kernel is launched
with ``c`` = workspace, alpha 1, beta 0, no bias, no activation); :func:`splitk_reduce_kernel`
then adds the SPLIT_K partial tiles in order (deterministic: no atomics) and applies the same
epilogue (:func:`epilogue`).
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
from kaio.runtime.workspace import workspace

SCALED, HAS_C, HAS_BIAS = 1, 2, 4  # the epilogue's terms (bits of TERMS)
INPUT_TYPES = (dtypes.f16, dtypes.bf16, dtypes.f32)
OUTPUT_TYPES = (dtypes.f32, dtypes.f16, dtypes.bf16)
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "silu": 3}
REDUCE_TILE = (32, 128)  # the split-K reduction's tile: 4 warps, 32 f32 per thread


@kaio.device
def activate(x: f32, ACT: i32) -> f32:  # noqa: N803
    """The fused activation (ACT: 0 none, 1 relu, 2 gelu in tanh form, 3 silu); ACT is a
    compile-time constant at every call, so only its branch is compiled."""
    if ACT == 1:
        return max(x, 0.0)
    elif ACT == 2:
        return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    elif ACT == 3:
        return x / (1.0 + exp(-x))
    return x


@kaio.device
def epilogue(acc: f32, c: f32, bias: f32, alpha: f32, beta: f32, ACT: i32, TERMS: i32) -> f32:  # noqa: N803
    """``act(alpha * acc + beta * c + bias)``, elementwise (lifted over tiles). TERMS says which
    terms a launch has (bits: SCALED alpha != 1, HAS_C beta != 0, HAS_BIAS); like ACT it is a
    compile-time constant at every call, so ``act(acc)`` is all a plain product computes (no
    multiply by 1, no C read to multiply by 0, no add of a zero bias)."""
    x = acc
    if TERMS & SCALED != 0:
        x = alpha * x
    if TERMS & HAS_C != 0:
        x = x + beta * c
    if TERMS & HAS_BIAS != 0:
        x = x + bias
    return activate(x, ACT)


@cache
def matmul_tile_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType, BIAS: dtypes.ScalarType) -> Any:  # noqa: N803
    """The tile kernel for one (input, output, bias) type triple."""

    @kaio.tile_kernel(num_warps=4, num_stages=3)
    def matmul(a: Array[IN], b: Array[IN], c: MutArray[OUT], bias: Array[BIAS],
               m: i32, n: i32, k: i32, alpha: f32, beta: f32,
               BM: kaio.constexpr = 128, BN: kaio.constexpr = 128, BK: kaio.constexpr = 32,
               GROUP: kaio.constexpr = 8, BASE_A: kaio.constexpr = 16, BASE_B: kaio.constexpr = 16,
               BASE_C: kaio.constexpr = 16, TERMS: kaio.constexpr = SCALED | HAS_C, ACT: kaio.constexpr = 0,
               SPLIT_K: kaio.constexpr = 1):  # fmt: skip
        a, b, c = kt.multiple_of(a, BASE_A), kt.multiple_of(b, BASE_B), kt.multiple_of(c, BASE_C)
        # which tile of C this program owns, in grouped order
        pid = i32(kt.program_id(0))
        m0, n0 = tile_rows(pid, m, n, BM, BN, GROUP), tile_cols(pid, m, n, BM, BN, GROUP)
        k_lo, k_hi, row0 = 0, k, 0
        if SPLIT_K > 1:  # this program's chunk of K; its partial sums go to rows split * m ..
            split = i32(kt.program_id(1))
            chunk = ((k + BK - 1) // BK + SPLIT_K - 1) // SPLIT_K * BK
            k_lo = split * chunk
            k_hi = min(k, k_lo + chunk)
            row0 = split * m

        acc = kt.zeros((BM, BN), f32)
        for k0 in range(k_lo, k_hi, BK):
            acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)

        c_old, bias_row = kt.zeros((BM, BN), f32), kt.zeros((1, BN), f32)
        if TERMS & HAS_C != 0:  # rows: none where beta == 0 (0 * C must not read C: it may hold NaN)
            c_old = f32(kt.load(c, (m0, n0), (BM, BN), (m if beta != 0.0 else 0, n)))
        if TERMS & HAS_BIAS != 0:
            bias_row = kt.expand_dims(f32(kt.load(bias, (n0,), (BN,), (n,))), 0)
        out = epilogue(acc, c_old, bias_row, alpha, beta, ACT, TERMS)
        kt.store(c, (row0 + m0, n0), OUT(out), (row0 + m, n))

    return matmul


@kaio.device
def tile_rows(tile: i32, m: i32, n: i32, BM: i32, BN: i32, GROUP: i32) -> i32:  # noqa: N803
    """The first row of C tile ``tile`` in grouped order: tiles go down GROUP tile-rows before
    moving right, so programs running together share A and B tiles in L2."""
    tiles_n = (n + BN - 1) // BN
    first_m = tile // (GROUP * tiles_n) * GROUP
    group_rows = min((m + BM - 1) // BM - first_m, GROUP)
    return (first_m + tile % (GROUP * tiles_n) % group_rows) * BM


@kaio.device
def tile_cols(tile: i32, m: i32, n: i32, BM: i32, BN: i32, GROUP: i32) -> i32:  # noqa: N803
    """The first column of C tile ``tile`` in grouped order (see :func:`tile_rows`)."""
    tiles_n = (n + BN - 1) // BN
    first_m = tile // (GROUP * tiles_n) * GROUP
    group_rows = min((m + BM - 1) // BM - first_m, GROUP)
    return tile % (GROUP * tiles_n) // group_rows * BN


@cache
def persistent_matmul_tile_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType, BIAS: dtypes.ScalarType) -> Any:  # noqa: N803
    """The persistent matmul: as many programs as the GPU runs at once, each walking the C tiles
    ``pid, pid + programs, ..`` in grouped order (the tile scheduler), so the launch, the
    barriers' set-up and the ring's fill are paid once per program instead of once per tile,
    and one tile's epilogue overlaps the next one's first loads. The K loop nests in the tile
    loop: ``pipeline-tma`` carries its ring through it."""

    @kaio.tile_kernel(num_warps=8, num_stages=4)
    def persistent_matmul(a: Array[IN], b: Array[IN], c: MutArray[OUT], bias: Array[BIAS],
                          m: i32, n: i32, k: i32, alpha: f32, beta: f32,
                          BM: kaio.constexpr = 128, BN: kaio.constexpr = 128, BK: kaio.constexpr = 64,
                          GROUP: kaio.constexpr = 8, BASE_A: kaio.constexpr = 16, BASE_B: kaio.constexpr = 16,
                          BASE_C: kaio.constexpr = 16, TERMS: kaio.constexpr = SCALED | HAS_C,
                          ACT: kaio.constexpr = 0):  # fmt: skip
        a, b, c = kt.multiple_of(a, BASE_A), kt.multiple_of(b, BASE_B), kt.multiple_of(c, BASE_C)
        tiles = (m + BM - 1) // BM * ((n + BN - 1) // BN)
        pid, programs = i32(kt.program_id(0)), i32(kt.num_programs(0))
        for i in range(0, (tiles - pid + programs - 1) // programs):  # a count: an scf.for
            tile = pid + i * programs
            m0, n0 = tile_rows(tile, m, n, BM, BN, GROUP), tile_cols(tile, m, n, BM, BN, GROUP)
            acc = kt.zeros((BM, BN), f32)
            for k0 in range(0, k, BK):
                acc = kt.dot(kt.load(a, (m0, k0), (BM, BK), (m, k)), kt.load(b, (k0, n0), (BK, BN), (k, n)), acc)
            c_old, bias_row = kt.zeros((BM, BN), f32), kt.zeros((1, BN), f32)
            if TERMS & HAS_C != 0:
                c_old = f32(kt.load(c, (m0, n0), (BM, BN), (m if beta != 0.0 else 0, n)))
            if TERMS & HAS_BIAS != 0:
                bias_row = kt.expand_dims(f32(kt.load(bias, (n0,), (BN,), (n,))), 0)
            kt.store(c, (m0, n0), OUT(epilogue(acc, c_old, bias_row, alpha, beta, ACT, TERMS)), (m, n))

    return persistent_matmul


@cache
def splitk_reduce_kernel(OUT: dtypes.ScalarType, BIAS: dtypes.ScalarType) -> Any:  # noqa: N803
    """Split-K's second step: C = epilogue(sum of the SPLIT_K partial tiles, in order)."""

    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def splitk_reduce(partial: Array[f32], c: MutArray[OUT], bias: Array[BIAS], m: i32, n: i32,
                      splits: i32, alpha: f32, beta: f32, BM: kaio.constexpr = 32,
                      BN: kaio.constexpr = 128, TERMS: kaio.constexpr = SCALED | HAS_C,
                      ACT: kaio.constexpr = 0):  # fmt: skip
        m0, n0 = i32(kt.program_id(0)) * BM, i32(kt.program_id(1)) * BN
        acc = kt.zeros((BM, BN), f32)
        for s in range(splits):
            acc = acc + kt.load(partial, (s * m + m0, n0), (BM, BN), (s * m + m, n))
        c_old, bias_row = kt.zeros((BM, BN), f32), kt.zeros((1, BN), f32)
        if TERMS & HAS_C != 0:  # rows: none where beta == 0 (0 * C must not read C: it may hold NaN)
            c_old = f32(kt.load(c, (m0, n0), (BM, BN), (m if beta != 0.0 else 0, n)))
        if TERMS & HAS_BIAS != 0:
            bias_row = kt.expand_dims(f32(kt.load(bias, (n0,), (BN,), (n,))), 0)
        kt.store(c, (m0, n0), OUT(epilogue(acc, c_old, bias_row, alpha, beta, ACT, TERMS)), (m, n))

    return splitk_reduce


@cache
def configured_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType, BIAS: dtypes.ScalarType, config: MatmulConfig) -> Any:
    """The tile kernel with a config's warps, stages, register cap and pipeline (made once per
    config; the stages and the cap go on its module, as ``kaio.launch``, for the passes)."""
    kernel = (persistent_matmul_tile_kernel if config.persistent else matmul_tile_kernel)(IN, OUT, BIAS)
    warps = config.warps[0] * config.warps[1]
    kernel = kernel.with_options(num_warps=warps, num_stages=config.stages, maxnreg=config.maxnreg or None)
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
    alpha_beta: tuple[bool, bool] = (True, True)
    """Whether the epilogue multiplies by alpha and reads C: a call with alpha == 1 and beta == 0
    (a plain product) runs the kernel with neither."""

    @property
    def terms(self) -> int:
        """The epilogue's terms (:func:`epilogue`'s TERMS bits)."""
        scaled, reads_c = self.alpha_beta
        return SCALED * scaled | HAS_C * reads_c | HAS_BIAS * (self.bias_dtype is not None)

    @property
    def name(self) -> str:
        return "matmul"

    @property
    def split(self) -> bool:
        return self.config.split_k > 1

    @property
    def tile_kernel(self) -> Any:
        """The main kernel; with split-K, the one writing f32 partial sums (no epilogue)."""
        if self.split:
            return configured_kernel(self.in_dtype, dtypes.f32, dtypes.f32, self.config)
        return configured_kernel(self.in_dtype, self.out_dtype, self.bias_dtype or self.out_dtype, self.config)

    @property
    def constexprs(self) -> dict[str, Any]:
        bm, bn, bk = self.config.block
        return {
            "BM": bm, "BN": bn, "BK": bk, "GROUP": max(self.config.group, 1),
            "BASE_A": self.align[0], "BASE_B": self.align[1], "BASE_C": 16 if self.split else self.align[2],
            "TERMS": 0 if self.split else self.terms,
            "ACT": 0 if self.split else ACTIVATIONS[self.activation],
            **({} if self.config.persistent else {"SPLIT_K": self.config.split_k}),
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

    def programs(self, device: Any) -> int:
        """A persistent kernel's programs: as many as the device runs at once (by shared
        memory and threads per SM)."""
        shared = self.config.shared_bytes(self.in_dtype.nbytes)
        per_sm = min(device.shared_memory_per_block_optin // max(shared, 1), 2048 // self.config.threads)
        return device.sm_count * max(per_sm, 1)

    @property
    def grid_rule(self) -> tuple[str, ...] | None:
        """Programs of one launch as an expression of the arguments and constexprs (what
        :func:`kaio.aot.export` compiles into C; :func:`kaio.ops_library.matmul.launch` reads it
        too); None where the count depends on the device (persistent) or two kernels run
        (split-K)."""
        if self.split or self.config.persistent:
            return None
        return ("cdiv(m, BM) * cdiv(n, BN)",)

    def launch(self, tiles: int, args: tuple[Any, ...], device: Any) -> None:
        """One program per C tile (``args``: a, b, c, bias, m, n, k, alpha, beta); with split-K,
        SPLIT_K programs per tile into an f32 workspace, then the ordered reduction."""
        if not self.split:
            grid = min(tiles, self.programs(device)) if self.config.persistent else tiles
            self.tile_kernel.launch(device, *args, grid=(grid,), **self.constexprs)
            return
        a, b, c, bias, m, n, k, alpha, beta = args
        splits = self.config.split_k
        reduce = splitk_reduce_kernel(self.out_dtype, self.bias_dtype or self.out_dtype)
        bm, bn = REDUCE_TILE
        with workspace(device, (splits * m, n), "float32", like=(a, b, c)) as partial:
            self.tile_kernel.launch(device, a, b, partial, partial, m, n, k, 1.0, 0.0, grid=(tiles, splits),
                                    **self.constexprs)  # fmt: skip
            reduce.launch(device, partial, c, bias, m, n, splits, alpha, beta, grid=((m + bm - 1) // bm, (n + bn - 1) // bn),
                          BM=bm, BN=bn, TERMS=self.terms, ACT=ACTIVATIONS[self.activation])  # fmt: skip
