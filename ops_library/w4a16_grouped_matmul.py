"""``kaio.ops_library.w4a16_grouped_matmul``: ``grouped_matmul`` with each expert's weight in
GPTQ's 4-bit format (a GPTQ mixture-of-experts checkpoint's expert tensors, stacked).

    from kaio.ops_library import w4a16_grouped_matmul
    y = w4a16_grouped_matmul(x, qweight, scales, expert_offsets, qzeros, group_size=128)
    # rows expert_offsets[e] : expert_offsets[e + 1] of y are x[those rows] @ W[e]

Each expert's tensors are ``w4a16_matmul``'s, stacked on a first axis of E: ``qweight`` int32
(E, K/8, N), ``scales`` f16 or x's type (E, K/group_size, N), ``qzeros`` int32
(E, K/group_size, N/8) or None (symmetric), ``W[e]`` dequantised as ``w4a16_matmul`` does.
``x`` (T, K) f16/bf16 with its rows sorted by expert, ``expert_offsets`` int32 (E + 1,) as
``grouped_matmul`` takes them; y (T, N) in x's type.

One launch of ``w4a16_matmul``'s kernel in its ``GROUPED`` form (as ``gguf_grouped_matmul``'s):
program row ``p`` takes the ``p``-th M tile of all groups, reads expert ``e``'s packed words and
its scale and zero rows; the grid has ``ceil(T / BM) + E`` rows of programs, those past the
groups' tiles run no K loop (read no weight) and store nothing. No backward: the weights are
frozen.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library.autograd import refuse_grad
from kaio.ops_library.grouped_matmul import check_offsets
from kaio.ops_library.operands import Operand, Operands
from kaio.ops_library.w4a16_matmul import ACTIVATION_TYPES, GROUP_SIZES, choose_config, w4a16_tile_kernel

OP = "w4a16_grouped_matmul"


class GPTQExperts(NamedTuple):
    """A GPTQ mixture-of-experts layer's weights as ``fused_moe`` takes them: each expert's
    ``w4a16_matmul`` tensors stacked on a first axis of E (``qweight`` (E, K/8, N), ``scales``
    (E, K/group_size, N), ``qzeros`` (E, K/group_size, N/8) or None), ``x @ W[e]``: for
    ``w_gate_up`` K = D and N = 2F (the gate columns first), for ``w_down`` K = F and N = D."""

    qweight: Any
    scales: Any
    qzeros: Any = None
    group_size: int = 128


class Checked(NamedTuple):
    """An expert stack's operands, its sizes and its group length."""

    qweight: Operand
    scales: Operand
    qzeros: Operand | None
    experts: int
    n: int
    group: int


