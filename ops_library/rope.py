"""``kaio.ops_library.rope``: rotary position embeddings on the last axis.

    from kaio.ops_library import rope
    q = rope(q, cos, sin)                     # q: (B, S, H, D) or (B, H, S, D); cos, sin: (S, D/2)
    q = rope(q, cos, sin, interleaved=True)   # pairs (2i, 2i+1) instead of halves (i, i + D/2)
    q = rope(q, cos, sin, layout="bhsd")      # say the layout when S == H
    dq = rope_backward(dq_rot, cos, sin)      # the gradient: the rotation back (rope's arguments)

Each pair ``(a, b)`` of a row at position ``s`` becomes ``(a cos - b sin, b cos + a sin)`` with
``cos[s, i]``, ``sin[s, i]``: the pairs are ``(x[i], x[i + D/2])`` (the "rotate half" form of
Llama/NeoX code) or, with ``interleaved=True``, ``(x[2i], x[2i + 1])`` (GPT-J, the original
paper). ``x`` is f16, bf16 or f32; ``cos`` and ``sin`` have x's type or f32. The result is a new
array of x's shape, type and kind.

The layout: ``layout="bshd"`` or ``"bhsd"``; by default it is told from the shapes: the axis
(1 or 2) of x whose size is ``cos.shape[0]`` is the sequence axis. When both are (S == H) the
call is ambiguous and must name the layout.

``bshd``: a program owns one position of one sequence and a block of heads, so one row of
cos/sin serves every head; ``bhsd``: one head and a block of positions, with the matching
block of cos/sin rows. The interleaved form reads pairs with gathers (scalar accesses).
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, f32, i32

LAYOUTS = ("bshd", "bhsd")
TILE_ELEMENTS = 2048  # per half: a program holds two halves of x, cos, sin
GATHER_ELEMENTS = 512  # per half, interleaved: gathers take registers for every address


def rope_blocks(inner: int, half: int, interleaved: bool) -> rowops.Blocks:
    """R rows (heads or positions) x C pairs per program, and its warps."""
    c = rowops.next_pow2(half)
    r = max(1, min(rowops.next_pow2(inner), (GATHER_ELEMENTS if interleaved else TILE_ELEMENTS) // c))
    return rowops.Blocks(r, c, max(1, min(8, r * c // 256)), True)


@cache
def rope_kernel(T: dtypes.ScalarType, CT: dtypes.ScalarType) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4)
    def rope(x: Array[T], cos: Array[CT], sin: Array[CT], y: MutArray[T], S: i32, H: i32, half: i32,
             R: kaio.constexpr = 1, C: kaio.constexpr = 64, BSHD: kaio.constexpr = True,
             INTERLEAVED: kaio.constexpr = False, INVERSE: kaio.constexpr = False, BASE_X: kaio.constexpr = 16,
             BASE_C: kaio.constexpr = 16,
             BASE_S: kaio.constexpr = 16, BASE_Y: kaio.constexpr = 16):  # fmt: skip
        x, y = kt.multiple_of(x, BASE_X), kt.multiple_of(y, BASE_Y)
        cos, sin = kt.multiple_of(cos, BASE_C), kt.multiple_of(sin, BASE_S)
        p0, blk = i32(kt.program_id(0)), i32(kt.program_id(1)) * R
        d = half * 2
        if BSHD:  # one position of one sequence, heads blk..blk+R: one row of cos/sin for all
            row0 = p0 * H + blk
            end = p0 * H + H
            s0 = p0 % S * half
            c = kt.expand_dims(f32(kt.load(cos, (s0,), (C,), (s0 + half,))), 0)
            sn = kt.expand_dims(f32(kt.load(sin, (s0,), (C,), (s0 + half,))), 0)
        else:  # one head of one sequence, positions blk..blk+R
            row0 = p0 * S + blk
            end = p0 * S + S
            c = f32(kt.load(cos, (blk, 0), (R, C), (S, half)))
            sn = f32(kt.load(sin, (blk, 0), (R, C), (S, half)))
        if INVERSE:  # the backward: the rotation by -angle (its transpose)
            sn = -sn
        if INTERLEAVED:
            # (bool tiles must not change layout: a compiler bug, see test_tile_bugs_membound)
            r = kt.broadcast_to(kt.expand_dims(kt.arange(R) + row0, 1), (R, C))
            j = kt.broadcast_to(kt.expand_dims(kt.arange(C), 0), (R, C))
            even = r * d + j * 2
            ok = (r < end) & (j < half)
            a = f32(kt.load(x, even, mask=ok))
            b = f32(kt.load(x, even + 1, mask=ok))
            kt.store(y, even, T(a * c - b * sn), mask=ok)
            kt.store(y, even + 1, T(b * c + a * sn), mask=ok)
        else:
            a = f32(kt.load(x, (row0, 0), (R, C), (end, half), strides=(d, 1)))
            b = f32(kt.load(x, (row0, half), (R, C), (end, d), strides=(d, 1)))
            kt.store(y, (row0, 0), T(a * c - b * sn), (end, half), strides=(d, 1))
            kt.store(y, (row0, half), T(b * c + a * sn), (end, d), strides=(d, 1))

    return rope


def _layout(x_shape: tuple[int, ...], s: int, layout: str | None) -> str:
    if layout is not None:
        if layout not in LAYOUTS:
            raise KaioTypeError(f"rope: `layout` is 'bshd', 'bhsd' or None (from the shapes), got {layout!r}")
        axis = 1 if layout == "bshd" else 2
        if x_shape[axis] != s:
            raise KaioTypeError(
                f"rope: `cos` has {s} rows but x {x_shape} ({layout}) has {x_shape[axis]} positions"
            )
        return layout
    on1, on2 = x_shape[1] == s, x_shape[2] == s
    if on1 and on2:
        raise KaioTypeError(
            f"rope: x {x_shape} has S = H = {s}: pass layout='bshd' or layout='bhsd'"
        )
    if not on1 and not on2:
        raise KaioTypeError(
            f"rope: `cos` has {s} rows, but neither axis 1 nor axis 2 of x {x_shape} has that size"
        )
    return "bshd" if on1 else "bhsd"


def rope(x: Any, cos: Any, sin: Any, interleaved: bool = False, *, layout: str | None = None,
         device: Any = None) -> Any:  # fmt: skip
    """Rotary embeddings of x (B, S, H, D) or (B, H, S, D) by cos, sin (S, D/2); see the module doc."""
    _check_options("rope", interleaved, layout)
    if (ops := rowops.torch_op(x, cos, sin, device=device)) is not None:
        return ops.rope(x, cos, sin, interleaved, layout)
    return run(x, cos, sin, interleaved, layout, device)


def rope_backward(grad_out: Any, cos: Any, sin: Any, interleaved: bool = False, *, layout: str | None = None,
                  device: Any = None) -> Any:  # fmt: skip
    """The gradient of ``rope``'s input from its output's, ``grad_out`` (rope's arguments
    otherwise): each pair rotated back, ``(a cos + b sin, b cos - a sin)``. One launch of the
    forward's kernel with the sine negated; the same layouts, types and checks."""
    _check_options("rope_backward", interleaved, layout)
    if (ops := rowops.torch_op(grad_out, cos, sin, device=device)) is not None:
        return ops.rope_backward(grad_out, cos, sin, interleaved, layout)
    return run(grad_out, cos, sin, interleaved, layout, device, inverse=True)


