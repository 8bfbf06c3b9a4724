"""``kaio.ops_library.attention_varlen_backward``: the gradients of
:func:`~kaio.ops_library.attention_varlen`, FlashAttention-2's backward pass over packed sequences.

    from kaio.ops_library import attention_varlen, attention_varlen_backward
    o, lse = attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, return_lse=True)
    dq, dk, dv = attention_varlen_backward(q, k, v, o, lse, do, cu_q, cu_k, max_q, max_k, causal=True)

The arguments mean what they mean to the forward (the packed ``(tokens, heads, D)`` layout, the
cumulative lengths, the same checks), plus the forward's output ``out`` and its ``(H, total_q)``
f32 logsumexp ``lse`` (``return_lse=True``) and the output's gradient ``grad_out`` (the output's
shape, q's type); ``grad_lse`` (lse's shape) when a loss used the logsumexp. dq has q's shape and
type, dk k's, dv v's; with ``sinks``, also ``dsinks`` (f32, one per head), as
:func:`~kaio.ops_library.attention_backward` returns. ``deterministic=True``: dQ by its own
query-block-parallel kernel (bit-identical runs), else by atomics from the key-block kernel.
The kernels are attention_backward's (``VARLEN``: each program finds its sequence's rows from
the cumulative lengths and its head's columns, as the forward's do). With ``dropout_p`` and
``seed``, the forward's, the mask is regenerated; torch tensors
go through the custom op ``torch.ops.kaio.attention_varlen_backward`` (the forward's autograd
runs it; ``torch.compile`` traces it), which has no backward itself: a second derivative is
refused at the call.
"""

from __future__ import annotations

import math
from typing import Any

from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library.attention import Dropout, Mods, Packed, _mod_operands, _scale, mods_given
from kaio.ops_library.attention_backward import _fill_zero, _launch, check_outputs, forward_dropout
from kaio.ops_library.random_args import seed_as_int64
from kaio.ops_library.attention_varlen import _check_packed, _max_seqlen, take_cu_seqlens
from kaio.ops_library.autograd import refuse_grad
from kaio.ops_library.config_fields import bool_field
from kaio.ops_library.operands import Operand, Operands
from kaio.ops_library.rows import torch_op

OP = "attention_varlen_backward"


def attention_varlen_backward(
    q: Any, k: Any, v: Any, out: Any, lse: Any, grad_out: Any, cu_seqlens_q: Any, cu_seqlens_k: Any,
    max_seqlen_q: int, max_seqlen_k: int, *, causal: bool = False, scale: float | None = None, grad_lse: Any = None,
    deterministic: bool = False, device: Any = None, score_mod: Any = None, mask_mod: Any = None, mod_args: Any = (),
    window: Any = None, softcap: Any = None, alibi_slopes: Any = None, sinks: Any = None, dropout_p: float = 0.0,
    seed: Any = None,
) -> tuple[Any, ...]:  # fmt: skip
    """(dq, dk, dv) of attention_varlen, and dsinks with ``sinks`` (see the module doc)."""
    drop = forward_dropout(OP, dropout_p, seed)
    causal = bool_field(OP, "causal", causal)
    deterministic = bool_field(OP, "deterministic", deterministic)
    scale = _scale(scale, OP)
    longest = (_max_seqlen("max_seqlen_q", max_seqlen_q), _max_seqlen("max_seqlen_k", max_seqlen_k))
    mods = mods_given(OP, score_mod, mask_mod, mod_args, window, softcap, alibi_slopes, sinks)
    if (ops_ns := torch_op(q, k, v, out, lse, grad_out, cu_seqlens_q, cu_seqlens_k, grad_lse, alibi_slopes, sinks,
                           *mods.mod_args, device=device)) is not None:  # fmt: skip
        from kaio.ops_library.attention_mods import mod_arg_slots, mods_key

        left, right = mods.window if mods.window is not None else (-1, -1)
        *grads, dsinks = ops_ns.attention_varlen_backward(
            q, k, v, out, lse, grad_out, cu_seqlens_q, cu_seqlens_k, *longest, causal, scale, grad_lse, deterministic,
            left, right, mods.softcap or 0.0, alibi_slopes, mods_key(mods.score_mod, mods.mask_mod),
            *mod_arg_slots(OP, mods.mod_args), sinks, drop.p, seed_as_int64(drop.seed),
        )
        return (*grads, dsinks) if sinks is not None else tuple(grads)
    # not all torch tensors: the kernels run directly, and nothing would record a second derivative
    refuse_grad(OP, q, k, v, out, lse, grad_out, grad_lse, sinks, why="some arrays are not torch tensors")
    return run(q, k, v, out, lse, grad_out, cu_seqlens_q, cu_seqlens_k, longest, causal, scale, grad_lse,
               deterministic, device, mods, drop)


