"""What the memory-bound library ops share: rows, blocks, alignment, checks, the launch.

Every op here works on the last axis of its input: the array is seen as ``(rows, cols)``
(``rows`` = the product of the leading dims), one program owns ``R`` whole rows and walks them
in ``(R, C)`` tiles. A row that fits one tile (``cols <= C``) is read once and kept in
registers (``SINGLE``); a longer row loops over column blocks (two passes, or an online
statistic). Short rows share a program (``R > 1``), so a tile is always about
``TILE_ELEMENTS`` elements and every thread has several to move.

Rows longer than ``MAX_BLOCK`` are still kept whole, one row per program, up to the op's
one-pass limit (``ONE_PASS``: 16 elements per thread of a 1024-thread program; softmax, which
keeps fewer values live per element, ``ONE_PASS_LIGHT``: 32 per thread): more warps per row
instead of a second read of the row. Past the limit the registers would spill (see
``tests/ops_library/test_membound_codegen.py``), and the row loops over ``MAX_BLOCK`` blocks.
Rows not 16-byte aligned (their accesses are realigned at run time, which takes registers)
are kept whole up to ``ONE_PASS_UNALIGNED``.

Vector accesses: the kernels start with ``kt.multiple_of(array, BASE)`` where ``BASE`` is the
base address alignment of the caller's array (bytes, up to 16), and the launch specializes on
the largest power of two dividing ``cols``; with both at 16 bytes a thread moves 8 halfs (or 4
floats) per ``ld.global.v4``. A misaligned view (an array offset by one element) gets narrower
accesses, never a refusal.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library.operands import Operand, Operands

FLOAT_TYPES = (dtypes.f16, dtypes.bf16, dtypes.f32)
MAX_BLOCK = 4096  # columns per tile of a row that loops over blocks
TILE_ELEMENTS = 4096  # elements per program's tile (short rows: several rows per program)
ONE_PASS = 16384  # longest row kept in registers (read once): 1024 threads x 16 elements
ONE_PASS_LIGHT = 32768  # the same for ops with one live value per element (softmax): 32 each
ONE_PASS_UNALIGNED = 8192  # the limit for rows not proven 16-byte aligned (realigned accesses
# hold two chunks per 16 bytes: more registers)
MAX_ROW_WARPS = 32  # warps of a program holding one long row (1024 threads)
NEG_INF = float("-inf")


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class Blocks:
    """How a (rows, cols) problem is cut: R rows x C columns per tile, warps per program."""

    rows: int
    cols: int
    warps: int
    single: bool  # a row fits one tile: read once

    def grid(self, rows: int) -> int:
        return math.ceil(rows / self.rows)

    def constexprs(self, kernel: Any) -> dict[str, Any]:
        single = any(p.name == "SINGLE" for p in kernel.constexpr_params)  # kernels that loop over blocks
        return {"R": self.rows, "C": self.cols, **({"SINGLE": self.single} if single else {})}


def blocks(rows: int, cols: int, max_block: int | None = None, one_pass: int = 0, aligned: bool = True) -> Blocks:
    """The tiling of ``rows`` rows of ``cols`` elements (``max_block``: columns per tile cap;
    ``one_pass``: rows up to this long are one tile, several warps' registers, not a loop;
    ``aligned``: every row starts 16-byte aligned, else the limit is ``ONE_PASS_UNALIGNED``)."""
    if not aligned:
        one_pass = min(one_pass, ONE_PASS_UNALIGNED)
    if max_block is None and MAX_BLOCK < cols <= one_pass:
        c = next_pow2(cols)
        return Blocks(1, c, min(MAX_ROW_WARPS, c // 512), True)
    c = min(next_pow2(cols), max_block or MAX_BLOCK)
    r = max(1, min(next_pow2(rows), TILE_ELEMENTS // c))
    warps = max(1, min(8, r * c // 256))
    return Blocks(r, c, warps, cols <= c)


def reciprocal(cols: int) -> float:
    """``1 / f32(cols)`` rounded to f32, for kernels that average over a row: they multiply by it
    (one FMUL, the f32 quotient within an ulp) where a division by the run-time ``cols`` costs an
    IEEE ``div.rn.f32`` with its slow-path call, whose calling convention also makes ptxas rebuild
    the addresses and masks live across it."""
    import numpy as np

    return float(np.float32(1.0) / np.float32(cols))


def rows_aligned(cols: int, *operands: Any) -> bool:
    """Whether every row of these (rows, cols) arrays (None: absent) starts 16-byte aligned."""
    return all(o is None or (base_alignment(o.ptr) == 16 and cols * o.dtype.nbytes % 16 == 0) for o in operands)


def base_alignment(address: int) -> int:
    """Largest power of two (bytes, at most 16) the address is a multiple of."""
    align = 16
    while align > 1 and address % align:
        align //= 2
    return align


@cache
def with_warps(kernel: Any, warps: int) -> Any:
    return kernel.with_options(num_warps=warps)


def launch(kernel: Any, b: Blocks, grid: int | tuple[int, ...], args: tuple[Any, ...], device: Any,
           **constexprs: Any) -> None:  # fmt: skip
    """One launch of a row kernel, its warps and constexprs from ``b``."""
    grid = grid if isinstance(grid, tuple) else (grid,)
    with_warps(kernel, b.warps).launch(device, *args, grid=grid, **b.constexprs(kernel), **constexprs)


# --------------------------------------------------------------------------- checks


def take_float(ops: Operands, op: str, name: str, value: Any, min_rank: int = 1) -> Operand:
    """An f16/bf16/f32 array operand of at least ``min_rank`` dims."""
    o = ops.take(name, value)
    if o.dtype not in FLOAT_TYPES:
        raise KaioTypeError(f"{op}: `{name}` must be f16, bf16 or f32, got {o.dtype.name}")
    if len(o.shape) < min_rank:
        raise KaioTypeError(f"{op}: `{name}` must have at least {min_rank} dim(s), got shape {o.shape}")
    return o


def same_dtype(op: str, name: str, o: Operand, x: Operand) -> None:
    if o.dtype != x.dtype:
        raise KaioTypeError(f"{op}: `{name}` is {o.dtype.name} but `x` is {x.dtype.name}: pass one type")


def same_shape(op: str, name: str, o: Operand, shape: tuple[int, ...]) -> None:
    if tuple(o.shape) != tuple(shape):
        raise KaioTypeError(f"{op}: `{name}` must have shape {tuple(shape)}, got {tuple(o.shape)}")


def check_eps(op: str, eps: Any) -> Any:
    """``eps`` as a float, or a KaioTypeError. Traced by Dynamo (an op's Python wrapper inside
    torch.compile), nothing is checked here: the custom op's fake checks it (``torch_checks``),
    where the error reaches the caller as a kaio error instead of Dynamo's "observed exception"
    and no guard is put on eps's value."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.compiler.is_dynamo_compiling():
        return eps
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps > 0 or not math.isfinite(eps):
        raise KaioTypeError(f"{op}: `eps` must be a positive finite number, got {eps!r}")
    return float(eps)


