"""``kaio.ops_library.attention_varlen``: attention over a batch of sequences of different lengths
packed into one array (FlashAttention's ``flash_attn_varlen_func`` layout), the forward pass.

    from kaio.ops_library import attention_varlen
    o = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    o, lse = attention_varlen(q, k, v, cu_q, cu_k, 512, 512, causal=True, return_lse=True)

q is ``(total_q, H, D)``, k ``(total_k, Hkv, D)`` and v ``(total_k, Hkv, Dv)`` (``Dv`` may
differ from ``D``, as in ``attention``), contiguous: sequence b's queries are the
rows ``cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1`` of q, its keys and values the rows
``cu_seqlens_k[b] .. cu_seqlens_k[b+1] - 1`` of k and v. ``cu_seqlens_q`` and ``cu_seqlens_k``
are int32 ``(B+1,)``, starting at 0, non-decreasing, ending at the packed length; a sequence
may have no query or no key. ``max_seqlen_q`` and ``max_seqlen_k`` (integers, at least every
sequence's length) size the launch. Each sequence is attended to on its own, exactly as
:func:`~kaio.ops_library.attention` attends to one batch entry: the same dtypes (f16, bf16),
head dims, GQA (query head h reads key/value head ``h // (H / Hkv)``) and keyword arguments
(``causal``, ``scale``, ``out``, ``return_lse``, ``device``, ``config``, ``score_mod``,
``mask_mod``, ``mod_args``, ``window``, ``softcap``, ``alibi_slopes``, ``sinks``). ``causal``
and ``window`` align to each sequence's bottom-right (FlashAttention-2's varlen semantic: query
i of a sequence of sq queries and sk keys sees key j iff ``j <= i + sk - sq``); ``score_mod``'s
and ``mask_mod``'s ``b`` is the sequence's index, ``q_idx`` and ``kv_idx`` positions within the
sequence, and so are ALiBi's. The output is ``(total_q, H, Dv)`` of q's type; ``return_lse=True``
also returns the f32 logsumexp ``(H, total_q)`` (FlashAttention's varlen ``softmax_lse``),
``-inf`` for a query that sees no key (its output is 0).

Bad input is refused before any launch, naming the argument and the rule; the values of
``cu_seqlens_*`` are checked where they can be read on the host (numpy arrays, kaio Buffers,
torch tensors), as ``attention`` checks ``kv_lens``. ``dropout_p`` and ``seed`` as
``attention``'s, the mask's offset of (head h, packed query row r, key k of the sequence)
``(h * total_q + r) * total_k + k``. The gradients:
:func:`~kaio.ops_library.attention_varlen_backward`. Torch tensors (every array one, no ``out=``)
go through the custom op ``torch.ops.kaio.attention_varlen`` (``attention_varlen_torch``), so
autograd records the call (q, k, v and ``sinks`` get gradients; ``mod_args`` none, and one that
requires grad is refused) and ``torch.compile`` traces it; ``out=`` runs the kernel directly,
and refuses an input that requires grad.

The kernel is attention's (``kaio.ops_library.attention_kernel``, ``VARLEN``): its loads and
stores view the packed arrays as (tokens, heads * D) matrices, one program per (block of a
sequence's queries, sequence, head).
"""

from __future__ import annotations

import math
from contextlib import ExitStack
from typing import Any

import numpy as np

from kaio import dtypes
from kaio.errors import KaioTypeError
from kaio.ops_library.attention import (
    check_heads_and_types,
    AttentionConfig,
    Dropout,
    Mods,
    Packed,
    _forward,
    _mod_operands,
    _ModdedLaunch,
    _scale,
    _to_host,
    attention,
    choose_config,
    dropout_of,
    mods_given,
    output_shape,
    tile_head_dim,
)
from kaio.ops_library.autograd import needs_grad, refuse_traced
from kaio.ops_library.random_args import seed_as_int64
from kaio.ops_library.rows import torch_op
from kaio.ops_library.config_fields import bool_field
from kaio.ops_library.operands import Operand, Operands
from kaio.pipeline import Pipeline

OP = "attention_varlen"


