"""Tensor-core matmul throughput on a GPU: kaio beside torch.matmul (cuBLAS) and Triton's
tutorial kernel, f16 and bf16 inputs, f32 accumulation, output in the input type (cuBLAS's
precision), square sizes 1024..8192 and skinny shapes (M <= 128, where kaio splits K), all timed
in one run with the same method (CUDA events, median).

    python benchmarks/matmul.py                 # needs a GPU; torch and triton are optional
    python benchmarks/matmul.py --sim-smoke     # checks the script itself on the simulator
    python benchmarks/matmul.py --sim-smoke --sim-arch sm_90a

kaio runs its default config, the mma.sync default (``DEFAULT_CONFIG``, the default on every
GPU before Hopper) and ``config="auto"`` (timed candidates, winner cached). On an H100 or H200
(sm_90a, its default target) the default is wgmma with TMA loads, and the table adds it warp
specialised (a TMA producer warpgroup), on cp.async instead of TMA, and the persistent config
(``persist``: a program per SM walking the C tiles).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np

import kaio
from kaio.hwcheck.markers import running
from kaio.ops_library import matmul
from kaio.ops_library.matmul_config import DEFAULT_CONFIG, WGMMA_CONFIGS

sys.path.insert(0, str(Path(__file__).resolve().parent))


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def time_ms(fn: Callable[[], object], dev: kaio.Device) -> float:
    return kaio.bench(fn, warmup=50, rep=200, device=dev).median


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    ref64 = ref.astype(np.float64)
    return float(np.linalg.norm(got.astype(np.float64) - ref64) / np.linalg.norm(ref64))


def torch_runner(a_host: np.ndarray, b_host: np.ndarray):
    """(a, b, c) as torch CUDA tensors and cuBLAS's matmul, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    a, b = torch.from_numpy(a_host.view(np.int16)).cuda(), torch.from_numpy(b_host.view(np.int16)).cuda()
    dtype = torch.float16 if a_host.dtype == np.float16 else torch.bfloat16
    a, b = a.view(dtype), b.view(dtype)
    c = torch.empty((a.shape[0], b.shape[1]), dtype=dtype, device="cuda")
    return a, b, c, (lambda: torch.matmul(a, b, out=c))


def triton_runner(a, b):
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
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device="cuda")

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_SIZE_M"]) * triton.cdiv(n, meta["BLOCK_SIZE_N"]),)

    def run():
        kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))

    return c, run


HOST_TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
SKINNY = [(64, 4096, 4096), (16, 8192, 8192), (128, 1024, 8192)]  # decode-like and deep-K shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 4096, 8192], help="square sizes")
    parser.add_argument("--dtypes", nargs="*", default=["f16", "bf16"], choices=list(HOST_TYPES))
    parser.add_argument("--no-skinny", action="store_true", help="leave out the skinny (M <= 128) shapes")
    parser.add_argument("--sim-smoke", action="store_true", help="tiny run on the simulator (checks the script)")
    parser.add_argument("--sim-arch", default="sm_80", help="the simulated GPU of --sim-smoke")
    args = parser.parse_args()

    dev = kaio.Device("sim", arch=args.sim_arch) if args.sim_smoke else kaio.Device()
    shapes = [(n, n, n) for n in args.sizes] + ([] if args.no_skinny else SKINNY)
    if args.sim_smoke:
        shapes = [(128, 128, 128), (16, 64, 1024)]
    if dev.is_simulator and not args.sim_smoke:
        print("no GPU: this benchmark measures GPU throughput (use --sim-smoke to check the script)")
        return
    print(f"device: {dev.name} ({dev.arch}, kaio compiles for {dev.compile_arch}); f32 accumulation, "
          "output in the input type; TFLOP/s (median)")  # fmt: skip
    variants: dict[str, object] = {"kaio": None, "mma.sync": DEFAULT_CONFIG, "kaio auto": "auto"}
    if dev.compile_arch == "sm_90a":
        persistent = next(c for c in WGMMA_CONFIGS if c.persistent)
        variants |= {"ws": replace(WGMMA_CONFIGS[0], warp_specialize=True), "cp.async": replace(WGMMA_CONFIGS[0], tma=False),
                     "persist": persistent}  # fmt: skip
    header = (f"{'dtype':>5} {'m':>6} {'n':>6} {'k':>6} " + " ".join(f"{v:>9}" for v in variants)
              + f" {'cuBLAS':>8} {'Triton':>8} {'kaio/cuBLAS':>12} {'kaio/Triton':>12}")  # fmt: skip
    print(header)
    rng = np.random.default_rng(0)
    for dtype in args.dtypes:
        for m, n, k in shapes:
            a_host = rng.standard_normal((m, k)).astype(HOST_TYPES[dtype])
            b_host = rng.standard_normal((k, n)).astype(HOST_TYPES[dtype])
            torch_side = None if dev.is_simulator else torch_runner(a_host, b_host)
            if torch_side is not None:
                a, b, _, cublas = torch_side
                c = torch_side[2].clone()
            else:
                a, b, cublas = dev.alloc_from(a_host), dev.alloc_from(b_host), None
                c = dev.empty((m, n), HOST_TYPES[dtype])
            where = f"{dtype} {m}x{n}x{k}"
            running(f"matmul kaio {where}")  # names the kernel if it hangs (python -m kaio.hwcheck)
            kaio_ms = time_ms(lambda: matmul(a, b, c), dev)
            got = c.float().cpu().numpy() if torch_side is not None else c.to_host()
            error = rel_error(got, a_host.astype(np.float32) @ b_host.astype(np.float32))
            results = {"kaio": tflops(m, n, k, kaio_ms)}
            for name, config in list(variants.items())[1:]:
                running(f"matmul {name} {where}")
                results[name] = tflops(m, n, k, time_ms(lambda: matmul(a, b, c, config=config), dev))
            if cublas is not None:
                running(f"cuBLAS {where}")
                results["cublas"] = tflops(m, n, k, time_ms(cublas, dev))
                triton_side = triton_runner(a, b)
                if triton_side is not None:
                    running(f"Triton {where}")
                    results["triton"] = tflops(m, n, k, time_ms(triton_side[1], dev))
            best = max(results[v] for v in variants)

            def cell(key: str) -> str:
                return f"{results[key]:8.1f}" if key in results else f"{'-':>8}"

            ratio_cublas = f"{best / results['cublas']:12.2f}" if "cublas" in results else f"{'-':>12}"
            ratio_triton = f"{best / results['triton']:12.2f}" if "triton" in results else f"{'-':>12}"
            kaio_cells = " ".join(f"{results[v]:9.1f}" for v in variants)
            print(f"{dtype:>5} {m:>6} {n:>6} {k:>6} {kaio_cells} {cell('cublas')} "
                  f"{cell('triton')} {ratio_cublas} {ratio_triton}   (kaio rel. error {error:.1e})")  # fmt: skip


if __name__ == "__main__":
    main()
