"""``torch.ops.kaio.gguf_matmul``: the GGUF quantised-weight matmul as a custom op, so that
``torch.compile`` sees one opaque op (``qtype`` as the format's name). It has no backward (the
weights are frozen blocks): x that requires grad is refused at the call. The fake runs the real
op's checks on the tensors' metadata.
``register()`` defines the ops (``torch_registration`` runs it); importing this imports torch.
"""

from __future__ import annotations

from kaio.ops_library.autograd import define_op, op_device
from kaio.ops_library.gguf_matmul import OP, check, run
from kaio.ops_library.torch_checks import TensorMetadata
from torch import Tensor


def register() -> None:
    define_op("kaio::gguf_matmul", _gguf_matmul, _gguf_matmul_fake)


def _gguf_matmul(x: Tensor, weight: Tensor, qtype: str, *, device: str | None = None) -> Tensor:
    return run(x, weight, qtype, op_device(device))  # type: ignore[no-any-return]


def _gguf_matmul_fake(x: Tensor, weight: Tensor, qtype: str, *, device: str | None = None) -> Tensor:
    check(TensorMetadata(OP), x, weight, qtype)
    return x.new_empty((x.shape[0], weight.shape[0]))
