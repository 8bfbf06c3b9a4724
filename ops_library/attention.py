"""``kaio.ops_library.attention``: scaled dot-product attention, FlashAttention-2's forward pass.

    from kaio.ops_library import attention
    o = attention(q, k, v)                               # q (B, H, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv)
    o = attention(q, k, v, causal=True, scale=0.1)
    o, lse = attention(q, k, v, kv_lens=lens, return_lse=True)

Layout as torch's ``scaled_dot_product_attention``: contiguous (batch, heads, sequence, head
dim) arrays; the output has q's type and shape but for its head dim, v's ``Dv`` (which may
differ from q's and k's ``D``: DeepSeek's 192 / 128). f16 and bf16 inputs, f32 accumulation; head
dims every multiple of 8 up to 256 (run in the next power of two, at least 16, masked); any
sequence lengths. ``H`` must be a multiple of ``Hkv``
(grouped-query and multi-query attention: query head h reads key/value head ``h // (H / Hkv)``).
``scale`` defaults to ``1 / sqrt(D)``. ``causal=True`` aligns the mask to the bottom-right, as
FlashAttention-2 does: query i sees key j iff ``j <= i + Sk - Sq``. ``kv_lens`` (int32, (B,))
gives each batch entry's valid key count (keys past it are masked): batched decoding of
sequences of different lengths. A query that sees no key gets 0 and a logsumexp of ``-inf``.
``return_lse=True`` also returns the f32 logsumexp (B, H, Sq). ``dropout_p`` (in [0, 1)) drops
each probability with that chance, its mask Triton's random numbers of ``seed`` (an integer or a
``torch.Generator``; None with torch tensors: one drawn from torch's default generator) at the
offset ``((b * H + h) * Sq + q) * Sk + k``, kept iff ``kaio.random.rand(seed, offset) >
dropout_p``, kept ones scaled by ``1 / (1 - dropout_p)``; the logsumexp is that of the undropped
scores (FlashAttention's), and ``attention_backward`` with the same ``dropout_p`` and ``seed``
regenerates the mask. numpy in -> numpy out, kaio
Buffers in -> Buffer out, torch tensors in -> torch tensor out. ``config``: None (tiles by a
rule), ``"auto"`` (on a GPU, the candidates for this head dim, dtype, causality and query-length
class are timed once and the winner is stored on disk; on the simulator, the rule) or an
:class:`AttentionConfig`.

``score_mod(score, b, h, q_idx, kv_idx, *mod_args)`` and ``mask_mod(b, h, q_idx, kv_idx,
*mod_args)`` (plain ``def`` functions, FlexAttention's meaning, ``mod_args`` up to 4 arrays) are
compiled into the kernel; ``window=(left, right)``, ``softcap=c``, ``alibi_slopes=`` and
``sinks=`` (f32, one per query head) are built-in mods (docs/attention.md, "Score and mask
functions"); ``attention_backward`` takes them all (the ``score_mod``'s derivative is derived by
kaio), and torch autograd records them all (``sinks`` get a gradient, ``mod_args`` none).

The kernel is a tile kernel (``kaio.ops_library.attention_kernel``); ``attention.pipeline(D)``
prints the passes it goes through.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from contextlib import ExitStack
from functools import cache
from typing import Any, NamedTuple

import numpy as np

from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library.attention_config import (  # noqa: F401 (re-exported: attention's tiles live there)
    HEAD_DIMS,
    AttentionConfig,
    candidates,
    check_head_dim,
    choose_config,
    padded,
)
from kaio.ops_library.autograd import needs_grad, refuse_traced
from kaio.ops_library.config_fields import bool_field
from kaio.ops_library.operands import Operand, Operands, to_host
from kaio.ops_library.random_args import check_p, check_seed, seed_as_int64
from kaio.ops_library.rows import torch_op
from kaio.pipeline import Pipeline

LOG2E = 1.4426950408889634
# A zero scale runs as 2**-100: the kernel takes the row max of the unscaled scores times the
# scale, and 0 * -inf (a masked score) is NaN; any f16/bf16 score (|s| < 2**40) times 2**-100 is
# below 2**-60, so exp2 of it is exactly 1.0 in f32 and the result is the same uniform average.
ZERO_SCALE = 2.0**-100


@cache
def configured_kernel(t: dtypes.ScalarType, config: AttentionConfig, out: dtypes.ScalarType | None = None,
                      mods: Any = None) -> Any:  # fmt: skip
    """The forward kernel of a config, for input type ``t``, output type ``out`` (t) and the
    score and mask functions ``mods`` (an ``AttentionMods``; None: none)."""
    from kaio.ops_library.attention_kernel import attention_tile_kernel
    from kaio.ops_library.attention_mods import NO_MODS

    kernel = attention_tile_kernel(t, out or t, mods or NO_MODS).with_options(num_warps=config.warps, num_stages=config.stages)
    return kernel.with_pipeline(config.pipeline)


def kernel_meta(config: AttentionConfig, bd: int, causal: bool, has_lens: bool, scale: float = 1.0,
                dropout: bool = False, bdv: int | None = None, split_dv: bool = False) -> dict[str, Any]:  # fmt: skip
    """The forward kernel's constexprs for a config, padded head dims ``bd`` (q's and k's) and
    ``bdv`` (v's and the output's; None: ``bd``), whether v's head dim differs from q's
    (``split_dv``), and call."""
    return {"BM": config.block_m, "BN": config.block_n, "BD": bd, "BDV": bdv or bd, "SPLIT_DV": split_dv,
            "CAUSAL": causal, "HAS_LENS": has_lens, "NEG_SCALE": scale < 0, "DROPOUT": dropout}  # fmt: skip


class Dropout(NamedTuple):
    """Attention's dropout: the probability ``p`` and the ``seed`` of its mask (p 0: none)."""

    p: float = 0.0
    seed: int = 0

    @property
    def args(self) -> tuple[float, float, int]:
        """The kernels' ``drop_p, drop_scale, seed`` arguments."""
        return self.p, 1.0 / (1.0 - self.p), self.seed


