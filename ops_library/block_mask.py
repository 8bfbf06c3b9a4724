"""``kaio.ops_library.create_block_mask``: FlexAttention's block mask, so attention walks only
the key blocks a ``mask_mod`` lets any query of a block see.

    from kaio.ops_library import attention, create_block_mask
    def sliding(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx >= q_idx - 256)
    mask = create_block_mask(sliding, None, None, 4096, 4096)
    o = attention(q, k, v, block_mask=mask)

``create_block_mask(mask_mod, B, H, Sq, Sk, *, block=None, mod_args=(), device=None)``
evaluates ``mask_mod(b, h, q_idx, kv_idx, *mod_args)`` (attention's meaning) once on every
(query, key) pair, on the device, one (block_q, block_kv) tile per program
(:mod:`kaio.ops_library.block_mask_kernel`), and records for each (batch, head, query block)
which key blocks are **empty** (never loaded), **full** (every valid query sees every key: the
kernel's unmasked loop, no per-element mask) or **partial** (the masked loop, which calls
``mask_mod`` on each score); and for each key block the query blocks, for the backward's dK/dV.
``B`` or ``H`` None: one mask for every batch entry or head (the function sees ``b`` or ``h``
0). ``block``: (block_q, block_kv), powers of two of at least 16, a multiple of the tiles of
the kernels that take the mask (attention refuses a config whose tiles do not divide it); None:
the attention kernel's own tiles for ``Sq`` queries on the device's arch, at least 32 (the
backward's), so every block the mask calls full is a whole tile of visible scores.

The result, a :class:`BlockMask`, holds the function and its arrays (``attention`` calls it on
the partial blocks), the classes (``to_dense()``: 0 empty, 1 partial, 2 full, per (B, H,
query block, key block)) and the lists the kernels read, on the device (the ``mod_args``'
kind: torch tensors, numpy arrays, else kaio Buffers). Called with torch tensors, attention and
attention_backward go through their custom ops with the lists as int32 tensors on q's device
(:meth:`BlockMask.for_torch`), so autograd records a block-masked call and ``torch.compile``
traces it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library.block_mask_kernel import EMPTY, FULL, PARTIAL

OP = "create_block_mask"
__all__ = ["EMPTY", "FULL", "PARTIAL", "BlockLists", "BlockMask", "MaskedBlocks", "create_block_mask", "mask_of"]


@dataclass(frozen=True, eq=False)
class BlockMask:
    """Which key blocks each query block sees (see the module doc)."""

    mask_mod: Callable[..., Any]
    mod_args: tuple[Any, ...]
    B: int | None
    H: int | None
    Sq: int
    Sk: int
    block: tuple[int, int]
    classes: np.ndarray  # (B or 1, H or 1, query blocks, key blocks): EMPTY, PARTIAL, FULL
    kv_lists: Any  # i32 [full counts R | partial counts R | full indices R x NKB | partial R x NKB]
    q_lists: Any  # the same per key block (C = rows of B x H x NKB) over the query blocks
    host_lists: tuple[np.ndarray, np.ndarray] = field(repr=False)  # (kv_lists, q_lists) on the host
    _on_torch: dict[Any, BlockLists] = field(repr=False, default_factory=dict)  # by torch device

    @property
    def num_blocks(self) -> tuple[int, int]:
        """(query blocks, key blocks)."""
        return self.classes.shape[2], self.classes.shape[3]

    def for_torch(self, like: Any) -> BlockLists:
        """What the kernels read of the mask, its lists int32 tensors on ``like``'s torch device
        (the operands of the torch custom ops), copied there once per device."""
        if like.device not in self._on_torch:
            import torch

            kv, q = (torch.from_numpy(h).to(like.device) for h in self.host_lists)
            self._on_torch[like.device] = BlockLists(self.B, self.H, self.Sq, self.Sk, self.block, kv, q)
        return self._on_torch[like.device]

    def to_dense(self) -> np.ndarray:
        """The classes of the blocks, (B or 1, H or 1, query blocks, key blocks)."""
        return self.classes.copy()

    def sparsity(self) -> float:
        """The percentage of blocks that are empty (FlexAttention's ``BlockMask.sparsity``)."""
        return 100.0 * float((self.classes == EMPTY).mean()) if self.classes.size else 0.0

    def __repr__(self) -> str:
        full, partial = int((self.classes == FULL).sum()), int((self.classes == PARTIAL).sum())
        return (f"BlockMask({self.mask_mod.__name__}, B={self.B}, H={self.H}, Sq={self.Sq}, Sk={self.Sk}, "
                f"block={self.block}: {full} full, {partial} partial, {self.sparsity():.1f}% empty)")  # fmt: skip


def create_block_mask(mask_mod: Callable[..., Any], B: int | None, H: int | None, Sq: int, Sk: int, *,  # noqa: N803
                      block: Any = None, mod_args: Any = (), device: Any = None) -> BlockMask:  # fmt: skip
    """The block mask of ``mask_mod`` over (B, H, Sq, Sk) (see the module doc)."""
    from kaio.ops_library.attention_mods import mods_of
    from kaio.ops_library.operands import Operands

    if mask_mod is None:
        raise KaioTypeError(f"{OP}: `mask_mod` is the function the mask is made of, got None")
    sizes = {name: _count(name, value, name in ("B", "H")) for name, value in (("B", B), ("H", H), ("Sq", Sq), ("Sk", Sk))}
    if not isinstance(mod_args, (tuple, list)):
        raise KaioTypeError(f"{OP}: `mod_args` is a tuple of arrays, got {type(mod_args).__name__}")
    ops = Operands(OP, *mod_args, device=device)
    taken = [ops.take(f"mod_args[{i}]", a) for i, a in enumerate(mod_args)]
    mods = mods_of(OP, None, mask_mod, tuple(a.dtype for a in taken), False, tuple(tuple(a.shape) for a in taken))
    bq, bkv = _block(block, Sq, ops.device.compile_arch)
    mb, mh = sizes["B"] or 1, sizes["H"] or 1
    nqb, nkb = math.ceil(Sq / bq), math.ceil(Sk / bkv)
    classes = np.zeros((mb, mh, nqb, nkb), np.int32)
    if classes.size:
        from kaio.ops_library.block_mask_kernel import block_classes_tile_kernel
        from kaio.ops_library.operands import to_host

        with ops.workspace((classes.size,), dtypes.i32) as out, ops.workspace((1,), dtypes.i32) as unused:
            slots = [a.value for a in taken] + [unused.value] * (4 - len(taken))
            block_classes_tile_kernel(mods).launch(ops.device, out.value, *slots, Sq, Sk, mh, nqb, nkb,
                                                   grid=(nkb, nqb, mb * mh), BQ=bq, BKV=bkv)  # fmt: skip
            classes = np.asarray(to_host(out.value)).reshape(classes.shape)
    kv_lists = _lists(classes.reshape(-1, nkb))
    q_lists = _lists(classes.transpose(0, 1, 3, 2).reshape(-1, nqb))
    return BlockMask(mask_mod, tuple(mod_args), sizes["B"], sizes["H"], Sq, Sk, (bq, bkv), classes.astype(np.int8),
                     _of_kind(ops, mod_args, kv_lists), _of_kind(ops, mod_args, q_lists), (kv_lists, q_lists))  # fmt: skip


class BlockLists(NamedTuple):
    """What the kernels read of a block mask: the (B, H, Sq, Sk) it was made for (B or H None:
    every batch entry or head), its (block_q, block_kv) and its lists by query block and by key
    block. A :class:`BlockMask` has the same fields; the torch custom ops carry these, their
    sizes as one list of integers (:attr:`schema`, :meth:`of_schema`)."""

    B: int | None
    H: int | None
    Sq: int
    Sk: int
    block: tuple[int, int]
    kv_lists: Any
    q_lists: Any

    @property
    def num_blocks(self) -> tuple[int, int]:
        """(query blocks, key blocks)."""
        return math.ceil(self.Sq / self.block[0]), math.ceil(self.Sk / self.block[1])

    @property
    def schema(self) -> tuple[Any, Any, list[int]]:
        """The custom ops' ``block_kv_lists, block_q_lists, block_sizes`` (B and H 0 for None)."""
        return self.kv_lists, self.q_lists, [self.B or 0, self.H or 0, self.Sq, self.Sk, *self.block]

    @classmethod
    def of_schema(cls, kv_lists: Any, q_lists: Any, sizes: Any) -> BlockLists | None:
        """The inverse of :attr:`schema`; None when the call has no block mask."""
        if sizes is None:
            return None
        b, h, sq, sk, bq, bkv = (int(x) for x in sizes)
        return cls(b or None, h or None, sq, sk, (bq, bkv), kv_lists, q_lists)


def _count(name: str, value: Any, optional: bool) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (1 if optional else 0):
        want = "a positive integer or None" if optional else "an integer >= 0"
        raise KaioTypeError(f"{OP}: `{name}` must be {want}, got {value!r}")
    return int(value)


def _block(block: Any, sq: int, arch: str) -> tuple[int, int]:
    """(block_q, block_kv): the caller's (an int for both, or a pair), else the attention
    kernel's tiles for ``sq`` queries on ``arch``, at least 32 each."""
    if block is None:
        from kaio.ops_library.attention_config import choose_config

        config = choose_config(sq, 64, arch)
        return max(config.block_m, 32), max(config.block_n, 32)
    pair = (block, block) if isinstance(block, (int, np.integer)) and not isinstance(block, bool) else block
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2
            and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 16 and not x & (x - 1) for x in pair)):  # fmt: skip
        raise KaioTypeError(f"{OP}: `block` is a power of two >= 16 or a pair of them (block_q, block_kv), got {block!r}")
    return int(pair[0]), int(pair[1])


