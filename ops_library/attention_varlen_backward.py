"""``kaio.ops_library.attention_varlen_backward``: the gradients of
:func:`~kaio.ops_library.attention_varlen`, FlashAttention-2's backward pass over packed sequences.

    from kaio.ops_library import attention_varlen, attention_varlen_backward
    o, lse = attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, return_lse=True)
    dq, dk, dv = attention_varlen_backward(q, k, v, o, lse, do, cu_q, cu_k, max_q, max_k, causal=True)

The arguments mean what they mean to the forward (the packed ``(tokens, heads, D)`` layout, the
cumulative lengths, the same checks), plus the forward's output ``out`` and its ``(H, total_q)``
f32 logsumexp ``lse`` (``return_lse=True``) and the output's gradient ``grad_out`` (q's shape and
type); ``grad_lse`` (lse's shape) when a loss used the logsumexp. dq has q's shape and type, dk
and dv k's; with ``sinks``, also ``dsinks`` (f32, one per head), as
:func:`~kaio.ops_library.attention_backward` returns. ``deterministic=True``: dQ by its own
query-block-parallel kernel (bit-identical runs), else by atomics from the key-block kernel.
The kernels are attention_backward's (``VARLEN``: each program finds its sequence's rows from
the cumulative lengths and its head's columns, as the forward's do). No dropout; torch tensors
run the kernels directly (no custom op), and ``torch.compile`` is refused.
"""

from __future__ import annotations

import math
from typing import Any

from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library.attention import Dropout, Packed, _mod_operands, _scale, mods_given
from kaio.ops_library.attention_backward import _fill_zero, _launch
from kaio.ops_library.attention_varlen import _check_packed, _max_seqlen, take_cu_seqlens
from kaio.ops_library.autograd import refuse_traced
from kaio.ops_library.config_fields import bool_field
from kaio.ops_library.operands import Operand, Operands

OP = "attention_varlen_backward"


def attention_varlen_backward(
    q: Any, k: Any, v: Any, out: Any, lse: Any, grad_out: Any, cu_seqlens_q: Any, cu_seqlens_k: Any,
    max_seqlen_q: int, max_seqlen_k: int, *, causal: bool = False, scale: float | None = None, grad_lse: Any = None,
    deterministic: bool = False, device: Any = None, score_mod: Any = None, mask_mod: Any = None, mod_args: Any = (),
    window: Any = None, softcap: Any = None, alibi_slopes: Any = None, sinks: Any = None,
) -> tuple[Any, ...]:  # fmt: skip
    """(dq, dk, dv) of attention_varlen, and dsinks with ``sinks`` (see the module doc)."""
    causal = bool_field(OP, "causal", causal)
    deterministic = bool_field(OP, "deterministic", deterministic)
    scale = _scale(scale, OP)
    longest = (_max_seqlen("max_seqlen_q", max_seqlen_q), _max_seqlen("max_seqlen_k", max_seqlen_k))
    mods = mods_given(OP, score_mod, mask_mod, mod_args, window, softcap, alibi_slopes, sinks)
    refuse_traced(OP, q, k, v, out, lse, grad_out)
    ops = Operands(OP, q, k, v, out, lse, grad_out, cu_seqlens_q, cu_seqlens_k, grad_lse, alibi_slopes, sinks,
                   *mods.mod_args, device=device)  # fmt: skip
    oq, ok, ov = ops.take("q", q), ops.take("k", k), ops.take("v", v)
    total_q, total_k, h, hkv, d = _check_packed(oq, ok, ov, None)
    oo, odo = ops.take("out", out), ops.take("grad_out", grad_out)
    for name, x in (("out", oo), ("grad_out", odo)):
        if x.shape != oq.shape or x.dtype != oq.dtype:
            raise KaioTypeError(f"{OP}: `{name}` must be {oq.dtype.name} of shape {oq.shape} (q's), got {x.dtype.name} {x.shape}")
    olse = _statistics(ops, "lse", lse, (h, total_q))
    odlse = _statistics(ops, "grad_lse", grad_lse, (h, total_q)) if grad_lse is not None else None
    cu_q, cu_k = take_cu_seqlens(ops, cu_seqlens_q, cu_seqlens_k, total_q, total_k, longest, OP)
    batch = cu_q.shape[0] - 1
    mod_operands = _mod_operands(ops, mods, h, OP)
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    dq, dk, dv = ops.output(oq.shape, oq.dtype), ops.output(ok.shape, ok.dtype), ops.output(ok.shape, ok.dtype)
    dsinks = ops.output((h,), dtypes.f32) if mod_operands["sinks"] is not None else None
    if batch and h and total_q and longest[0] and (total_k or dsinks is not None):
        arrays = (oq, ok, ov, oo, olse, odo, odlse, None, dq, dk, dv, dsinks)
        _launch(ops, arrays, (batch, h, hkv, total_q, total_k, d), float(scale), causal, deterministic, Dropout(), mods,
                mod_operands, packed=Packed(cu_q.value, cu_k.value, longest))  # fmt: skip
    else:  # nothing flows back, but the gradients are written
        for x in (dq, dk, dv) + ((dsinks,) if dsinks is not None else ()):
            if math.prod(x.shape):
                _fill_zero(ops, x)
    grads = (ops.result(dq), ops.result(dk), ops.result(dv))
    return (*grads, ops.result(dsinks)) if dsinks is not None else grads


def _statistics(ops: Operands, name: str, value: Any, shape: tuple[int, int]) -> Operand:
    x = ops.take(name, value)
    if x.shape != shape or x.dtype != dtypes.f32:
        raise KaioTypeError(f"{OP}: `{name}` must be f32 of shape {shape} (the forward's (H, total_q) logsumexp), "
                            f"got {x.dtype.name} {x.shape}")  # fmt: skip
    return x
