"""High-level ops, one module each, each owning its default pass pipeline."""

from kaio.ops_library.matmul import Matmul, matmul
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.ops_library.norms import layer_norm, rms_norm
from kaio.ops_library.softmax import log_softmax, softmax

__all__ = ["Matmul", "MatmulConfig", "layer_norm", "log_softmax", "matmul", "rms_norm", "softmax"]
