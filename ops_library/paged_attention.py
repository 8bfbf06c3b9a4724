"""``kaio.ops_library.paged_attention``: decoding attention over a paged KV cache (vLLM's layout).

    from kaio.ops_library import paged_attention
    o = paged_attention(q, k_cache, v_cache, block_table, seq_lens)
    o = paged_attention(q, k8, v8, block_table, seq_lens, k_scale=0.02, v_scale=0.01)  # fp8 cache
    o, lse = paged_attention(q, k_cache, v_cache, block_table, seq_lens, window=(127, 0), return_lse=True)

``q`` (B, H, D): one new token per sequence; ``k_cache``, ``v_cache`` (num_blocks, block_size,
Hkv, D); ``block_table`` int32 (B, max_blocks): sequence b's key j lives in page
``block_table[b, j // block_size]`` at slot ``j % block_size``; ``seq_lens`` int32 (B,): its key
count (0 gives a zero output and a logsumexp of ``-inf``). The query sees all its keys (it is the
last position). ``H`` a multiple of ``Hkv`` (query head h reads kv head ``h // (H / Hkv)``); head
dims multiples of 8 up to 256; block sizes a power of two from 16 up. q is f16 or bf16; the caches
q's type, or fp8 e4m3 (``ml_dtypes.float8_e4m3fn``, torch's ``float8_e4m3fn``; sm_89 and newer)
with per-tensor scales: the real K is ``k_scale * k_cache``, the real V ``v_scale * v_cache``.
``scale`` defaults to ``1 / sqrt(D)``. ``window=(left, right)``: FlashAttention's sliding window
at the query's position ``seq_lens[b] - 1`` (keys ``pos - left`` on; ``right`` reaches no key).
``softcap=c``: each score ``s`` becomes ``c * tanh(s / c)``. ``sinks``: f32 (H,), one logit per
query head in the softmax denominator (gpt-oss). Long sequences are split into key chunks
(flash-decoding) and combined. ``return_lse=True`` also returns the f32 logsumexp (B, H).
numpy in -> numpy out, kaio Buffers in -> Buffer out, torch tensors in -> torch tensor out,
through ``torch.ops.kaio.paged_attention`` (one opaque op for ``torch.compile``; forward only:
a tensor that requires grad is refused).

The kernel is a tile kernel (:mod:`kaio.ops_library.paged_attention_kernel`); every cached byte a
sequence needs is loaded once, for all the query heads of its kv head.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library.attention import check_head_dim, AttentionConfig, _scale, _to_host, mods_given, padded
from kaio.ops_library.autograd import needs_grad, refuse_traced
from kaio.ops_library.config_fields import bool_field
from kaio.ops_library.operands import Operand, Operands
from kaio.ops_library.rows import next_pow2, torch_op
from kaio.pipeline import Pipeline

OP = "paged_attention"
LOG2E = 1.4426950408889634
MIN_BLOCK_SIZE = 16  # a key step within one page has at least the 16 rows a tensor-core dot needs
MAX_KEY_BLOCK = 32  # keys per step: scores and K, V fragments stay few registers in one warp


class Sizes(NamedTuple):
    b: int
    h: int
    hkv: int
    d: int
    num_blocks: int
    block_size: int
    max_blocks: int


def config_for(sizes: Sizes) -> AttentionConfig:
    """Tiles: the G query heads of a kv head padded to a tensor-core row block (16 rows a warp),
    BN keys a step (a divisor of the block size, so a step never straddles two pages), the head
    dim split over two warps at 256 (a warp's accumulator stays 16 x 128), two cp.async stages."""
    g = sizes.h // sizes.hkv
    block_m = max(16, next_pow2(g))
    warps_n = 2 if next_pow2(sizes.d) >= 256 else 1
    return AttentionConfig(block_m, min(sizes.block_size, MAX_KEY_BLOCK), block_m // 16, warps_n, 2)


def decode_splits(max_len: int, block_n: int) -> int:
    """Flash-decoding's key chunks: at least 8 key blocks each, at most 32 chunks."""
    return max(1, min(32, max_len // (8 * block_n)))


class PagedAttention:
    """The paged decoding op: call it, or ask for its pipeline."""

    def __call__(self, q: Any, k_cache: Any, v_cache: Any, block_table: Any, seq_lens: Any, *,
                 scale: float | None = None, window: Any = None, softcap: Any = None, sinks: Any = None,
                 k_scale: float = 1.0, v_scale: float = 1.0, out: Any = None, device: Any = None,
                 return_lse: bool = False) -> Any:  # fmt: skip
        return_lse = bool_field(OP, "return_lse", return_lse)
        scale = _scale(scale, OP)  # the scalars checked before any operand is copied to the device
        k_scale, v_scale = _cache_scale("k_scale", k_scale), _cache_scale("v_scale", v_scale)
        mods = mods_given(OP, None, None, (), window, softcap, None, sinks)
        tops = torch_op(q, k_cache, v_cache, block_table, seq_lens, sinks, device=device) if out is None else None
        if tops is not None:
            left, right = mods.window or (-1, -1)
            o, lse = tops.paged_attention(q, k_cache, v_cache, block_table, seq_lens, scale, left, right,
                                          mods.softcap or 0.0, sinks, k_scale, v_scale)  # fmt: skip
            return (o, lse) if return_lse else o
        if needs_grad(q, k_cache, v_cache, sinks):
            raise KaioTypeError(f"{OP}: has no backward, and an input requires grad; pass tensors that do not (.detach())")
        refuse_traced(OP, q, k_cache, v_cache, block_table, seq_lens, out)
        result, lse = run(q, k_cache, v_cache, block_table, seq_lens, scale, mods, sinks, k_scale, v_scale, out, device)
        return (result, lse) if return_lse else result

    def pipeline(self, d: int = 128, h: int = 8, hkv: int = 8, block_size: int = 16, arch: str = "sm_80") -> Pipeline:
        """The pass pipeline of the kernel for head dim ``d``, ``h`` query and ``hkv`` kv heads."""
        return config_for(Sizes(1, h, hkv, d, 1, block_size, 1)).pipeline(arch)

    def __repr__(self) -> str:
        return "<kaio.ops_library.paged_attention>"


def check(ops: Any, q: Any, k_cache: Any, v_cache: Any, block_table: Any, seq_lens: Any, out: Any,
          sinks: Any) -> tuple[Sizes, tuple[Operand, ...]]:  # fmt: skip
    """The sizes and operands (q, k, v, table, lens, out or None, sinks or None), or a kaio error
    naming the argument (``ops``: an ``Operands``, or ``torch_checks.TensorMetadata`` for a fake)."""
    oq, ok, ov = ops.take("q", q), ops.take("k_cache", k_cache), ops.take("v_cache", v_cache)
    table, lens = ops.take("block_table", block_table), ops.take("seq_lens", seq_lens)
    oo = ops.take("out", out) if out is not None else None
    osinks = ops.take("sinks", sinks) if sinks is not None else None
    return _check(oq, ok, ov, table, lens, oo, osinks), (oq, ok, ov, table, lens, oo, osinks)


def run(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seq_lens: Any, scale: float | None, mods: Any,
        sinks: Any, k_scale: float, v_scale: float, out: Any, device: Any) -> tuple[Any, Any]:  # fmt: skip
    """The op itself, without the torch custom-op routing: (o, lse)."""
    ops = Operands(OP, q, k_cache, v_cache, block_table, seq_lens, out, sinks, device=device)
    sizes, (oq, ok, ov, table, lens, oo, osinks) = check(ops, q, k_cache, v_cache, block_table, seq_lens, out, sinks)
    max_len = _check_pages(table, lens, sizes)
    if ok.dtype != oq.dtype:
        from kaio.ops_library.scaled_matmul import require_arch

        require_arch(OP, ops.device, 89, "an fp8 e4m3 KV cache (cvt.rn.f16x2.e4m3x2)")
    if scale is None:
        scale = 1.0 / math.sqrt(sizes.d)
    if oo is None:
        oo = ops.output((sizes.b, sizes.h, sizes.d), oq.dtype)
    lse = ops.output((sizes.b, sizes.h), dtypes.f32)
    if sizes.b and sizes.h:
        with ops.workspace((1,), dtypes.f32) as unused:  # the sinks' slot when there are none: never read
            _forward(ops, oq, ok, ov, table, lens, oo, lse, osinks, unused, sizes, max_len,
                     scale * k_scale, v_scale, mods.window, mods.softcap)  # fmt: skip
    return ops.result(oo, out), ops.result(lse)


def kernel_for(t: dtypes.ScalarType, kv: dtypes.ScalarType, out: dtypes.ScalarType, config: AttentionConfig) -> Any:
    from kaio.ops_library.paged_attention_kernel import paged_attention_tile_kernel

    kernel = paged_attention_tile_kernel(t, kv, out).with_options(num_warps=config.warps, num_stages=config.stages)
    return kernel.with_pipeline(config.pipeline)


def _forward(ops: Operands, q: Operand, k: Operand, v: Operand, table: Operand, lens: Operand, o: Operand,
             lse: Operand, sinks: Operand | None, unused: Operand, sizes: Sizes, max_len: int, scale: float, v_scale: float,
             window: tuple[int, int] | None, softcap: float | None) -> None:  # fmt: skip
    """Launch the kernel, split into key chunks and combined for long sequences."""
    config = config_for(sizes)
    bd = padded(sizes.d)
    g = sizes.h // sizes.hkv
    splits = decode_splits(max_len, config.block_n)
    chunk = math.ceil(math.ceil(max(max_len, 1) / splits) / config.block_n) * config.block_n
    if softcap is not None:  # c * tanh(s * scale / c), in log2 units
        scale_log2, tanh_scale = softcap * LOG2E, scale / softcap
    else:
        scale_log2, tanh_scale = scale * LOG2E, 1.0
    left = min(window[0], max_len) if window is not None else 0  # past every key: no bound, no overflow
    meta = {"BM": config.block_m, "BN": config.block_n, "BD": bd, "BLOCK_SIZE": sizes.block_size,
            "WINDOW": window is not None, "SOFTCAP": softcap is not None, "SINKS": sinks is not None}  # fmt: skip
    args = (sizes.h, sizes.hkv, sizes.d, sizes.max_blocks, scale_log2, tanh_scale, left, v_scale, splits, chunk)
    grid = (splits, sizes.b * sizes.hkv)
    inputs = (q.value, k.value, v.value, table.value, lens.value)
    sinks_arg = sinks.value if sinks is not None else unused.value
    if splits == 1:
        kernel_for(q.dtype, k.dtype, q.dtype, config).launch(ops.device, *inputs, o.value, lse.value, sinks_arg,
                                                             *args, grid=grid, **meta)  # fmt: skip
        return
    from kaio.ops_library.attention_kernel import combine_tile_kernel

    rows = sizes.b * sizes.h * splits
    with ops.workspace((rows, sizes.d), dtypes.f32) as parts, ops.workspace((rows,), dtypes.f32) as part_lse:
        kernel_for(q.dtype, k.dtype, dtypes.f32, config).launch(ops.device, *inputs, parts.value, part_lse.value,
                                                                sinks_arg, *args, grid=grid, **meta)  # fmt: skip
        # the combine's (batch, head) is the kernel's (batch, kv head), its query rows the G heads
        combine_tile_kernel(q.dtype).launch(ops.device, parts.value, part_lse.value, o.value, lse.value, g, sizes.d,
                                            splits, grid=(math.ceil(g / 16), sizes.b * sizes.hkv), BM=16, BD=bd)  # fmt: skip


def _cache_scale(name: str, value: Any) -> float:
    """``k_scale`` / ``v_scale``: a finite positive number (vLLM's per-tensor fp8 scales)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise KaioTypeError(f"{OP}: `{name}` is a positive finite number, got {value!r} ({type(value).__name__})")
    if not 0 < value < math.inf:  # NaN fails too; comparisons, which torch.compile traces on its symbolic floats
        raise KaioValueError(f"{OP}: `{name}` must be positive and finite, got {value!r}")
    return float(value)


def _check(q: Operand, k: Operand, v: Operand, table: Operand, lens: Operand, out: Operand | None,
           sinks: Operand | None) -> Sizes:  # fmt: skip
    """The sizes of valid operands; else a KaioTypeError naming the argument and the rule."""
    if len(q.shape) != 3:
        raise KaioTypeError(f"{OP}: `q` must be 3-D (batch, heads, head dim), got shape {q.shape}")
    b, h, d = q.shape
    for name, x in (("k_cache", k), ("v_cache", v)):
        if len(x.shape) != 4 or x.shape[3] != d:
            raise KaioTypeError(f"{OP}: `{name}` must be 4-D (num_blocks, block_size, Hkv, {d}), got shape {x.shape}")
    if v.shape != k.shape:
        raise KaioTypeError(f"{OP}: `v_cache` must have k_cache's shape {k.shape}, got {v.shape}")
    num_blocks, block_size, hkv, _ = k.shape
    if hkv < 1 or h % hkv:
        raise KaioTypeError(f"{OP}: q's {h} heads must be a multiple of the caches' {hkv} (Hkv)")
    check_head_dim(OP, d)
    if block_size < MIN_BLOCK_SIZE or block_size & (block_size - 1):
        raise KaioTypeError(f"{OP}: the caches' block_size must be a power of two >= {MIN_BLOCK_SIZE}, got {block_size}")
    if q.dtype not in (dtypes.f16, dtypes.bf16):
        raise KaioTypeError(f"{OP}: `q` must be f16 or bf16, got {q.dtype.name}")
    e4m3 = dtypes.BY_NAME["f8e4m3"]
    for name, x in (("k_cache", k), ("v_cache", v)):
        if x.dtype not in (q.dtype, e4m3):
            raise KaioTypeError(f"{OP}: `{name}` must be q's type {q.dtype.name} or f8e4m3, got {x.dtype.name}")
    if v.dtype != k.dtype:
        raise KaioTypeError(f"{OP}: `k_cache` and `v_cache` must have one type, got {k.dtype.name} and {v.dtype.name}")
    if len(table.shape) != 2 or table.shape[0] != b or table.dtype != dtypes.i32:
        raise KaioTypeError(f"{OP}: `block_table` must be int32 of shape ({b}, max_blocks), got {table.dtype.name} {table.shape}")
    if lens.shape != (b,) or lens.dtype != dtypes.i32:
        raise KaioTypeError(f"{OP}: `seq_lens` must be int32 of shape ({b},), got {lens.dtype.name} {lens.shape}")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype):
        raise KaioTypeError(f"{OP}: `out` must be {q.dtype.name} of shape {q.shape}, got {out.dtype.name} {out.shape}")
    if sinks is not None and (sinks.shape != (h,) or sinks.dtype != dtypes.f32):
        raise KaioTypeError(f"{OP}: `sinks` must be f32 of shape ({h},) (one per query head), got {sinks.dtype.name} {sinks.shape}")
    if max(b * h * d, num_blocks * block_size * hkv * d, b * table.shape[1]) >= 2**31:
        raise KaioTypeError(f"{OP}: arrays must have fewer than 2**31 elements")
    return Sizes(b, h, hkv, d, num_blocks, block_size, table.shape[1])


def _check_pages(table: Operand, lens: Operand, sizes: Sizes) -> int:
    """The longest sequence, after checking each length lies in 0..max_blocks * block_size and
    each page a sequence uses (its first ``ceil(len / block_size)`` entries) in 0..num_blocks - 1
    (else a KaioTypeError naming the argument, as attention's ``kv_lens`` check raises). The
    values are read on the host (copied back from a device array, as attention's are)."""
    values = lens.host if lens.host is not None else _to_host(lens.value)
    pages = table.host if table.host is not None else _to_host(table.value)
    if values is None or pages is None:  # an array kaio cannot read back: the capacity bounds it
        return sizes.max_blocks * sizes.block_size
    values, pages = np.asarray(values, np.int64), np.asarray(pages, np.int64)
    capacity = sizes.max_blocks * sizes.block_size
    if ((values < 0) | (values > capacity)).any():
        raise KaioTypeError(f"{OP}: `seq_lens` must lie in 0..{capacity} (max_blocks * block_size), got {values.tolist()}")
    used = np.arange(sizes.max_blocks)[None, :] < -(-values[:, None] // sizes.block_size)
    bad = used & ((pages < 0) | (pages >= sizes.num_blocks))
    if bad.any():
        b, j = (int(i) for i in np.argwhere(bad)[0])
        raise KaioTypeError(f"{OP}: `block_table` entries of the blocks a sequence uses must lie in 0..{sizes.num_blocks - 1} "
                             f"(num_blocks), got block_table[{b}, {j}] = {pages[b, j]}")  # fmt: skip
    return int(values.max(initial=0))


# help(paged_attention) shows the class's doc, so the class carries the user-facing one
PagedAttention.__doc__ = __doc__

paged_attention = PagedAttention()
