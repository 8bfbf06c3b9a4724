"""Quantized kernels: GGUF decode, W4A16 (GPTQ int4), int8 and fp8 GEMMs.

    python benchmarks/quantized.py               # a GPU: times; no GPU: SASS per loop trip
    python benchmarks/quantized.py --sim-smoke   # checks the GPU rows' script on the simulator (tiny)

On a GPU (``kaio.bench``: CUDA events, L2 flushed before each call, median), the rows of the
acceptance table:

- GGUF Q4_K and Q8_0 decode (M = 1, K = N = 4096): the weight bytes over the time, as a share
  of the bandwidth of a device-to-device copy (reading and writing the same number of bytes);
- W4A16 (GPTQ, groups of 128, with zero points) at M = 1 and 16, K = N = 4096: speedup over
  kaio's f16 matmul of the same shape;
- int8 (W8A8) and fp8 (e4m3) GEMMs at 4096^3: speedup over kaio's f16 GEMM, and over
  ``torch._int_mm`` / ``torch._scaled_mm``.

Without a GPU, each op's kernels at those shapes are compiled (launches are captured, not
simulated) and assembled by the ptxas wheel: registers, spills and the static SASS counts of the
main loop per warp (``kaio.targets.ptx.sass``), beside Triton's kernel for the same work where
Triton has one (a GPTQ dequantising matmul written below, the way GPTQ's Triton kernels are;
an int8 ``tl.dot``). Figures: instructions per MMA of the main loop, and for the W4A16 rows,
whose tiles are known, SASS instructions per weight byte (a loop trip's instructions times the
warps, over the bytes of packed weights it consumes). Ops not in this kaio yet are listed as
missing, never an error.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kaio
from kaio.hwcheck.markers import running

from cuda_sources import Unavailable

M_DECODE, K, N = 1, 4096, 4096
GROUP = 128


def missing(op: str) -> bool:
    import kaio.ops_library as ol

    return op not in dir(ol)


# --- without a GPU: the kernels each op launches, compiled and counted -----------------------------

_RECORDED: list[tuple[str, str, int]] | None = None  # (entry, PTX, threads per CTA) of captured launches
_PTX: dict[int, str] = {}  # id of a loaded simulator module -> its PTX (a module loads once per device)


@contextlib.contextmanager
def captured_launches(dev: Any) -> Iterator[list[tuple[str, str, int]]]:
    """Launches on the simulated ``dev`` are recorded, not run: the op compiles exactly what
    it would launch at full size, in no time (the results are garbage)."""
    global _RECORDED
    backend = dev._backend  # the simulator backend: its module loads and launchers
    load = backend.load_module

    def load_module(ptx: str) -> Any:
        module = load(ptx)
        _PTX[id(module)] = ptx
        return module

    def launcher(function: Any, params: Any, name: str) -> Callable[..., None]:
        module, entry = function
        ptx = _PTX[id(module)]

        def record(grid: Any, block: Any, shared_bytes: int, stream: Any, values: Any) -> None:
            if _RECORDED is not None:
                _RECORDED.append((entry, ptx, block[0] * block[1] * block[2]))

        return record

    _RECORDED = []
    backend.load_module, backend.launcher = load_module, launcher
    try:
        yield _RECORDED
    finally:
        del backend.load_module, backend.launcher  # the class's own again
        _RECORDED = None


@dataclass
class SassRow:
    name: str
    side: str
    registers: int
    spills: int
    counts: dict[str, int]
    warps: int
    weight_bytes_per_trip: int | None
    weights_per_trip: int | None = None  # GGUF decode: weights (elements) one trip consumes per CTA


def analyze(name: str, side: str, entry: str, ptx: str, arch: str, threads: int,
            weight_bytes_per_trip: int | None = None, weights_per_trip: int | None = None) -> SassRow:  # fmt: skip
    from kaio.targets.ptx import sass

    report = sass.analyze(ptx, arch)[entry]
    loop = report.main_loop()
    counts = loop.counts if loop is not None else report.counts
    return SassRow(name, side, report.registers, report.spill_bytes, counts, max(threads // 32, 1), weight_bytes_per_trip,
                   weights_per_trip)  # fmt: skip


def gptq_host(rng: Any, m: int, k: int, n: int, dtype: Any) -> tuple[Any, ...]:
    """Random GPTQ tensors (x, qweight, scales, qzeros) as numpy arrays."""
    import numpy as np

    words = rng.integers(0, 2**32, (k // 8, n), dtype=np.uint64).astype(np.uint32).view(np.int32)
    zeros = rng.integers(0, 2**32, (k // GROUP, n // 8), dtype=np.uint64).astype(np.uint32).view(np.int32)
    scales = (rng.random((k // GROUP, n)) * 0.01).astype(np.float16)
    return rng.standard_normal((m, k)).astype(dtype), words, scales, zeros


def gguf_decode_weights(entry: str, qtype: str) -> int | None:
    """Weights one trip of the decoding kernel's K loop consumes per CTA: each of its
    ``DECODE_COLS`` threads takes the format's ``decode_step`` elements of its row of W."""
    from kaio.ops_library.gguf_blocks import FORMATS
    from kaio.ops_library.gguf_matmul import DECODE_COLS

    return DECODE_COLS * FORMATS[qtype].decode_step if entry == "gguf_decode" else None


