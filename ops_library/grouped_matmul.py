"""``kaio.ops_library.grouped_matmul``: one matmul per expert over its rows, in one launch.

    from kaio.ops_library import grouped_matmul
    y = grouped_matmul(x, w, expert_offsets)       # x (T, K), w (E, K, N) f16/bf16 -> y (T, N) f32
    # rows expert_offsets[e] : expert_offsets[e + 1] of y are x[those rows] @ w[e]

The rows of ``x`` are sorted by expert (``expert_offsets``: int32 ``(E + 1,)``, 0 first,
non-decreasing, ``T`` last: the exclusive prefix sum of the group sizes), groups are ragged
and may be empty. ``out_dtype`` "f32" (the default), "f16" or "bf16": the f32 accumulator is
rounded once.

**The schedule: persistent over tiles.** The (M tile, N tile) pairs of all groups are numbered
group by group (a group of ``c`` rows has ``ceil(c / BM)`` M tiles, the last one partial), and
a fixed grid of programs (as many as the device runs at once, or fewer when there are fewer
tiles) walks them: program ``p`` takes tiles ``p, p + P, p + 2P, ...``. Each program first adds
up the tile count (one pass over the E + 1 offsets), then walks its tiles in increasing order,
so the group a tile falls in is found by moving a group cursor forward (a ``while`` over the
offsets that never steps back): over the whole launch a program reads each offset about once,
instead of searching the groups per tile. A grid sized for the worst case (``ceil(T / BM) + E``
M tiles) with an early exit would launch up to E idle rows of programs, each still searching
the groups; with the persistent walk, the launch, the set-up and the idle programs are paid
once, as in the persistent dense matmul. A tile's rows past its group's end are not stored
(the store's bound is the group's end, so no row of another expert is written); they may be
read, as rows of x past the end belong to the next group and only make rows of y that are not
stored. So x's tiles are bounded by x's own size, and ``w[e]``'s by the whole weight array
(its rows past N only make columns past N; along K, where a tile past the end of ``w[e]``
would add the next expert's rows into the sum, by ``w[e]``'s own rows unless BK divides K):
bounds that are the kernel's arguments, which on sm_90a lets the loads be TMA copies.

The tile loop's body is the dense matmul's: ``kt.dot`` over K in ``BK`` steps on an
``(BM, BK)`` tile of x and a ``(BK, BN)`` tile of ``w[e]`` (``w`` seen as ``(E * K, N)``), so it
takes the same passes: shared-memory staging, the cp.async ring, ``mma.sync`` on sm_80, wgmma
on sm_90a.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from functools import cache
from typing import Any

import numpy as np

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library.matmul_kernel import base_alignment
from kaio.ops_library.moe_checks import host_values, take_index
from kaio.ops_library.autograd import refuse_grad
from kaio.ops_library.operands import Operand, Operands
from kaio.ops_library.rows import torch_op
from kaio.prelude import Array, MutArray, f32, i32

INPUT_TYPES = (dtypes.f16, dtypes.bf16)
E4M3 = dtypes.BY_NAME["f8e4m3"]  # fp8 expert weights (W8A16): converted to x's type in registers
OUT_TYPES = {"f32": dtypes.f32, "f16": dtypes.f16, "bf16": dtypes.bf16}
BLOCK = (64, 64, 32)  # BM, BN, BK
WARPS = 4
STAGES = 3


@cache
def grouped_matmul_kernel(IN: dtypes.ScalarType, OUT: dtypes.ScalarType, W: dtypes.ScalarType | None = None,  # noqa: N803
                          S: dtypes.ScalarType = dtypes.i32) -> Any:  # noqa: N803
    """The tile kernel for one (input, output) type pair; ``W`` the weights' type (x's, or e4m3:
    converted to x's type in registers, ``SCALED`` 1 a scale per expert, 2 one per expert and
    output column, applied to the f32 accumulator), ``S`` the scales' (f32; another array fills
    the slot when there are none)."""
    W = W or IN  # noqa: N806
    FP8 = W != IN  # noqa: N806 (read by the kernel at compile time)

    @kaio.tile_kernel(num_warps=WARPS, num_stages=STAGES)
    def grouped_matmul(x: Array[IN], w: Array[W], offsets: Array[i32], y: MutArray[OUT], w_scale: Array[S], m: i32,
                       experts: i32, n: i32, k: i32, BM: kaio.constexpr = 64, BN: kaio.constexpr = 64,
                       BK: kaio.constexpr = 32, BASE_X: kaio.constexpr = 16, BASE_W: kaio.constexpr = 16,
                       BASE_Y: kaio.constexpr = 16, W_NK: kaio.constexpr = False, K_TILED: kaio.constexpr = False,
                       SCALED: kaio.constexpr = 0):  # fmt: skip
        x, w, y = kt.multiple_of(x, BASE_X), kt.multiple_of(w, BASE_W), kt.multiple_of(y, BASE_Y)
        tiles_n = (n + BN - 1) // BN
        tiles_m = 0
        for e in range(experts):  # offsets[e], offsets[e + 1] as scalars
            pair = kt.load(offsets, (e,), (2,), (experts + 1,))
            tiles_m += (kt.max(pair, 0) - kt.min(pair, 0) + BM - 1) // BM
        pid, programs = i32(kt.program_id(0)), i32(kt.num_programs(0))
        # the group cursor: group e holds M tiles first .. first + count - 1, rows lo .. hi - 1
        e, first, lo = 0, 0, 0
        hi = kt.sum(kt.load(offsets, (1,), (1,), (experts + 1,)), 0)
        count = (hi + BM - 1) // BM
        for i in range(0, (tiles_m * tiles_n - pid + programs - 1) // programs):  # a count: an scf.for
            tile = pid + i * programs
            mt = tile // tiles_n
            # tiles only grow: the cursor only moves forward (and never past the last group, even
            # for offsets no check has seen: a device array of a kind kaio cannot read back)
            while mt >= first + count and e + 1 < experts:
                e += 1
                first += count
                lo = hi
                hi = kt.sum(kt.load(offsets, (e + 1,), (1,), (experts + 1,)), 0)
                count = (hi - lo + BM - 1) // BM
            m0, n0 = lo + (mt - first) * BM, tile % tiles_n * BN
            end = min(hi, m0 + BM)  # the tile's last row + 1: the group's end bounds it
            acc = kt.zeros((BM, BN), f32)
            for k0 in range(0, k, BK):
                # rows of x past the group's end only make rows of y that are not stored: x is
                # bounded by its own size, w[e]'s K by the expert's own rows unless BK divides K
                a = kt.load(x, (m0, k0), (BM, BK), (m, k))
                if W_NK:  # w[e] stored (N, K), as nn.Linear weights are: its transpose
                    wt = kt.trans(kt.load(w, (e * n + n0, k0), (BN, BK), (experts * n, k)))
                elif K_TILED:
                    wt = kt.load(w, (e * k + k0, n0), (BK, BN), (experts * k, n))
                else:
                    wt = kt.load(w, (e * k + k0, n0), (BK, BN), (e * k + k, n))
                if FP8:  # in registers; every e4m3 value is exact in f16 and bf16
                    acc = kt.dot(a, IN(wt), acc)
                else:
                    acc = kt.dot(a, wt, acc)
            if SCALED == 1:
                acc = acc * f32(w_scale[e])
            if SCALED == 2:
                acc = acc * kt.expand_dims(f32(kt.load(w_scale, (e * n + n0,), (BN,), (e * n + n,))), 0)
            kt.store(y, (m0, n0), OUT(acc), (end, n))

    return grouped_matmul


def check_offsets(op: str, name: str, o: Operand, value: Any, experts: int, tokens: int) -> None:
    """int32 (E + 1,), 0 first, non-decreasing, ``tokens`` last (a device array is read back)."""
    take_index(op, name, o, (dtypes.i32,))
    if tuple(o.shape) != (experts + 1,):
        raise KaioTypeError(f"{op}: `{name}` must have shape ({experts + 1},) (experts + 1), got {tuple(o.shape)}")
    host = host_values(value)
    if host is None:
        return
    host = np.asarray(host, np.int64)
    if host[0] != 0:
        raise KaioValueError(f"{op}: `{name}`[0] must be 0, got {int(host[0])}")
    steps = np.diff(host)
    if (steps < 0).any():
        e = int(np.argmax(steps < 0))
        raise KaioValueError(
            f"{op}: `{name}` must be non-decreasing; `{name}`[{e + 1}] = {int(host[e + 1])} is below "
            f"`{name}`[{e}] = {int(host[e])}"
        )
    if host[-1] != tokens:
        raise KaioValueError(f"{op}: `{name}`[{experts}] must be the token count {tokens} (x's rows), got {int(host[-1])}")


def check(ops: Any, x: Any, w: Any, expert_offsets: Any, out_dtype: Any,
          read_values: bool = True) -> tuple[Operand, Operand, Operand, dtypes.ScalarType]:  # fmt: skip
    """The operands and the output type, or a kaio error naming the argument (``ops``: an
    ``Operands``, or ``torch_checks.TensorMetadata`` for a fake; ``read_values``: also read the
    offsets back, which a fake cannot)."""
    op = ops.op
    ox, ow, oo = ops.take("x", x), ops.take("w", w), ops.take("expert_offsets", expert_offsets)
    if ox.dtype not in INPUT_TYPES:
        raise KaioTypeError(f"{op}: `x` must be f16 or bf16, got {ox.dtype.name}")
    if ow.dtype not in (ox.dtype, E4M3):
        raise KaioTypeError(f"{op}: `w` is {ow.dtype.name} but `x` is {ox.dtype.name}: pass one type (or e4m3 weights)")
    if len(ox.shape) != 2:
        raise KaioTypeError(f"{op}: `x` must be (tokens, K), got shape {tuple(ox.shape)}")
    if len(ow.shape) != 3:
        raise KaioTypeError(f"{op}: `w` must be (experts, K, N), got shape {tuple(ow.shape)}")
    (tokens, k), (experts, k2, n) = ox.shape, ow.shape
    if k != k2:
        raise KaioTypeError(f"{op}: `x` is {tokens}x{k} but `w` is {experts}x{k2}x{n}: the K sizes differ")
    if experts == 0:
        raise KaioTypeError(f"{op}: `w` has no experts (shape {tuple(ow.shape)})")
    if any(s >= 2**31 for s in (tokens * k, experts * k * n, tokens * n)):
        raise KaioTypeError(f"{op}: arrays of 2**31 elements or more are too large")
    if isinstance(out_dtype, dtypes.ScalarType):
        out_dtype = out_dtype.name
    if out_dtype not in OUT_TYPES:
        raise KaioValueError(f"{op}: `out_dtype` must be one of {', '.join(map(repr, OUT_TYPES))}, got {out_dtype!r}")
    check_offsets(op, "expert_offsets", oo, expert_offsets if read_values else None, experts, tokens)
    return ox, ow, oo, OUT_TYPES[out_dtype]


def check_scale(op: str, name: str, o: Operand | None, experts: int, n: int) -> None:
    """A weight's scales: None, or f32 (E,) (one per expert) or (E, N) (one per output column)."""
    if o is not None and (o.dtype != dtypes.f32 or tuple(o.shape) not in ((experts,), (experts, n))):
        raise KaioTypeError(f"{op}: `{name}` must be f32 of shape ({experts},) or ({experts}, {n}) (per expert, or per "
                            f"expert and output column), got {o.dtype.name} {tuple(o.shape)}")  # fmt: skip


