"""``torch.ops.kaio.gguf_matmul``: the GGUF quantised-weight matmul as a custom op, so that
``torch.compile`` sees one opaque op (``qtype`` as the format's name). It has no backward (the
weights are frozen blocks): x that requires grad is refused at the call. The fake runs the real
op's checks on the tensors' metadata. Loaded by ``torch_ops``; imports torch.
"""

from __future__ import annotations

import torch
from kaio.ops_library.autograd import op_device
from kaio.ops_library.gguf_matmul import OP, check, run
from kaio.ops_library.torch_checks import TensorMetadata
from torch import Tensor


@torch.library.custom_op("kaio::gguf_matmul", mutates_args=())
def _gguf_matmul(x: Tensor, weight: Tensor, qtype: str, *, device: str | None = None) -> Tensor:
    return run(x, weight, qtype, op_device(device))  # type: ignore[no-any-return]


@_gguf_matmul.register_fake
def _(x: Tensor, weight: Tensor, qtype: str, *, device: str | None = None) -> Tensor:
    check(TensorMetadata(OP), x, weight, qtype)
    return x.new_empty((x.shape[0], weight.shape[0]))
