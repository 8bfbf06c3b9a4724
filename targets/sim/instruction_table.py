"""The instruction table: (mnemonic, type family) -> factory, and the decoding of one
instruction into an ``Op``.

Adding an instruction means writing a factory ``(ins, mods, dc) -> run closure | Behaviour``
in the ops module of its kind and listing it in that module's ``TABLE``. The family key lets
one mnemonic have separate integer, float and half implementations (``add.s32``, ``add.f32``,
``add.f16x2``); ``"*"`` is for instructions that handle every type themselves (``cvt``, ``ld``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from . import (
    ops_async_copy,
    ops_atomic,
    ops_bits,
    ops_compare,
    ops_control,
    ops_convert,
    ops_float,
    ops_half,
    ops_int,
    ops_ldmatrix,
    ops_mbarrier,
    ops_memory,
    ops_mma,
    ops_sm90,
    ops_warp,
    ops_wgmma,
    ops_wmma,
)
from .categories import instruction_category
from .faults import DecodeError
from .modifiers import Modifiers
from .operands import DecodeContext
from .program import Behaviour, Op, OpKind, RunFn
from .ptx_types import PTX_TYPES
from .syntax import Instruction

Factory = Callable[[Instruction, Modifiers, DecodeContext], RunFn | Behaviour]


def _merge(*tables: Mapping[tuple[str, str], Callable[..., object]]) -> dict[tuple[str, str], Factory]:
    merged: dict[tuple[str, str], Factory] = {}
    for table in tables:
        for key, factory in table.items():
            if key in merged:
                raise RuntimeError(f"instruction {key} is defined twice")
            merged[key] = factory  # type: ignore[assignment]  # each returns a RunFn or a Behaviour
    return merged


INSTRUCTIONS: dict[tuple[str, str], Factory] = _merge(
    ops_int.TABLE,
    ops_bits.TABLE,
    ops_float.TABLE,
    ops_half.TABLE,
    ops_compare.TABLE,
    ops_convert.TABLE,
    ops_memory.TABLE,
    ops_atomic.TABLE,
    ops_warp.TABLE,
    ops_control.TABLE,
    ops_async_copy.TABLE,
    ops_ldmatrix.TABLE,
    ops_mma.TABLE,
    ops_wgmma.TABLE,
    ops_mbarrier.TABLE,
    ops_sm90.TABLE,
    ops_wmma.TABLE,
)
MNEMONICS = frozenset(m for m, _ in INSTRUCTIONS)


def type_family(modifiers: list[str]) -> str | None:
    """'int', 'float' or 'half' from the first type modifier (None if the opcode has none)."""
    for m in modifiers:
        t = PTX_TYPES.get(m)
        if t is None:
            continue
        if not t.is_float:
            return "int"
        return "float" if t.name in ("f32", "f64") else "half"
    return None


def decode_instruction(ins: Instruction, dc: DecodeContext) -> Op:
    mods = Modifiers(ins.opcode)
    family = type_family(mods.items)
    factory = INSTRUCTIONS.get((mods.mnemonic, family or "")) or INSTRUCTIONS.get((mods.mnemonic, "*"))
    if factory is None:
        if mods.mnemonic in MNEMONICS:
            raise DecodeError(f"unsupported instruction {ins.opcode}: no .{family or 'untyped'} form of {mods.mnemonic}")
        raise DecodeError(f"unknown instruction {ins.opcode}")
    made = factory(ins, mods, dc)
    mods.done()
    behaviour = made if isinstance(made, Behaviour) else Behaviour(run=made)
    guard = None
    if ins.guard is not None:
        guard = dc.slot(ins.guard)
        if dc.register_types[guard] != np.dtype(np.bool_):
            raise DecodeError(f"guard {ins.guard} is not a predicate register")
    target = -1
    if behaviour.kind == OpKind.BRANCH:
        assert behaviour.target_label is not None
        target = dc.label(behaviour.target_label)
        if target < 0:
            raise DecodeError(f"branch to unknown label {behaviour.target_label}")
    klass = behaviour.klass or ins.opcode
    return Op(
        line=ins.line,
        text=ins.text,
        klass=klass,
        kind=behaviour.kind,
        category=instruction_category(ins.opcode),
        run=behaviour.run,
        guard=guard,
        guard_negated=ins.guard_negated,
        target=target,
        barrier=behaviour.barrier,
        shared_access=min(behaviour.shared_access & -behaviour.shared_access, 16),  # a power of two
    )