def is_fp8(w: Any) -> bool:
    """Whether an array argument holds fp8 values (numpy's ml_dtypes or torch's float8 types)."""
    return "float8" in str(getattr(w, "dtype", ""))


def require_fp8_arch(op: str, device: Any) -> None:
    from kaio.ops_library.scaled_matmul import require_arch

    require_arch(op, device, 89, "e4m3 weights (cvt.rn.f16x2.e4m3x2)")


def programs_for(device: Any, tiles: int) -> int:
    """As many programs as the device runs at once (by shared memory and threads), at most one
    per tile."""
    bm, bn, bk = BLOCK
    shared = STAGES * (bm * bk + bk * bn) * 2
    per_sm = min(device.shared_memory_per_block_optin // shared, 2048 // (32 * WARPS))
    return max(1, min(tiles, device.sm_count * max(per_sm, 1)))


def grouped_matmul(x: Any, w: Any, expert_offsets: Any, *, out_dtype: str = "f32", programs: int | None = None,
                   w_scale: Any = None, device: Any = None) -> Any:  # fmt: skip
    """``y`` (T, N): rows ``expert_offsets[e]:expert_offsets[e + 1]`` are ``x[rows] @ w[e]``
    (see the module doc); ``programs``: the persistent grid (default: what the device runs at
    once); ``w_scale``: f32 (E,) or (E, N), the product of expert e (column j) times it (e4m3
    weights' dequantisation scales, W8A16). Torch tensors of 16-bit weights go through
    ``torch.ops.kaio.grouped_matmul`` (autograd records it: ``grouped_matmul_backward``)."""
    op = "grouped_matmul"
    if isinstance(out_dtype, dtypes.ScalarType):
        out_dtype = out_dtype.name
    if programs is not None and (isinstance(programs, bool) or not isinstance(programs, int) or programs < 1):
        raise KaioTypeError(f"{op}: `programs` must be a positive int or None, got {programs!r}")
    if w_scale is not None or is_fp8(w):  # frozen quantised weights: run directly, no gradient
        refuse_grad(op, x, w, expert_offsets, w_scale, why="the fp8 or scaled weights are frozen")
        return run(x, w, expert_offsets, out_dtype, programs, device, w_scale)
    if (ops := torch_op(x, w, expert_offsets, device=device)) is not None:
        return ops.grouped_matmul(x, w, expert_offsets, out_dtype, programs)
    return run(x, w, expert_offsets, out_dtype, programs, device)


def run(x: Any, w: Any, expert_offsets: Any, out_dtype: str, programs: int | None, device: Any,
        w_scale: Any = None) -> Any:  # fmt: skip
    """The op itself, without the torch custom-op routing."""
    ops = Operands("grouped_matmul", x, w, expert_offsets, w_scale, device=device)
    ox, ow, oo, out = check(ops, x, w, expert_offsets, out_dtype)
    (tokens, k), (experts, _, n) = ox.shape, ow.shape
    osc = ops.take("w_scale", w_scale) if w_scale is not None else None
    check_scale(ops.op, "w_scale", osc, experts, n)
    if ow.dtype == E4M3:
        require_fp8_arch(ops.op, ops.device)
    oy = ops.output((tokens, n), out)
    launch(ops.device, ox, ow, oo, oy, experts, n, k, programs, w_scale=osc)
    return ops.result(oy)


def launch(device: Any, x: Operand, w: Operand, offsets: Operand, y: Operand, experts: int, n: int, k: int,
           programs: int | None = None, w_nk: bool = False, w_scale: Operand | None = None) -> None:  # fmt: skip
    """The launch on checked operands (``w_nk``: ``w`` is (E, N, K); ``w_scale``: e4m3 weights'
    f32 scales, (E,) or (E, N))."""
    tokens = x.shape[0]
    if not (tokens and n):
        return
    bm, bn, bk = BLOCK
    worst = (-(-tokens // bm) + experts) * -(-n // bn)  # every group may end in a partial tile
    grid = min(programs or programs_for(device, worst), worst)
    scale = w_scale or offsets  # no scales: any array fills the slot, never read
    grouped_matmul_kernel(x.dtype, y.dtype, w.dtype, scale.dtype).launch(
        device, x.value, w.value, offsets.value, y.value, scale.value, tokens, experts, n, k, grid=(grid,), BM=bm,
        BN=bn, BK=bk, BASE_X=base_alignment(x.ptr), BASE_W=base_alignment(w.ptr), BASE_Y=base_alignment(y.ptr),
        W_NK=w_nk, K_TILED=k % bk == 0, SCALED=0 if w_scale is None else len(w_scale.shape))  # fmt: skip
