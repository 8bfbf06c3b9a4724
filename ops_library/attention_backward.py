"""``kaio.ops_library.attention_backward``: the gradients of :func:`~kaio.ops_library.attention`,
FlashAttention-2's backward pass.

    from kaio.ops_library import attention, attention_backward
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = attention_backward(q, k, v, o, lse, do, causal=True)

The arguments mean what they mean to the forward (same layouts, types and checks), plus the
forward's output ``out`` and f32 logsumexp ``lse`` (``return_lse=True``) and the output's
gradient ``grad_out`` (the output's shape, q's type); ``grad_lse`` (f32, lse's shape) is the
logsumexp's gradient when a loss used it. dq has q's shape and type, dk k's, dv v's. GQA/MQA: a key/value
head's gradients are summed over the query heads that read it.

dQ is accumulated in f32 by atomics from the key-block-parallel kernel (fastest, but on a GPU
the order of the additions, so the last bits, may change from run to run), or with
``deterministic=True`` by a separate query-block-parallel kernel: bit-identical results on
every run. With ``dropout_p`` and ``seed``, those of the forward, the backward regenerates the
forward's dropout mask (a torch.Generator cannot be given here: pass the integer seed; through
torch autograd the forward's seed is kept for it). ``window``, ``softcap``, ``alibi_slopes``,
``score_mod``, ``mask_mod``, ``mod_args`` and ``sinks`` are the forward's (docs/attention.md). The
derivative of ``score_mod`` by its score is derived by kaio from the function's syntax
(:mod:`kaio.frontend.derivative`); what it cannot differentiate is a ``KaioCompileError`` naming
the construct. With ``sinks`` the call returns ``(dq, dk, dv, dsinks)``, ``dsinks`` f32 (H,):
``-sum over (batch, query) of exp(sink - lse) * (rowsum(dO * O) - dlse)``. The kernels are in
:mod:`kaio.ops_library.attention_backward_kernel`.
"""

from __future__ import annotations

import math
import sys
from contextlib import ExitStack
from typing import Any, NamedTuple

from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library.attention import (
    Dropout,
    Mods,
    _check,
    _lengths,
    _mod_operands,
    _ModdedLaunch,
    _scale,
    mods_given,
    output_shape,
    padded,
)
from kaio.ops_library.config_fields import bool_field
from kaio.ops_library.operands import Operand, Operands
from kaio.ops_library.random_args import check_p, check_seed, seed_as_int64

OP = "attention_backward"


class BackwardTiles(NamedTuple):
    """Query rows and key rows per step of the backward kernels, their warps, and the depth of
    the cp.async ring of the loops' operands."""

    block_m: int
    block_n: int
    warps: int
    stages: int = 2


def choose_backward_tiles(d: int) -> BackwardTiles:
    """Tiles that keep dK and dV (two (BN, BD) f32 accumulators), the transposed scores and the
    atomic path's dQ block in registers without spills on sm_80 and sm_90a
    (tests/ops_library/test_attention_backward.py checks every head dim), as large as that
    allows: the (BN, BM) scores are an mma tile of at least 16 x 16 per warp, so in a smaller
    block several warps compute copies of the same scores (eight at 16 x 16 with 8 warps).
    At head dim 256, 16 x 32 would halve dK/dV's instructions per score (230 registers), but
    the dQ kernel, which ptxas fits in 128 registers for two blocks per SM, spills there."""
    bd = padded(d)
    if bd >= 256:
        return BackwardTiles(16, 16, 8)
    if bd >= 64:
        return BackwardTiles(32, 32, 8)
    return BackwardTiles(32, 32, 4)


