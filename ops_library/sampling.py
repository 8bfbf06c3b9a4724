"""``kaio.ops_library.sample``: one token per row of logits, greedy or at a temperature.

    from kaio.ops_library import sample
    ids = sample(logits)                                  # argmax of each row (temperature 0)
    ids = sample(logits, temperature=0.8, seed=7, offset=step * logits.size)

``logits`` is ``(..., vocab)`` f16/bf16/f32; ``ids`` is int32 of shape ``logits.shape[:-1]``, in
the kind of ``logits`` (numpy, torch, or a kaio Buffer).

With ``temperature == 0`` the id is the row's argmax (the first of equal maxima, as
``numpy.argmax``). Otherwise it is drawn from ``softmax(logits / temperature)`` by the
Gumbel-max trick: the argmax of ``logits / temperature - log(-log(u))`` with ``u`` uniform, so
the row is read once and no probabilities are stored. ``u`` for element ``i`` of the flattened
logits is ``kaio.random.rand(seed, i + offset)`` (Triton's Philox, bit for bit): a caller that
keeps ``seed`` and gives each step its own ``offset`` replays any draw. A row whose logits are
all ``-inf`` gives 0. A sampled id has no gradient, so logits that require grad are taken as
they are (as ``torch.argmax`` takes them); the op runs its kernel directly, which
``torch.compile`` cannot trace (a clear error while tracing).
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioValueError
from kaio.ops_library import rows as rowops
from kaio.ops_library.autograd import refuse_traced
from kaio.ops_library.operands import Operands
from kaio.ops_library.random_args import check_seed
from kaio.prelude import Array, MutArray, f32, i32, log, u64

OP = "sample"
NEG_INF = rowops.NEG_INF


@cache
def sample_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    """The tile kernel for one logit type: R rows per program, C columns per trip, a running
    (best value, its column) per row; ``GREEDY`` leaves out the noise."""

    @kaio.tile_kernel(num_warps=4)
    def sample(x: Array[T], ids: MutArray[i32], rows: i32, cols: i32, inv_t: f32, seed: u64, offset: i32,
               R: kaio.constexpr = 1, C: kaio.constexpr = 1024, GREEDY: kaio.constexpr = True,
               BASE_X: kaio.constexpr = 16):  # fmt: skip
        x = kt.multiple_of(x, BASE_X)
        r0 = i32(kt.program_id(0)) * R
        best = kt.full((R,), NEG_INF, f32)
        at = kt.zeros((R,), i32)
        for k0 in range(0, cols, C):
            t = f32(kt.load(x, (r0, k0), (R, C), (rows, cols), other=NEG_INF))
            col = kt.expand_dims(kt.arange(C), 0) + k0
            if not GREEDY:
                counter = (kt.expand_dims(kt.arange(R), 1) + r0) * cols + col + offset
                t = t * inv_t - log(-log(kt.rand(seed, counter)))  # Gumbel noise; -inf stays -inf
            m = kt.max(t, 1)
            first = kt.min(kt.where(t == kt.expand_dims(m, 1), col, cols), 1)  # the first maximum
            better = m > best  # strictly: an equal maximum in a later block keeps the earlier column
            at = kt.where(better, first, at)
            best = kt.where(better, m, best)
        kt.store(ids, (r0,), at, (rows,))

    return sample


def check_temperature(temperature: Any) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise KaioValueError(f"{OP}: `temperature` must be a number >= 0, got {temperature!r}")
    if not math.isfinite(temperature) or temperature < 0:
        raise KaioValueError(f"{OP}: `temperature` must be a finite number >= 0, got {temperature!r}")
    return float(temperature)


def sample(logits: Any, *, temperature: float = 0.0, seed: Any = 0, offset: int = 0, device: Any = None) -> Any:
    """The id of one token per row of ``logits`` (see the module doc): int32, ``logits.shape[:-1]``."""
    t = check_temperature(temperature)
    seed = check_seed(OP, seed)
    refuse_traced(OP, logits)
    ops = Operands(OP, logits, device=device)
    ox = rowops.take_float(ops, OP, "logits", logits)
    rows, cols = rowops.rows_cols(ox.shape, OP)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise KaioValueError(f"{OP}: `offset` must be an integer >= 0, got {offset!r}")
    if t and offset + rows * cols >= 2**31:
        raise KaioValueError(f"{OP}: `offset` + the logits' {rows * cols} elements must stay below 2**31 "
                             f"(the counter of the random stream), got offset {offset}")  # fmt: skip
    if cols == 0 and rows:
        raise KaioValueError(f"{OP}: `logits` has no columns to pick from (shape {tuple(ox.shape)})")
    out = ops.output(tuple(ox.shape[:-1]), dtypes.i32)
    if rows:
        b = rowops.blocks(rows, cols)
        inv_t = 1.0 / t if t else 0.0
        rowops.launch(sample_kernel(ox.dtype), b, b.grid(rows), (ox.value, out.value, rows, cols, inv_t, seed, offset),
                      ops.device, GREEDY=not t, BASE_X=rowops.base_alignment(ox.ptr))  # fmt: skip
    return ops.result(out)
