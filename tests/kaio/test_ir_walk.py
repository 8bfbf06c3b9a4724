"""ops_within / ops_of list the ops exactly as xDSL's walk() / block.ops do."""

from __future__ import annotations

from kaio import dtypes
from kaio.ir_walk import ops_of, ops_within
from kaio.ops_library.matmul_config import DEFAULT_CONFIG
from kaio.ops_library.matmul_kernel import MatmulKernel


def test_same_ops_in_the_same_order_as_xdsl_walk() -> None:
    """On a tile module (loops inside loops, blocks with arguments) and on ops with none."""
    module = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG).build({}).module
    walked = list(module.walk())
    assert len(walked) > 50 and any(op.regions for op in walked[2:])  # nesting below the kernel
    assert ops_within(module) == walked
    for op in walked:
        assert ops_within(op) == list(op.walk())
        for region in op.regions:
            for block in region.blocks:
                assert ops_of(block) == list(block.ops)