class AttentionVarlen:
    """The varlen attention op: call it, or ask for its pipeline."""

    def __call__(
        self, q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int, max_seqlen_k: int, *,
        causal: bool = False, scale: float | None = None, out: Any = None, return_lse: bool = False,
        device: Any = None, config: AttentionConfig | str | None = None, score_mod: Any = None,
        mask_mod: Any = None, mod_args: Any = (), window: Any = None, softcap: Any = None,
        alibi_slopes: Any = None, sinks: Any = None, dropout_p: float = 0.0, seed: Any = None,
    ) -> Any:  # fmt: skip
        causal = bool_field(OP, "causal", causal)
        return_lse = bool_field(OP, "return_lse", return_lse)
        scale = _scale(scale, OP)
        drop = dropout_of(OP, dropout_p, seed, q)
        longest = (_max_seqlen("max_seqlen_q", max_seqlen_q), _max_seqlen("max_seqlen_k", max_seqlen_k))
        mods = mods_given(OP, score_mod, mask_mod, mod_args, window, softcap, alibi_slopes, sinks)
        arrays = (q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks, *mods.mod_args)
        if out is None and (ops_ns := torch_op(*arrays, device=device)) is not None:
            # torch tensors: torch.ops.kaio.attention_varlen, which records the graph (saving out, lse)
            if needs_grad(*mods.mod_args):
                raise KaioTypeError(f"{OP}: `mod_args` get no gradient, and one requires grad; detach it")
            from kaio.ops_library.attention import _config_label
            from kaio.ops_library.attention_mods import mod_arg_slots, mods_key

            left, right = mods.window if mods.window is not None else (-1, -1)
            result, lse = ops_ns.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *longest, causal, scale,
                                                  _config_label(config), left, right, mods.softcap or 0.0, alibi_slopes,
                                                  mods_key(mods.score_mod, mods.mask_mod),
                                                  *mod_arg_slots(OP, mods.mod_args), sinks, drop.p,
                                                  seed_as_int64(drop.seed))  # fmt: skip
            return (result, lse) if return_lse else result
        if needs_grad(q, k, v, alibi_slopes, sinks, *mods.mod_args):
            # the kernel runs directly below: nothing would record the gradient
            why = "`out=` records no gradient" if out is not None else "arrays not all torch tensors record no gradient"
            raise KaioTypeError(f"{OP}: {why}, and an input requires grad; leave out=None")
        refuse_traced(OP, q, k, v, out, cu_seqlens_q, cu_seqlens_k)
        return self.run(q, k, v, cu_seqlens_q, cu_seqlens_k, longest, causal, scale, out, return_lse, device, config, mods,
                        drop)  # fmt: skip

    def run(self, q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, longest: tuple[int, int],
            causal: bool, scale: float | None, out: Any, return_lse: bool, device: Any,
            config: AttentionConfig | str | None, mods: Mods, dropout: Dropout = Dropout()) -> Any:  # fmt: skip
        """The op itself, its scalar arguments checked, without the torch custom-op routing."""
        ops = Operands(OP, q, k, v, out, cu_seqlens_q, cu_seqlens_k, mods.alibi_slopes, mods.sinks, *mods.mod_args,
                       device=device)  # fmt: skip
        oq, ok, ov = ops.take("q", q), ops.take("k", k), ops.take("v", v)
        oo = ops.take("out", out) if out is not None else None
        total_q, total_k, h, hkv, d = _check_packed(oq, ok, ov, oo)
        cu_q, cu_k = take_cu_seqlens(ops, cu_seqlens_q, cu_seqlens_k, total_q, total_k, longest)
        batch = cu_q.shape[0] - 1
        mod_operands = _mod_operands(ops, mods, h, OP)
        if scale is None:
            scale = 1.0 / math.sqrt(d)
        if oo is None:
            oo = ops.output(output_shape(oq, ov), oq.dtype)
        with ExitStack() as scratch:  # the logsumexp nobody asked for, and the unread slots
            def workspace(shape: tuple[int, ...], t: dtypes.ScalarType) -> Operand:
                return scratch.enter_context(ops.workspace(shape, t))

            lse = ops.output((h, total_q), dtypes.f32) if return_lse else workspace((h, total_q), dtypes.f32)
            if batch and h and total_q and longest[0]:
                kv_lens = workspace((1,), dtypes.i32).value  # unread: each sequence's keys are all its keys
                sizes = (batch, h, hkv, total_q, total_k, d)
                modded = _ModdedLaunch.of(mods, mod_operands, workspace, *longest, op=OP)
                packed = Packed(cu_q.value, cu_k.value, longest)
                run = lambda c: _forward(ops, oq, ok, ov, oo, lse, kv_lens, False, sizes, float(scale),  # noqa: E731
                                         causal, c, dropout, modded, packed)  # fmt: skip
                run(attention._config(config, ops.device, oq.dtype, longest[0], tile_head_dim(d, ov), causal, run, OP))
        result = ops.result(oo, out)
        return (result, ops.result(lse)) if return_lse else result

    def pipeline(self, d: int = 64, max_seqlen_q: int = 128, arch: str = "sm_80") -> Pipeline:
        """The pass pipeline of the kernel for head dim ``d`` and a longest sequence of
        ``max_seqlen_q`` queries."""
        return choose_config(max_seqlen_q, d, arch).pipeline(arch)

    def __repr__(self) -> str:
        return "<kaio.ops_library.attention_varlen>"


