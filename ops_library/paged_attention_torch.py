"""``torch.ops.kaio.paged_attention``: paged decoding attention as a ``torch.library`` custom op,
so ``torch.compile`` sees one opaque op (the output and its f32 logsumexp). It has no backward
(decoding): a tensor that requires grad is refused at the call. The window and softcap travel
as ``attention``'s schema carries them (a window side of -1: none; a softcap of 0: none).
``out=`` is no argument: a call with it runs the kernel directly. The fake runs the real op's
checks on the tensors' metadata; the page table's and lengths' values are checked when the op
runs, on the host, before any launch.
``register()`` defines the op (``torch_registration`` runs it); importing this imports torch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kaio.ops_library.attention import schema_mods
from kaio.ops_library.autograd import define_op, op_device
from kaio.ops_library.paged_attention import OP, check, run
from kaio.ops_library.torch_checks import TensorMetadata


def register() -> None:
    define_op("kaio::paged_attention", _paged_attention, _paged_attention_fake)


def _paged_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor, seq_lens: Tensor,
                     scale: float | None, window_left: int, window_right: int, softcap: float, sinks: Tensor | None,
                     k_scale: float, v_scale: float, *, device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    mods = schema_mods(OP, window_left, window_right, softcap, None, None, (), sinks)
    return run(q, k_cache, v_cache, block_table, seq_lens, scale, mods, sinks, k_scale, v_scale, None,
               op_device(device))  # type: ignore[return-value]  # fmt: skip


def _paged_attention_fake(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor, seq_lens: Tensor,
                          scale: float | None, window_left: int, window_right: int, softcap: float,
                          sinks: Tensor | None, k_scale: float, v_scale: float, *,
                          device: str | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    schema_mods(OP, window_left, window_right, softcap, None, None, (), sinks)
    check(TensorMetadata(OP), q, k_cache, v_cache, block_table, seq_lens, None, sinks)
    return torch.empty_like(q), q.new_empty(q.shape[:2], dtype=torch.float32)
