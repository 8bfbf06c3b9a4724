"""Attention throughput on a GPU: kaio's FlashAttention-2 tile kernel beside torch's
``scaled_dot_product_attention`` with the FLASH and the cuDNN backends, bf16, in one run with one
timing method (CUDA events, median).

    python benchmarks/attention.py              # needs a GPU with torch
    python benchmarks/attention.py --sim-smoke  # checks the script itself on the simulator

Prefill shapes (B, H, S, D) report TFLOP/s (4 * B * H * Sq * Sk * D flops; half of it with
causal masking); the decode case (B=32, H=32, Hkv=8, Sq=1, Sk=8192, D=128) reports GB/s of
K and V read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np

import kaio
from kaio.hwcheck.markers import running
from kaio.ops_library import attention

PREFILL = [(4, 32, 4096, 128), (8, 16, 2048, 64), (16, 32, 512, 128)]
DECODE = (32, 32, 8, 1, 8192, 128)  # B, H, Hkv, Sq, Sk, D


def tflops(b: int, h: int, sq: int, sk: int, d: int, causal: bool, ms: float) -> float:
    flops = 4.0 * b * h * sq * sk * d * (0.5 if causal else 1.0)
    return flops / (ms * 1e-3) / 1e12


def time_ms(fn: Callable[[], object], dev: kaio.Device) -> float:
    return kaio.bench(fn, warmup=20, rep=100, device=dev).median


def sdpa(torch, backend: str, q, k, v, causal: bool) -> Callable[[], object] | None:  # type: ignore[no-untyped-def]
    """torch's SDPA pinned to one backend, or None where that backend refuses the inputs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    gqa = k.shape[1] != q.shape[1]

    def run() -> object:
        with sdpa_kernel(chosen):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    try:
        run()
    except RuntimeError:
        return None
    return run


def gpu(dev: kaio.Device) -> None:
    import torch

    print(f"attention, bf16, {dev!r} ({dev.name}, kaio compiles for {dev.compile_arch}): TFLOP/s (prefill) and GB/s (decode), medians; kaio autotuned")
    print(f"{'shape':34} {'causal':>6} {'kaio':>8} {'FLASH':>8} {'cuDNN':>8} {'kaio/FLASH':>10} {'max err':>8}")
    for b, h, s, d in PREFILL:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for causal in (False, True):
            running(f"attention kaio {(b, h, s, d)} causal={causal}")  # named if it hangs (kaio.hwcheck)
            o = attention(q, k, v, causal=causal, config="auto")  # tunes once, then reads the stored winner
            want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            err = float((o.float() - want.float()).abs().max())
            kaio_ms = time_ms(lambda: attention(q, k, v, causal=causal, config="auto"), dev)
            row = [tflops(b, h, s, s, d, causal, kaio_ms)]
            for backend in ("flash", "cudnn"):
                running(f"attention SDPA {backend} {(b, h, s, d)} causal={causal}")
                fn = sdpa(torch, backend, q, k, v, causal)
                row.append(tflops(b, h, s, s, d, causal, time_ms(fn, dev)) if fn else float("nan"))
            print(f"{str((b, h, s, d)):34} {causal!s:>6} {row[0]:8.1f} {row[1]:8.1f} {row[2]:8.1f} "
                  f"{row[0] / row[1]:10.2f} {err:8.1e}")  # fmt: skip
    b, h, hkv, sq, sk, d = DECODE
    q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    kv_bytes = 2 * k.numel() * k.element_size()
    running(f"attention kaio decode {DECODE}")
    attention(q, k, v, config="auto")
    kaio_ms = time_ms(lambda: attention(q, k, v, config="auto"), dev)
    row = [kv_bytes / (kaio_ms * 1e-3) / 1e9]
    for backend in ("flash", "cudnn"):
        running(f"attention SDPA {backend} decode {DECODE}")
        fn = sdpa(torch, backend, q, k, v, False)
        row.append(kv_bytes / (time_ms(fn, dev) * 1e-3) / 1e9 if fn else float("nan"))
    print(f"decode {str(DECODE):27} {'':>6} {row[0]:8.0f} {row[1]:8.0f} {row[2]:8.0f} {row[0] / row[1]:10.2f}   (GB/s)")


def sim_smoke() -> None:
    """The script's kaio path on tiny shapes on the simulator (no timing): it runs and is right."""
    dev = kaio.Device("sim")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 32, 64)).astype(np.float16)
    running("attention kaio (1, 2, 32, 64) causal=True on the simulator")
    o = attention(dev.alloc_from(q), dev.alloc_from(q), dev.alloc_from(q), causal=True).to_host()
    assert o.shape == q.shape and not np.isnan(o.astype(np.float32)).any()
    print("attention benchmark: simulator smoke run ok (no timings on the simulator)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim-smoke", action="store_true")
    args = parser.parse_args()
    if args.sim_smoke:
        sim_smoke()
        return
    dev = kaio.Device()
    if dev.is_simulator:
        print("no GPU: attention throughput needs one (try --sim-smoke to check the script)")
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("torch is needed for the comparison: pip install torch")
    gpu(dev)


if __name__ == "__main__":
    main()
