"""``kaio.ops_library.moe_align``: tokens grouped by expert, each group padded to a whole
number of blocks, as vLLM's ``moe_align_block_size``.

    from kaio.ops_library import moe_align
    sorted_ids, expert_ids, num_post = moe_align(ids, num_experts, block)
    # ids: (T, k) int32/int64 expert ids (moe_topk_softmax's), flattened as i = t * k + j

The three results are vLLM's, with the same meaning and padding:

* ``sorted_ids`` int32 ``(T * k + E * (block - 1),)`` (the most any routing can need): the flat
  indices ``i`` of expert 0's entries, then expert 1's, ..., each expert's run padded with the
  value ``T * k`` to a multiple of ``block``; an expert with no tokens takes no block; entries
  past ``num_post`` hold ``T * k`` too. Within an expert the indices ascend (vLLM's CUDA kernel
  leaves that order to its atomics; its golden reference, a stable sort, ascends).
* ``expert_ids`` int32 ``(ceil(len(sorted_ids) / block),)``: the expert of each block of
  ``sorted_ids``; 0 for the blocks past ``num_post``.
* ``num_post`` int32 ``(1,)``: the padded total, ``sum(ceil(count_e / block) * block)``.

Three launches, each a small tile kernel: a histogram (``kt.atomic_add`` of 1 per entry, a
program per chunk), the exclusive prefix sum of the padded counts (one program walking the
experts with scalars: also writes ``expert_ids``, ``num_post`` and the padding), and the
scatter (one program walking the entries in order, so each expert's indices come out in
ascending order: an entry's place is its expert's start, plus how many of its expert the
earlier chunks had (a running ``(E,)`` count), plus how many before it in its own chunk (a
``(C, C)`` comparison)).
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import rows as rowops
from kaio.ops_library.autograd import refuse_grad
from kaio.ops_library.moe_checks import check_count, check_ids, take_index
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, i32

MAX_EXPERTS = 1024  # the scatter's (C, EP) comparison tile
HIST_BLOCK = 1024  # entries per histogram program
FILL_BLOCK = 256  # elements per store of the prefix program's fills


@cache
def histogram_kernel(I: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def moe_histogram(ids: Array[I], counts: MutArray[i32], n: i32, experts: i32, B: kaio.constexpr = HIST_BLOCK):  # fmt: skip
        offs = i32(kt.program_id(0)) * B + kt.arange(B)
        e = i32(kt.load(ids, offs, mask=offs < n))
        kt.atomic_add(counts, e, 1, mask=(offs < n) & (e >= 0) & (e < experts))

    return moe_histogram


@kaio.tile_kernel(num_warps=4, num_stages=0)
def moe_prefix(counts: Array[i32], starts: MutArray[i32], sorted_ids: MutArray[i32], expert_ids: MutArray[i32],
               num_post: MutArray[i32], n: i32, experts: i32, block: i32, padded_len: i32, blocks: i32,
               B: kaio.constexpr = FILL_BLOCK):  # fmt: skip
    for i0 in range(0, padded_len, B):  # every place starts as padding (the scatter comes later)
        kt.store(sorted_ids, (i0,), kt.full((B,), n, i32), (padded_len,))
    start = 0
    for e in range(experts):
        count = kt.sum(kt.load(counts, (e,), (1,), (experts,)), 0)
        kt.store(starts, (e,), kt.full((1,), start, i32), (experts,))
        first = start // block
        end = first + (count + block - 1) // block
        for b0 in range(first, end, B):
            kt.store(expert_ids, (b0,), kt.full((B,), e, i32), (end,))
        start = end * block
    kt.store(num_post, (0,), kt.full((1,), start, i32), (1,))
    kt.store(starts, (experts,), kt.full((1,), start, i32), (experts + 1,))  # the end of the last
    for b0 in range(start // block, blocks, B):
        kt.store(expert_ids, (b0,), kt.zeros((B,), i32), (blocks,))


@cache
def scatter_kernel(I: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def moe_scatter(ids: Array[I], starts: Array[i32], sorted_ids: MutArray[i32], n: i32, experts: i32,
                    C: kaio.constexpr = 64, EP: kaio.constexpr = 64):  # fmt: skip
        expert = kt.expand_dims(kt.arange(EP), 0)  # (1, EP)
        start = kt.expand_dims(kt.load(starts, (0,), (EP,), (experts,)), 0)
        before = kt.expand_dims(kt.arange(C), 0) < kt.expand_dims(kt.arange(C), 1)  # (C, C): j < i
        seen = kt.zeros((1, EP), i32)  # entries of each expert in the chunks before
        for c0 in range(0, n, C):
            offs = c0 + kt.arange(C)
            e = i32(kt.load(ids, offs, mask=offs < n, other=-1))
            mine = kt.expand_dims(e, 1) == expert  # (C, EP): entry i is expert's
            base = kt.sum(kt.where(mine, start + seen, 0), 1)
            same = kt.expand_dims(e, 1) == kt.expand_dims(e, 0)  # (C, C)
            rank = kt.sum(kt.where(same & before, 1, 0), 1)
            kt.store(sorted_ids, base + rank, offs, mask=(offs < n) & (e >= 0) & (e < experts))
            seen = seen + kt.expand_dims(kt.sum(kt.where(mine, 1, 0), 0), 0)

    return moe_scatter


def chunk(ep: int) -> int:
    return max(16, min(128, 8192 // ep))


def moe_align(ids: Any, num_experts: int, block: int, *, device: Any = None) -> Any:
    """``(sorted_ids, expert_ids, num_post)``, vLLM's ``moe_align_block_size(ids, block,
    num_experts)``: see the module doc."""
    op = "moe_align"
    refuse_grad(op, ids)
    ops = Operands(op, ids, device=device)
    oi = ops.take("ids", ids)
    take_index(op, "ids", oi)
    if len(oi.shape) not in (1, 2):
        raise KaioTypeError(f"{op}: `ids` must be (tokens, k) (or flat), got shape {tuple(oi.shape)}")
    experts = check_count(op, "num_experts", num_experts)
    if experts > MAX_EXPERTS:
        raise KaioValueError(f"{op}: `num_experts` must be at most {MAX_EXPERTS}, got {experts}")
    block = check_count(op, "block", block)
    n = math.prod(oi.shape)
    padded_len = n + experts * (block - 1)
    if padded_len >= 2**31:
        raise KaioValueError(f"{op}: {n} entries padded to blocks of {block} need 2**31 places or more")
    check_ids(op, "ids", ids, experts)
    blocks = -(-padded_len // block)
    sorted_ids = ops.output((padded_len,), dtypes.i32)
    expert_ids = ops.output((blocks,), dtypes.i32)
    num_post = ops.output((1,), dtypes.i32)
    with ops.workspace((experts + 1,), dtypes.i32) as starts:
        launch(ops, oi, n, experts, block, sorted_ids, expert_ids, num_post, starts)
    return ops.result(sorted_ids), ops.result(expert_ids), ops.result(num_post)


def launch(ops: Operands, oi: Operand, n: int, experts: int, block: int, sorted_ids: Operand, expert_ids: Operand,
           num_post: Operand, starts: Operand) -> None:  # fmt: skip
    """The three launches, on checked arguments; ``starts`` (E + 1,) is left holding where
    each expert's run begins (and the padded total last): with ``block`` 1, the exclusive
    prefix sum of the counts that :func:`kaio.ops_library.grouped_matmul` takes."""
    dev = ops.device
    padded_len, blocks = sorted_ids.shape[0], expert_ids.shape[0]
    with ops.workspace((experts,), dtypes.i32, zero=True) as counts:
        if n:
            histogram_kernel(oi.dtype).launch(dev, oi.value, counts.value, n, experts, grid=(-(-n // HIST_BLOCK),))
        moe_prefix.launch(dev, counts.value, starts.value, sorted_ids.value, expert_ids.value, num_post.value, n,
                          experts, block, padded_len, blocks, grid=(1,))  # fmt: skip
    if n:
        ep = rowops.next_pow2(experts)
        scatter_kernel(oi.dtype).launch(dev, oi.value, starts.value, sorted_ids.value, n, experts, grid=(1,),
                                        C=chunk(ep), EP=ep)  # fmt: skip