def attention_backward(
    q: Any, k: Any, v: Any, out: Any, lse: Any, grad_out: Any, *, causal: bool = False,
    scale: float | None = None, kv_lens: Any = None, grad_lse: Any = None, deterministic: bool = False,
    device: Any = None, dropout_p: float = 0.0, seed: Any = None, mask_mod: Any = None, mod_args: Any = (),
    window: Any = None, softcap: Any = None, alibi_slopes: Any = None, score_mod: Any = None, sinks: Any = None,
    block_mask: Any = None,
) -> tuple[Any, ...]:  # fmt: skip
    """(dq, dk, dv) of attention, and dsinks with ``sinks`` (see the module doc)."""
    causal = bool_field(OP, "causal", causal)
    deterministic = bool_field(OP, "deterministic", deterministic)
    scale = _scale(scale, OP)
    drop = forward_dropout(OP, dropout_p, seed)
    if block_mask is not None:  # its function is the mask
        from kaio.ops_library.block_mask import mask_of

        mask_mod, mod_args = mask_of(OP, block_mask, mask_mod, mod_args, causal, window, kv_lens)
    mods = mods_given(OP, score_mod, mask_mod, mod_args, window, softcap, alibi_slopes, sinks)
    from kaio.ops_library.rows import torch_op

    if (ops := torch_op(q, k, v, out, lse, grad_out, kv_lens, grad_lse, alibi_slopes, sinks, *mods.mod_args,
                        device=device)) is not None:  # fmt: skip
        from kaio.ops_library.attention_mods import mod_arg_slots, mods_key

        left, right = mods.window if mods.window is not None else (-1, -1)
        blocks = block_mask.for_torch(q).schema if block_mask is not None else (None, None, None)
        *grads, dsinks = ops.attention_backward(q, k, v, out, lse, grad_out, grad_lse, causal, scale, kv_lens, deterministic,
                                                drop.p, seed_as_int64(drop.seed), left, right, mods.softcap or 0.0,
                                                alibi_slopes, mods_key(mods.score_mod, mods.mask_mod),
                                                *mod_arg_slots(OP, mods.mod_args), sinks, *blocks)  # fmt: skip
        return (*grads, dsinks) if sinks is not None else tuple(grads)
    return run(q, k, v, out, lse, grad_out, grad_lse, causal, scale, kv_lens, deterministic, device, drop, mods, block_mask)


def forward_dropout(op: str, dropout_p: Any, seed: Any) -> Dropout:
    """The forward's dropout, which a backward must be told: the same p and integer seed."""
    p = check_p(op, dropout_p, "dropout_p")
    if p == 0:
        return Dropout()
    if seed is None or (sys.modules.get("torch") is not None and isinstance(seed, sys.modules["torch"].Generator)):
        raise KaioValueError(f"{op}: `dropout_p` {p} needs the forward's integer `seed` (the mask is regenerated from it)")
    return Dropout(p, check_seed(op, seed))


def run(q: Any, k: Any, v: Any, out: Any, lse: Any, grad_out: Any, grad_lse: Any, causal: bool,
        scale: float | None, kv_lens: Any, deterministic: bool, device: Any, dropout: Dropout = Dropout(),
        mods: Mods = Mods(), block_mask: Any = None) -> tuple[Any, ...]:  # fmt: skip
    """The op itself, without the torch custom-op routing."""
    ops = Operands(OP, q, k, v, out, lse, grad_out, kv_lens, grad_lse, mods.alibi_slopes, mods.sinks, *mods.mod_args,
                   device=device)  # fmt: skip
    oq, ok, ov, oo, olse, odo, odlse, (b, h, hkv, sq, sk, d) = _take(ops, q, k, v, out, lse, grad_out, grad_lse)
    lens = _lengths(ops, kv_lens, b, sk, OP) if kv_lens is not None else None
    mod_operands = _mod_operands(ops, mods, h, OP)
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    dq, dk, dv = ops.output(oq.shape, oq.dtype), ops.output(ok.shape, ok.dtype), ops.output(ov.shape, ov.dtype)
    sinks = mod_operands["sinks"]
    dsinks = ops.output((h,), dtypes.f32) if sinks is not None else None
    if b and h and sq and (sk or dsinks is not None):  # no key: only the sinks' softmax, and its gradient
        _launch(ops, (oq, ok, ov, oo, olse, odo, odlse, lens, dq, dk, dv, dsinks), (b, h, hkv, sq, sk, d), float(scale),
                causal, deterministic, dropout, mods, mod_operands, block_mask)  # fmt: skip
    else:  # no query or no key: nothing flows back, but the gradients are written
        for x in (dq, dk, dv):
            if math.prod(x.shape):
                _fill_zero(ops, x)
        if dsinks is not None and h:
            _fill_zero(ops, dsinks)  # no query: no softmax saw a sink
    grads = (ops.result(dq), ops.result(dk), ops.result(dv))
    return (*grads, ops.result(dsinks)) if dsinks is not None else grads