def run(q: Any, k: Any, v: Any, out: Any, lse: Any, grad_out: Any, cu_seqlens_q: Any, cu_seqlens_k: Any,
        longest: tuple[int, int], causal: bool, scale: float | None, grad_lse: Any, deterministic: bool, device: Any,
        mods: Mods, dropout: Dropout = Dropout()) -> tuple[Any, ...]:  # fmt: skip
    """The op itself, its scalar arguments checked, without the torch custom-op routing."""
    ops = Operands(OP, q, k, v, out, lse, grad_out, cu_seqlens_q, cu_seqlens_k, grad_lse, mods.alibi_slopes,
                   mods.sinks, *mods.mod_args, device=device)  # fmt: skip
    oq, ok, ov = ops.take("q", q), ops.take("k", k), ops.take("v", v)
    total_q, total_k, h, hkv, d = _check_packed(oq, ok, ov, None)
    check_outputs(ops, OP, out, grad_out, oq, ov)
    oo, odo = ops.take("out", out), ops.take("grad_out", grad_out)
    olse = _statistics(ops, "lse", lse, (h, total_q))
    odlse = _statistics(ops, "grad_lse", grad_lse, (h, total_q)) if grad_lse is not None else None
    cu_q, cu_k = take_cu_seqlens(ops, cu_seqlens_q, cu_seqlens_k, total_q, total_k, longest, OP)
    batch = cu_q.shape[0] - 1
    mod_operands = _mod_operands(ops, mods, h, OP)
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    dq, dk, dv = ops.output(oq.shape, oq.dtype), ops.output(ok.shape, ok.dtype), ops.output(ov.shape, ov.dtype)
    dsinks = ops.output((h,), dtypes.f32) if mod_operands["sinks"] is not None else None
    if batch and h and total_q and longest[0] and (total_k or dsinks is not None):
        arrays = (oq, ok, ov, oo, olse, odo, odlse, None, dq, dk, dv, dsinks)
        _launch(ops, arrays, (batch, h, hkv, total_q, total_k, d), float(scale), causal, deterministic, dropout, mods,
                mod_operands, packed=Packed(cu_q.value, cu_k.value, longest))  # fmt: skip
    else:  # nothing flows back, but the gradients are written
        for x in (dq, dk, dv) + ((dsinks,) if dsinks is not None else ()):
            if math.prod(x.shape):
                _fill_zero(ops, x)
    grads = (ops.result(dq), ops.result(dk), ops.result(dv))
    return (*grads, ops.result(dsinks)) if dsinks is not None else grads


def check_saved(q: Any, k: Any, v: Any, out: Any, lse: Any, grad_out: Any, grad_lse: Any, cu_seqlens_q: Any,
                cu_seqlens_k: Any) -> int:  # fmt: skip
    """What :func:`run` checks on torch tensors' metadata alone (the custom op's fake runs it):
    H, for the mods' per-head arrays."""
    from kaio.ops_library.attention_varlen import check_tensors
    from kaio.ops_library.torch_checks import TensorMetadata

    total_q, _, h, _, _ = check_tensors(OP, q, k, v, cu_seqlens_q, cu_seqlens_k)
    meta = TensorMetadata(OP)
    check_outputs(meta, OP, out, grad_out, meta.take("q", q), meta.take("v", v))
    _statistics(meta, "lse", lse, (h, total_q))  # type: ignore[arg-type]
    if grad_lse is not None:
        _statistics(meta, "grad_lse", grad_lse, (h, total_q))  # type: ignore[arg-type]
    return h


def _statistics(ops: Operands, name: str, value: Any, shape: tuple[int, int]) -> Operand:
    x = ops.take(name, value)
    if x.shape != shape or x.dtype != dtypes.f32:
        raise KaioTypeError(f"{OP}: `{name}` must be f32 of shape {shape} (the forward's (H, total_q) logsumexp), "
                            f"got {x.dtype.name} {x.shape}")  # fmt: skip
    return x