def row_stats(ops: Operands, x: Operand, save: bool) -> Operand:
    """The f32 per-row statistic (shape ``x.shape[:-1]``) a forward saves for its backward, or,
    when not saving, a one-element stand-in for the kernel's unwritten parameter (torch: an
    empty tensor, no fill kernel)."""
    if save:
        return ops.output(tuple(x.shape[:-1]), dtypes.f32)
    if ops.torch:
        from kaio.runtime import tensors

        t = x.value.new_empty((1,), dtype=tensors.torch_dtype(dtypes.f32))
        return Operand(t, (1,), dtypes.f32, t.data_ptr())
    buf = ops.device.empty((1,), dtypes.f32.np_dtype)
    return Operand(buf, (1,), dtypes.f32, buf.ptr)


def rows_cols(shape: tuple[int, ...], op: str) -> tuple[int, int]:
    rows = math.prod(shape[:-1])
    cols = shape[-1]
    if rows >= 2**31 or cols >= 2**31 or rows * cols >= 2**31:
        raise KaioTypeError(f"{op}: arrays of {rows * cols} elements are too large (2**31 at most)")
    return rows, cols


# --------------------------------------------------------------------------- torch custom ops


def torch_op(*values: Any, device: Any = None) -> Any:
    """What a call with torch tensors goes through (every array argument a torch tensor; None
    for absent optional ones): ``torch.ops.kaio``, or its grad-checking form when a tensor
    requires grad (``device=`` honoured, see ``kaio.ops_library.autograd``); None when the op
    runs directly (other arrays, or ``device=`` without grad). torch is never imported here:
    whoever holds a tensor imported it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    arrays = [v for v in values if v is not None]
    if not arrays or not all(isinstance(v, torch.Tensor) for v in arrays):
        return None
    from kaio.ops_library.autograd import route

    return route(tuple(arrays), device)  # registers torch.ops.kaio on the first call