def _take(ops: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, grad_out: Any, grad_lse: Any) -> tuple[Any, ...]:
    """The operands, checked (by ``Operands``, or ``TensorMetadata`` for tensors' metadata alone),
    and the sizes (B, H, Hkv, Sq, Sk, D)."""
    oq, ok, ov = ops.take("q", q), ops.take("k", k), ops.take("v", v)
    sizes = _check(oq, ok, ov, None, OP)
    b, h, _, sq, _, _ = sizes
    check_outputs(ops, OP, out, grad_out, oq, ov)
    oo, odo = ops.take("out", out), ops.take("grad_out", grad_out)
    olse = _take_lse(ops, "lse", lse, (b, h, sq))
    odlse = _take_lse(ops, "grad_lse", grad_lse, (b, h, sq)) if grad_lse is not None else None
    return oq, ok, ov, oo, olse, odo, odlse, sizes


def check_outputs(ops: Any, op: str, out: Any, grad_out: Any, q: Any, v: Any) -> None:
    """The forward's output and its gradient: q's type, and the shape of the output (q's with v's
    head dim), in either layout."""
    shape = output_shape(q, v)
    for name, value in (("out", out), ("grad_out", grad_out)):
        x = ops.take(name, value)
        if x.shape != shape or x.dtype != q.dtype:
            raise KaioTypeError(f"{op}: `{name}` must be {q.dtype.name} of shape {shape} (the forward's output), "
                                f"got {x.dtype.name} {x.shape}")  # fmt: skip


def check_saved(q: Any, k: Any, v: Any, out: Any, lse: Any, grad_out: Any, grad_lse: Any, kv_lens: Any) -> None:
    """What :func:`run` checks, on torch tensors' metadata alone: the custom op's fake runs it."""
    from kaio.ops_library.attention import check_tensors
    from kaio.ops_library.torch_checks import TensorMetadata

    check_tensors(OP, q, k, v, kv_lens)
    _take(TensorMetadata(OP), q, k, v, out, lse, grad_out, grad_lse)


def _take_lse(ops: Any, name: str, value: Any, shape: tuple[int, int, int]) -> Operand:
    x = ops.take(name, value)
    if x.shape != shape or x.dtype != dtypes.f32:
        raise KaioTypeError(f"{OP}: `{name}` must be f32 of shape {shape} (the forward's logsumexp), got {x.dtype.name} {x.shape}")
    return x