def check_experts(op: str, ops: Any, prefix: str, w: GPTQExperts, k: int, x_type: dtypes.ScalarType) -> Checked:
    """The stack's operands for an x of K columns, or a kaio error naming it and the rule
    (``prefix``: what its tensors' names start with, e.g. ``"w_gate_up."``)."""
    group_size = w.group_size
    if isinstance(group_size, bool) or not isinstance(group_size, int) or (group_size != -1 and group_size not in GROUP_SIZES):
        raise KaioValueError(f"{op}: `{prefix}group_size` must be -1 or a power of two from 16 to 4096, got {group_size!r}")
    oq, os_ = ops.take(f"{prefix}qweight", w.qweight), ops.take(f"{prefix}scales", w.scales)
    if oq.dtype != dtypes.i32 or len(oq.shape) != 3 or oq.shape[0] == 0:
        raise KaioTypeError(f"{op}: `{prefix}qweight` must be a 3-D int32 array (E, K/8, N), got {oq.dtype.name} {oq.shape}")
    experts, words, n = oq.shape
    if k % 8 or words != k // 8:
        raise KaioValueError(f"{op}: `{prefix}qweight` packs 8 rows of K per int32: K = {k}, so (E, {k // 8}, N), "
                             f"got {oq.shape}")  # fmt: skip
    group = k if group_size == -1 else group_size
    if group and k % group:
        raise KaioValueError(f"{op}: K = {k} is not a multiple of `{prefix}group_size` = {group_size}")
    groups = k // group if group else 0
    if os_.dtype not in (dtypes.f16, x_type) or os_.shape != (experts, groups, n):
        raise KaioTypeError(f"{op}: `{prefix}scales` must be f16 (or x's type) of shape (E, K/group_size, N) = "
                            f"{(experts, groups, n)}, got {os_.dtype.name} {os_.shape}")  # fmt: skip
    oz = None
    if w.qzeros is not None:
        oz = ops.take(f"{prefix}qzeros", w.qzeros)
        if n % 8 or oz.dtype != dtypes.i32 or oz.shape != (experts, groups, n // 8):
            raise KaioTypeError(f"{op}: `{prefix}qzeros` must be int32 of shape (E, K/group_size, N/8) = "
                                f"{(experts, groups, n // 8)} (N a multiple of 8), got {oz.dtype.name} {oz.shape}")  # fmt: skip
    if experts * words * n >= 2**31:
        raise KaioValueError(f"{op}: arrays must have fewer than 2**31 elements")
    return Checked(oq, os_, oz, experts, n, max(group, 1))


def check(ops: Any, x: Any, qweight: Any, scales: Any, expert_offsets: Any, qzeros: Any, group_size: Any,
          read_values: bool = True) -> tuple[Operand, Operand, Checked]:  # fmt: skip
    """(x, offsets, the experts checked), or a kaio error naming the argument and the rule
    (``w4a16_matmul``'s, per expert)."""
    ox, oo = ops.take("x", x), ops.take("expert_offsets", expert_offsets)
    if ox.dtype not in ACTIVATION_TYPES or len(ox.shape) != 2:
        raise KaioTypeError(f"{OP}: `x` must be a 2-D f16 or bf16 array (tokens, K), got {ox.dtype.name} {ox.shape}")
    tokens, k = ox.shape
    w = check_experts(OP, ops, "", GPTQExperts(qweight, scales, qzeros, group_size), k, ox.dtype)
    if tokens * max(k, w.n) >= 2**31:
        raise KaioValueError(f"{OP}: arrays must have fewer than 2**31 elements")
    check_offsets(OP, "expert_offsets", oo, expert_offsets if read_values else None, w.experts, tokens)
    return ox, oo, w


def w4a16_grouped_matmul(x: Any, qweight: Any, scales: Any, expert_offsets: Any, qzeros: Any = None, *,
                         group_size: int = 128, device: Any = None) -> Any:  # fmt: skip
    """y (T, N): rows ``expert_offsets[e]:expert_offsets[e + 1]`` are ``x[rows] @ W[e]`` with
    ``W[e]`` expert e's GPTQ weight (see the module doc)."""
    refuse_grad(OP, x, qweight, scales, expert_offsets, qzeros, why="the 4-bit weights are frozen")
    ops = Operands(OP, x, qweight, scales, expert_offsets, qzeros, device=device)
    ox, oo, w = check(ops, x, qweight, scales, expert_offsets, qzeros, group_size)
    oy = ops.output((ox.shape[0], w.n), ox.dtype)
    launch(ops, ox, w, oo, oy)
    return ops.result(oy)


def launch(ops: Operands, x: Operand, w: Checked, offsets: Operand, y: Operand) -> None:
    """The launch on checked operands (``y`` (T, N) of x's type)."""
    tokens, k = x.shape
    if not (tokens and w.n):
        return
    in_x = w.scales.dtype == x.dtype
    config = choose_config(max(1, math.ceil(tokens / w.experts)), k, w.group, in_x)  # an expert's rows, on average
    kernel = w4a16_tile_kernel(x.dtype, w.scales.dtype, x.dtype)
    grid = (math.ceil(w.n / config.block_n), math.ceil(tokens / config.block_m) + w.experts)
    zeros = w.qzeros or w.qweight  # not read without zero points; no bias: x fills its slot
    kernel.launch(ops.device, x.value, w.qweight.value, w.scales.value, zeros.value, x.value, y.value, tokens, w.n, k,
                  w.group, offsets.value, w.experts, grid=grid, BM=config.block_m, BN=config.block_n,
                  BK=config.block_k, HAS_ZEROS=w.qzeros is not None, SCALES_IN_T=in_x, ROW_GROUPS=config.row_groups,
                  GROUPED=True)  # fmt: skip