def dropout_of(op: str, dropout_p: Any, seed: Any, *tensors: Any) -> Dropout:
    """``dropout_p`` and ``seed`` checked (``kaio.ops_library.dropout``'s rules); a missing seed
    with torch tensors is drawn from torch's default generator, else refused."""
    p = check_p(op, dropout_p, "dropout_p")
    if p == 0:
        return Dropout()
    torch = sys.modules.get("torch")
    if seed is None:
        if torch is None or not any(isinstance(t, torch.Tensor) for t in tensors):
            raise KaioValueError(f"{op}: `dropout_p` {p} needs a `seed` (an integer or a torch.Generator)")
        seed = torch.default_generator
    return Dropout(p, check_seed(op, seed))


def decode_splits(sq: int, sk: int, block_n: int) -> int:
    """Flash-decoding: key chunks per (batch, head) for a few queries over many keys (each chunk
    at least 8 key blocks; at most 32 chunks), else 1."""
    if sq > 16:
        return 1
    return max(1, min(32, sk // (8 * block_n)))


class Mods(NamedTuple):
    """What changes the scores and the mask: a user's ``score_mod`` and ``mask_mod`` with their
    ``mod_args`` arrays (:mod:`kaio.ops_library.attention_mods`), and the built-in ones."""

    score_mod: Any = None
    mask_mod: Any = None
    mod_args: tuple[Any, ...] = ()
    window: tuple[int, int] | None = None
    softcap: float | None = None
    alibi_slopes: Any = None
    sinks: Any = None

    @property
    def any(self) -> bool:
        return bool(self.mod_args) or any(getattr(self, f) is not None for f in self._fields if f != "mod_args")


def mods_given(op: str, score_mod: Any, mask_mod: Any, mod_args: Any, window: Any, softcap: Any,
               alibi_slopes: Any, sinks: Any) -> Mods:  # fmt: skip
    """The mods of a call, their scalar arguments checked (the arrays are checked when taken)."""
    if not isinstance(mod_args, (tuple, list)):
        raise KaioTypeError(f"{op}: `mod_args` is a tuple of arrays, got {type(mod_args).__name__}")
    if window is not None:
        if not (isinstance(window, (tuple, list)) and len(window) == 2
                and all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in window)):  # fmt: skip
            raise KaioTypeError(f"{op}: `window` is a pair of integers (left, right), got {window!r}")
        if min(window) < 0:
            raise KaioValueError(f"{op}: `window` sizes must be >= 0, got {tuple(window)}")
        window = (int(window[0]), int(window[1]))
    if softcap is not None:
        if isinstance(softcap, (bool, np.bool_)) or not isinstance(softcap, (int, float, np.integer, np.floating)):
            raise KaioTypeError(f"{op}: `softcap` is a positive number or None, got {softcap!r}")
        if not (math.isfinite(float(softcap)) and softcap > 0):
            raise KaioValueError(f"{op}: `softcap` must be positive and finite, got {softcap!r}")
        softcap = float(softcap)
    return Mods(score_mod, mask_mod, tuple(mod_args), window, softcap, alibi_slopes, sinks)


def schema_mods(op: str, window_left: int, window_right: int, softcap: float, alibi_slopes: Any, mods: str | None,
                mod_args: tuple[Any, ...], sinks: Any) -> Mods:  # fmt: skip
    """The mods as the attention custom ops' schemas carry them (a window side of -1: no window;
    a softcap of 0: none; the score and mask functions by their ``mods_key``; the ``mod_args``
    as four optional tensors, the given ones first: a schema's ``Tensor[]`` takes no default),
    checked as the op checks them. Here, not in the torch layer: each of its modules with an
    attention op decodes them, and they import no other module of that layer."""
    from kaio.ops_library.attention_mods import mods_of_key

    window = None if window_left < 0 and window_right < 0 else (window_left, window_right)
    score_mod, mask_mod = mods_of_key(op, mods)
    given = tuple(a for a in mod_args if a is not None)
    return mods_given(op, score_mod, mask_mod, given, window, softcap or None, alibi_slopes, sinks)


def schema_blocks(op: str, q: Any, k: Any, kv_lists: Any, q_lists: Any, sizes: Any) -> Any:
    """A block mask as the attention custom ops' schemas carry it (``BlockLists.schema``; sizes
    None: none), checked to be made for the call of (B, H, Sq, Sk) of q and k (dense layout)."""
    from kaio.ops_library.block_mask import BlockLists, check_made_for

    blocks = BlockLists.of_schema(kv_lists, q_lists, sizes)
    if blocks is not None:
        check_made_for(op, blocks, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
    return blocks


class Attention:
    """The attention op: call it, or ask for its pipeline."""

    def __call__(
        self, q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
        kv_lens: Any = None, out: Any = None, return_lse: bool = False, device: Any = None,
        config: AttentionConfig | str | None = None, dropout_p: float = 0.0, seed: Any = None,
        score_mod: Any = None, mask_mod: Any = None, mod_args: Any = (), window: Any = None,
        softcap: Any = None, alibi_slopes: Any = None, sinks: Any = None, block_mask: Any = None,
    ) -> Any:  # fmt: skip
        causal = bool_field("attention", "causal", causal)  # "no" would read as true
        return_lse = bool_field("attention", "return_lse", return_lse)
        scale = _scale(scale)  # checked before any operand is taken (copied to the device)
        drop = dropout_of("attention", dropout_p, seed, q)
        if block_mask is not None:  # its function is the mask
            from kaio.ops_library.block_mask import mask_of

            mask_mod, mod_args = mask_of("attention", block_mask, mask_mod, mod_args, causal, window, kv_lens)
        mods = mods_given("attention", score_mod, mask_mod, mod_args, window, softcap, alibi_slopes, sinks)
        if out is None and (ops_ns := torch_op(q, k, v, kv_lens, alibi_slopes, sinks, *mods.mod_args, device=device)) is not None:
            # torch tensors: torch.ops.kaio.attention, which records the graph (saving out, lse)
            if needs_grad(*mods.mod_args):
                raise KaioTypeError("attention: `mod_args` get no gradient, and one requires grad; detach it")
            from kaio.ops_library.attention_mods import mod_arg_slots, mods_key

            left, right = mods.window if mods.window is not None else (-1, -1)
            blocks = block_mask.for_torch(q).schema if block_mask is not None else (None, None, None)
            result, lse = ops_ns.attention(q, k, v, causal, scale, kv_lens, _config_label(config), drop.p, seed_as_int64(drop.seed),
                                           left, right, mods.softcap or 0.0, alibi_slopes, mods_key(mods.score_mod, mods.mask_mod),
                                           *mod_arg_slots("attention", mods.mod_args), sinks, *blocks)  # fmt: skip
            return (result, lse) if return_lse else result
        if out is not None and needs_grad(q, k, v, sinks):
            raise KaioTypeError("attention: `out=` records no gradient, and an input requires grad; leave out=None")
        refuse_traced("attention", q, k, v, out)  # out=: the kernel runs directly
        return self.run(q, k, v, causal, scale, kv_lens, out, return_lse, config, device, drop, mods, block_mask)

    def run(self, q: Any, k: Any, v: Any, causal: bool, scale: float | None, kv_lens: Any, out: Any,
            return_lse: bool, config: AttentionConfig | str | None, device: Any, dropout: Dropout = Dropout(),
            mods: Mods = Mods(), block_mask: Any = None) -> Any:  # fmt: skip
        """The op itself, without the torch custom-op routing."""
        ops = Operands("attention", q, k, v, out, kv_lens, mods.alibi_slopes, mods.sinks, *mods.mod_args, device=device)
        oq, ok, ov = ops.take("q", q), ops.take("k", k), ops.take("v", v)
        oo = ops.take("out", out) if out is not None else None
        b, h, hkv, sq, sk, d = _check(oq, ok, ov, oo)
        lens = _lengths(ops, kv_lens, b, sk) if kv_lens is not None else None
        mod_operands = _mod_operands(ops, mods, h)
        blocks = None
        if block_mask is not None:
            from kaio.ops_library.block_mask import MaskedBlocks

            blocks = MaskedBlocks.rows_of("attention", ops, block_mask, (b, h, sq, sk))
        if scale is None:
            scale = 1.0 / math.sqrt(d)
        if oo is None:
            oo = ops.output((b, h, sq, ov.shape[-1]), oq.dtype)
        with ExitStack() as scratch:  # the logsumexp nobody asked for, and the unread lengths and cu_seqlens
            def workspace(shape: tuple[int, ...], t: dtypes.ScalarType) -> Operand:
                return scratch.enter_context(ops.workspace(shape, t))

            lse = ops.output((b, h, sq), dtypes.f32) if return_lse else workspace((b, h, sq), dtypes.f32)
            if b and h and sq:
                unread = workspace((1,), dtypes.i32).value
                lens_arg = lens.value if lens is not None else unread
                sizes = (b, h, hkv, sq, sk, d)
                modded = _ModdedLaunch.of(mods, mod_operands, workspace, sq, sk)
                dense = Packed(unread, unread)
                run = lambda c: _forward(ops, oq, ok, ov, oo, lse, lens_arg, lens is not None, sizes,  # noqa: E731
                                         float(scale), bool(causal), c, dropout, modded, dense, blocks)  # fmt: skip
                fits = blocks.fits if blocks is not None else None
                run(self._config(config, ops.device, oq.dtype, sq, tile_head_dim(d, ov), bool(causal), run, fits=fits))
        result = ops.result(oo, out)
        return (result, ops.result(lse)) if return_lse else result

    def _config(self, config: AttentionConfig | str | None, dev: Any, t: dtypes.ScalarType, sq: int, d: int,
                causal: bool, run: Any, op: str = "attention", fits: Any = None) -> AttentionConfig:  # fmt: skip
        """The config a call runs: the rule's (None; "auto" on the simulator, where timings mean
        nothing), the stored or measured winner ("auto" on a GPU), or the caller's. ``fits``
        (a block mask's): whether a config's tiles may run (the first candidate that does, for
        the rule's; the caller's must)."""
        auto = isinstance(config, str) and config == "auto"
        if not (config is None or auto or isinstance(config, AttentionConfig)):
            raise KaioTypeError(f"{op}: config is None, 'auto' or an AttentionConfig, not {config!r}")
        if fits is not None:
            if isinstance(config, AttentionConfig):
                fits(config, explicit=True)
                return self._config(config, dev, t, sq, d, causal, run, op)
            smallest = AttentionConfig(16, 16, 1, 1, 2)  # divides every block a mask may have
            return next((c for c in candidates(sq, d, dev.compile_arch) if fits(c)), smallest)
        if config is None or (auto and dev.is_simulator):
            return choose_config(sq, d, dev.compile_arch)
        if auto:
            from kaio.runtime.bench import bench

            time_ms = lambda c: bench(lambda: run(c), warmup=10, rep=50, device=dev).median  # noqa: E731
            return autotuned_config(dev, t, sq, d, causal, time_ms)
        assert isinstance(config, AttentionConfig)
        if config.shared_bytes(padded(d)) > dev.shared_memory_per_block_optin:
            raise KaioTypeError(
                f"{op}: {config} needs {config.shared_bytes(padded(d))} bytes of shared memory for head dim {d}; "
                f"the device gives a block at most {dev.shared_memory_per_block_optin}"
            )
        return config

    def pipeline(self, d: int = 64, sq: int = 128, arch: str = "sm_80") -> Pipeline:
        """The pass pipeline of the kernel for head dim ``d`` and ``sq`` queries."""
        return choose_config(sq, d, arch).pipeline(arch)

    def __repr__(self) -> str:
        return "<kaio.ops_library.attention>"


def _config_label(config: AttentionConfig | str | None) -> str | None:
    """The config as the custom op's schema carries it: None, "auto" or a config's label."""
    return config.label() if isinstance(config, AttentionConfig) else config


def config_from_label(config: str | None) -> AttentionConfig | str | None:
    """The inverse of :func:`_config_label` (any other string is left for the op to refuse)."""
    found = re.fullmatch(r"(\d+)x(\d+)-w(\d+)x(\d+)-s(\d+)", config) if isinstance(config, str) else None
    return AttentionConfig(*(int(g) for g in found.groups())) if found else config


def check_tensors(op: str, q: Any, k: Any, v: Any, kv_lens: Any) -> tuple[int, int, int, int, int, int]:
    """The checks of :func:`_check` and of ``kv_lens``'s type and shape on torch tensors'
    metadata alone (fake tensors too): what the custom ops and their fakes both run."""
    from kaio.ops_library.torch_checks import TensorMetadata

    meta = TensorMetadata(op)
    sizes = _check(meta.take("q", q), meta.take("k", k), meta.take("v", v), None, op)
    if kv_lens is not None:
        _check_lengths(meta.take("kv_lens", kv_lens), sizes[0], op)
    return sizes


def autotuned_config(dev: Any, t: dtypes.ScalarType, sq: int, d: int, causal: bool,
                     time_ms: Callable[[AttentionConfig], float]) -> AttentionConfig:  # fmt: skip
    """The fastest candidate for (head dim, dtype, causal, decoding or not) on ``dev``, timed
    with ``time_ms`` once and then read back from ``autotune/attention.json`` in the kaio cache
    directory (:mod:`kaio.ops_library.autotune`)."""
    from kaio.ops_library import autotune as tuning

    phase = "decode" if sq <= 16 else "prefill"
    key = f"{tuning.device_key(dev)}|{t.name}|d{d}|{'causal' if causal else 'full'}|{phase}"
    if (known := tuning.remembered("attention", key)) is not None:
        return known  # type: ignore[no-any-return]
    pool = [c for c in candidates(sq, d, dev.compile_arch) if c.shared_bytes(padded(d)) <= dev.shared_memory_per_block_optin]
    return tuning.tuned("attention", key, pool, time_ms, AttentionConfig.label)


class _ModdedLaunch(NamedTuple):
    """The forward kernel's specialization for a call's mods, and its mod arguments."""

    mods: Any  # an AttentionMods
    args: tuple[Any, ...]  # softcap, left, right, slopes, sinks, the four mod_args slots
    meta: dict[str, Any]

    @classmethod
    def of(cls, mods: Mods, operands: dict[str, Any], workspace: Callable[..., Operand], sq: int, sk: int,
           op: str = "attention", grad: bool = False) -> _ModdedLaunch:  # fmt: skip
        """The launch for ``mods``; ``grad``: the backward's, with the score function's derivative."""
        from kaio.ops_library.attention_mods import mods_of

        arrays = operands["mod_args"]
        kernel_mods = mods_of(op, mods.score_mod, mods.mask_mod, tuple(a.dtype for a in arrays), grad,
                              tuple(tuple(a.shape) for a in arrays))  # fmt: skip
        unused = workspace((1,), dtypes.f32).value  # never read: the kernel's constexprs leave them out
        unused_slot = workspace((1,), dtypes.i32).value
        slots = [a.value for a in arrays] + [unused_slot] * (4 - len(arrays))
        reach = sk + sq  # a window side past every key: no bound (and no 32-bit overflow)
        left, right = (min(w, reach) for w in mods.window) if mods.window is not None else (reach, reach)
        slopes, sinks = operands["alibi_slopes"], operands["sinks"]
        args = (mods.softcap or 1.0, left, right, slopes.value if slopes is not None else unused,
                sinks.value if sinks is not None else unused, *slots)  # fmt: skip
        meta = {"WINDOW": mods.window is not None, "SOFTCAP": mods.softcap is not None,
                "ALIBI": slopes is not None, "SINKS": sinks is not None}  # fmt: skip
        return cls(kernel_mods, args, meta)

    @property
    def scores_modified(self) -> bool:
        """Whether the kernel scales and modifies each score before the softmax (then exp2
        scales by log2(e) alone); a softcap alone folds its factor into exp2's scale."""
        return self.mods.score is not None or self.meta["ALIBI"]


def _mod_operands(ops: Any, mods: Mods, h: int, op: str = "attention") -> dict[str, Any]:
    """The mods' arrays taken (by ``Operands``, or ``TensorMetadata`` for tensors' metadata
    alone) and checked: per-head f32 slopes and sinks, mod_args of any type."""
    taken: dict[str, Any] = {"mod_args": [ops.take(f"mod_args[{i}]", a) for i, a in enumerate(mods.mod_args)]}
    for name in ("alibi_slopes", "sinks"):
        value = getattr(mods, name)
        operand = ops.take(name, value) if value is not None else None
        if operand is not None and (operand.shape != (h,) or operand.dtype != dtypes.f32):
            raise KaioTypeError(f"{op}: `{name}` must be f32 of shape ({h},) (one per query head), "
                                f"got {operand.dtype.name} {operand.shape}")  # fmt: skip
        taken[name] = operand
    return taken


def check_mod_tensors(op: str, mods: Mods, h: int) -> None:
    """:func:`_mod_operands`' checks on torch tensors' metadata alone (the custom ops' fakes)."""
    from kaio.ops_library.attention_mods import mods_of
    from kaio.ops_library.torch_checks import TensorMetadata

    taken = _mod_operands(TensorMetadata(op), mods, h, op)
    mods_of(op, mods.score_mod, mods.mask_mod, tuple(a.dtype for a in taken["mod_args"]), False,
            tuple(tuple(a.shape) for a in taken["mod_args"]))  # the functions' arity and subscripts  # fmt: skip


class Packed(NamedTuple):
    """The forward kernel's ``cu_q, cu_k`` arguments: a varlen call's cumulative sequence lengths
    and its longest sequences' (query, key) lengths, which size the grid; a dense call's unread
    placeholders and None."""

    cu_q: Any
    cu_k: Any
    longest: tuple[int, int] | None = None


def _forward(ops: Operands, q: Operand, k: Operand, v: Operand, o: Operand, lse: Operand, lens: Any,
             has_lens: bool, sizes: tuple[int, ...], scale: float, causal: bool, config: AttentionConfig,
             dropout: Dropout, modded: _ModdedLaunch, packed: Packed, blocks: Any = None) -> None:  # fmt: skip
    """Launch the forward kernel, split into key chunks and combined when decoding. Varlen
    (``packed.longest``): ``sizes`` has the total query and key rows as Sq and Sk, and one
    program per block of the longest sequence's queries (no split)."""
    b, h, hkv, sq, sk, d = sizes
    dv = v.shape[-1]  # the value head dim: the output's
    rows, keys = packed.longest or (sq, sk)  # the grid's query rows; the most keys a program walks
    splits = 1 if packed.longest or blocks is not None else decode_splits(sq, sk, config.block_n)
    meta = kernel_meta(config, padded(d), causal, has_lens, scale, dropout.p > 0, padded(dv), dv != d)
    if packed.longest:
        meta["VARLEN"] = True
    scale_log2 = scale * LOG2E if scale else ZERO_SCALE
    meta |= modded.meta
    if modded.scores_modified:  # the kernel scales each score itself; exp2 then needs log2(e)
        scale_log2, meta["NEG_SCALE"] = LOG2E, False
    elif modded.meta["SOFTCAP"]:  # tanh(s * scale / c) in the kernel; exp2 scales by c log2(e)
        scale_log2, meta["NEG_SCALE"] = float(modded.args[0]) * LOG2E, False  # args[0]: the softcap
    # no block mask: one of the dense call's unread i32 placeholders stands for its lists
    listed = blocks.args if blocks is not None else (packed.cu_q, 1, 1, 0, 0)
    extra = (scale, *modded.args, *listed)
    if blocks is not None:
        meta |= {"BLOCK_MASK": True, "BQ_MASK": blocks.block[0], "BKV_MASK": blocks.block[1]}
    grid = (math.ceil(rows / config.block_m) * splits, b * h)
    if splits == 1:
        kernel = configured_kernel(q.dtype, config, mods=modded.mods)
        kernel.launch(ops.device, q.value, k.value, v.value, o.value, lse.value, lens, packed.cu_q, packed.cu_k,
                      h, hkv, sq, sk, d, dv, scale_log2, 1, keys, *dropout.args, *extra, grid=grid, **meta)  # fmt: skip
        return
    from kaio.ops_library.attention_kernel import combine_tile_kernel

    chunk = math.ceil(math.ceil(sk / splits) / config.block_n) * config.block_n
    kernel = configured_kernel(q.dtype, config, dtypes.f32, mods=modded.mods)
    combine = combine_tile_kernel(q.dtype)
    rows = b * h * splits * sq
    with ops.workspace((rows, dv), dtypes.f32) as parts, ops.workspace((rows,), dtypes.f32) as part_lse:
        kernel.launch(ops.device, q.value, k.value, v.value, parts.value, part_lse.value, lens, packed.cu_q,
                      packed.cu_k, h, hkv, sq, sk, d, dv, scale_log2, splits, chunk, *dropout.args, *extra, grid=grid,
                      **meta)  # fmt: skip
        combine.launch(ops.device, parts.value, part_lse.value, o.value, lse.value, sq, dv, splits,
                       grid=(math.ceil(sq / 16), b * h), BM=16, BD=meta["BDV"])  # fmt: skip


def _check(q: Operand, k: Operand, v: Operand, out: Operand | None, op: str = "attention") -> tuple[int, int, int, int, int, int]:
    """(B, H, Hkv, Sq, Sk, D) of valid q, k, v (and out); else a KaioTypeError naming the argument."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if len(x.shape) != 4:
            raise KaioTypeError(f"{op}: `{name}` must be 4-D (batch, heads, sequence, head dim), got shape {x.shape}")
    b, h, sq, d = q.shape
    bk, hkv, sk, dk = k.shape
    if (bk, dk) != (b, d):
        raise KaioTypeError(f"{op}: `k` must have shape ({b}, Hkv, Sk, {d}), got {k.shape}")
    check_heads_and_types(op, q, k, v, out, h, hkv, d)
    if max(b * h * sq, b * hkv * sk) * max(d, v.shape[-1]) >= 2**31:
        raise KaioTypeError(f"{op}: arrays must have fewer than 2**31 elements")
    return b, h, hkv, sq, sk, d


def check_heads_and_types(op: str, q: Operand, k: Operand, v: Operand, out: Operand | None, h: int, hkv: int, d: int) -> None:
    """The rules the dense and the packed layouts share: v of k's shape but for its own head dim
    (the last axis: DeepSeek's 192 / 128), H a multiple of Hkv, the head dims, one 16-bit type,
    out of q's shape and type with v's head dim."""
    if v.shape[:-1] != k.shape[:-1]:
        raise KaioTypeError(f"{op}: `v` must have k's shape {k.shape} but for its head dim (the last axis), got {v.shape}")
    if hkv < 1 or h % hkv:
        raise KaioTypeError(f"{op}: q's {h} heads must be a multiple of k's and v's {hkv}")
    check_head_dim(op, d)
    check_head_dim(op, v.shape[-1], "v's head dim")
    if q.dtype not in (dtypes.f16, dtypes.bf16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise KaioTypeError(
            f"{op}: q, k and v must all be f16 or all bf16, got {q.dtype.name}, {k.dtype.name}, {v.dtype.name} "
            "(the tensor cores take 16-bit operands: cast f32 inputs with .half() or .bfloat16())"
        )
    if out is not None and (out.shape != output_shape(q, v) or out.dtype != q.dtype):
        raise KaioTypeError(f"{op}: `out` must be {q.dtype.name} of shape {output_shape(q, v)}, got {out.dtype.name} {out.shape}")


def output_shape(q: Any, v: Any) -> tuple[int, ...]:
    """attention's output shape: q's with v's head dim (the last axis), in both layouts."""
    return (*q.shape[:-1], v.shape[-1])


def tile_head_dim(d: int, v: Any) -> int:
    """The head dim a config is chosen for: the larger of q's and k's ``d`` and ``v``'s (the
    tiles of both must fit)."""
    return max(d, v.shape[-1])


def _scale(scale: Any, op: str = "attention") -> float | None:
    """The softmax scale asked for: None (``1 / sqrt(d)``) or a finite real number (a bool is
    refused: ``scale=True`` is a mistake, not 1.0)."""
    if scale is None:
        return None
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise KaioTypeError(f"{op}: `scale` is a finite number or None, got {scale!r} ({type(scale).__name__})")
    if not math.isfinite(float(scale)):
        raise KaioValueError(f"{op}: `scale` is a finite number or None, got {scale!r}")
    return float(scale)


def _lengths(ops: Operands, kv_lens: Any, b: int, sk: int, op: str = "attention") -> Operand:
    lens = _check_lengths(ops.take("kv_lens", kv_lens), b, op)
    values = lens.host if lens.host is not None else _to_host(lens.value)
    if values is not None and ((np.asarray(values) < 0) | (np.asarray(values) > sk)).any():
        raise KaioTypeError(f"{op}: `kv_lens` must lie in 0..{sk} (the key count), got {np.asarray(values).tolist()}")
    return lens


def _check_lengths(lens: Operand, b: int, op: str) -> Operand:
    if lens.shape != (b,) or lens.dtype != dtypes.i32:
        raise KaioTypeError(f"{op}: `kv_lens` must be int32 of shape ({b},), got {lens.dtype.name} {lens.shape}")
    return lens


_to_host = to_host  # the name paged_attention and attention_varlen import


# help(attention) shows the class's doc, so the class carries the user-facing one (the module's)
Attention.__doc__ = f"""{__doc__}
``attention.run(...)`` is the op without the torch custom-op routing; ``attention.pipeline(d,
sq, arch)`` the pass pipeline of a head dim and query length.
"""

attention = Attention()
