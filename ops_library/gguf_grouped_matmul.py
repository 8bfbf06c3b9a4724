"""``kaio.ops_library.gguf_grouped_matmul``: ``grouped_matmul`` with each expert's weight a GGUF
tensor as stored (a mixture-of-experts layer of a GGUF file: ``blk.N.ffn_*_exps.weight``).

    from kaio.ops_library import gguf_grouped_matmul
    y = gguf_grouped_matmul(x, weight, "Q4_K", expert_offsets)
    # rows expert_offsets[e] : expert_offsets[e + 1] of y are x[those rows] @ W[e].T

``x`` (T, K) f16/bf16/f32 with its rows sorted by expert; ``weight`` the experts' blocks, uint8
``(E, N, K_bytes)`` (a ``GGUFReader`` tensor's ``data`` of GGUF shape ``(K, N, E)``), or for
the float formats the values themselves (E, N, K); ``expert_offsets`` int32 (E + 1,) as
``grouped_matmul`` takes them. y (T, N) has x's type. Any format ``gguf_matmul`` takes.

One launch of ``gguf_matmul``'s prefill kernel in its ``GROUPED`` form: program row ``p`` takes
the ``p``-th M tile of all groups (numbered group by group, a walk over the offsets), decodes
expert ``e``'s weight tile from its blocks in registers and feeds ``kt.dot``; a tile's rows
stop at its group's end. The grid has a row of programs for each of the ``ceil(T / BM) + E``
tiles the groups can need at most: the rows past the groups' own tiles walk the offsets, run
no K loop (so read no weight block) and store nothing; a persistent schedule, as
``grouped_matmul``'s, would not launch them at all. No backward: the weights are frozen blocks.
"""

from __future__ import annotations

import math
from typing import Any

from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library.autograd import refuse_grad
from kaio.ops_library.gguf_blocks import BlockFormat, block_format
from kaio.ops_library.gguf_matmul import ACTIVATION_TYPES, FLOAT_NAMES, format_args, gguf_tile_kernel, weight_views
from kaio.ops_library.grouped_matmul import check_offsets
from kaio.ops_library.operands import Operand, Operands

OP = "gguf_grouped_matmul"


def expert_bytes(weight: Any, fmt: BlockFormat) -> Any:
    """A float format's (E, N, K) values seen as their bytes (E, N, K * size), as every format is
    taken; anything else as it is."""
    name = str(getattr(weight, "dtype", "")).removeprefix("torch.")
    if not fmt.passthrough or len(getattr(weight, "shape", ())) != 3 or name not in FLOAT_NAMES[fmt.name]:
        return weight
    if type(weight).__module__.startswith("torch"):
        import torch

        return weight.contiguous().view(torch.uint8)
    import numpy as np

    return np.ascontiguousarray(weight).view(np.uint8) if isinstance(weight, np.ndarray) else weight


def check(ops: Any, x: Any, weight: Any, fmt: BlockFormat, expert_offsets: Any, op: str = OP,
          read_values: bool = True) -> tuple[Operand, Operand, Operand, int, int, int]:  # fmt: skip
    """(x, weight, offsets, experts, N, bytes per weight row), or a kaio error naming the
    argument and the rule."""
    ox, ow, oo = ops.take("x", x), ops.take("weight", weight), ops.take("expert_offsets", expert_offsets)
    if ox.dtype not in ACTIVATION_TYPES or len(ox.shape) != 2:
        raise KaioTypeError(f"{op}: `x` must be a 2-D f16, bf16 or f32 array (tokens, K), got {ox.dtype.name} {ox.shape}")
    tokens, k = ox.shape
    if ow.dtype != dtypes.u8 or len(ow.shape) != 3:
        raise KaioTypeError(f"{op}: `weight` must be the experts' uint8 block bytes (E, N, K_bytes), got {ow.dtype.name} {ow.shape}")
    experts, n, row_bytes = ow.shape
    if experts == 0:
        raise KaioTypeError(f"{op}: `weight` has no experts (shape {tuple(ow.shape)})")
    if row_bytes % fmt.nbytes or row_bytes // fmt.nbytes * fmt.elements != k:
        raise KaioValueError(f"{op}: `weight` rows of {row_bytes} bytes are not the {fmt.name} blocks of K = {k} "
                             f"elements (x's columns): {k / fmt.elements:g} blocks of {fmt.nbytes} bytes")  # fmt: skip
    if any(size >= 2**31 for size in (tokens * k, experts * n * row_bytes, tokens * n)):
        raise KaioValueError(f"{op}: arrays must have fewer than 2**31 elements")
    check_offsets(op, "expert_offsets", oo, expert_offsets if read_values else None, experts, tokens)
    return ox, ow, oo, experts, n, row_bytes


def grouped_launch(ops: Operands, x: Operand, weight: Operand, fmt: BlockFormat, offsets: Operand, y: Operand,
                   experts: int, n: int, row_bytes: int) -> None:  # fmt: skip
    """The launch on checked operands (``y`` (T, N) of x's type)."""
    tokens, k = x.shape
    if not (tokens and n):
        return
    rows = Operand(weight.value, (experts * n, row_bytes), weight.dtype, weight.ptr)  # the experts' rows in turn
    wh, h = weight_views(ops, rows, fmt)
    bm = 32 if tokens <= 32 * experts else 64  # small groups: fewer idle rows per tile
    grid = (math.ceil(n / 64), math.ceil(tokens / bm) + experts)
    gguf_tile_kernel(x.dtype, h).launch(ops.device, x.value, weight.value, wh, y.value, tokens, n, k, row_bytes,
                                        offsets.value, experts, grid=grid, BM=bm, BN=64, NS=fmt.scale_bytes,
                                        GROUPED=True, **format_args(fmt))  # fmt: skip


def gguf_grouped_matmul(x: Any, weight: Any, qtype: Any, expert_offsets: Any, *, device: Any = None) -> Any:
    """y (T, N): rows ``expert_offsets[e]:expert_offsets[e + 1]`` are ``x[rows] @ W[e].T`` with
    ``W[e]`` expert e's GGUF blocks (see the module doc)."""
    refuse_grad(OP, x, weight, expert_offsets, why="the GGUF weights are frozen blocks")
    fmt = block_format(OP, qtype)
    weight = expert_bytes(weight, fmt)
    ops = Operands(OP, x, weight, expert_offsets, device=device)
    ox, ow, oo, experts, n, row_bytes = check(ops, x, weight, fmt, expert_offsets)
    oy = ops.output((ox.shape[0], n), ox.dtype)
    grouped_launch(ops, ox, ow, fmt, oo, oy, experts, n, row_bytes)
    return ops.result(oy)
