"""``torch.ops.kaio.w4a16_matmul``: the GPTQ int4-weight matmul as a custom op, so that
``torch.compile`` sees one opaque op. It has no backward (the weights are frozen integers; a
gradient for x alone is not implemented): x that requires grad is refused at the call. The fake
runs the real op's checks on the tensors' metadata. Loaded by ``torch_ops``; imports torch.
"""

from __future__ import annotations

import torch
from kaio.ops_library.autograd import op_device
from kaio.ops_library.torch_checks import TensorMetadata
from kaio.ops_library.w4a16_matmul import OP, check, run
from torch import Tensor


@torch.library.custom_op("kaio::w4a16_matmul", mutates_args=())
def _w4a16_matmul(x: Tensor, qweight: Tensor, scales: Tensor, qzeros: Tensor | None, bias: Tensor | None,
                  group_size: int, *, device: str | None = None) -> Tensor:  # fmt: skip
    return run(x, qweight, scales, qzeros, bias, group_size, op_device(device))  # type: ignore[no-any-return]


@_w4a16_matmul.register_fake
def _(x: Tensor, qweight: Tensor, scales: Tensor, qzeros: Tensor | None, bias: Tensor | None,
      group_size: int, *, device: str | None = None) -> Tensor:  # fmt: skip
    check(TensorMetadata(OP), x, qweight, scales, qzeros, bias, group_size)
    return x.new_empty((x.shape[0], qweight.shape[1]))
