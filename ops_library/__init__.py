"""High-level ops, one module each, each a tile kernel with its default pass pipeline.

The ops load on first use (PEP 562): ``import kaio.ops_library`` imports none of them, nor
xDSL, so it costs nothing until an op is called. A new op adds its public names to ``_OPS``.
"""

# ruff: noqa: F401 - the TYPE_CHECKING imports name what the lazy attributes resolve to

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

# public name -> the module (under kaio.ops_library) that defines it
_OPS: dict[str, str] = {
    "gelu_and_mul": "activations", "silu_and_mul": "activations",
    "gelu_and_mul_backward": "activations_backward", "silu_and_mul_backward": "activations_backward",
    "Attention": "attention", "attention": "attention",
    "PagedAttention": "paged_attention", "paged_attention": "paged_attention",
    "attention_backward": "attention_backward",
    "attention_varlen": "attention_varlen", "attention_varlen_backward": "attention_varlen_backward",
    "BlockMask": "block_mask", "create_block_mask": "block_mask",
    "cross_entropy": "cross_entropy", "cross_entropy_backward": "cross_entropy",
    "dropout": "dropout", "dropout_add": "dropout",
    "linear_cross_entropy": "linear_cross_entropy", "linear_cross_entropy_backward": "linear_cross_entropy",
    "Matmul": "matmul", "matmul": "matmul",
    "matmul_backward": "matmul_backward",
    "MatmulConfig": "matmul_config",
    "layer_norm": "norms", "rms_norm": "norms",
    "layer_norm_backward": "norms_backward", "rms_norm_backward": "norms_backward",
    "rope": "rope", "rope_backward": "rope",
    "log_softmax": "softmax", "softmax": "softmax",
    "log_softmax_backward": "softmax_backward", "softmax_backward": "softmax_backward",
    "w4a16_matmul": "w4a16_matmul", "w4a16_grouped_matmul": "w4a16_grouped_matmul", "GPTQExperts": "w4a16_grouped_matmul",
    "int8_matmul": "int8_matmul", "fp8_matmul": "fp8_matmul",
    "quantize_int8": "quantize", "quantize_fp8": "quantize",
    "gguf_matmul": "gguf_matmul", "gguf_grouped_matmul": "gguf_grouped_matmul", "GGUFLinear": "gguf_linear", "gguf_linear": "gguf_linear",
    "moe_topk_softmax": "moe_routing", "moe_topk_softmax_backward": "moe_routing_backward", "moe_align": "moe_align", "grouped_matmul": "grouped_matmul",
    "grouped_matmul_backward": "grouped_matmul_backward",
    "fused_moe": "moe_fused", "fused_moe_backward": "moe_fused_backward",
    "sample": "sampling",
}  # fmt: skip

if TYPE_CHECKING:  # what the lazy names resolve to, for type checkers and IDEs
    from kaio.ops_library.activations import gelu_and_mul, silu_and_mul
    from kaio.ops_library.activations_backward import gelu_and_mul_backward, silu_and_mul_backward
    from kaio.ops_library.attention import Attention, attention
    from kaio.ops_library.attention_backward import attention_backward
    from kaio.ops_library.attention_varlen import attention_varlen
    from kaio.ops_library.attention_varlen_backward import attention_varlen_backward
    from kaio.ops_library.block_mask import BlockMask, create_block_mask
    from kaio.ops_library.cross_entropy import cross_entropy, cross_entropy_backward
    from kaio.ops_library.dropout import dropout, dropout_add
    from kaio.ops_library.fp8_matmul import fp8_matmul
    from kaio.ops_library.gguf_linear import GGUFLinear, gguf_linear
    from kaio.ops_library.gguf_grouped_matmul import gguf_grouped_matmul
    from kaio.ops_library.gguf_matmul import gguf_matmul
    from kaio.ops_library.grouped_matmul import grouped_matmul
    from kaio.ops_library.grouped_matmul_backward import grouped_matmul_backward
    from kaio.ops_library.int8_matmul import int8_matmul
    from kaio.ops_library.linear_cross_entropy import (
        linear_cross_entropy,
        linear_cross_entropy_backward,
    )
    from kaio.ops_library.matmul import Matmul, matmul
    from kaio.ops_library.matmul_backward import matmul_backward
    from kaio.ops_library.matmul_config import MatmulConfig
    from kaio.ops_library.moe_align import moe_align
    from kaio.ops_library.moe_fused import fused_moe
    from kaio.ops_library.moe_fused_backward import fused_moe_backward
    from kaio.ops_library.moe_routing import moe_topk_softmax
    from kaio.ops_library.moe_routing_backward import moe_topk_softmax_backward
    from kaio.ops_library.norms import layer_norm, rms_norm
    from kaio.ops_library.paged_attention import PagedAttention, paged_attention
    from kaio.ops_library.norms_backward import layer_norm_backward, rms_norm_backward
    from kaio.ops_library.quantize import quantize_fp8, quantize_int8
    from kaio.ops_library.rope import rope, rope_backward
    from kaio.ops_library.sampling import sample
    from kaio.ops_library.softmax import log_softmax, softmax
    from kaio.ops_library.softmax_backward import log_softmax_backward, softmax_backward
    from kaio.ops_library.w4a16_grouped_matmul import GPTQExperts, w4a16_grouped_matmul
    from kaio.ops_library.w4a16_matmul import w4a16_matmul


def __getattr__(name: str) -> object:
    module = _OPS.get(name)
    if module is None:
        raise AttributeError(f"module 'kaio.ops_library' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_OPS})


class _OpsPackage(types.ModuleType):
    """The package's module type: an op named like its module (``matmul``, ``softmax``,
    ``attention``...) stays the op when its module is imported, which would otherwise bind the
    module to the package attribute (the eager imports this package had overwrote it again)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _OPS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _OpsPackage

__all__ = sorted(_OPS)  # noqa: PLE0605 - the table above is the list of public names
