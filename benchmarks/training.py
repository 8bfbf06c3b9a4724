"""Training kernels on a GPU: kaio's backward ops beside torch, all timed in one run with one
method (``kaio.bench``: CUDA events, L2 flushed before each call, median).

    python benchmarks/training.py               # needs a GPU and torch
    python benchmarks/training.py --sim-smoke   # checks the script on the simulator (tiny)

Three tables:

* attention backward (dQ, dK, dV from the saved output and logsumexp) beside torch's FLASH
  backend (FlashAttention-2) timed on ``torch.autograd.grad`` of its output, at
  (4, 32, 4096, 128) bf16, causal and not; ``vs FLASH`` = FLASH time / kaio time.
* the memory-bound backwards (norms, rope, gated activations, softmax, cross-entropy) beside
  torch eager's backward of the same op, and a device-to-device copy of the bytes kaio's
  backward must move: ``of copy`` = copy time / kaio time (the share of copy bandwidth).
* the fused linear + cross-entropy, forward and backward, beside ``F.linear`` +
  ``F.cross_entropy`` (which materialise the (tokens, vocab) logits): time and the peak memory
  each step allocates above its inputs (``torch.cuda.max_memory_allocated``).

Without a GPU the script says so and exits 0 (no figure is claimed for the simulator).
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
    nbytes: int  # what kaio's backward must read and write


def grads(torch: Any, out: Any, inputs: list[Any], grad_out: Any) -> Callable[[], Any]:
    """torch's backward alone: the gradients of ``out`` (already computed) w.r.t. ``inputs``."""
    return lambda: torch.autograd.grad(out, inputs, grad_out, retain_graph=True)


def attention_cases(torch: Any, shape: tuple[int, int, int, int], device: str) -> list[tuple[str, Any, Any]]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, s, d = shape
    rows = []
    for causal in (False, True):
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device=device) for _ in range(3))
        dout = torch.randn_like(q)
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
        kaio_bwd = lambda q=q, k=k, v=v, out=out, lse=lse, dout=dout, causal=causal: ops.attention_backward(  # noqa: E731
            q, k, v, out, lse, dout, causal=causal)  # fmt: skip
        torch_bwd = None
        if device != "cpu":  # the FLASH backend runs on CUDA only
            qt, kt, vt = (t.detach().clone().requires_grad_() for t in (q, k, v))
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                ot = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            torch_bwd = grads(torch, ot, [qt, kt, vt], dout)
        rows.append((f"{shape} causal={causal}", kaio_bwd, torch_bwd))
    return rows


