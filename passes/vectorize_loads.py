"""``vectorize-loads``: neighbouring global loads of one thread become one vector load.

``x[4*i]``, ``x[4*i+1]``, ``x[4*i+2]``, ``x[4*i+3]`` in one block, with nothing that writes
memory or synchronizes between them, become ``kernel.load_vector`` (``ld.global.v4``): one
memory instruction instead of four. Legal when the first index is a multiple of the vector
length (proved from the IR: ``4*i`` or ``i << 2``) and the array's base address is aligned to
the vector; the pass records that alignment on the kernel (``kaio.align``) and the runtime
refuses to launch with a less aligned array. Vectors are at most 16 bytes (4 x 32-bit, 2 x 64-bit).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, i32, i64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import is_side_effect_free

from kaio.dialects import kernel
from kaio.dialects.stage_attrs import require_alignment
from kaio.passes.value_facts import constant_int


def _is_multiple(v: SSAValue, k: int) -> bool:
    """True if the i32 value ``v`` is provably a multiple of ``k`` (a power of two)."""
    owner = v.owner
    if isinstance(owner, arith.MuliOp):
        return any((c := constant_int(x)) is not None and c % k == 0 for x in (owner.lhs, owner.rhs))
    if isinstance(owner, arith.ShLIOp):
        shift = constant_int(owner.rhs)
        return shift is not None and (1 << shift) % k == 0
    return False


def _split(index: SSAValue) -> tuple[SSAValue, int, type[Operation]] | None:
    """An i64 index ``ext(base + c)`` -> (base, c, extension op), else None."""
    ext = index.owner
    if not isinstance(ext, arith.ExtUIOp | arith.ExtSIOp) or ext.input.type != i32:
        return None
    v = ext.input
    if isinstance(v.owner, arith.AddiOp) and (c := constant_int(v.owner.rhs)) is not None:
        return v.owner.lhs, c, type(ext)
    return v, 0, type(ext)


def _nothing_in_between(first: Operation, last: Operation, group: set[Operation]) -> bool:
    """No store, atomic, barrier or call between two ops of one block (loads may move up)."""
    op = first.next_op
    while op is not None and op is not last:
        harmless = op in group or isinstance(op, kernel.SourceLocOp) or is_side_effect_free(op)
        if not harmless:
            return False
        op = op.next_op
    return op is last


def _vectorize_block(block: Block, func: kernel.KernelFuncOp, aligns: dict[str, int]) -> None:
    groups: dict[tuple[SSAValue, SSAValue, type[Operation]], dict[int, kernel.LoadOp]] = defaultdict(dict)
    for op in block.ops:
        if isinstance(op, kernel.LoadOp) and isinstance(op.ref.type, kernel.ArrayType):
            split = _split(op.indices[0])
            if split is not None:
                base, offset, ext = split
                groups[(op.ref, base, ext)].setdefault(offset, op)
    for (ref, base, ext), loads in groups.items():
        elem_bytes = max(kernel.element_type_of(ref.type).bitwidth // 8, 1)  # type: ignore[attr-defined]
        for count in (4, 2):
            if count * elem_bytes > 16 or not _is_multiple(base, count):
                continue
            for start in sorted(loads):
                members = [loads.get(start + c) for c in range(count)]
                if start % count or any(m is None for m in members):
                    continue
                ordered = sorted(members, key=block.get_operation_index)  # type: ignore[arg-type]
                if not _nothing_in_between(ordered[0], ordered[-1], set(ordered)):  # type: ignore[arg-type]
                    continue
                b = Builder(InsertPoint.before(ordered[0]))  # type: ignore[arg-type]
                index = base if start == 0 else b.insert(arith.AddiOp(base, b.insert(arith.ConstantOp.from_int_and_width(start, 32)).result)).result
                wide = b.insert(ext(index, i64)).result  # type: ignore[call-arg]
                vector = b.insert(kernel.LoadVectorOp(ref, wide, count))
                for load, value in zip(members, vector.values):
                    assert load is not None
                    load.result.replace_all_uses_with(value)
                    load.detach()
                    load.erase()
                    for o in loads:
                        if loads[o] is load:
                            loads[o] = None  # type: ignore[assignment]
                name = func.param_names.data[func.body.block.args.index(ref)].data  # type: ignore[arg-type]
                aligns[name] = max(aligns.get(name, 1), count * elem_bytes)
            loads = {k: v for k, v in loads.items() if v is not None}


@dataclass(frozen=True)
class VectorizeLoadsPass(ModulePass):
    name = "vectorize-loads"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for func in kernel.kernel_funcs(op):
            aligns: dict[str, int] = {}
            blocks = [b for o in func.walk() for r in o.regions for b in r.blocks]
            for block in blocks:
                _vectorize_block(block, func, aligns)
            for name, nbytes in aligns.items():
                require_alignment(func, name, nbytes)
