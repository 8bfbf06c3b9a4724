"""``attention_varlen`` and its backward as ``torch.library`` custom ops:
``torch.ops.kaio.attention_varlen`` (the packed output and its ``(H, total_q)`` f32 logsumexp)
and ``torch.ops.kaio.attention_varlen_backward`` (dq, dk, dv, dsinks), with the forward's
autograd through the backward, as ``torch_ops`` does for ``attention``.

The schemas carry what the Python ops take, in their order: the packed q, k, v, the two
cumulative lengths and the two longest lengths, then ``causal``, ``scale``, ``config`` (its
label), and the mods as ``attention``'s schema carries them (a window side of -1: none; a
softcap of 0: none; the score and mask functions by their ``mods_key``; ``mod_args`` as four
optional tensors; ``alibi_slopes``, ``sinks``), then ``dropout_p`` and the int64 ``seed`` (the
backward regenerates the mask from them).
``out=`` is no argument: a call with it runs the kernel directly, and refuses grads there.

Each implementation and fake runs the same metadata checks (``attention_varlen.check_tensors``,
the mods' arrays), so ``torch.compile`` refuses what the op refuses, with the same kaio error;
the cumulative lengths' values are checked by the implementation alone, on the host, before
any launch (a fake tensor has no values). The backward saves the logsumexp, not the
probabilities: the backward kernels recompute them, as FlashAttention-2's do.

``register()`` defines them (``torch_registration`` calls it after ``torch_ops.register``,
which marks ``mods_key`` a constant for Dynamo); importing this module imports torch and
registers nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from kaio.ops_library.autograd import define_op, op_device, register_autograd
from kaio.ops_library.attention import schema_mods

FORWARD = "attention_varlen"
BACKWARD = "attention_varlen_backward"


def register() -> None:
    define_op("kaio::attention_varlen", _attention_varlen, _attention_varlen_fake)
    define_op("kaio::attention_varlen_backward", _attention_varlen_backward, _attention_varlen_backward_fake)
    register_autograd("kaio::attention_varlen", _attention_varlen_grad, _attention_varlen_setup)


def _dropout(dropout_p: float, seed: int) -> Any:
    """The schema's ``dropout_p`` and int64 ``seed`` as the kernels take them."""
    from kaio.ops_library.attention import Dropout

    return Dropout(dropout_p, seed % (1 << 64)) if dropout_p > 0 else Dropout()


def _longest(op: str, max_seqlen_q: Any, max_seqlen_k: Any) -> tuple[int, int]:
    """The two longest lengths checked as the Python ops check them; a symbolic size (a
    ``torch.compile`` trace with dynamic shapes) is left for the implementation to check."""
    from kaio.ops_library.attention_varlen import _max_seqlen

    def checked(name: str, value: Any) -> Any:
        return value if isinstance(value, torch.SymInt) else _max_seqlen(name, value)

    return checked("max_seqlen_q", max_seqlen_q), checked("max_seqlen_k", max_seqlen_k)


def _attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int,
                      max_seqlen_k: int, causal: bool = False, scale: float | None = None, config: str | None = None,
                      window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                      alibi_slopes: Tensor | None = None, mods: str | None = None, mod_arg0: Tensor | None = None,
                      mod_arg1: Tensor | None = None, mod_arg2: Tensor | None = None, mod_arg3: Tensor | None = None,
                      sinks: Tensor | None = None, dropout_p: float = 0.0, seed: int = 0, *, device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """(out, lse): the packed output and the f32 ``(H, total_q)`` logsumexp the backward
    recomputes the probabilities from."""
    from kaio.ops_library.attention import _scale, config_from_label
    from kaio.ops_library.attention_varlen import attention_varlen, check_tensors

    check_tensors(FORWARD, q, k, v, cu_seqlens_q, cu_seqlens_k)
    longest = _longest(FORWARD, max_seqlen_q, max_seqlen_k)
    given = schema_mods(FORWARD, window_left, window_right, softcap, alibi_slopes, mods,
                         (mod_arg0, mod_arg1, mod_arg2, mod_arg3), sinks)  # fmt: skip
    return attention_varlen.run(q, k, v, cu_seqlens_q, cu_seqlens_k, longest, causal, _scale(scale, FORWARD), None, True,  # type: ignore[no-any-return]
                                op_device(device), config_from_label(config), given, _dropout(dropout_p, seed))  # fmt: skip


