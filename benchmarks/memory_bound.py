"""Memory-bound library ops on a GPU: kaio beside torch eager and a device-to-device copy of
the same bytes, at (8192, 4096) in f16 and f32, all timed in one run with one method
(``kaio.bench``: CUDA events, L2 flushed before each call, median).

    python benchmarks/memory_bound.py               # needs a GPU and torch
    python benchmarks/memory_bound.py --sim-smoke   # checks the script on the simulator (tiny)

Columns: kaio's time and bandwidth (bytes the op must move / time), torch eager's time, the
speedup over torch (torch time / kaio time), the copy's time, and kaio's share of the copy's
bandwidth (copy time / kaio time). The copy moves the same number of bytes (half read, half
written) with ``Tensor.copy_``. Without a GPU the script says so and exits 0.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kaio
from kaio import ops_library as ops
from kaio.hwcheck.bench_setup import benchmark_setup
from kaio.hwcheck.markers import running


@dataclass
class Case:
    name: str
    kaio: Callable[[], Any]
    torch: Callable[[], Any]
    nbytes: int


def cases(torch: Any, rows: int, cols: int, dtype: Any, device: str) -> list[Case]:
    F = torch.nn.functional  # noqa: N806
    eb = torch.finfo(dtype).bits // 8
    x = torch.randn(rows, cols, dtype=dtype, device=device)
    r = torch.randn(rows, cols, dtype=dtype, device=device)
    w = torch.randn(cols, dtype=dtype, device=device)
    b = torch.randn(cols, dtype=dtype, device=device)
    t = torch.randint(0, cols, (rows,), device=device)
    # rope on the same number of elements: (1, S, H, 128) with S * H * 128 = rows * cols
    d = 128
    heads = max(1, min(32, rows * cols // d))
    seq = rows * cols // (heads * d)
    q = torch.randn(1, seq, heads, d, dtype=dtype, device=device)
    angle = torch.rand(seq, d // 2, device=device) * 6
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    c4, s4 = cos[None, :, None, :], sin[None, :, None, :]

    def torch_rope() -> Any:
        x1, x2 = q[..., : d // 2], q[..., d // 2 :]
        return torch.cat((x1 * c4 - x2 * s4, x2 * c4 + x1 * s4), -1)

    def torch_add_rms() -> Any:
        h = x + r
        return F.rms_norm(h, (cols,), w, 1e-6), h

    half = cols // 2
    n = rows * cols * eb
    return [
        Case("softmax", lambda: ops.softmax(x), lambda: torch.softmax(x, -1), 2 * n),
        Case("log_softmax", lambda: ops.log_softmax(x), lambda: torch.log_softmax(x, -1), 2 * n),
        Case("layer_norm", lambda: ops.layer_norm(x, w, b), lambda: F.layer_norm(x, (cols,), w, b), 2 * n),
        Case("rms_norm", lambda: ops.rms_norm(x, w), lambda: F.rms_norm(x, (cols,), w, 1e-6), 2 * n),
        Case("add_rms_norm", lambda: ops.rms_norm(x, w, residual=r), torch_add_rms, 4 * n),
        Case("rope", lambda: ops.rope(q, cos, sin), torch_rope, 2 * q.numel() * eb),
        Case("silu_and_mul", lambda: ops.silu_and_mul(x), lambda: F.silu(x[:, :half]) * x[:, half:], n + n // 2),
        Case("gelu_and_mul", lambda: ops.gelu_and_mul(x), lambda: F.gelu(x[:, :half]) * x[:, half:], n + n // 2),
        Case("cross_entropy", lambda: ops.cross_entropy(x, t), lambda: F.cross_entropy(x, t, reduction="none"),
             n + rows * 12),  # fmt: skip
    ]


def main() -> int:
    setup = benchmark_setup(__doc__.splitlines()[0], "GPU bandwidth")
    if isinstance(setup, int):
        return setup
    args, dev, torch = setup
    rows, cols = (4, 256) if args.sim_smoke else (args.rows, args.cols)
    device = "cpu" if dev.is_simulator else f"cuda:{dev.ordinal}"
    budget = (1, 1) if dev.is_simulator else (50, 200)

    def ms(fn: Callable[[], Any]) -> float:
        return kaio.bench(fn, *budget, device=dev).median

    where = "the simulator (times are CPU time: no GPU figure)" if dev.is_simulator else f"{dev.name} ({dev.arch})"
    print(f"device: {where}; shape ({rows}, {cols}); median of kaio.bench")
    print(f"{'op':<14}{'dtype':>6}{'kaio ms':>10}{'GB/s':>9}{'torch ms':>10}{'vs torch':>10}{'copy ms':>10}{'of copy':>9}")
    for dtype in (torch.float16, torch.float32):
        for case in cases(torch, rows, cols, dtype, device):
            name = str(dtype).removeprefix("torch.").replace("float", "f")
            running(f"{case.name} {name}")  # names the kernel if it hangs (python -m kaio.hwcheck)
            src = torch.empty(case.nbytes // 2, dtype=torch.uint8, device=device)
            dst = torch.empty_like(src)
            k, t, c = ms(case.kaio), ms(case.torch), ms(lambda: dst.copy_(src))  # noqa: B023
            print(f"{case.name:<14}{name:>6}{k:10.4f}{case.nbytes / k / 1e6:9.0f}{t:10.4f}{t / k:9.2f}x"
                  f"{c:10.4f}{c / k:8.0%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
