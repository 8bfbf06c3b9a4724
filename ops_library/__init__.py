"""High-level ops, one module each, each owning its default pass pipeline."""

from kaio.ops_library.attention import Attention, attention
from kaio.ops_library.matmul import Matmul, matmul
from kaio.ops_library.matmul_config import MatmulConfig

__all__ = ["Attention", "Matmul", "MatmulConfig", "attention", "matmul"]
