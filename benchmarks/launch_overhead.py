"""Host time per launch of a 4-argument kernel: ``python benchmarks/launch_overhead.py``.

On a GPU (the default device when the CUDA driver loads):
  * wall clock: 10,000 back-to-back launches of a tiny kernel, timed on the host until the last
    one is queued, then until the GPU is idle; per launch.
  * CUDA events around the same 10,000 launches: GPU time per launch (bounded below by the
    kernel itself; equal to the host time when the host is the bottleneck).
  * the same launch with torch CUDA tensors, with CuPy arrays (if installed), a Triton kernel of
    the same work (if installed), and a torch op of the same size (``torch.add(out=)``).
  * library ops (matmul, decode attention, rms_norm) on tiny torch tensors beside torch's own:
    host time per call, what bounds an op whose kernel takes less.
On the simulator (no driver, or KAIO_DEVICE=sim) there is no GPU: the table reports the host-side
path alone (argument binding, checking and packing), with the simulator's execution replaced by a
no-op, and, separately, what one real simulated launch of the same kernel costs. torch tensors
there are CPU tensors, which the simulator stages through its own memory (a copy in and out per
launch), so the table also times the checks a GPU launch makes on a tensor (dtype, device,
contiguity, data_ptr) on their own.

Options: ``--launches N`` (default 10000), ``--repeats R`` (best of R, default 5).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kaio
from kaio.hwcheck.markers import running
from kaio.prelude import Array, MutArray, block_dim_x, block_idx_x, f32, thread_idx_x, u32


try:  # Triton's version of the same kernel, for comparison on a GPU
    import triton
    import triton.language as tl

    @triton.jit
    def triton_add(a, b, c, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(c + i, tl.load(a + i, mask=i < n) + tl.load(b + i, mask=i < n), mask=i < n)

except ImportError:
    triton_add = None


def optional(name: str) -> Any:
    """The module ``name`` if it is installed, else None."""
    try:
        return __import__(name)
    except ImportError:
        return None


@kaio.gpu_kernel(block_size=128)
def add4(a: Array[f32], b: Array[f32], c: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        c[i] = a[i] + b[i]


def per_call_us(fn: Callable[[], None], launches: int, repeats: int) -> tuple[float, float]:
    """(best, median) microseconds per call over ``repeats`` rounds of ``launches`` calls."""
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(launches):
            fn()
        rounds.append((time.perf_counter() - start) / launches * 1e6)
    return min(rounds), statistics.median(rounds)


def row(what: str, best: float, median: float, unit: str = "us") -> str:
    return f"| {what:<58} | {best:>10.2f} | {median:>10.2f} | {unit:<4} |"


def header(title: str) -> list[str]:
    return [
        title,
        "",
        f"| {'measured':<58} | {'best':>10} | {'median':>10} | unit |",
        f"|{'-' * 60}|{'-' * 12}|{'-' * 12}|------|",
    ]


def bench_simulator(dev: kaio.Device, launches: int, repeats: int) -> list[str]:
    from kaio.targets.sim.simulator import SimModule

    running("add4 on the simulator")
    n = 1024
    a, b = dev.alloc_from(np.ones(n, np.float32)), dev.alloc_from(np.ones(n, np.float32))
    c = dev.zeros(n, np.float32)
    add4[kaio.cdiv(n, 128)](a, b, c, n)  # compile, load, build the launch path; really runs
    assert (c.to_host() == 2).all()
    real = kaio.bench(lambda: add4[8](a, b, c, n), warmup=20, rep=200, device=dev)

    # Replace the simulator's execution (not the packing, which happens before it) with a no-op,
    # and rebuild the launch path so it captures the stub.
    received: list[object] = [None]
    original = SimModule.launch

    def stub(
        self: object,
        name: str,
        grid: object,
        block: object,
        params: object,
        shared_bytes: int = 0,
        profile: bool = False,
    ) -> None:
        received[0] = params

    SimModule.launch = stub  # type: ignore[method-assign,assignment]
    try:
        add4._launcher = None
        add4[8](a, b, c, n)
        assert isinstance(received[0], tuple) and len(received[0]) == 4, (
            "the stub sees 4 packed parameters"
        )
        spec = add4._launcher._last[2]
        bound = add4[8]
        rows = header(
            f"kaio launch overhead on {dev!r} ({dev.name}): HOST PATH ONLY, simulator execution "
            f"stubbed out; {launches} launches, best/median of {repeats}"
        )
        rows.append(
            row(
                "kernel[grid](a, b, c, n): bind + check + pack",
                *per_call_us(lambda: add4[8](a, b, c, n), launches, repeats),
            )
        )
        rows.append(
            row(
                "bound = kernel[grid]; bound(a, b, c, n)",
                *per_call_us(lambda: bound(a, b, c, n), launches, repeats),
            )
        )
        rows.append(
            row(
                "kernel.launch(dev, a, b, c, n, grid=8)",
                *per_call_us(lambda: add4.launch(dev, a, b, c, n, grid=8), launches, repeats),
            )
        )
        rows.append(
            row(
                "argument checks alone (4 checkers, fused)",
                *per_call_us(lambda: spec.check_all((a, b, c, n), None, []), launches, repeats),
            )
        )
        values = spec.check_all((a, b, c, n), None, [])
        rows.append(
            row(
                "checks + simulator parameter packing (run with stub)",
                *per_call_us(
                    lambda: spec.run(
                        (8, 1, 1), (128, 1, 1), 0, None, spec.check_all((a, b, c, n), None, [])
                    ),
                    launches,
                    repeats,
                ),
            )
        )
        rows.append(
            row(
                "packing alone (4 struct packs)",
                *per_call_us(
                    lambda: spec.run((8, 1, 1), (128, 1, 1), 0, None, values), launches, repeats
                ),
            )
        )
        rows += torch_rows_simulator(launches, repeats)
    finally:
        SimModule.launch = original  # type: ignore[method-assign]
        add4._launcher = None
    rows.append(
        row("one real simulated launch, 1024 threads (kaio.bench)", real.min, real.median, "ms")
    )
    cupy = "installed but needs a GPU" if optional("cupy") else "not installed"
    rows.append(f"| {'CuPy arrays: ' + cupy:<58} | {'-':>10} | {'-':>10} |      |")
    tri = "installed but needs a GPU" if triton_add is not None else "not installed"
    rows.append(
        f"| {'Triton kernel of the same work: ' + tri:<58} | {'-':>10} | {'-':>10} |      |"
    )
    rows += ["", "GPU: not measured (no CUDA driver on this machine / simulator selected)."]
    return rows


def torch_rows_simulator(launches: int, repeats: int) -> list[str]:
    """torch rows on the simulator (inside the stubbed section): CPU tensors, staged; the GPU
    checks of a tensor alone; a torch op of the same size, really run on the CPU."""
    torch = optional("torch")
    if torch is None:
        return [f"| {'torch: not installed':<58} | {'-':>10} | {'-':>10} |      |"]
    from kaio.runtime import tensors

    n = 1024
    ta, tb, tc = torch.ones(n), torch.ones(n), torch.zeros(n)
    rows = [
        row(
            "torch CPU tensors: kernel[grid](a, b, c, n), staged copies",
            *per_call_us(lambda: add4[8](ta, tb, tc, n), launches, repeats),
        )
    ]

    class AsIfGpu:  # a GPU device whose ordinal is CPU tensors' get_device() (-1)
        is_simulator = False
        ordinal = -1

    check = tensors.tensor_checker("bench", kaio.dtypes.f32, False, AsIfGpu(), 1, lambda p: p)  # type: ignore[arg-type]

    def three() -> None:
        check(ta, None, [])
        check(tb, None, [])
        check(tc, None, [])

    rows.append(
        row("torch tensor checks as on a GPU (3 tensors)", *per_call_us(three, launches, repeats))
    )
    rows.append(
        row(
            "torch.add(a, b, out=c), same size, run on the CPU",
            *per_call_us(lambda: torch.add(ta, tb, out=tc), launches, repeats),
        )
    )
    return rows


def bench_gpu(dev: kaio.Device, launches: int, repeats: int) -> list[str]:
    running("add4 with kaio Buffers")  # names the kernel if it hangs (python -m kaio.hwcheck)
    n = 1024
    a, b = dev.alloc_from(np.ones(n, np.float32)), dev.alloc_from(np.ones(n, np.float32))
    c = dev.zeros(n, np.float32)
    add4[8](a, b, c, n)
    dev.synchronize()
    rows = header(
        f"kaio launch overhead on {dev!r} ({dev.name}, {dev.arch}); "
        f"{launches} launches, best/median of {repeats}"
    )
    queued, drained, gpu_times = [], [], []
    for _ in range(repeats):
        start_event, end_event = dev.event(), dev.event()
        dev.synchronize()
        start_event.record()
        start = time.perf_counter()
        for _ in range(launches):
            add4[8](a, b, c, n)
        queued.append((time.perf_counter() - start) / launches * 1e6)
        end_event.record()
        dev.synchronize()
        drained.append((time.perf_counter() - start) / launches * 1e6)
        gpu_times.append(start_event.elapsed_ms(end_event) * 1e3 / launches)
    rows.append(
        row(
            "wall clock, host until queued: kernel[grid](a, b, c, n)",
            min(queued),
            statistics.median(queued),
        )
    )
    rows.append(
        row("wall clock, host until the GPU is idle", min(drained), statistics.median(drained))
    )
    rows.append(
        row(
            "CUDA events around the launches (GPU time per launch)",
            min(gpu_times),
            statistics.median(gpu_times),
        )
    )
    bound = add4[8]
    rows.append(
        row(
            "wall clock, pre-bound: bound(a, b, c, n)",
            *per_call_us(lambda: bound(a, b, c, n), launches, repeats),
        )
    )
    dev.synchronize()
    assert (c.to_host() == 2).all()
    rows += other_rows_gpu(dev, launches, repeats)
    return rows


def queued_us(
    dev: kaio.Device, fn: Callable[[], None], launches: int, repeats: int
) -> tuple[float, float]:
    """Host microseconds per call until queued, the device idle before each round."""
    fn()
    dev.synchronize()
    rounds = []
    for _ in range(repeats):
        dev.synchronize()
        start = time.perf_counter()
        for _ in range(launches):
            fn()
        rounds.append((time.perf_counter() - start) / launches * 1e6)
    dev.synchronize()
    return min(rounds), statistics.median(rounds)


def other_rows_gpu(dev: kaio.Device, launches: int, repeats: int) -> list[str]:
    """The same launch with torch tensors and CuPy arrays, Triton's kernel, a torch op."""
    n, rows = 1024, []
    torch = optional("torch")
    if torch is not None and torch.cuda.is_available():
        running("add4 with torch tensors, torch.add, Triton")
        ta, tb = torch.ones(n, device="cuda"), torch.ones(n, device="cuda")
        tc = torch.zeros(n, device="cuda")
        rows.append(
            row(
                "kaio, torch CUDA tensors: kernel[grid](a, b, c, n)",
                *queued_us(dev, lambda: add4[8](ta, tb, tc, n), launches, repeats),
            )
        )
        rows.append(
            row(
                "torch.add(a, b, out=c), same size",
                *queued_us(dev, lambda: torch.add(ta, tb, out=tc), launches, repeats),
            )
        )
        if triton_add is not None:
            rows.append(
                row(
                    "Triton: triton_add[(8,)](a, b, c, n, BLOCK=128)",
                    *queued_us(
                        dev, lambda: triton_add[(8,)](ta, tb, tc, n, BLOCK=128), launches, repeats
                    ),
                )
            )
        else:
            rows.append(f"| {'Triton: not installed':<58} | {'-':>10} | {'-':>10} |      |")
        torch.cuda.synchronize()
        assert bool((tc == 2).all())
        rows += library_op_rows(dev, torch, max(launches // 10, 10), repeats)
    else:
        rows.append(f"| {'torch with CUDA: not installed':<58} | {'-':>10} | {'-':>10} |      |")
    cupy = optional("cupy")
    if cupy is not None:
        running("add4 with CuPy arrays")
        ca, cb, cc = (
            cupy.ones(n, cupy.float32),
            cupy.ones(n, cupy.float32),
            cupy.zeros(n, cupy.float32),
        )
        rows.append(
            row(
                "kaio, CuPy arrays (CAI): kernel[grid](a, b, c, n)",
                *queued_us(dev, lambda: add4[8](ca, cb, cc, n), launches, repeats),
            )
        )
    else:
        rows.append(f"| {'CuPy: not installed':<58} | {'-':>10} | {'-':>10} |      |")
    return rows  # fmt: skip


def library_op_rows(dev: kaio.Device, torch: Any, calls: int, repeats: int) -> list[str]:
    """Host time per call of library ops on tiny torch CUDA tensors (the GPU's part is a few
    microseconds), beside torch's own op: what bounds an op whose kernel is shorter."""
    from kaio.ops_library import attention, matmul, rms_norm

    half = dict(device="cuda", dtype=torch.float16)
    a, b = torch.randn(128, 128, **half), torch.randn(128, 128, **half)
    q, kv = torch.randn(1, 8, 1, 64, **half), torch.randn(1, 8, 256, 64, **half)
    x, w = torch.randn(16, 1024, **half), torch.randn(1024, **half)
    cases = [
        ("kaio matmul(a, b), 128^3 f16", lambda: matmul(a, b)),
        ("torch.matmul(a, b), same", lambda: torch.matmul(a, b)),
        ("kaio attention decode, 8 heads, 256 keys", lambda: attention(q, kv, kv)),
        ("torch SDPA, same", lambda: torch.nn.functional.scaled_dot_product_attention(q, kv, kv)),
        ("kaio rms_norm(x, w), (16, 1024) f16", lambda: rms_norm(x, w)),
        ("torch rms_norm, same", lambda: torch.nn.functional.rms_norm(x, (1024,), w)),
    ]
    rows = []
    for what, fn in cases:
        running(f"library op host time: {what}")
        try:
            rows.append(row(f"{what} (host, queued)", *queued_us(dev, fn, calls, repeats)))
        except Exception as exc:  # a row that cannot run says why; the table still prints
            rows.append(f"| {what + ': ' + type(exc).__name__ + ': ' + str(exc)[:60]:<58} | {'-':>10} | {'-':>10} |      |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    dev = kaio.Device()
    if dev.is_simulator:
        rows = bench_simulator(dev, args.launches, args.repeats)
    else:
        rows = bench_gpu(dev, args.launches, args.repeats)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
