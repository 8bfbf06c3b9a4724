"""A user-written fused op trained end to end: ``gelu(x + bias)`` as a tile kernel, its
backward as a second tile kernel, joined by ``kaio.torch.custom_op(backward=...)``.

    python examples/tile_bias_gelu_training.py

The forward reads x and bias once and writes ``y = gelu_tanh(x + bias)``. The backward gets
the saved inputs and ``dy``, recomputes ``h = x + bias`` (cheaper than saving it) and writes
``dx = dy * gelu'(h)``; the bias gradient (the column sums of dx) is reduced in the same kernel
with one atomic add per column per program (``kt.atomic_add``), in f32. ``torch.compile`` sees
one opaque op in each direction. Runs on CPU torch tensors with the simulator when there is no
GPU; a small two-layer model trained for a few steps matches the same model with torch's ops.
"""

import numpy as np
import torch

import kaio
import kaio.tile as kt
import kaio.torch
from kaio.prelude import Array, MutArray, f32, i32, tanh

SQRT_2_OVER_PI = 0.7978845608028654


@kaio.tile_kernel(num_warps=4)
def bias_gelu_kernel(x: Array[f32], bias: Array[f32], y: MutArray[f32], rows: i32, cols: i32,
                     R: kaio.constexpr = 16, C: kaio.constexpr = 64):  # fmt: skip
    r0, c0 = i32(kt.program_id(0)) * R, i32(kt.program_id(1)) * C
    h = kt.load(x, (r0, c0), (R, C), (rows, cols)) + kt.expand_dims(kt.load(bias, (c0,), (C,), (cols,)), 0)
    y_tile = 0.5 * h * (1.0 + tanh(SQRT_2_OVER_PI * (h + 0.044715 * h * h * h)))
    kt.store(y, (r0, c0), y_tile, (rows, cols))


@kaio.tile_kernel(num_warps=4)
def bias_gelu_backward_kernel(x: Array[f32], bias: Array[f32], dy: Array[f32], dx: MutArray[f32],
                              dbias: MutArray[f32], rows: i32, cols: i32,
                              R: kaio.constexpr = 16, C: kaio.constexpr = 64):  # fmt: skip
    r0, c0 = i32(kt.program_id(0)) * R, i32(kt.program_id(1)) * C
    h = kt.load(x, (r0, c0), (R, C), (rows, cols)) + kt.expand_dims(kt.load(bias, (c0,), (C,), (cols,)), 0)
    t = tanh(SQRT_2_OVER_PI * (h + 0.044715 * h * h * h))
    slope = 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * h * h)
    g = kt.load(dy, (r0, c0), (R, C), (rows, cols)) * slope  # 0 outside: loads past the bounds read 0
    kt.store(dx, (r0, c0), g, (rows, cols))
    cs = c0 + kt.arange(C)
    kt.atomic_add(dbias, cs, kt.sum(g, 0), mask=cs < cols)  # this program's share of the column sums


def grid(x: torch.Tensor) -> tuple[int, int]:
    return kaio.cdiv(x.shape[0], 16), kaio.cdiv(x.shape[1], 64)


def bias_gelu_grad(saved: kaio.torch.Saved, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of ``bias_gelu``'s arguments (x, bias) from the saved inputs and ``dy``."""
    dx = torch.empty_like(saved.x)
    dbias = torch.zeros_like(saved.bias)  # the atomics add into it
    rows, cols = saved.x.shape
    bias_gelu_backward_kernel[grid(saved.x)](saved.x, saved.bias, dy.contiguous(), dx, dbias, rows, cols)
    return dx, dbias


@kaio.torch.custom_op("examples::bias_gelu", mutates_args=(), fake=lambda x, bias: torch.empty_like(x),
                      backward=bias_gelu_grad)  # fmt: skip
def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``gelu_tanh(x + bias)`` for f32 x (rows, cols) and bias (cols,)."""
    y = torch.empty_like(x)
    bias_gelu_kernel[grid(x)](x, bias, y, x.shape[0], x.shape[1])
    return y


def train(fused: bool, steps: int = 5, seed: int = 0) -> tuple[list[float], list[torch.Tensor]]:
    """A two-layer regression model, ``fused``: with bias_gelu, else with torch's ops."""
    gen = torch.Generator().manual_seed(seed)
    x, target = torch.randn(24, 16, generator=gen), torch.randn(24, 8, generator=gen)
    w1 = (torch.randn(16, 40, generator=gen) * 0.3).requires_grad_()
    b1 = torch.zeros(40).requires_grad_()
    w2 = (torch.randn(40, 8, generator=gen) * 0.3).requires_grad_()
    params = [w1, b1, w2]
    opt = torch.optim.SGD(params, lr=0.1)
    losses = []
    for _ in range(steps):
        h = x @ w1
        a = bias_gelu(h, b1) if fused else torch.nn.functional.gelu(h + b1, approximate="tanh")
        loss = ((a @ w2 - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach() for p in params]


def main() -> None:
    kaio_losses, kaio_params = train(fused=True)
    torch_losses, torch_params = train(fused=False)
    np.testing.assert_allclose(kaio_losses, torch_losses, rtol=1e-4)
    for p, q in zip(kaio_params, torch_params, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    print("losses:", " ".join(f"{v:.4f}" for v in kaio_losses), "(kaio bias_gelu = torch)")


if __name__ == "__main__":
    main()
