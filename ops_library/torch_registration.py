"""The torch layer's one list: every module that defines ``torch.ops.kaio`` custom ops, in the
order their ``register()`` runs, and :func:`register_torch_ops`, which runs them once.

Importing a module of the torch layer (this one included) imports torch and registers nothing.
``import kaio.torch`` calls :func:`register_torch_ops`; so does a library op's first call with
torch tensors (``autograd.kaio_ops``), so a user never has to import ``kaio.torch`` first.
A new torch module adds its ``register`` here; the op modules never import this layer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from kaio.ops_library import (
    attention_varlen_torch,
    dropout_torch,
    gguf_matmul_torch,
    linear_cross_entropy_torch,
    matmul_torch,
    moe_torch,
    norms_autograd,
    paged_attention_torch,
    scaled_matmul_torch,
    torch_ops,
    torch_ops_backward,
    w4a16_matmul_torch,
)

REGISTRATIONS: tuple[Callable[[], None], ...] = (
    matmul_torch.register,  # matmul, matmul_out, matmul_backward and matmul's autograd
    torch_ops.register,  # the memory-bound forwards and attention (and Dynamo's constants)
    attention_varlen_torch.register,  # after torch_ops: Dynamo's constants (mods_key) set
    torch_ops_backward.register,  # softmax's, the gated activations' and cross_entropy's backwards
    norms_autograd.register,  # the norms' forwards with statistics, their and rope's backwards
    linear_cross_entropy_torch.register,
    w4a16_matmul_torch.register,
    scaled_matmul_torch.register,  # int8 / fp8 GEMMs and their quantisers
    gguf_matmul_torch.register,
    dropout_torch.register,
    paged_attention_torch.register,
    moe_torch.register,  # grouped_matmul and fused_moe with their backwards and autograd
)

_LOCK = threading.Lock()
_done = 0  # how many of REGISTRATIONS have run


@torch.compiler.assume_constant_result  # a first call traced by torch.compile registers eagerly
def register_torch_ops() -> None:
    """Define every ``torch.ops.kaio`` custom op, with its fake and autograd. Runs each
    registration once, whatever the number of calls and threads; later calls return at once."""
    global _done
    if _done == len(REGISTRATIONS):
        return
    with _LOCK:
        while _done < len(REGISTRATIONS):
            REGISTRATIONS[_done]()
            _done += 1