def _check_options(op: str, interleaved: Any, layout: Any) -> None:
    if not isinstance(interleaved, bool):
        raise KaioTypeError(f"{op}: `interleaved` must be a bool, got {interleaved!r}")
    if layout is not None and layout not in LAYOUTS:
        raise KaioTypeError(f"{op}: `layout` is 'bshd', 'bhsd' or None (from the shapes), got {layout!r}")


def take_operands(ops: Any, op: str, name: str, x: Any, cos: Any, sin: Any,
                  layout: str | None) -> tuple[Operand, Operand, Operand, str]:  # fmt: skip
    """x (named ``name``), cos and sin as operands, checked, and the layout. ``ops``: the call's
    Operands, or anything with its ``take`` (the torch fakes check tensors' metadata alone)."""
    ox = rowops.take_float(ops, op, name, x)
    oc = rowops.take_float(ops, op, "cos", cos)
    osn = rowops.take_float(ops, op, "sin", sin)
    if len(ox.shape) != 4:
        raise KaioTypeError(f"{op}: `{name}` must be 4-D, (B, S, H, D) or (B, H, S, D), got shape {tuple(ox.shape)}")
    dim = ox.shape[3]
    if dim % 2:
        raise KaioTypeError(f"{op}: the head dim of `{name}` must be even, got {dim}")
    half = dim // 2
    if len(oc.shape) != 2 or oc.shape[1] != half:
        raise KaioTypeError(f"{op}: `cos` must have shape (S, {half}), got {tuple(oc.shape)}")
    rowops.same_shape(op, "sin", osn, tuple(oc.shape))
    if oc.dtype != osn.dtype:
        raise KaioTypeError(f"{op}: `cos` is {oc.dtype.name} but `sin` is {osn.dtype.name}: pass one type")
    if oc.dtype not in (ox.dtype, dtypes.f32):
        raise KaioTypeError(f"{op}: `cos` must be f32 or {ox.dtype.name} (x's type), got {oc.dtype.name}")
    lay = _layout(tuple(ox.shape), oc.shape[0], layout)
    rowops.rows_cols(tuple(ox.shape), op)
    return ox, oc, osn, lay


def run(x: Any, cos: Any, sin: Any, interleaved: bool, layout: str | None, device: Any,
        inverse: bool = False) -> Any:  # fmt: skip
    """The op itself, without the torch custom-op routing (``inverse``: ``rope_backward``, x
    being the output's gradient)."""
    op = "rope_backward" if inverse else "rope"
    ops = Operands(op, x, cos, sin, device=device)
    ox, oc, osn, lay = take_operands(ops, op, "grad_out" if inverse else "x", x, cos, sin, layout)
    bsz, a1, a2, dim = ox.shape
    half = dim // 2
    s = oc.shape[0]
    oy = ops.output(tuple(ox.shape), ox.dtype)
    if ox.shape and math.prod(ox.shape):
        heads = a2 if lay == "bshd" else a1
        inner = heads if lay == "bshd" else s  # rows a program's block walks
        b = rope_blocks(inner, half, interleaved)
        grid = (bsz * (s if lay == "bshd" else heads), math.ceil(inner / b.rows))
        args = (ox.value, oc.value, osn.value, oy.value, s, heads, half)
        al = rowops.base_alignment
        rowops.launch(rope_kernel(ox.dtype, oc.dtype), b, grid, args, ops.device, BSHD=lay == "bshd",
                      INTERLEAVED=interleaved, INVERSE=inverse, BASE_X=al(ox.ptr), BASE_C=al(oc.ptr),
                      BASE_S=al(osn.ptr), BASE_Y=al(oy.ptr))  # fmt: skip
    return ops.result(oy)