def row_cases(torch: Any, rows: int, cols: int, dtype: Any, device: str) -> list[Case]:
    """The memory-bound backwards, each beside torch eager's backward of the same op."""
    F = torch.nn.functional  # noqa: N806
    eb = torch.finfo(dtype).bits // 8
    n = rows * cols * eb

    def leaf(*shape: int, dt: Any = dtype) -> Any:
        return torch.randn(*shape, dtype=dt, device=device).requires_grad_()

    x, w, b = leaf(rows, cols), leaf(cols), leaf(cols)
    dy = torch.randn(rows, cols, dtype=dtype, device=device)
    xf = x.detach().float()
    mean = xf.mean(-1)
    rstd = torch.rsqrt(xf.var(-1, unbiased=False) + 1e-5)
    rms_rstd = torch.rsqrt(xf.pow(2).mean(-1) + 1e-6)
    half = cols // 2
    dh = torch.randn(rows, half, dtype=dtype, device=device)
    y = torch.softmax(x.detach(), -1)
    t = torch.randint(0, cols, (rows,), device=device)
    dl = torch.randn(rows, device=device)
    d = 128
    heads = max(1, min(32, rows * cols // d))
    seq = rows * cols // (heads * d)
    angle = torch.rand(seq, d // 2, device=device) * 6
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    dq = torch.randn(1, seq, heads, d, dtype=dtype, device=device)
    q = leaf(1, seq, heads, d)
    c4, s4 = cos[None, :, None, :], sin[None, :, None, :]
    q1, q2 = q[..., : d // 2], q[..., d // 2 :]
    torch_rope = torch.cat((q1 * c4 - q2 * s4, q2 * c4 + q1 * s4), -1)
    stats = rows * 4  # one f32 per row
    vec = cols * eb
    return [
        Case("rms_norm", lambda: ops.rms_norm_backward(dy, x.detach(), w.detach(), rms_rstd),
             grads(torch, F.rms_norm(x, (cols,), w, 1e-6), [x, w], dy), 3 * n + stats + 2 * vec),
        Case("layer_norm", lambda: ops.layer_norm_backward(dy, x.detach(), w.detach(), mean, rstd, bias=b.detach()),
             grads(torch, F.layer_norm(x, (cols,), w, b), [x, w, b], dy), 3 * n + 2 * stats + 3 * vec),
        Case("rope", lambda: ops.rope_backward(dq, cos, sin), grads(torch, torch_rope, [q], dq), 2 * q.numel() * eb),
        Case("silu_and_mul", lambda: ops.silu_and_mul_backward(dh, x.detach()),
             grads(torch, F.silu(x[:, :half]) * x[:, half:], [x], dh), 2 * n + n // 2),
        Case("gelu_and_mul", lambda: ops.gelu_and_mul_backward(dh, x.detach()),
             grads(torch, F.gelu(x[:, :half]) * x[:, half:], [x], dh), 2 * n + n // 2),
        Case("softmax", lambda: ops.softmax_backward(dy, y), grads(torch, torch.softmax(x, -1), [x], dy), 3 * n),
        Case("cross_entropy", lambda: ops.cross_entropy_backward(x.detach(), t, dl),
             grads(torch, F.cross_entropy(x, t, reduction="none"), [x], dl), 2 * n + rows * 12),
    ]  # fmt: skip


def fused_ce(torch: Any, tokens: int, hidden: int, vocab: int, dtype: Any, device: str) -> dict[str, Callable[[], Any]]:
    """One forward + backward step of the fused op and of torch's unfused pair."""
    F = torch.nn.functional  # noqa: N806
    x = (torch.randn(tokens, hidden, dtype=dtype, device=device) * 0.5).requires_grad_()
    weight = (torch.randn(vocab, hidden, dtype=dtype, device=device) * 0.02).requires_grad_()
    t = torch.randint(0, vocab, (tokens,), device=device)

    def kaio_step() -> Any:
        ops.linear_cross_entropy(x, weight, t).mean().backward()

    def torch_step() -> Any:
        F.cross_entropy(F.linear(x, weight).float(), t).backward()

    return {"kaio": kaio_step, "torch": torch_step}


def peak_bytes(torch: Any, step: Callable[[], Any]) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - base)


def main() -> int:
    setup = benchmark_setup(__doc__.splitlines()[0], "GPU time and memory")
    if isinstance(setup, int):
        return setup
    args, dev, torch = setup
    sim = dev.is_simulator
    device = "cpu" if sim else f"cuda:{dev.ordinal}"
    budget = (1, 1) if sim else (25, 100)

    def ms(fn: Callable[[], Any]) -> float:
        return kaio.bench(fn, *budget, device=dev).median

    where = "the simulator (times are CPU time: no GPU figure)" if sim else f"{dev.name} ({dev.arch})"
    print(f"device: {where}; medians of kaio.bench")

    shape = (1, 2, 32, 32) if sim else (4, 32, 4096, 128)
    print(f"\nattention backward, bf16\n{'shape':36}{'kaio ms':>10}{'FLASH ms':>10}{'vs FLASH':>10}")
    for name, kaio_bwd, torch_bwd in attention_cases(torch, shape, device):
        running(f"attention backward {name}")
        k = ms(kaio_bwd)
        t = ms(torch_bwd) if torch_bwd is not None else float("nan")
        print(f"{name:36}{k:10.3f}{t:10.3f}{t / k:9.2f}x")

    rows, cols = (4, 256) if sim else (args.rows, args.cols)
    print(f"\nmemory-bound backwards, shape ({rows}, {cols})")
    print(f"{'op':<14}{'dtype':>6}{'kaio ms':>10}{'GB/s':>9}{'torch ms':>10}{'vs torch':>10}{'copy ms':>10}{'of copy':>9}")
    for dtype in (torch.bfloat16, torch.float32):
        label = str(dtype).removeprefix("torch.").replace("float", "f")
        for case in row_cases(torch, rows, cols, dtype, device):
            running(f"{case.name} backward {label}")
            src = torch.empty(case.nbytes // 2, dtype=torch.uint8, device=device)
            dst = torch.empty_like(src)
            k, t, c = ms(case.kaio), ms(case.torch), ms(lambda: dst.copy_(src))  # noqa: B023
            print(f"{case.name:<14}{label:>6}{k:10.4f}{case.nbytes / k / 1e6:9.0f}{t:10.4f}{t / k:9.2f}x"
                  f"{c:10.4f}{c / k:8.0%}")  # fmt: skip

    tokens, hidden, vocab = (16, 32, 300) if sim else (8192, 4096, 128256)
    print(f"\nfused linear + cross-entropy, forward + backward, bf16, tokens {tokens}, hidden {hidden}, vocab {vocab}")
    print(f"{'':8}{'ms':>10}{'peak MiB':>10}")
    steps = fused_ce(torch, tokens, hidden, vocab, torch.bfloat16, device)
    for name, step in steps.items():
        running(f"linear_cross_entropy {name}")
        peak = "-" if sim else f"{peak_bytes(torch, step) / 2**20:.0f}"  # CPU tensors: not measured
        print(f"{name:8}{ms(step):10.3f}{peak:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
