"""kaio's IsolatedFromAbove gives xDSL's verdict and message on isolated and leaking bodies."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from xdsl.dialects import arith, cf, func, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, i32
from xdsl.ir import Block, Operation, Region
from xdsl.traits import IsolatedFromAbove as XdslIsolatedFromAbove
from xdsl.utils.exceptions import VerifyException

from kaio.dialects import kernel, ptx
from kaio.dialects.isolated_from_above import IsolatedFromAbove


def verdict(trait: XdslIsolatedFromAbove, op: Operation) -> str:
    try:
        trait.verify(op)
    except VerifyException as e:
        return str(e)
    return "ok"


def function(*ops: Operation, blocks: tuple[Block, ...] = ()) -> func.FuncOp:
    return func.FuncOp("f", ((), ()), Region([Block([*ops, func.ReturnOp()]), *blocks]))


def index(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, IndexType()))


def inside_only() -> Operation:
    one = arith.ConstantOp(IntegerAttr(1, i32))
    return function(one, arith.AddiOp(one.result, one.result))


def outside_value() -> Operation:
    outside = arith.ConstantOp(IntegerAttr(2, i32))
    f = function(arith.AddiOp(outside.result, outside.result))
    ModuleOp([outside, f])
    return f


def outside_value_in_a_loop() -> Operation:
    outside = arith.ConstantOp(IntegerAttr(2, i32))
    lo, hi, step = index(0), index(4), index(1)
    body = Block([arith.AddiOp(outside.result, outside.result), scf.YieldOp()], arg_types=[IndexType()])
    f = function(lo, hi, step, scf.ForOp(lo.result, hi.result, step.result, [], Region(body)))
    ModuleOp([outside, f])
    return f


def loop_using_its_block_argument() -> Operation:
    lo, hi, step = index(0), index(4), index(1)
    body = Block(arg_types=[IndexType()])
    body.add_ops([arith.AddiOp(body.args[0], body.args[0]), scf.YieldOp()])
    return function(lo, hi, step, scf.ForOp(lo.result, hi.result, step.result, [], Region(body)))


def value_of_a_later_block() -> Operation:
    """A use in the first block of a value defined in the second: inside, though its block
    is not visited yet when the use is checked."""
    later = Block()
    one = arith.ConstantOp(IntegerAttr(1, i32))
    later.add_ops([one, func.ReturnOp()])
    first = Block([arith.AddiOp(one.result, one.result), cf.BranchOp(later)])
    return func.FuncOp("f", ((), ()), Region([first, later]))


def nested_isolated_op_leaks() -> Operation:
    """The inner function uses the outer one's value: the inner op's own check catches it,
    not the outer one's (xDSL's rule)."""
    one = arith.ConstantOp(IntegerAttr(1, i32))
    inner = function(arith.AddiOp(one.result, one.result))
    return function(one, inner)


CASES: dict[str, Callable[[], Operation]] = {
    "inside only": inside_only,
    "a value from outside": outside_value,
    "a value from outside, in a loop": outside_value_in_a_loop,
    "a loop's block argument": loop_using_its_block_argument,
    "a value of a later block": value_of_a_later_block,
    "a nested isolated op leaks": nested_isolated_op_leaks,
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_verdict_and_message_as_xdsl(case: str) -> None:
    op = CASES[case]()
    expected = verdict(XdslIsolatedFromAbove(), op)
    assert verdict(IsolatedFromAbove(), op) == expected
    leaks = case in ("a value from outside", "a value from outside, in a loop")
    assert (expected != "ok") == leaks


def test_the_kernel_ops_carry_it() -> None:
    """ptx.entry and kernel.func carry kaio's trait, found as xDSL's."""
    for cls in (ptx.EntryOp, kernel.KernelFuncOp):
        assert cls.has_trait(XdslIsolatedFromAbove)
        assert any(type(t) is IsolatedFromAbove for t in cls.traits)
