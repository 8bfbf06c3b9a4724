"""``torch.ops.kaio.w4a16_matmul``: the GPTQ int4-weight matmul as a custom op, so that
``torch.compile`` sees one opaque op. It has no backward (the weights are frozen integers; a
gradient for x alone is not implemented): x that requires grad is refused at the call. The fake
runs the real op's checks on the tensors' metadata.
``register()`` defines the ops (``torch_registration`` runs it); importing this imports torch.
"""

from __future__ import annotations

from kaio.ops_library.autograd import define_op, op_device
from kaio.ops_library.torch_checks import TensorMetadata
from kaio.ops_library.w4a16_matmul import OP, check, run
from torch import Tensor


def register() -> None:
    define_op("kaio::w4a16_matmul", _w4a16_matmul, _w4a16_matmul_fake)


def _w4a16_matmul(x: Tensor, qweight: Tensor, scales: Tensor, qzeros: Tensor | None, bias: Tensor | None,
                  group_size: int, *, device: str | None = None) -> Tensor:  # fmt: skip
    return run(x, qweight, scales, qzeros, bias, group_size, op_device(device))  # type: ignore[no-any-return]


def _w4a16_matmul_fake(x: Tensor, qweight: Tensor, scales: Tensor, qzeros: Tensor | None, bias: Tensor | None,
                       group_size: int, *, device: str | None = None) -> Tensor:  # fmt: skip
    check(TensorMetadata(OP), x, qweight, scales, qzeros, bias, group_size)
    return x.new_empty((x.shape[0], qweight.shape[1]))
