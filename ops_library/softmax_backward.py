"""``kaio.ops_library.softmax_backward`` and ``log_softmax_backward``: the gradient of softmax
and log_softmax (along the last axis) from their output, as torch's ``_softmax_backward_data``.

    from kaio.ops_library import softmax_backward, log_softmax_backward
    dx = softmax_backward(dy, y)          # y = softmax(x):     dx = y * (dy - sum(dy * y))
    dx = log_softmax_backward(dy, y)      # y = log_softmax(x): dx = dy - exp(y) * sum(dy)

Only the output ``y`` is needed (what autograd saves). A row that fits one tile is read once
(the row sum and the result stay in registers); a longer row takes two passes over column
blocks: the sum, then the gradient. Sums in f32.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library import rows as rowops
from kaio.ops_library.operands import Operand, Operands
from kaio.prelude import Array, MutArray, exp, f32, i32


@cache
def softmax_backward_kernel(T: dtypes.ScalarType) -> Any:  # noqa: N803
    """The tile kernel for one storage type (``LOG``: log_softmax's gradient)."""

    @kaio.tile_kernel(num_warps=4)
    def softmax_backward(dy: Array[T], y: Array[T], dx: MutArray[T], rows: i32, cols: i32,
                         R: kaio.constexpr = 1, C: kaio.constexpr = 1024, SINGLE: kaio.constexpr = True,
                         LOG: kaio.constexpr = False, BASE_DY: kaio.constexpr = 16, BASE_Y: kaio.constexpr = 16,
                         BASE_DX: kaio.constexpr = 16):  # fmt: skip
        dy, y, dx = kt.multiple_of(dy, BASE_DY), kt.multiple_of(y, BASE_Y), kt.multiple_of(dx, BASE_DX)
        r0 = i32(kt.program_id(0)) * R
        if SINGLE:
            g = f32(kt.load(dy, (r0, 0), (R, C), (rows, cols)))
            t = f32(kt.load(y, (r0, 0), (R, C), (rows, cols)))
            if LOG:
                kt.store(dx, (r0, 0), T(g - exp(t) * kt.expand_dims(kt.sum(g, 1), 1)), (rows, cols))
            else:
                kt.store(dx, (r0, 0), T(t * (g - kt.expand_dims(kt.sum(g * t, 1), 1))), (rows, cols))
        else:
            s = kt.zeros((R,), f32)
            for k0 in range(0, cols, C):
                g = f32(kt.load(dy, (r0, k0), (R, C), (rows, cols)))
                if LOG:
                    s = s + kt.sum(g, 1)
                else:
                    s = s + kt.sum(g * f32(kt.load(y, (r0, k0), (R, C), (rows, cols))), 1)
            ss = kt.expand_dims(s, 1)
            for k0 in range(0, cols, C):
                g = f32(kt.load(dy, (r0, k0), (R, C), (rows, cols)))
                t = f32(kt.load(y, (r0, k0), (R, C), (rows, cols)))
                if LOG:
                    kt.store(dx, (r0, k0), T(g - exp(t) * ss), (rows, cols))
                else:
                    kt.store(dx, (r0, k0), T(t * (g - ss)), (rows, cols))

    return softmax_backward


def check(ops: Any, op: str, grad_y: Any, y: Any) -> tuple[Operand, Operand, int, int]:
    """The operands (``ops``: an ``Operands``, or tensor metadata for a fake), rows and cols."""
    oy = rowops.take_float(ops, op, "y", y)
    ody = rowops.take_float(ops, op, "grad_y", grad_y)
    rowops.same_shape(op, "grad_y", ody, oy.shape)
    if ody.dtype != oy.dtype:
        raise KaioTypeError(f"{op}: `grad_y` is {ody.dtype.name} but `y` is {oy.dtype.name}: pass one type")
    rows, cols = rowops.rows_cols(oy.shape, op)
    return ody, oy, rows, cols


def run(op: str, grad_y: Any, y: Any, log: bool, device: Any) -> Any:
    """The op itself, without the torch custom-op routing."""
    ops = Operands(op, grad_y, y, device=device)
    ody, oy, rows, cols = check(ops, op, grad_y, y)
    odx = ops.output(tuple(oy.shape), oy.dtype)
    if rows and cols:
        b = rowops.blocks(rows, cols, one_pass=rowops.ONE_PASS, aligned=rowops.rows_aligned(cols, ody, oy, odx))
        rowops.launch(softmax_backward_kernel(oy.dtype), b, b.grid(rows), (ody.value, oy.value, odx.value, rows, cols),
                      ops.device, LOG=log, BASE_DY=rowops.base_alignment(ody.ptr),
                      BASE_Y=rowops.base_alignment(oy.ptr), BASE_DX=rowops.base_alignment(odx.ptr))  # fmt: skip
    return ops.result(odx)


def softmax_backward(grad_y: Any, y: Any, *, device: Any = None) -> Any:
    """``y * (grad_y - sum(grad_y * y))`` along the last axis, for ``y = softmax(x)``."""
    if (ops := rowops.torch_op(grad_y, y, device=device)) is not None:
        return ops.softmax_backward(grad_y, y, False)
    return run("softmax_backward", grad_y, y, False, device)


def log_softmax_backward(grad_y: Any, y: Any, *, device: Any = None) -> Any:
    """``grad_y - exp(y) * sum(grad_y)`` along the last axis, for ``y = log_softmax(x)``."""
    if (ops := rowops.torch_op(grad_y, y, device=device)) is not None:
        return ops.softmax_backward(grad_y, y, True)
    return run("log_softmax_backward", grad_y, y, True, device)