def _lists(classes: np.ndarray) -> np.ndarray:
    """The kernels' lists of (R, N) classes: the counts of full and of partial blocks per row,
    then each row's full and partial block indices in order (past the count: any block)."""
    rows, n = classes.shape
    full, partial = classes == FULL, classes == PARTIAL
    order = lambda picked: np.argsort(~picked, axis=1, kind="stable")  # noqa: E731 (the picked ones first)
    parts = [full.sum(1), partial.sum(1), order(full).ravel(), order(partial).ravel()]
    return np.concatenate([np.asarray(p, np.int32).ravel() for p in parts] + [np.zeros(1, np.int32)])  # never empty


def _of_kind(ops: Any, mod_args: Any, host: np.ndarray) -> Any:
    """``host`` as the block mask keeps it: a tensor beside the mod_args' tensors, a numpy array
    for numpy callers, else a kaio Buffer on the op's device."""
    if ops.torch:
        like = next(a for a in mod_args if hasattr(a, "device") and hasattr(a, "data_ptr"))
        import torch

        return torch.from_numpy(host).to(like.device)
    if ops.host:
        return host
    return ops.device.alloc_from(host)


def mask_of(op: str, block_mask: Any, mask_mod: Any, mod_args: Any, causal: bool, window: Any,
            kv_lens: Any) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """The mask function and arrays of an attention call with ``block_mask``: the block mask's
    (a ``mask_mod`` given too must be the same function, ``mod_args`` the same arrays, since a
    ``score_mod`` reads those too); the masks it replaces are refused."""
    if not isinstance(block_mask, BlockMask):
        raise KaioTypeError(f"{op}: `block_mask` is a BlockMask (create_block_mask), got {type(block_mask).__name__}")
    for name, given in (("causal", causal), ("window", window is not None), ("kv_lens", kv_lens is not None)):
        if given:
            raise KaioTypeError(f"{op}: `block_mask` carries the mask, so `{name}` is not taken with it; "
                                f"write it into the block mask's mask_mod")  # fmt: skip
    if mask_mod is not None and mask_mod is not block_mask.mask_mod:
        raise KaioTypeError(f"{op}: `mask_mod` {mask_mod.__name__} is not the block mask's ({block_mask.mask_mod.__name__})")
    if tuple(mod_args) and (len(mod_args) != len(block_mask.mod_args)
                            or any(a is not b for a, b in zip(mod_args, block_mask.mod_args))):  # fmt: skip
        raise KaioTypeError(f"{op}: `mod_args` with a block_mask are its own (create_block_mask(..., mod_args=)): "
                            f"the score and mask functions read the same arrays")  # fmt: skip
    return block_mask.mask_mod, block_mask.mod_args


