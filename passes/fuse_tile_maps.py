"""``fuse-tile-maps``: merge chains of elementwise ``tile.map`` ops into one region.

The frontend makes one map per Python operator: ``alpha * acc + beta * c`` is three maps,
each a whole tile of values. A map whose result only feeds another map of the same block is
merged into it: the consumer's region computes the producer's element first. The fused map
computes each element start to finish, so lower-to-ptx keeps one element of each
intermediate live instead of a whole tile of each (and streams the loads it reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from kaio.dialects import tile


def fuse_into(consumer: tile.MapOp) -> bool:
    """Merge one single-use map producer into ``consumer``; False if there is none."""
    for index, value in enumerate(consumer.inputs):
        producer = value.owner
        if not (isinstance(producer, tile.MapOp) and value.has_one_use()):
            continue
        if producer.parent_block() is not consumer.parent_block():
            continue
        inputs: list[SSAValue] = []
        for x in [*producer.inputs, *(v for i, v in enumerate(consumer.inputs) if i != index)]:
            if x not in inputs:
                inputs.append(x)
        block = Block(arg_types=[tile.element_of(x.type) for x in inputs])
        arg_of = dict(zip(inputs, block.args, strict=True))
        mapping: dict[SSAValue, SSAValue] = {a: arg_of[x] for a, x in zip(producer.block.args, producer.inputs, strict=True)}
        for op in producer.block.ops:
            if isinstance(op, tile.YieldOp):
                element = mapping.get(op.operands[0], op.operands[0])
            else:
                block.add_op(op.clone(value_mapper=mapping))
        for i, (a, x) in enumerate(zip(consumer.block.args, consumer.inputs, strict=True)):
            mapping[a] = element if i == index else arg_of[x]
        for op in consumer.block.ops:
            block.add_op(op.clone(value_mapper=mapping))
        fused = tile.MapOp(inputs, consumer.result.type, Region(block))
        Rewriter.replace_op(consumer, fused)
        Rewriter.erase_op(producer)
        return True
    return False


@dataclass(frozen=True)
class FuseTileMapsPass(ModulePass):
    name = "fuse-tile-maps"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        changed = True
        while changed:
            changed = False
            for m in [o for o in op.walk() if isinstance(o, tile.MapOp)]:
                if m.parent is not None and fuse_into(m):
                    changed = True