def _max_seqlen(name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise KaioTypeError(f"{OP}: `{name}` is a non-negative integer, got {value!r} ({type(value).__name__})")
    if value < 0 or value >= 2**31:
        raise KaioTypeError(f"{OP}: `{name}` must lie in 0..2**31-1, got {value}")
    return int(value)


def _check_packed(q: Operand, k: Operand, v: Operand, out: Operand | None) -> tuple[int, int, int, int, int]:
    """(total_q, total_k, H, Hkv, D) of valid packed q, k, v (and out); else a KaioTypeError
    naming the argument (``attention``'s rules, on 3-D arrays)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if len(x.shape) != 3:
            raise KaioTypeError(f"{OP}: `{name}` must be 3-D (packed tokens, heads, head dim), got shape {x.shape}")
    total_q, h, d = q.shape
    total_k, hkv, dk = k.shape
    if dk != d:
        raise KaioTypeError(f"{OP}: `k` must have shape (total_k, Hkv, {d}), got {k.shape}")
    check_heads_and_types(OP, q, k, v, out, h, hkv, d)
    if max(total_q * h, total_k * hkv) * max(d, v.shape[-1]) >= 2**31:
        raise KaioTypeError(f"{OP}: arrays must have fewer than 2**31 elements")
    return total_q, total_k, h, hkv, d


def take_cu_seqlens(ops: Operands, cu_seqlens_q: Any, cu_seqlens_k: Any, total_q: int, total_k: int,
                    longest: tuple[int, int], op: str = OP) -> tuple[Operand, Operand]:  # fmt: skip
    """The two cumulative lengths taken and checked against the packed lengths and the longest
    sequences (``max_seqlen_q``, ``max_seqlen_k``)."""
    cu_q, cu_k = _cu_seqlens_pair(ops, cu_seqlens_q, cu_seqlens_k, op)
    _check_offsets(cu_q, "cu_seqlens_q", total_q, "q", longest[0], "max_seqlen_q", op)
    _check_offsets(cu_k, "cu_seqlens_k", total_k, "k", longest[1], "max_seqlen_k", op)
    return cu_q, cu_k


def check_tensors(op: str, q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any) -> tuple[int, int, int, int, int]:
    """(total_q, total_k, H, Hkv, D): :func:`_check_packed` and the cumulative lengths' type and
    shape on torch tensors' metadata alone (fake tensors too), what the custom ops and their
    fakes both run; the lengths' values are the real op's to check (a fake has none)."""
    from kaio.ops_library.torch_checks import TensorMetadata

    meta = TensorMetadata(op)
    sizes = _check_packed(meta.take("q", q), meta.take("k", k), meta.take("v", v), None)
    _cu_seqlens_pair(meta, cu_seqlens_q, cu_seqlens_k, op)  # type: ignore[arg-type]
    return sizes


def _cu_seqlens_pair(ops: Operands, cu_seqlens_q: Any, cu_seqlens_k: Any, op: str) -> tuple[Operand, Operand]:
    cu_q, cu_k = _cu_seqlens(ops, "cu_seqlens_q", cu_seqlens_q, op), _cu_seqlens(ops, "cu_seqlens_k", cu_seqlens_k, op)
    if cu_k.shape != cu_q.shape:
        raise KaioTypeError(f"{op}: `cu_seqlens_k` must have cu_seqlens_q's shape {cu_q.shape} (B+1 entries), "
                            f"got {cu_k.shape}")  # fmt: skip
    return cu_q, cu_k


def _cu_seqlens(ops: Operands, name: str, value: Any, op: str = OP) -> Operand:
    """``value`` taken, int32 of shape ``(B+1,)``."""
    cu = ops.take(name, value)
    if len(cu.shape) != 1 or cu.shape[0] < 1 or cu.dtype != dtypes.i32:
        raise KaioTypeError(f"{op}: `{name}` must be int32 of shape (B+1,), got {cu.dtype.name} {cu.shape}")
    return cu


def _check_offsets(cu: Operand, name: str, total: int, packed_name: str, longest: int, longest_name: str,
                   op: str = OP) -> None:  # fmt: skip
    """``cu``'s values, where the host can read them, start at 0, never decrease, end at
    ``total`` (the packed length of ``packed_name``) and differ by at most ``longest``
    (``longest_name``): every sequence lies inside the packed array and inside the grid."""
    host = cu.host if cu.host is not None else _to_host(cu.value)
    if host is None:
        return  # not readable here: the caller vouches for it, as for attention's kv_lens
    values = np.asarray(host, np.int64)
    lengths = np.diff(values)
    if values[0] != 0:
        raise KaioTypeError(f"{op}: `{name}` must start at 0, got {values[0]} first")
    if (lengths < 0).any():
        at = int(np.argmax(lengths < 0))
        raise KaioTypeError(f"{op}: `{name}` must be non-decreasing, but entry {at + 1} ({values[at + 1]}) "
                            f"is below entry {at} ({values[at]})")  # fmt: skip
    if values[-1] != total:
        raise KaioTypeError(f"{op}: `{name}`'s last entry must be {packed_name}'s packed length {total}, "
                            f"got {values[-1]}")  # fmt: skip
    if lengths.size and lengths.max() > longest:
        at = int(np.argmax(lengths))
        raise KaioTypeError(f"{op}: `{longest_name}` {longest} is below sequence {at}'s length {lengths[at]} "
                            f"(from `{name}`)")  # fmt: skip


# help(attention_varlen) shows the class's doc, so the class carries the user-facing one (the module's)
AttentionVarlen.__doc__ = f"""{__doc__}
``attention_varlen.pipeline(d, max_seqlen_q, arch)`` is the pass pipeline of a head dim and
longest query sequence.
"""

attention_varlen = AttentionVarlen()