def _launch(ops: Operands, arrays: tuple[Any, ...], sizes: tuple[int, ...], scale: float, causal: bool,
            deterministic: bool, dropout: Dropout, mods: Mods, mod_operands: dict[str, Any],
            block_mask: Any = None, packed: Any = None) -> None:  # fmt: skip
    """The backward's kernels. Varlen (``packed``, attention's ``Packed`` with the longest
    sequence): ``sizes`` has the sequences as B and the total query and key rows as Sq and Sk;
    lse and the deltas are (H, total queries), one program per block of the longest sequence."""
    from kaio.ops_library import attention_backward_kernel as kernels

    q, k, v, o, lse, do, dlse, lens, dq, dk, dv, dsinks = arrays
    b, h, hkv, sq, sk, d = sizes
    d_v = v.shape[-1]  # the value head dim: the output's
    bd, bdv = padded(d), padded(d_v)
    tiles = choose_backward_tiles(max(d, d_v))
    dev = ops.device
    varlen = packed is not None
    rows = sq * h if varlen else b * h * sq  # query rows of D
    longest_q, longest_k = packed.longest if varlen else (sq, sk)
    with ExitStack() as scratch:  # row statistics, dQ's f32 sums and placeholders for unread arguments
        def workspace(shape: tuple[int, ...], t: dtypes.ScalarType, zero: bool = False) -> Any:
            return scratch.enter_context(ops.workspace(shape, t, zero=zero)).value

        unread_f32, delta = workspace((1,), dtypes.f32), workspace((rows,), dtypes.f32)
        delta_rows = 4096 // bdv
        kernels.delta_tile_kernel(q.dtype).launch(
            dev, o.value, do.value, dlse.value if dlse is not None else unread_f32, delta, sq if varlen else rows, d_v, h,
            grid=(math.ceil(sq / delta_rows), h) if varlen else (math.ceil(rows / delta_rows),), BM=delta_rows, BD=bdv,
            HAS_DLSE=dlse is not None, VARLEN=varlen,
        )  # fmt: skip
        if not sk:  # the sinks' gradient alone: no key, so dQ is zero (dK, dV are empty)
            _fill_zero(ops, dq)
        else:
            lens_arg = lens.value if lens is not None else workspace((1,), dtypes.i32)
            cu = (packed.cu_q, packed.cu_k) if varlen else (lens_arg, lens_arg)  # dense: unread
            modded = _ModdedLaunch.of(mods, mod_operands, lambda shape, t: scratch.enter_context(ops.workspace(shape, t)), sq, sk, OP,
                                      grad=True)  # fmt: skip
            softcap_, left, right, slopes, _sinks, *slots = modded.args
            mod_args = (softcap_, left, right, slopes, *slots)
            by_query, by_key = _listed_blocks(ops, block_mask, (b, h, sq, sk), tiles, lens_arg)
            meta = {"BM": tiles.block_m, "BN": tiles.block_n, "BD": bd, "BDV": bdv, "SPLIT_DV": d_v != d, "CAUSAL": int(causal), "HAS_LENS": lens is not None,
                    "DROPOUT": dropout.p > 0, "WINDOW": modded.meta["WINDOW"], "SOFTCAP": modded.meta["SOFTCAP"],
                    "ALIBI": modded.meta["ALIBI"], "VARLEN": varlen}  # fmt: skip
            dq_acc = unread_f32 if deterministic else workspace((rows * d,), dtypes.f32, zero=True)
            dkdv = kernels.dkdv_tile_kernel(q.dtype, tiles.warps, tiles.stages, modded.mods)
            dkdv.launch(dev, q.value, k.value, v.value, do.value, lse.value, delta, dk.value, dv.value, dq_acc, lens_arg, *cu,
                        h, hkv, sq, sk, d, d_v, scale, *dropout.args, *mod_args, *by_key[0],
                        grid=(math.ceil(longest_k / tiles.block_n), b * hkv), ATOMIC_DQ=not deterministic, **meta,
                        **by_key[1])  # fmt: skip
            if deterministic:
                kernels.dq_tile_kernel(q.dtype, tiles.warps, tiles.stages, modded.mods).launch(
                    dev, q.value, k.value, v.value, do.value, lse.value, delta, dq.value, lens_arg, *cu, h, hkv, sq, sk, d,
                    d_v, scale, *dropout.args, *mod_args, *by_query[0], grid=(math.ceil(longest_q / tiles.block_m), b * h), **meta,
                    **by_query[1],
                )  # fmt: skip
            else:
                n = rows * d
                kernels.scale_cast_tile_kernel(q.dtype).launch(dev, dq_acc, dq.value, n, scale, grid=(math.ceil(n / 1024),))
        if dsinks is not None:  # varlen: its (H, total queries) statistics are one batch entry's
            kernels.sink_grad_tile_kernel().launch(dev, lse.value, delta, mod_operands["sinks"].value, dsinks.value,
                                                   1 if varlen else b, h, sq, grid=(h,))  # fmt: skip


def _listed_blocks(ops: Operands, block_mask: Any, sizes: tuple[int, int, int, int], tiles: BackwardTiles,
                   placeholder: Any) -> tuple[tuple[tuple[Any, ...], dict[str, Any]], ...]:  # fmt: skip
    """The block-mask arguments and constexprs of the dQ kernel (lists by query block) and of
    the dK/dV kernel (by key block); without a mask, an unread i32 array in their place."""
    if block_mask is None:
        none = ((placeholder, 1, 1, 0, 0), {})
        return none, none
    from kaio.ops_library.block_mask import MaskedBlocks

    by_query = MaskedBlocks.rows_of(OP, ops, block_mask, sizes)
    by_key = MaskedBlocks.rows_of(OP, ops, block_mask, sizes, by_key_block=True)
    by_query.fits(None, explicit=True, tiles=(tiles.block_m, tiles.block_n))
    bq, bkv = by_query.block
    return ((by_query.args, {"BLOCK_MASK": True, "BROW_MASK": bq, "BLIST_MASK": bkv}),
            (by_key.args, {"BLOCK_MASK": True, "BROW_MASK": bkv, "BLIST_MASK": bq}))  # fmt: skip


def _fill_zero(ops: Operands, x: Operand) -> None:
    """Zeros into a gradient no kernel writes (a call without queries)."""
    from kaio.ops_library import attention_backward_kernel as kernels

    n = math.prod(x.shape)
    with ops.workspace((n,), dtypes.f32, zero=True) as zeros:
        kernels.scale_cast_tile_kernel(x.dtype).launch(ops.device, zeros.value, x.value, n, 0.0, grid=(math.ceil(n / 1024),))
