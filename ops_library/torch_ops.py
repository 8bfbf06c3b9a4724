"""The memory-bound ops as ``torch.library`` custom ops: ``torch.ops.kaio.softmax``,
``layer_norm``, ``rms_norm``, ``add_rms_norm``, ``rope``, ``gated_activation``,
``cross_entropy``; and ``attention`` with its backward.

Each op called with torch tensors (and no ``device=``) goes through these, as ``matmul`` does,
so ``torch.compile`` sees one opaque op with a fake implementation instead of tracing into kaio.
Each op's implementation and fake run the same check (``torch_checks``): what the real op
refuses, tracing refuses too, with the same kaio error. Every op takes the keyword-only
``device`` (a kaio device as a string, ``autograd.device_label``) and launches there, else on
the operands' device; a library op's ``device=`` reaches it when the call requires grad or is
traced by ``torch.compile`` (``autograd.route``), and its backward launches there too.

``register()`` defines them (``torch_registration`` calls it, on an op's first torch call or
``import kaio.torch``); importing this module imports torch and registers nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from kaio.ops_library import torch_checks as checks
from kaio.ops_library.activations import SILU
from kaio.ops_library.activations import run as run_gated
from kaio.ops_library.attention import schema_blocks, schema_mods
from kaio.ops_library.attention_mods import mods_key
from kaio.ops_library.autograd import (
    define_op,
    device_label,
    direct_run_traced,
    op_device,
    register_autograd,
    require_backward,
)
from kaio.ops_library.cross_entropy import run as run_cross_entropy
from kaio.ops_library.norms import run_layer_norm, run_rms_norm
from kaio.ops_library.rope import run as run_rope
from kaio.ops_library.softmax import run as run_softmax


def register() -> None:
    # Dynamo runs these while tracing a library op (its device=; whether a call that needs grad
    # has a backward; a call that runs kernels directly) and keeps what they return; what they
    # raise stops the compile, as its cause
    torch.compiler.assume_constant_result(device_label)
    torch.compiler.assume_constant_result(require_backward)
    torch.compiler.assume_constant_result(direct_run_traced)
    torch.compiler.assume_constant_result(mods_key)

    define_op("kaio::softmax", _softmax, _softmax_fake)
    define_op("kaio::layer_norm", _layer_norm, _layer_norm_fake)
    define_op("kaio::rms_norm", _rms_norm, _rms_norm_fake)
    define_op("kaio::add_rms_norm", _add_rms_norm, _add_rms_norm_fake)
    define_op("kaio::rope", _rope, _rope_fake)
    define_op("kaio::gated_activation", _gated, _gated_fake)
    define_op("kaio::cross_entropy", _cross_entropy, _cross_entropy_fake)
    define_op("kaio::attention", _attention, _attention_fake)
    define_op("kaio::attention_backward", _attention_backward, _attention_backward_fake)
    register_autograd("kaio::attention", _attention_grad, _attention_setup)


def _softmax(x: Tensor, log: bool = False, *, device: str | None = None) -> Tensor:
    checks.check_softmax(x, log)
    return run_softmax("log_softmax" if log else "softmax", x, log, op_device(device))  # type: ignore[no-any-return]


def _softmax_fake(x: Tensor, log: bool = False, *, device: str | None = None) -> Tensor:
    checks.check_softmax(x, log)
    return torch.empty_like(x)


def _layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, *, device: str | None = None) -> Tensor:
    checks.check_layer_norm(x, weight, bias, eps)
    return run_layer_norm(x, weight, bias, eps, op_device(device))  # type: ignore[no-any-return]


def _layer_norm_fake(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, *, device: str | None = None) -> Tensor:
    checks.check_layer_norm(x, weight, bias, eps)
    return torch.empty_like(x)


def _rms_norm(x: Tensor, weight: Tensor | None, eps: float, *, device: str | None = None) -> Tensor:
    checks.check_rms_norm(x, weight, eps)
    return run_rms_norm(x, weight, eps, None, op_device(device))  # type: ignore[no-any-return]


def _rms_norm_fake(x: Tensor, weight: Tensor | None, eps: float, *, device: str | None = None) -> Tensor:
    checks.check_rms_norm(x, weight, eps)
    return torch.empty_like(x)


def _add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor | None, eps: float, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    checks.check_rms_norm(x, weight, eps, residual)
    return run_rms_norm(x, weight, eps, residual, op_device(device))  # type: ignore[no-any-return]


def _add_rms_norm_fake(x: Tensor, residual: Tensor, weight: Tensor | None, eps: float, *, device: str | None = None) -> tuple[Tensor, Tensor]:
    checks.check_rms_norm(x, weight, eps, residual)
    return torch.empty_like(x), torch.empty_like(x)


def _rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool, layout: str | None, *, device: str | None = None) -> Tensor:
    checks.check_rope(x, cos, sin, layout)
    return run_rope(x, cos, sin, interleaved, layout, op_device(device))  # type: ignore[no-any-return]


def _rope_fake(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool, layout: str | None, *, device: str | None = None) -> Tensor:
    checks.check_rope(x, cos, sin, layout)
    return torch.empty_like(x)


def _gated(x: Tensor, act: int, *, device: str | None = None) -> Tensor:
    """``silu_and_mul`` (act 0), ``gelu_and_mul`` tanh (1) or erf (2)."""
    name = "silu_and_mul" if act == SILU else "gelu_and_mul"
    checks.check_gated(x, act)
    return run_gated(name, x, act, op_device(device))  # type: ignore[no-any-return]


def _gated_fake(x: Tensor, act: int, *, device: str | None = None) -> Tensor:
    checks.check_gated(x, act)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


def _cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int, *, device: str | None = None) -> Tensor:
    checks.check_cross_entropy(logits, targets)
    return run_cross_entropy(logits, targets, ignore_index, op_device(device))  # type: ignore[no-any-return]


def _cross_entropy_fake(logits: Tensor, targets: Tensor, ignore_index: int, *, device: str | None = None) -> Tensor:
    checks.check_cross_entropy(logits, targets)
    return logits.new_empty(logits.shape[:-1], dtype=torch.float32)


# --- attention: FlashAttention-2 forward and backward, the backward registered for autograd ----


def _attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None, kv_lens: Tensor | None,
               config: str | None, dropout_p: float = 0.0, seed: int = 0, window_left: int = -1, window_right: int = -1,
               softcap: float = 0.0, alibi_slopes: Tensor | None = None, mods: str | None = None,
               mod_arg0: Tensor | None = None, mod_arg1: Tensor | None = None, mod_arg2: Tensor | None = None,
               mod_arg3: Tensor | None = None, sinks: Tensor | None = None, block_kv_lists: Tensor | None = None,
               block_q_lists: Tensor | None = None, block_sizes: list[int] | None = None, *,
               device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """(out, lse): the output and the f32 logsumexp the backward recomputes P from. A block
    mask comes as its two list tensors and its sizes (``BlockLists.schema``)."""
    from kaio.ops_library.attention import Dropout, attention, check_tensors, config_from_label

    check_tensors("attention", q, k, v, kv_lens)
    given = schema_mods("attention", window_left, window_right, softcap, alibi_slopes, mods,
                         (mod_arg0, mod_arg1, mod_arg2, mod_arg3), sinks)  # fmt: skip
    blocks = schema_blocks("attention", q, k, block_kv_lists, block_q_lists, block_sizes)
    drop = Dropout(dropout_p, seed % (1 << 64)) if dropout_p > 0 else Dropout()
    return attention.run(q, k, v, causal, scale, kv_lens, None, True, config_from_label(config), op_device(device), drop,  # type: ignore[no-any-return]
                         given, blocks)  # fmt: skip


def _attention_fake(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None, kv_lens: Tensor | None,
                    config: str | None, dropout_p: float = 0.0, seed: int = 0, window_left: int = -1, window_right: int = -1,
                    softcap: float = 0.0, alibi_slopes: Tensor | None = None, mods: str | None = None,
                    mod_arg0: Tensor | None = None, mod_arg1: Tensor | None = None, mod_arg2: Tensor | None = None,
                    mod_arg3: Tensor | None = None, sinks: Tensor | None = None, block_kv_lists: Tensor | None = None,
                    block_q_lists: Tensor | None = None, block_sizes: list[int] | None = None, *,
                    device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    from kaio.ops_library.attention import check_mod_tensors, check_tensors, output_shape

    check_tensors("attention", q, k, v, kv_lens)
    given = schema_mods("attention", window_left, window_right, softcap, alibi_slopes, mods,
                         (mod_arg0, mod_arg1, mod_arg2, mod_arg3), sinks)  # fmt: skip
    check_mod_tensors("attention", given, q.shape[1])
    schema_blocks("attention", q, k, block_kv_lists, block_q_lists, block_sizes)
    return q.new_empty(output_shape(q, v)), q.new_empty(q.shape[:3], dtype=torch.float32)


def _attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor,
                        grad_lse: Tensor | None, causal: bool, scale: float | None, kv_lens: Tensor | None,
                        deterministic: bool, dropout_p: float = 0.0, seed: int = 0, window_left: int = -1,
                        window_right: int = -1, softcap: float = 0.0, alibi_slopes: Tensor | None = None,
                        mods: str | None = None, mod_arg0: Tensor | None = None, mod_arg1: Tensor | None = None,
                        mod_arg2: Tensor | None = None, mod_arg3: Tensor | None = None, sinks: Tensor | None = None,
                        block_kv_lists: Tensor | None = None, block_q_lists: Tensor | None = None,
                        block_sizes: list[int] | None = None, *,
                        device: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """(dq, dk, dv, dsinks): dsinks f32 (H,) with ``sinks``, else empty."""
    from kaio.ops_library.attention import Dropout
    from kaio.ops_library.attention_backward import OP, check_saved, run

    check_saved(q, k, v, out, lse, grad_out, grad_lse, kv_lens)
    given = schema_mods(OP, window_left, window_right, softcap, alibi_slopes, mods, (mod_arg0, mod_arg1, mod_arg2, mod_arg3), sinks)
    blocks = schema_blocks(OP, q, k, block_kv_lists, block_q_lists, block_sizes)
    drop = Dropout(dropout_p, seed % (1 << 64)) if dropout_p > 0 else Dropout()
    grads = run(q, k, v, out, lse, grad_out, grad_lse, causal, scale, kv_lens, deterministic, op_device(device), drop, given,
                blocks)  # fmt: skip
    return (*grads, q.new_empty((0,), dtype=torch.float32)) if sinks is None else grads  # type: ignore[return-value]


def _attention_backward_fake(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor, grad_lse: Tensor | None,
                             causal: bool, scale: float | None, kv_lens: Tensor | None, deterministic: bool, dropout_p: float = 0.0,
                             seed: int = 0, window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                             alibi_slopes: Tensor | None = None, mods: str | None = None, mod_arg0: Tensor | None = None,
                             mod_arg1: Tensor | None = None, mod_arg2: Tensor | None = None, mod_arg3: Tensor | None = None,
                             sinks: Tensor | None = None, block_kv_lists: Tensor | None = None,
                             block_q_lists: Tensor | None = None, block_sizes: list[int] | None = None, *,
                             device: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    from kaio.ops_library.attention import check_mod_tensors
    from kaio.ops_library.attention_backward import OP, check_saved

    check_saved(q, k, v, out, lse, grad_out, grad_lse, kv_lens)
    given = schema_mods(OP, window_left, window_right, softcap, alibi_slopes, mods, (mod_arg0, mod_arg1, mod_arg2, mod_arg3), sinks)
    check_mod_tensors(OP, given, q.shape[1])
    schema_blocks(OP, q, k, block_kv_lists, block_q_lists, block_sizes)
    dsinks = q.new_empty((q.shape[1] if sinks is not None else 0,), dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks


# the forward's schema after (q, k, v, causal, scale, kv_lens, config), with its defaults
_ATTENTION_TAIL = (0.0, 0, -1, -1, 0.0, None, None, None, None, None, None, None, None, None, None)


def _attention_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, causal, scale, kv_lens, _, *rest = inputs
    rest += _ATTENTION_TAIL[len(rest):]
    dropout_p, seed, window_left, window_right, softcap, alibi_slopes, mods, *mod_args, sinks, kv_lists, q_lists, sizes = rest
    # the logsumexp, not the probabilities; a block mask's lists (the backward walks them too)
    ctx.save_for_backward(q, k, v, *output, kv_lens, alibi_slopes, sinks, kv_lists, q_lists, *mod_args)
    ctx.causal, ctx.scale = causal, scale
    ctx.dropout = (dropout_p, seed)  # the backward regenerates the mask
    ctx.mods = (window_left, window_right, softcap)
    ctx.functions = mods
    ctx.block_sizes = sizes


def _attention_grad(ctx: Any, grad_out: Tensor, grad_lse: Tensor) -> tuple[Tensor | None, ...]:
    q, k, v, out, lse, kv_lens, alibi_slopes, sinks, kv_lists, q_lists, *mod_args = ctx.saved_tensors
    dq, dk, dv, dsinks = torch.ops.kaio.attention_backward(
        q, k, v, out, lse, grad_out.contiguous(), grad_lse.contiguous(), ctx.causal, ctx.scale, kv_lens, False,
        *ctx.dropout, *ctx.mods, alibi_slopes, ctx.functions, *mod_args, sinks, kv_lists, q_lists, ctx.block_sizes,
        device=ctx.kaio_device,
    )
    # no gradient for the flags, the built-in mods' numbers and slopes, the functions' arrays,
    # the block mask's lists; the sinks' sits where they sit, before the block mask's three
    return dq, dk, dv, *(None,) * (4 + len(_ATTENTION_TAIL) - 4), dsinks if sinks is not None else None, None, None, None