@dataclass
class SassCase:
    """One op call (numpy inputs, at the benchmark's shape) on a simulated ``arch``."""

    name: str
    op: str  # its name in kaio.ops_library
    arch: str
    call: Callable[[Any, Any], Any]  # (ops_library, device) -> runs the op once
    triton: Callable[[], tuple[str, str, int, int]] | None = None  # -> (PTX, entry, threads, weight bytes/trip)
    kaio_weight_bytes: Callable[[str], int | None] = lambda entry: None
    kaio_weights: Callable[[str], int | None] = lambda entry: None  # entry -> weights per trip per CTA
    reference: Callable[[str], SassRow] | None = None  # (row name) -> the reference kernel's row


def sass_cases() -> list[SassCase]:
    import numpy as np

    rng = np.random.default_rng(0)
    cases = []
    for arch in ("sm_80", "sm_90a"):
        for m in (M_DECODE, 64):
            x, qw, sc, qz = gptq_host(rng, m, K, N, np.float16)

            def w4a16(ol: Any, dev: Any, x: Any = x, qw: Any = qw, sc: Any = sc, qz: Any = qz) -> Any:
                return ol.w4a16_matmul(x, qw, sc, qz, group_size=GROUP, device=dev)

            def w4a16_bytes(entry: str, m: int = m) -> int:
                from kaio.ops_library.w4a16_matmul import choose_config

                config = choose_config(m, K, GROUP)
                return config.block_k * config.block_n // 2

            cases.append(SassCase(f"w4a16 M={m} K=N={K} g{GROUP}", "w4a16_matmul", arch, w4a16,
                                  triton_w4a16(arch, m), w4a16_bytes,
                                  reference=lambda name, m=m, arch=arch: marlin_row(name, m, arch)))  # fmt: skip
    for arch in ("sm_80", "sm_90a"):
        for qtype, block, qk in (("Q4_K", 144, 256), ("Q8_0", 34, 32)):
            weight = rng.integers(0, 256, (N, K // qk * block), dtype=np.uint8)
            x1 = rng.standard_normal((M_DECODE, K)).astype(np.float16)
            cases.append(SassCase(f"gguf {qtype} decode M=1 K=N={K}", "gguf_matmul", arch,
                                  lambda ol, dev, w=weight, q=qtype, x=x1: ol.gguf_matmul(x, w, q, device=dev),
                                  kaio_weights=lambda entry, q=qtype: gguf_decode_weights(entry, q),
                                  reference=lambda name, q=qtype, arch=arch: llama_cpp_row(name, q, arch)))  # fmt: skip
    size = 4096
    a8 = rng.integers(-128, 128, (size, size), dtype=np.int8)
    s_row, s_col = np.ones(size, np.float32), np.ones(size, np.float32)
    for arch in ("sm_80", "sm_90a"):
        cases.append(SassCase(f"int8 GEMM {size}^3", "int8_matmul", arch,
                              lambda ol, dev: ol.int8_matmul(a8, a8, s_row, s_col, device=dev),
                              triton_int8(arch)))  # fmt: skip
        cases.append(SassCase(f"int8 GEMM {size}^3, B column-major", "int8_matmul", arch,
                              lambda ol, dev: ol.int8_matmul(a8, a8.T, s_row, s_col, device=dev)))  # fmt: skip
    try:
        import ml_dtypes

        f8 = rng.standard_normal((size, size)).astype(ml_dtypes.float8_e4m3fn)
        for arch in ("sm_89", "sm_90a"):
            cases.append(SassCase(f"fp8 e4m3 GEMM {size}^3", "fp8_matmul", arch,
                                  lambda ol, dev: ol.fp8_matmul(f8, f8, s_row, s_col, device=dev)))  # fmt: skip
            cases.append(SassCase(f"fp8 e4m3 GEMM {size}^3, B column-major", "fp8_matmul", arch,
                                  lambda ol, dev: ol.fp8_matmul(f8, f8.T, s_row, s_col, device=dev)))  # fmt: skip
    except (ImportError, AttributeError):
        pass
    return cases


def sass_table() -> int:
    from kaio.targets.ptx import sass

    if not sass.tools_available():
        print("needs the ptxas, cuobjdump and nvdisasm wheels: pip install -e '.[test]'")
        return 0
    import kaio.ops_library as ol

    rows: list[SassRow] = []
    notes: list[str] = []
    for case in sass_cases():
        running(f"{case.name} {case.arch}")
        if missing(case.op):
            notes.append(f"{case.name} ({case.arch}): kaio.ops_library.{case.op} is not in this kaio yet")
        else:
            dev = kaio.Device("sim", arch=case.arch)
            try:
                with captured_launches(dev) as launches:
                    case.call(ol, dev)
            except Exception as exc:  # noqa: BLE001 (one op's failure is a line of the report, not its end)
                notes.append(f"{case.name} ({case.arch}): kaio failed: {type(exc).__name__}: {exc}")
                launches = []
            for entry, ptx, threads in dict.fromkeys(launches):
                rows.append(analyze(f"{case.name} {case.arch}", "kaio:" + entry, entry, ptx, case.arch, threads,
                                    case.kaio_weight_bytes(entry), case.kaio_weights(entry)))  # fmt: skip
        if case.triton is not None:
            try:
                ptx, entry, threads, per_trip = case.triton()
                rows.append(analyze(f"{case.name} {case.arch}", "triton", entry, ptx, case.arch, threads, per_trip))
            except ImportError:
                notes.append("triton not installed: kaio's side only")
            except Exception as exc:  # noqa: BLE001 (likewise)
                notes.append(f"{case.name} ({case.arch}): triton failed: {type(exc).__name__}: {exc}")
        if case.reference is not None:
            try:
                rows.append(case.reference(f"{case.name} {case.arch}"))
            except Unavailable as exc:
                notes.append(f"{case.name} ({case.arch}): reference skipped: {exc}")
    print_sass(rows)
    for note in dict.fromkeys(notes):
        print("note:", note)
    return 0


COLUMNS = (("mma", ("mma",)), ("cp/tma", ("ldgsts", "tma")), ("gmem", ("global",)), ("smem", ("shared", "ldsm")),
           ("int", ("integer",)), ("flt", ("float",)), ("cvt", ("convert",)), ("bar", ("barrier",)),
           ("tot", ("total",)))  # fmt: skip


def print_sass(rows: list[SassRow]) -> None:
    print("SASS of the main loop per warp (static counts; ptxas wheel): no GPU, so no times")
    head = f"{'kernel':<38}{'side':<28}{'regs':>5}{'spill':>6}" + "".join(f"{c:>7}" for c, _ in COLUMNS)
    print(head + f"{'instr/MMA':>10}{'instr/wB':>9}{'instr/256w':>11}")
    for r in rows:
        vals = "".join(f"{sum(r.counts[k] for k in keys):>7}" for _, keys in COLUMNS)
        per_mma = f"{r.counts['total'] / r.counts['mma']:10.1f}" if r.counts["mma"] else f"{'-':>10}"
        per_byte = (f"{r.counts['total'] * r.warps / r.weight_bytes_per_trip:9.3f}"
                    if r.weight_bytes_per_trip else f"{'-':>9}")  # fmt: skip
        per_256 = f"{r.counts['total'] * r.warps * 256 / r.weights_per_trip:11.2f}" if r.weights_per_trip else f"{'-':>11}"
        print(f"{r.name:<38}{r.side[:27]:<28}{r.registers:>5}{r.spills:>6}{vals}{per_mma}{per_byte}{per_256}")


# --- Triton's kernels for the same work ----------------------------------------------------------

def _triton_compile(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], arch: str,
                    warps: int = 4, stages: int = 3) -> tuple[str, str]:  # fmt: skip
    import os

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    names = fn.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, t in signature.items() if t != "constexpr"}
    signature = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    cc = int(re.sub(r"\D", "", arch))
    compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", cc, 32), options={"num_warps": warps, "num_stages": stages})  # fmt: skip
    # the ptxas wheel accepts PTX ISA 8.8 at most; these kernels need nothing newer
    ptx = re.sub(r"^\.version \d+\.\d+$", ".version 8.7", compiled.asm["ptx"], flags=re.MULTILINE)
    return ptx, compiled.metadata.name


