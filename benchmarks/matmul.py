"""Tensor-core matmul throughput on a GPU: kaio beside torch.matmul (cuBLAS) and Triton's
tutorial kernel, f16 inputs, f32 accumulation, f16 output (cuBLAS HGEMM's precision), square
sizes 1024..8192, all timed in one run with the same method (CUDA events, median).

    python benchmarks/matmul.py                 # needs a GPU; torch and triton are optional
    python benchmarks/matmul.py --sim-smoke     # checks the script itself on the simulator
    python benchmarks/matmul.py --sim-smoke --sim-arch sm_90a

kaio runs its default config (on an H100, which kaio compiles for sm_90a: wgmma), the mma.sync
default (``DEFAULT_CONFIG``, the same on older GPUs) and ``config="auto"`` (timed candidates of
both kinds, winner cached).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

import kaio
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import DEFAULT_CONFIG

sys.path.insert(0, str(Path(__file__).resolve().parent))


def tflops(n: int, ms: float) -> float:
    return 2.0 * n**3 / (ms * 1e-3) / 1e12


def time_ms(fn: Callable[[], object], dev: kaio.Device) -> float:
    return kaio.bench(fn, warmup=50, rep=200, device=dev).median


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    ref64 = ref.astype(np.float64)
    return float(np.linalg.norm(got.astype(np.float64) - ref64) / np.linalg.norm(ref64))


def torch_runner(n: int, a_host: np.ndarray, b_host: np.ndarray):
    """(a, b, c) as torch CUDA tensors and cuBLAS's matmul, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    a, b = torch.from_numpy(a_host).cuda(), torch.from_numpy(b_host).cuda()
    c = torch.empty((n, n), dtype=torch.float16, device="cuda")
    return a, b, c, (lambda: torch.matmul(a, b, out=c))


def triton_runner(n: int, a, b):
    """Triton's tutorial kernel with its autotuning, or None without triton (or torch)."""
    try:
        import torch
        import triton
        import triton_tutorial
    except ImportError:
        return None
    configs = [
        triton.Config({k: v for k, v in c.items() if k.isupper()}, num_stages=c["num_stages"], num_warps=c["num_warps"])
        for c in triton_tutorial.CUDA_CONFIGS
    ]
    kernel = triton.autotune(configs=configs, key=["M", "N", "K"])(triton_tutorial.matmul_kernel)
    c = torch.empty((n, n), dtype=torch.float16, device="cuda")

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_SIZE_M"]) * triton.cdiv(n, meta["BLOCK_SIZE_N"]),)

    def run():
        kernel[grid](a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))

    return c, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--sim-smoke", action="store_true", help="tiny run on the simulator (checks the script)")
    parser.add_argument("--sim-arch", default="sm_80", help="the simulated GPU of --sim-smoke")
    args = parser.parse_args()

    dev = kaio.Device("sim", arch=args.sim_arch) if args.sim_smoke else kaio.Device()
    sizes = [128] if args.sim_smoke else args.sizes
    if dev.is_simulator and not args.sim_smoke:
        print("no GPU: this benchmark measures GPU throughput (use --sim-smoke to check the script)")
        return
    print(f"device: {dev.name} ({dev.arch}, kaio compiles for {dev.compile_arch}); f16 inputs, f32 accumulation, "
          "f16 output; TFLOP/s (median)")  # fmt: skip
    header = (f"{'n':>6} {'kaio':>8} {'mma.sync':>9} {'kaio auto':>10} {'cuBLAS':>8} {'Triton':>8} "
              f"{'kaio/cuBLAS':>12} {'kaio/Triton':>12}")  # fmt: skip
    print(header)
    rng = np.random.default_rng(0)
    for n in sizes:
        a_host = rng.standard_normal((n, n)).astype(np.float16)
        b_host = rng.standard_normal((n, n)).astype(np.float16)
        torch_side = None if dev.is_simulator else torch_runner(n, a_host, b_host)
        if torch_side is not None:
            a, b, _, cublas = torch_side
        else:
            a, b, cublas = dev.alloc_from(a_host), dev.alloc_from(b_host), None
        c = dev.empty((n, n), np.float16)
        kaio_ms = time_ms(lambda: matmul(a, b, c), dev)
        error = rel_error(c.to_host(), a_host.astype(np.float32) @ b_host.astype(np.float32))
        mma_ms = time_ms(lambda: matmul(a, b, c, config=DEFAULT_CONFIG), dev)
        auto_ms = time_ms(lambda: matmul(a, b, c, config="auto"), dev)
        results = {"kaio": tflops(n, kaio_ms), "mma": tflops(n, mma_ms), "auto": tflops(n, auto_ms)}
        if cublas is not None:
            results["cublas"] = tflops(n, time_ms(cublas, dev))
            triton_side = triton_runner(n, a, b)
            if triton_side is not None:
                results["triton"] = tflops(n, time_ms(triton_side[1], dev))
        best = max(results["kaio"], results["auto"])

        def cell(key: str) -> str:
            return f"{results[key]:8.1f}" if key in results else f"{'-':>8}"

        ratio_cublas = f"{best / results['cublas']:12.2f}" if "cublas" in results else f"{'-':>12}"
        ratio_triton = f"{best / results['triton']:12.2f}" if "triton" in results else f"{'-':>12}"
        print(f"{n:>6} {cell('kaio')} {results['mma']:9.1f} {results['auto']:10.1f} {cell('cublas')} {cell('triton')} {ratio_cublas} {ratio_triton}"
              f"   (kaio rel. error {error:.1e})")  # fmt: skip


if __name__ == "__main__":
    main()
