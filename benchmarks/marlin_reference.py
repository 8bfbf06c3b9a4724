"""vLLM's Marlin W4A16 GEMM, compiled from vLLM's public source for kaio's ``w4a16_matmul`` shapes.

    python benchmarks/marlin_reference.py    # registers, spills, SASS of Marlin's k-loop per warp

What is compiled: the ``Marlin<...>`` template of ``csrc/quantization/marlin/marlin_template.h``
in the vLLM 0.34.0 sdist (``cuda_sources.VLLM``, fetched and unpacked at benchmark time),
explicitly instantiated as ``generate_kernels.py`` writes its ``sm80_kernel_*.cu`` files, with
the template arguments that ``marlin_mm`` in ``marlin.cu`` (``determine_exec_config`` and its
thread-config tables) picks for the benchmark's work -- K = N = 4096, M = 1 or 64, groups of
128, f16 activations, scales and output -- on an A100 (sm_80, 108 SMs) or an H100 SXM (sm_90a,
132 SMs). The weights are ``vllm::kU4``, int4 with per-group zero points: the type vLLM runs
Marlin with when a checkpoint has zero points (``query_marlin_supported_quant_types(has_zp=True)``)
and kaio's ``qzeros`` work; symmetric GPTQ's ``kU4B8`` (bias 8, no zero points) does less.
nvcc compiles that one translation unit to PTX; kaio's ptxas wheel assembles it.

The figure, as for kaio's rows in ``benchmarks/quantized.py``: SASS instructions of one trip of
the main loop per warp, times the warps, over the packed weight bytes that trip consumes. A trip
of Marlin's ``while (slice_iters)`` loop is ``stages`` k-tiles (:func:`weight_bytes_per_trip`);
:func:`k_loop` cuts its hot path out of the SASS, because ``FunctionReport.main_loop()`` picks a
lock spin loop of the cross-CTA reduction instead (the k-loop is not innermost: the slice
epilogue with those loops is laid out inside it).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))  # cuda_sources, beside this file
from cuda_sources import VLLM, Unavailable, nvcc_ptx, source_tree

if TYPE_CHECKING:
    from kaio.targets.ptx.sass import FunctionReport, Instruction

K = N = 4096
GROUP = 128
# marlin_mm's inputs that depend on the GPU: SMs and cudaDevAttrMaxSharedMemoryPerBlockOptin
GPUS = {"sm_80": ("A100", 108, 166912), "sm_90a": ("H100 SXM", 132, 232448)}
# vLLM builds its f16 Marlin kernels for "8.0+PTX" only (CMakeLists.txt, MARLIN_ARCHS), so on
# Hopper the driver compiles the compute_80 PTX: that PTX is what is assembled for sm_90a too.
PTX_ARCH = "sm_80"


@dataclass(frozen=True)
class MarlinConfig:
    """The template arguments of ``Marlin<...>`` after the type ids (marlin_template.h)."""

    b_type: str  # vllm::kU4 (zero points) or vllm::kU4B8 (GPTQ symmetric, bias 8)
    threads: int
    thread_m_blocks: int
    thread_n_blocks: int
    thread_k_blocks: int
    m_block_size_8: bool
    stages: int
    group_blocks: int
    is_zp_float: bool

    def template_args(self) -> str:
        f16, b = "vllm::kFloat16.id()", f"vllm::{self.b_type}.id()"
        flag = lambda v: "true" if v else "false"  # noqa: E731
        return (f"{f16}, {b}, {f16}, {f16}, {self.threads}, {self.thread_m_blocks}, {self.thread_n_blocks}, "
                f"{self.thread_k_blocks}, {flag(self.m_block_size_8)}, {self.stages}, {self.group_blocks}, "
                f"{flag(self.is_zp_float)}")  # fmt: skip


def _cache_bytes(tk: int, tn: int, thread_m_blocks: int, stages: int, has_zp: bool) -> int:
    """marlin.cu's get_kernel_cache_size for 4-bit weights with integer zero points."""
    sh_a, sh_b = stages * thread_m_blocks * 16 * tk * 2, stages * (tk * tn // 8) * 4
    sh_red, sh_s = thread_m_blocks * 16 * (tn + 8) * 2, -(-tk // GROUP) * tn * 2 * stages
    return max(sh_b, sh_red, min(sh_b, sh_red) + tn * 2) + sh_a + sh_s + (sh_s // 4 if has_zp else 0)


def choose_config(m: int, arch: str, zero_points: bool = True) -> MarlinConfig:
    """marlin_mm's choice for an (m, K, N) call, no act_order, default thread_k = thread_n = -1."""
    if not 1 <= m <= 64:
        raise ValueError("m up to 64: one launch (marlin_mm splits larger m into 64-row launches)")
    _, sms, smem = GPUS[arch]
    stages = 4  # 2 only on Turing
    thread_m_blocks, m_block_size_8 = min(-(-m // 16), 4), m <= 8
    # (thread_k, thread_n, threads) by priority; generate_kernels.py instantiates the 256-thread
    # configs only as (128, 128) for thread_m_blocks <= 1 and (64, 256) above, which these are
    table = [(128, 128, 256), (64, 128, 128), (128, 64, 128)] if thread_m_blocks <= 1 else \
            [(64, 256, 256), (64, 128, 128), (128, 64, 128)]  # fmt: skip

    def valid(tk: int, tn: int, threads: int, limit: int) -> bool:
        return (K % tk == 0 and N % tn == 0 and min(tk, tn) >= 64 and threads >= 128
                and _cache_bytes(tk, tn, thread_m_blocks, stages, zero_points) <= limit)  # fmt: skip

    tk, tn, threads = next(c for c in table if valid(*c, smem - 512))
    # too few CTAs for the SMs: marlin_mm falls back to the narrow 128 x 64 tile
    if N // tn * -(-m // (thread_m_blocks * 16)) * 4 <= sms and valid(128, 64, 128, smem):
        tk, tn, threads = 128, 64, 128
    return MarlinConfig("kU4" if zero_points else "kU4B8", threads, thread_m_blocks, tn // 16, tk // 16,
                        m_block_size_8, stages, GROUP // 16, False)  # fmt: skip


def weight_bytes_per_trip(config: MarlinConfig) -> int:
    """Packed weight bytes one CTA consumes in one trip of the main loop.

    ``while (slice_iters) { for (pipe = 0; pipe < stages;) { ... slice_iters--; } }``: the inner
    loop is unrolled (``#pragma unroll``, so shared-memory stage offsets are static), and each
    ``pipe`` is one k-tile -- one ``fetch_to_shared`` of ``b_sh_stage`` int4 vectors, that is a
    (16 thread_k_blocks) x (16 thread_n_blocks) tile of 4-bit weights -- so a trip is ``stages``
    k-tiles of thread_k x thread_n / 2 bytes each.
    """
    return config.stages * (16 * config.thread_k_blocks) * (16 * config.thread_n_blocks) // 2


def mmas_per_trip(config: MarlinConfig) -> int:
    """m16n8k16 MMAs per warp per trip, to check that the loop cut out is one trip: with
    m_block_size_8 Marlin multiplies transposed (weights as the 16-row operand, 8 rows of A as
    the 8-column one), else each 16-row block of A meets each 8-column block of weights."""
    k16, n = config.thread_k_blocks, 16 * config.thread_n_blocks
    per_tile = k16 * n // 16 if config.m_block_size_8 else config.thread_m_blocks * k16 * n // 8
    return config.stages * per_tile // (config.threads // 32)


def marlin_reference(m: int, arch: str, zero_points: bool = True) -> tuple[str, str, int, int]:
    """(PTX, entry, threads per CTA, packed weight bytes per main-loop trip per CTA)."""
    try:
        import torch
    except ImportError as exc:
        raise Unavailable("no torch: Marlin's headers include torch/headeronly's") from exc
    csrc = source_tree(VLLM, "csrc")
    config = choose_config(m, arch, zero_points)
    # one explicit instantiation, as generate_kernels.py writes them (no host code, no launch)
    instance = f"template __global__ void Marlin<{config.template_args()}>(MARLIN_KERNEL_PARAMS);"
    source = f'#include "kernel.h"\n#include "marlin_template.h"\n\nnamespace marlin {{\n{instance}\n}}\n'
    includes = [csrc, csrc / "quantization" / "marlin", Path(torch.__file__).parent / "include"]
    ptx = nvcc_ptx(source, PTX_ARCH, includes)
    entry = re.search(r"^\.visible \.entry (\w+)\(", ptx, re.M)
    if entry is None:
        raise RuntimeError("no Marlin entry in nvcc's PTX")
    return ptx, entry.group(1), config.threads, weight_bytes_per_trip(config)


def k_loop(report: FunctionReport) -> list[Instruction]:
    """The steady-state trip of Marlin's main loop, in SASS.

    The loop with the MMAs runs from its head through the ``stages`` unrolled k-tiles to a
    forward branch (taken while ``slice_iters != 0``) over the slice epilogue (cross-CTA
    reduction with its lock loops, output, next slice) to the back edge: the trip is the
    instructions up to that branch -- the longest forward jump after the last MMA -- and those
    from its target to the back edge."""
    outer = max(report.loops, key=lambda lp: (lp.counts["mma"], -lp.depth))
    body = outer.instructions
    last_mma = max(n for n, i in enumerate(body) if i.kind == "mma")

    def jump(n: int) -> int:
        target = body[n].branch_target()
        return target - body[n].address if target is not None and target <= outer.tail else 0

    skip = max(range(last_mma, len(body)), key=jump)
    target = body[skip].address + jump(skip)
    return body[: skip + 1] + [i for i in body if i.address >= target]


COLUMNS = (("mma", ("mma",)), ("ldgsts", ("ldgsts",)), ("gmem", ("global",)),
           ("smem", ("shared", "ldsm")), ("int", ("integer",)), ("flt", ("float",)),
           ("cvt", ("convert",)), ("bar", ("barrier",)), ("tot", ("total",)))  # fmt: skip


def main() -> int:
    import time

    from kaio.targets.ptx import sass

    if not sass.tools_available():
        print("note: needs the ptxas, cuobjdump and nvdisasm wheels: pip install -e '.[test]'")
        return 0
    print(f"vLLM {VLLM.version} Marlin, int4 + zero points, g{GROUP}, f16, K=N={K}: SASS of one main-loop "
          f"trip per warp (static counts; {PTX_ARCH} PTX as vLLM ships it, ptxas wheel per arch)")  # fmt: skip
    print(f"{'shape':<16}{'config (tk x tn, threads)':<28}{'regs':>5}{'spill':>6}"
          + "".join(f"{c:>7}" for c, _ in COLUMNS) + f"{'B/trip':>8}{'instr/wB':>9}{'nvcc s':>7}")  # fmt: skip
    for arch in GPUS:
        for m in (1, 64):
            config = choose_config(m, arch)
            start = time.perf_counter()
            try:
                ptx, entry, threads, per_trip = marlin_reference(m, arch)
            except Unavailable as exc:
                print(f"note: Marlin reference unavailable: {exc}")
                return 0
            seconds = time.perf_counter() - start
            report = sass.analyze(ptx, arch)[entry]
            counts = sass.count(k_loop(report))
            assert counts["mma"] == mmas_per_trip(config), (counts["mma"], mmas_per_trip(config))
            assert counts["ldgsts"] > 0, "the k-loop fetches the next stages with cp.async"
            vals = "".join(f"{sum(counts[k] for k in keys):>7}" for _, keys in COLUMNS)
            cfg = f"{16 * config.thread_k_blocks}x{16 * config.thread_n_blocks}, {threads}" + (
                ", m8" if config.m_block_size_8 else "")
            per_byte = counts["total"] * (threads // 32) / per_trip
            print(f"M={m:<3}{arch:<11}{cfg:<28}{report.registers:>5}{report.spill_bytes:>6}{vals}"
                  f"{per_trip:>8}{per_byte:9.3f}{seconds:7.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