def check_made_for(op: str, bm: BlockMask | BlockLists, sizes: tuple[int, int, int, int]) -> None:
    """A KaioTypeError unless the block mask was made for a call of (B, H, Sq, Sk) ``sizes``."""
    b, h, sq, sk = sizes
    if (bm.B not in (None, b)) or (bm.H not in (None, h)) or (bm.Sq, bm.Sk) != (sq, sk):
        raise KaioTypeError(f"{op}: `block_mask` is made for (B, H, Sq, Sk) = ({bm.B}, {bm.H}, {bm.Sq}, {bm.Sk}), "
                            f"the call is ({b}, {h}, {sq}, {sk})")  # fmt: skip


class MaskedBlocks(NamedTuple):
    """A block mask as a kernel takes it: one of its list arrays (taken by the op), the mask's
    batch and head counts, the row and listed block counts, and (block_q, block_kv)."""

    lists: Any
    mb: int
    mh: int
    rows: int
    listed: int
    block: tuple[int, int]

    @classmethod
    def rows_of(cls, op: str, ops: Any, block_mask: BlockMask | BlockLists, sizes: tuple[int, int, int, int],
                by_key_block: bool = False) -> MaskedBlocks:  # fmt: skip
        """The lists by query block (by key block with ``by_key_block``: dK/dV's), checked to be
        a mask of a call of (B, H, Sq, Sk) ``sizes``."""
        bm = block_mask
        check_made_for(op, bm, sizes)
        nqb, nkb = bm.num_blocks
        lists = ops.take("block_mask", bm.q_lists if by_key_block else bm.kv_lists).value
        rows, listed = (nkb, nqb) if by_key_block else (nqb, nkb)
        return cls(lists, bm.B or 1, bm.H or 1, rows, listed, bm.block)

    @property
    def args(self) -> tuple[Any, ...]:
        """The kernels' ``bmask, MB, MH, NQB, NKB`` (rows and listed blocks)."""
        return self.lists, self.mb, self.mh, self.rows, self.listed

    def fits(self, config: Any, explicit: bool = False, tiles: tuple[int, int] | None = None) -> bool:
        """Whether a config's (rows, keys) tiles divide the mask's blocks; a KaioValueError
        naming both when ``explicit`` and they do not."""
        bm_, bn_ = tiles or (config.block_m, config.block_n)
        ok = self.block[0] % bm_ == 0 and self.block[1] % bn_ == 0
        if not ok and explicit:
            raise KaioValueError(f"attention: the tiles {bm_} x {bn_} do not divide the block_mask's blocks "
                                 f"{self.block[0]} x {self.block[1]}; make the mask with block= a multiple of them")  # fmt: skip
        return ok
