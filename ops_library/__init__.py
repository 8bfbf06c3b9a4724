"""High-level ops, one module each, each a tile kernel with its default pass pipeline."""

from kaio.ops_library.activations import gelu_and_mul, silu_and_mul
from kaio.ops_library.activations_backward import gelu_and_mul_backward, silu_and_mul_backward
from kaio.ops_library.attention import Attention, attention
from kaio.ops_library.attention_backward import attention_backward
from kaio.ops_library.cross_entropy import cross_entropy, cross_entropy_backward
from kaio.ops_library.linear_cross_entropy import linear_cross_entropy, linear_cross_entropy_backward
from kaio.ops_library.matmul import Matmul, matmul
from kaio.ops_library.matmul_backward import matmul_backward
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.ops_library.norms import layer_norm, rms_norm
from kaio.ops_library.norms_backward import layer_norm_backward, rms_norm_backward
from kaio.ops_library.rope import rope, rope_backward
from kaio.ops_library.softmax import log_softmax, softmax
from kaio.ops_library.softmax_backward import log_softmax_backward, softmax_backward
from kaio.ops_library.w4a16_matmul import w4a16_matmul

__all__ = [
    "cross_entropy_backward", "gelu_and_mul_backward", "log_softmax_backward", "matmul_backward",
    "silu_and_mul_backward", "softmax_backward",
    "Attention", "Matmul", "MatmulConfig", "attention", "attention_backward", "cross_entropy", "gelu_and_mul",
    "layer_norm", "layer_norm_backward", "linear_cross_entropy", "linear_cross_entropy_backward",
    "log_softmax", "matmul", "rms_norm", "rms_norm_backward", "rope",
    "rope_backward", "silu_and_mul", "softmax", "w4a16_matmul",
]  # fmt: skip
