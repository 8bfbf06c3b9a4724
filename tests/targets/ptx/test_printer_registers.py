"""The printer's register table, keyed by the values' identities: every value an entry defines
has its name, a value from elsewhere (even one equal in type) has none."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import i32

import kaio
from kaio import compiler
from kaio.dialects import ptx
from kaio.ir_walk import ops_within
from kaio.pass_manager import run_pipeline
from kaio.prelude import Array, MutArray, f32, thread_idx_x
from kaio.targets.ptx.printer import _Registers


def _entry() -> ptx.EntryOp:
    @kaio.gpu_kernel(block_size=32)
    def scale(a: Array[f32], b: MutArray[f32]):
        b[thread_idx_x()] = a[thread_idx_x()] * 2.0

    module = scale.build({}).module
    run_pipeline(module, compiler._resolve_pipeline(scale, "sm_80", None))  # pyright: ignore[reportPrivateUsage]
    (entry,) = (op for op in module.ops if isinstance(op, ptx.EntryOp))
    return entry


def test_every_result_has_one_name_and_a_foreign_value_has_none() -> None:
    entry = _entry()
    regs = _Registers(entry)
    results = [r for op in ops_within(entry) if op not in regs.inlined for r in op.results]
    names = [regs.reg(r) for r in results]
    assert len(results) > 5 and len(set(names)) == len(names)
    foreign = ptx.MovOp("u32", [], [i32], symbol="%tid.x")  # an i32 like the entry's, elsewhere
    with pytest.raises(ValueError, match="has no register"):
        regs.reg(foreign.outs[0])


def test_immediates_are_each_constants_own_and_a_foreign_constant_is_worked_out() -> None:
    """The table of immediate texts gives each constant of the entry its own ``immediate()``;
    a constant from elsewhere (not in the table) is worked out on the spot, a register value
    reads as its register."""
    entry = _entry()
    regs = _Registers(entry)
    consts = [op for op in ops_within(entry) if isinstance(op, ptx.ConstOp)]
    assert consts and all(regs.imm(c.result) == (c.immediate() or regs.reg(c.result)) for c in consts)
    assert len({regs.imm(c.result) for c in consts if c.immediate() is not None}) > 1  # not one text for all
    foreign = ptx.ConstOp(12345, i32)
    assert regs.imm(foreign.result) == "12345"
    loaded = next(op for op in ops_within(entry) if isinstance(op, ptx.LdOp) and op.results)
    assert regs.imm(loaded.results[0]) == regs.reg(loaded.results[0])
