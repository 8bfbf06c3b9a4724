"""Paged decoding: the K/V bytes ``paged_attention`` loads beside the bytes the sequence lengths
need (on the simulator's count), and on a GPU the GB/s of K and V read (CUDA events, median).

    python benchmarks/paged_attention.py          # a GPU if present, else the simulator
    python benchmarks/paged_attention.py --sim    # the byte table on the simulator

Bytes loaded: the distinct global bytes of each request of the chunk kernel's K and V loads
(cp.async of f16/bf16 tiles; an e4m3 tile is loaded byte by byte, ``ld.global.u8``, into
registers), summed over requests, so a page read by two programs counts twice; sector bytes: 32
per distinct sector each request touches (coalescing: equal to the bytes when it is perfect); the
needed bytes: ``2 * sum(seq_lens) * Hkv * D * element size``. A kernel that gave each query head
its own program would read ``H / Hkv`` times that.
"""

from __future__ import annotations

import argparse
import math

import ml_dtypes
import numpy as np

import kaio
from kaio.ops_library import attention_kernel, paged_attention

# (lens, H, Hkv, D, block_size, cache type)
SIM_CASES = [
    ((200, 37, 0), 8, 2, 64, 16, "f16"),
    ((1500, 700, 1), 8, 2, 64, 16, "f16"),
    ((4096,), 32, 8, 128, 16, "f16"),
    ((4096, 333), 32, 4, 128, 128, "f16"),
    ((2000, 90), 8, 1, 128, 32, "e4m3"),
]
GPU_CASES = [((8192,) * 32, 32, 8, 128, 16, "f16"), ((8192,) * 32, 32, 8, 128, 16, "e4m3"), ((1024,) * 128, 32, 8, 128, 16, "f16")]
KV_LOADS = ("cp.async", "ld.global.u8")  # the K and V tiles' loads (the q tile and scalars: other ones)
TYPES = {"f16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn}


def make(rng: np.random.Generator, lens: tuple[int, ...], h: int, hkv: int, d: int, block_size: int, cache: str) -> tuple:
    max_blocks = max(1, max(math.ceil(n / block_size) for n in lens))
    num_blocks = len(lens) * max_blocks
    q = rng.standard_normal((len(lens), h, d)).astype(np.float16)
    k, v = (rng.standard_normal((num_blocks, block_size, hkv, d)).astype(TYPES[cache]) for _ in range(2))
    table = rng.permutation(num_blocks).reshape(len(lens), max_blocks).astype(np.int32)
    return q, k, v, table, np.array(lens, np.int32)


class _NoCombine:
    """Flash-decoding's combine made a no-op: the latest launch report is the chunk kernel's."""

    def launch(self, *args: object, **kw: object) -> None:
        pass


def sim() -> None:
    dev = kaio.Device("sim", arch="sm_89")  # e4m3 caches convert on sm_89+
    rng = np.random.default_rng(0)
    print(f"paged_attention on {dev!r}: K/V bytes loaded vs needed")
    print(f"{'seq_lens':>16} {'H':>3} {'Hkv':>3} {'D':>4} {'block':>5} {'cache':>5} {'needed':>10} {'loaded':>10} {'ratio':>6} {'sectors':>10} {'per head':>10}")
    original = attention_kernel.combine_tile_kernel
    attention_kernel.combine_tile_kernel = lambda t: _NoCombine()
    try:
        for lens, h, hkv, d, bs, cache in SIM_CASES:
            args = make(rng, lens, h, hkv, d, bs, cache)
            with dev.profiling():
                paged_attention(*args, device=dev)
            rows = dev.last_launch_report.global_memory
            kv_rows = [r for r in rows if r.text.lstrip("@%p0123456789! ").startswith(KV_LOADS)]
            loaded, sectors = sum(r.bytes for r in kv_rows), sum(32 * r.sectors for r in kv_rows)
            needed = 2 * sum(lens) * hkv * d * np.dtype(TYPES[cache]).itemsize
            label = ",".join(map(str, lens))
            print(f"{label:>16} {h:>3} {hkv:>3} {d:>4} {bs:>5} {cache:>5} {needed:>10} {loaded:>10} {loaded / needed:>6.3f} {sectors:>10} {needed * h // hkv:>10}")
    finally:
        attention_kernel.combine_tile_kernel = original


def gpu(dev: kaio.Device) -> None:
    rng = np.random.default_rng(0)
    print(f"paged_attention on {dev!r} ({dev.name}): GB/s of K and V read, medians")
    for lens, h, hkv, d, bs, cache in GPU_CASES:
        args = [dev.alloc_from(x) for x in make(rng, lens, h, hkv, d, bs, cache)]
        out = dev.alloc_from(np.zeros((len(lens), h, d), np.float16))
        ms = kaio.bench(lambda: paged_attention(*args, out=out, device=dev), warmup=20, rep=100, device=dev).median
        needed = 2 * sum(lens) * hkv * d * np.dtype(TYPES[cache]).itemsize
        print(f"B={len(lens)} len={lens[0]} H={h} Hkv={hkv} D={d} block={bs} {cache}: {ms:.3f} ms, {needed / ms / 1e6:.0f} GB/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim", action="store_true", help="the byte table on the simulator")
    dev = kaio.Device() if not parser.parse_args().sim else None
    if dev is None or dev.is_simulator:
        sim()
    else:
        gpu(dev)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