def _attention_varlen_fake(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                           max_seqlen_q: int, max_seqlen_k: int, causal: bool = False, scale: float | None = None,
                           config: str | None = None, window_left: int = -1, window_right: int = -1,
                           softcap: float = 0.0, alibi_slopes: Tensor | None = None, mods: str | None = None,
                           mod_arg0: Tensor | None = None, mod_arg1: Tensor | None = None,
                           mod_arg2: Tensor | None = None, mod_arg3: Tensor | None = None,
                           sinks: Tensor | None = None, dropout_p: float = 0.0, seed: int = 0, *, device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    from kaio.ops_library.attention import _scale, check_mod_tensors, output_shape
    from kaio.ops_library.attention_varlen import check_tensors

    total_q, _, h, _, _ = check_tensors(FORWARD, q, k, v, cu_seqlens_q, cu_seqlens_k)
    _longest(FORWARD, max_seqlen_q, max_seqlen_k)
    _scale(scale, FORWARD)
    given = schema_mods(FORWARD, window_left, window_right, softcap, alibi_slopes, mods,
                         (mod_arg0, mod_arg1, mod_arg2, mod_arg3), sinks)  # fmt: skip
    check_mod_tensors(FORWARD, given, h)
    return q.new_empty(output_shape(q, v)), q.new_empty((h, total_q), dtype=torch.float32)


def _attention_varlen_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor,
                               cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                               causal: bool = False, scale: float | None = None, grad_lse: Tensor | None = None,
                               deterministic: bool = False, window_left: int = -1, window_right: int = -1,
                               softcap: float = 0.0, alibi_slopes: Tensor | None = None, mods: str | None = None,
                               mod_arg0: Tensor | None = None, mod_arg1: Tensor | None = None,
                               mod_arg2: Tensor | None = None, mod_arg3: Tensor | None = None,
                               sinks: Tensor | None = None, dropout_p: float = 0.0, seed: int = 0, *,
                               device: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """(dq, dk, dv, dsinks): dsinks f32 (H,) with ``sinks``, else empty (a schema returns a
    fixed number of tensors)."""
    from kaio.ops_library.attention import _scale
    from kaio.ops_library.attention_varlen_backward import check_saved, run

    check_saved(q, k, v, out, lse, grad_out, grad_lse, cu_seqlens_q, cu_seqlens_k)
    longest = _longest(BACKWARD, max_seqlen_q, max_seqlen_k)
    given = schema_mods(BACKWARD, window_left, window_right, softcap, alibi_slopes, mods,
                         (mod_arg0, mod_arg1, mod_arg2, mod_arg3), sinks)  # fmt: skip
    grads = run(q, k, v, out, lse, grad_out, cu_seqlens_q, cu_seqlens_k, longest, causal, _scale(scale, BACKWARD),
                grad_lse, deterministic, op_device(device), given, _dropout(dropout_p, seed))  # fmt: skip
    return (*grads, q.new_empty((0,), dtype=torch.float32)) if sinks is None else grads  # type: ignore[return-value]


def _attention_varlen_backward_fake(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor,
                                    cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    causal: bool = False, scale: float | None = None, grad_lse: Tensor | None = None,
                                    deterministic: bool = False, window_left: int = -1, window_right: int = -1,
                                    softcap: float = 0.0, alibi_slopes: Tensor | None = None, mods: str | None = None,
                                    mod_arg0: Tensor | None = None, mod_arg1: Tensor | None = None,
                                    mod_arg2: Tensor | None = None, mod_arg3: Tensor | None = None,
                                    sinks: Tensor | None = None, dropout_p: float = 0.0, seed: int = 0, *,
                                    device: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    from kaio.ops_library.attention import _scale, check_mod_tensors
    from kaio.ops_library.attention_varlen_backward import check_saved

    h = check_saved(q, k, v, out, lse, grad_out, grad_lse, cu_seqlens_q, cu_seqlens_k)
    _longest(BACKWARD, max_seqlen_q, max_seqlen_k)
    _scale(scale, BACKWARD)
    given = schema_mods(BACKWARD, window_left, window_right, softcap, alibi_slopes, mods,
                         (mod_arg0, mod_arg1, mod_arg2, mod_arg3), sinks)  # fmt: skip
    check_mod_tensors(BACKWARD, given, h)
    dsinks = q.new_empty((h if sinks is not None else 0,), dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks


# the forward's schema after (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k),
# with its defaults: causal, scale, config, window_left, window_right, softcap, alibi_slopes,
# mods, the four mod_args slots, sinks, dropout_p, seed
_TAIL = (False, None, None, -1, -1, 0.0, None, None, None, None, None, None, None, 0.0, 0)


def _attention_varlen_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, cu_q, cu_k, max_q, max_k, *rest = inputs
    rest += _TAIL[len(rest):]
    causal, scale, _, window_left, window_right, softcap, alibi_slopes, mods, *mod_args, sinks, dropout_p, seed = rest
    ctx.save_for_backward(q, k, v, *output, cu_q, cu_k, alibi_slopes, sinks, *mod_args)  # the logsumexp, not P
    ctx.longest = (max_q, max_k)
    ctx.causal, ctx.scale = causal, scale
    ctx.mods = (window_left, window_right, softcap)
    ctx.functions = mods
    ctx.dropout = (dropout_p, seed)  # the backward regenerates the mask


def _attention_varlen_grad(ctx: Any, grad_out: Tensor, grad_lse: Tensor) -> tuple[Tensor | None, ...]:
    q, k, v, out, lse, cu_q, cu_k, alibi_slopes, sinks, *mod_args = ctx.saved_tensors
    dq, dk, dv, dsinks = torch.ops.kaio.attention_varlen_backward(
        q, k, v, out, lse, grad_out.contiguous(), cu_q, cu_k, *ctx.longest, ctx.causal, ctx.scale,
        grad_lse.contiguous(), False, *ctx.mods, alibi_slopes, ctx.functions, *mod_args, sinks, *ctx.dropout,
        device=ctx.kaio_device,
    )
    # no gradient for the lengths, the flags, the built-in mods' numbers and slopes, the functions' arrays, dropout's
    return dq, dk, dv, *(None,) * (4 + len(_TAIL) - 3), dsinks if sinks is not None else None, None, None