def _triton_kernels() -> tuple[Any, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def gptq_matmul(x_ptr, qw_ptr, s_ptr, z_ptr, y_ptr, M, N, K, G,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):  # fmt: skip
        """GPTQ's Triton matmul: row k of the weight tile reads word k // 8 (a gathered load),
        nibble k % 8, minus the zero point (stored minus one), times the group's scale."""
        pid_n, pid_m = tl.program_id(0), tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        shifts = (rk % 8) * 4
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            kk = k0 + rk
            x = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            words = tl.load(qw_ptr + (kk[:, None] // 8) * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N))
            g = k0 // G
            s = tl.load(s_ptr + g * N + rn, mask=rn < N)
            z = ((tl.load(z_ptr + g * (N // 8) + rn // 8, mask=rn < N) >> ((rn % 8) * 4)) & 0xF) + 1
            w = ((words >> shifts[:, None]) & 0xF) - z[None, :]
            acc = tl.dot(x, w.to(tl.float16) * s[None, :], acc)
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))

    @triton.jit
    def int8_matmul(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M, N, K,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):  # fmt: skip
        """W8A8: exact int32 sums of int8 products, per-row and per-column scales in the epilogue."""
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.int32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
            b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
            acc = tl.dot(a, b, acc)
        out = acc.to(tl.float32) * tl.load(sa_ptr + rm)[:, None] * tl.load(sb_ptr + rn)[None, :]
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], out.to(tl.float16))

    return gptq_matmul, int8_matmul


def triton_w4a16(arch: str, m: int) -> Callable[[], tuple[str, str, int, int]]:
    def build() -> tuple[str, str, int, int]:
        from kaio.ops_library.w4a16_matmul import choose_config

        gptq, _ = _triton_kernels()
        config = choose_config(m, K, GROUP)  # kaio's tile for the same call
        bm, bn, bk = config.block_m, config.block_n, config.block_k
        sig = {"x_ptr": "*fp16", "qw_ptr": "*i32", "s_ptr": "*fp16", "z_ptr": "*i32", "y_ptr": "*fp16",
               "M": "i32", "N": "i32", "K": "i32", "G": "i32"}  # fmt: skip
        ptx, name = _triton_compile(gptq, sig, {"BM": bm, "BN": bn, "BK": bk}, arch)
        return ptx, name, 128, bk * bn // 2

    return build


def triton_int8(arch: str) -> Callable[[], tuple[str, str, int, int]]:
    def build() -> tuple[str, str, int, int]:
        _, int8 = _triton_kernels()
        sig = {"a_ptr": "*i8", "b_ptr": "*i8", "sa_ptr": "*fp32", "sb_ptr": "*fp32", "c_ptr": "*fp16",
               "M": "i32", "N": "i32", "K": "i32"}  # fmt: skip
        ptx, name = _triton_compile(int8, sig, {"BM": 128, "BN": 128, "BK": 64}, arch, warps=8)
        return ptx, name, 256, 64 * 128

    return build


# --- the best references, compiled from their public sources (benchmarks/cuda_sources.py) ---------


def llama_cpp_row(name: str, qtype: str, arch: str) -> SassRow:
    """llama.cpp's ``mul_mat_vec_q`` for ``qtype`` at one destination column (its decode), with
    the weights of one pass of its SASS loop (ptxas unrolls the source's k-loop)."""
    from llama_cpp_mmvq import compile_reference, trips_per_pass

    from kaio.targets.ptx import sass

    ref = compile_reference(qtype, arch)
    report = sass.analyze(ref.ptx, arch)[ref.entry]
    loop = report.main_loop()
    assert loop is not None
    weights = trips_per_pass(loop, ref.blocks_per_iter) * ref.weights_per_trip
    return SassRow(name, "llama.cpp:mul_mat_vec_q", report.registers, report.spill_bytes, loop.counts,
                   ref.threads // 32, None, weights)  # fmt: skip


def marlin_row(name: str, m: int, arch: str) -> SassRow:
    """vLLM's Marlin (int4 with zero points, the tiles its host code picks for this shape): the
    steady trip of its main loop (``marlin_reference.k_loop``: the slice epilogue inside the
    loop is not a trip's work)."""
    from marlin_reference import k_loop, marlin_reference

    from kaio.targets.ptx import sass

    ptx, entry, threads, per_trip = marlin_reference(m, arch)
    report = sass.analyze(ptx, arch)[entry]
    return SassRow(name, "vllm:marlin", report.registers, report.spill_bytes, sass.count(k_loop(report)),
                   threads // 32, per_trip)  # fmt: skip


# --- on a GPU: times --------------------------------------------------------------------------------


@dataclass
class GpuRow:
    name: str
    op: str
    run: Callable[[Any, Any, Any, bool], list[str]]  # (ops_library, torch, bench, tiny) -> printed cells


def _gguf_row(qtype: str, block: int, qk: int) -> GpuRow:
    def run(ol: Any, torch: Any, ms: Any, tiny: bool) -> list[str]:
        k, n = (256, 64) if tiny else (K, N)
        device = "cpu" if tiny else "cuda"
        weight = torch.randint(0, 256, (n, k // qk * block), dtype=torch.uint8, device=device)
        if qtype == "Q8_0":  # sane f16 block scales (the first two bytes of each block)
            weight.view(n, -1, block)[:, :, :2] = torch.tensor([0x00, 0x20], dtype=torch.uint8, device=device)
        x = torch.randn(1, k, dtype=torch.float16, device=device)
        src = torch.empty(weight.numel(), dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        t, c = ms(lambda: ol.gguf_matmul(x, weight, qtype)), ms(lambda: dst.copy_(src))
        gbs, copy_gbs = weight.numel() / t / 1e6, 2 * weight.numel() / c / 1e6
        return [f"{t:.4f} ms", f"{gbs:.0f} GB/s of weights", f"{gbs / copy_gbs:.0%} of a copy's {copy_gbs:.0f} GB/s"]

    return GpuRow(f"gguf {qtype} decode M=1 K=N={K}", "gguf_matmul", run)


def _w4a16_row(m: int) -> GpuRow:
    def run(ol: Any, torch: Any, ms: Any, tiny: bool) -> list[str]:
        import numpy as np

        k, n = (256, 64) if tiny else (K, N)
        device = "cpu" if tiny else "cuda"
        x, qw, sc, qz = (torch.from_numpy(a).to(device) for a in gptq_host(np.random.default_rng(), m, k, n, np.float16))
        w16 = torch.randn(k, n, dtype=torch.float16, device=device)
        t = ms(lambda: ol.w4a16_matmul(x, qw, sc, qz, group_size=GROUP))
        f16 = ms(lambda: ol.matmul(x, w16, torch.empty(m, n, dtype=torch.float16, device=device)))
        th = ms(lambda: x @ w16)
        return [f"{t:.4f} ms", f"{f16 / t:.2f}x kaio f16 matmul ({f16:.4f} ms)", f"{th / t:.2f}x torch f16 ({th:.4f} ms)"]

    return GpuRow(f"w4a16 M={m} K=N={K} g{GROUP}", "w4a16_matmul", run)


def _gemm_row(kind: str) -> GpuRow:
    def run(ol: Any, torch: Any, ms: Any, tiny: bool) -> list[str]:
        size = 64 if tiny else 4096
        device = "cpu" if tiny else "cuda"
        ones = torch.ones(size, dtype=torch.float32, device=device)
        h = torch.randn(size, size, dtype=torch.float16, device=device)
        f16 = ms(lambda: ol.matmul(h, h, torch.empty_like(h)))
        if kind == "int8":
            a = torch.randint(-128, 128, (size, size), dtype=torch.int8, device=device)
            bt = a.t().contiguous().t()  # B column-major: the layout 8-bit wgmma reads (sm_90a)
            t, t_col = ms(lambda: ol.int8_matmul(a, a, ones, ones)), ms(lambda: ol.int8_matmul(a, bt, ones, ones))
            ref_name, ref = "torch._int_mm", (lambda: torch._int_mm(a, a))
        else:
            a = torch.randn(size, size, device=device).to(torch.float8_e4m3fn)
            bt = a.t().contiguous().t()  # _scaled_mm wants B column-major
            one = torch.ones((), device=device)
            t, t_col = ms(lambda: ol.fp8_matmul(a, a, ones, ones)), ms(lambda: ol.fp8_matmul(a, bt, ones, ones))
            ref_name, ref = "torch._scaled_mm", (lambda: torch._scaled_mm(a, bt, one, one, out_dtype=torch.bfloat16))
        t_row = t
        t = min(t, t_col)  # the faster B layout; both are printed
        cells = [f"{t:.4f} ms (B row-major {t_row:.4f}, column-major {t_col:.4f})",
                 f"{f16 / t:.2f}x kaio f16 GEMM ({f16:.4f} ms)"]  # fmt: skip
        try:
            r = ms(ref)
            cells.append(f"{r / t:.2f}x {ref_name} ({r:.4f} ms)")
        except (RuntimeError, NotImplementedError) as exc:  # not on this device or torch build
            cells.append(f"{ref_name}: unavailable ({str(exc).splitlines()[0][:60]})")
        return cells

    return GpuRow(f"{kind} GEMM 4096^3", f"{kind}_matmul", run)


GPU_ROWS = [_gguf_row("Q4_K", 144, 256), _gguf_row("Q8_0", 34, 32), _w4a16_row(1), _w4a16_row(16),
            _gemm_row("int8"), _gemm_row("fp8")]  # fmt: skip


def gpu_table(dev: Any, torch: Any, tiny: bool) -> int:
    import kaio.ops_library as ol

    budget = (1, 1) if tiny else (50, 200)

    def ms(fn: Callable[[], Any]) -> float:
        return kaio.bench(fn, *budget, device=dev).median

    where = "the simulator (CPU times, tiny shapes: a script check)" if tiny else f"{dev.name} ({dev.arch})"
    print(f"device: {where}; median of kaio.bench")
    status = 0
    for row in GPU_ROWS:
        running(row.name)
        if missing(row.op):
            print(f"{row.name:<34} kaio.ops_library.{row.op} is not in this kaio yet")
            continue
        try:
            with torch.no_grad():
                cells = row.run(ol, torch, ms, tiny)
        except kaio.KaioTargetError as exc:  # fp8 before sm_89: not this device's, not a failure
            cells = [f"not on this device: {exc}"]
        except Exception as exc:  # noqa: BLE001 (a row that fails is reported, the others still run)
            cells, status = [f"failed: {type(exc).__name__}: {exc}"], 1
        print(f"{row.name:<34} " + " | ".join(cells))
    return status


def main() -> int:
    if "--sim-smoke" not in sys.argv and kaio.Device().is_simulator:
        return sass_table()
    from kaio.hwcheck.bench_setup import benchmark_setup

    setup = benchmark_setup(__doc__.splitlines()[0], "GPU time")
    if isinstance(setup, int):
        return setup
    args, dev, torch = setup
    return gpu_table(dev, torch, args.sim_smoke)  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
