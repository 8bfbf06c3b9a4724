"""The pass manager's verifier: re-verifying only changed ops (kaio.verifier) and the IRDL
shortcut for simple op definitions (kaio.irdl_shortcut) answer as ``module.verify()`` does."""

from __future__ import annotations

import itertools
from typing import ClassVar

import pytest
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    FloatAttr,
    Float32Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    f32,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, Region
from xdsl.irdl import (
    IRDLOperation,
    OpDef,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.utils.exceptions import VerifyException

from kaio import irdl_shortcut
from kaio import verifier as verifier_module
from kaio.dialects import ptx
from kaio.verifier import IncrementalVerifier


def small_module() -> tuple[ModuleOp, ptx.AddOp, ptx.ConstOp]:
    one = ptx.ConstOp(1, i32)
    wide = ptx.ConstOp(1, i64)
    add = ptx.AddOp("s32", [one.result, one.result], [i32])
    return ModuleOp([one, wide, add]), add, wide


def whole_verifies(module: ModuleOp) -> bool:
    try:
        module.verify()
    except Exception:  # noqa: BLE001  (any verifier failure counts)
        return False
    return True


def test_an_unchanged_module_verifies_again_without_rechecking(monkeypatch: pytest.MonkeyPatch):
    module, add, _ = small_module()
    verifier = IncrementalVerifier()
    assert verifier.verifies(module)
    checked: list[str] = []
    original = ptx.AddOp.verify

    def counting(self: ptx.AddOp, verify_nested_ops: bool = True) -> None:
        checked.append(self.name)
        original(self, verify_nested_ops)

    monkeypatch.setattr(ptx.AddOp, "verify", counting)
    assert verifier.verifies(module) and checked == []
    add.properties["spec"] = StringAttr("u32")  # changed in place: checked again
    assert verifier.verifies(module) and checked == ["ptx.add"]


@pytest.mark.parametrize(
    "change",
    ["operand", "property", "result type", "operand type", "extra property"],
)
def test_an_op_changed_in_place_after_verifying_is_caught(change: str):
    """Each in-place change the fingerprint must see; a verifier that trusted its first answer
    (or left one of these out of the fingerprint) would let the broken op through."""
    module, add, wide = small_module()
    verifier = IncrementalVerifier()
    assert verifier.verifies(module)
    if change == "operand":
        add.operands[1] = wide.result  # an i64 into a 32-bit add
    elif change == "property":
        add.properties["spec"] = StringAttr("banana.s32")
    elif change == "result type":
        add.results[0]._type = i64  # type: ignore[attr-defined]  # as a pass retyping a value would
    elif change == "operand type":  # the value read, retyped where its definer stays valid
        add.operands[0]._type = i64  # type: ignore[attr-defined]
    elif change == "extra property":
        add.properties["bogus"] = IntegerAttr(1, i32)
    assert not whole_verifies(module)
    assert not verifier.verifies(module)


def test_a_fingerprint_blind_to_operands_would_miss_the_change(monkeypatch: pytest.MonkeyPatch):
    """The planted bug: with a constant fingerprint nothing is verified twice, and the
    operand change of the test above goes through; so those tests can fail."""
    monkeypatch.setattr(verifier_module, "fingerprint", lambda op, block: ())
    module, add, wide = small_module()
    verifier = IncrementalVerifier()
    assert verifier.verifies(module)
    add.operands[1] = wide.result
    assert not whole_verifies(module) and verifier.verifies(module)


def test_the_shortcut_keeps_xdsl_messages_for_every_bad_shape():
    irdl_shortcut.install_shortcut(ptx.AddOp)
    assert "verify" in vars(ptx.AddOp.get_irdl_definition())  # the simple shape: installed
    one = ptx.ConstOp(1, i32)
    missing = ptx.AddOp("s32", [one.result, one.result], [i32])
    del missing.properties["spec"]
    with pytest.raises(VerifyException, match="property 'spec' expected"):
        missing.verify()
    wrong = ptx.AddOp("s32", [one.result, one.result], [i32])
    wrong.properties["spec"] = IntegerAttr(1, i32)
    with pytest.raises(VerifyException, match="should be of base attribute string"):
        wrong.verify()
    extra = ptx.AddOp("s32", [one.result, one.result], [i32])
    extra.properties["bogus"] = StringAttr("x")
    with pytest.raises(VerifyException, match="property 'bogus' is not defined"):
        extra.verify()


def test_fixed_counts_are_checked_by_the_shortcut():
    irdl_shortcut.install_shortcut(ptx.ConstOp)
    assert "verify" in vars(ptx.ConstOp.get_irdl_definition())  # one single result
    one = ptx.ConstOp(1, i32)
    two = ptx.ConstOp.create(properties=dict(one.properties), result_types=[i32, i32])
    with pytest.raises(VerifyException):
        two.verify()


def test_an_op_with_regions_keeps_the_generic_verifier():
    entry = next(
        c
        for c in vars(ptx).values()
        if isinstance(c, type) and getattr(c, "name", "") == "ptx.entry"
    )
    irdl_shortcut.install_shortcut(entry)
    assert "verify" not in vars(entry.get_irdl_definition())


def isolated_function() -> tuple[ModuleOp, func.FuncOp, arith.ConstantOp, arith.AddiOp]:
    """func.func (IsolatedFromAbove) holding a constant and an add of it."""
    one = arith.ConstantOp(IntegerAttr(1, i32))
    add = arith.AddiOp(one.result, one.result)
    body = Block([one, add, func.ReturnOp()])
    function = func.FuncOp("f", ((), ()), Region(body))
    return ModuleOp([function]), function, one, add


@pytest.mark.parametrize(
    "change",
    [
        "a new op uses a value from outside",
        "an op now uses a value from outside",
        "a used op moved out",
    ],
)
def test_an_isolated_op_is_verified_again_when_its_body_changed(change: str):
    """The op itself is unchanged; its IsolatedFromAbove trait fails because of its body."""
    module, function, one, add = isolated_function()
    verifier = IncrementalVerifier()
    assert verifier.verifies(module)
    if change == "a new op uses a value from outside":
        outside = arith.ConstantOp(IntegerAttr(2, i32))
        module.body.block.insert_op_before(outside, function)
        function.body.block.insert_op_before(arith.AddiOp(outside.result, outside.result), add)
    elif change == "an op now uses a value from outside":  # as many ops inside as before
        outside = arith.ConstantOp(IntegerAttr(2, i32))
        module.body.block.insert_op_before(outside, function)
        add.operands[0] = outside.result
    else:
        one.detach()  # its user, the add, is untouched
        module.body.block.insert_op_before(one, function)
    assert not whole_verifies(module)
    assert not verifier.verifies(module)


@irdl_op_definition
class MixedOp(IRDLOperation):
    """Singles around one variadic, a type variable shared by an operand and the result."""

    name = "test.mixed"
    T: ClassVar = VarConstraint("T", base(IntegerType) | base(IndexType))
    first = operand_def(T)
    middle = var_operand_def(Float32Type)
    last = operand_def(IndexType)
    out = result_def(T)
    flag = opt_prop_def(IntegerAttr)


def generic_verdict(op: Operation) -> bool:
    try:
        OpDef.verify(type(op).get_irdl_definition(), op)
    except VerifyException:
        return False
    return True


def shortcut_verdict(op: Operation) -> bool:
    try:
        op.verify_()
    except VerifyException:
        return False
    return True


def test_the_shortcut_agrees_with_xdsl_on_every_small_operand_list():
    """Every operand list of up to four values over four types, with two result types and the
    optional property present or not, judged by the generic verifier and the shortcut."""
    irdl_shortcut.install_shortcut(MixedOp)
    assert "verify" in vars(MixedOp.get_irdl_definition())
    block = Block(arg_types=[i32, i64, f32, IndexType()])
    judged = 0
    for n in range(5):
        for values in itertools.product(block.args, repeat=n):
            for result in (i32, i64):
                for props in ({}, {"flag": IntegerAttr(1, i32)}, {"flag": StringAttr("x")}):
                    op = MixedOp.create(operands=values, result_types=[result], properties=props)
                    expected = generic_verdict(op)
                    got = shortcut_verdict(op)
                    assert got == expected, (values, result, props)
                    judged += 1
    assert judged == 6 * sum(4**n for n in range(5))


@irdl_op_definition
class AnyVariadicOp(IRDLOperation):
    """Operands constrained by nothing but their count: one, then any number, then one."""

    name = "test.any_variadic"
    first = operand_def()
    rest = var_operand_def()
    last = operand_def()
    out = result_def()


@irdl_op_definition
class AnyFixedOp(IRDLOperation):
    name = "test.any_fixed"
    a = operand_def()
    b = operand_def()
    out = result_def()


@pytest.mark.parametrize("cls", [AnyVariadicOp, AnyFixedOp])
def test_values_of_any_type_are_only_counted_and_agree_with_xdsl(cls: type[IRDLOperation]):
    """Unconstrained operands and results skip the per-value look; the count is still checked
    (too few operands for the variadic op, anything but two for the fixed one)."""
    irdl_shortcut.install_shortcut(cls)
    assert "verify" in vars(cls.get_irdl_definition())
    block = Block(arg_types=[i32, f32])
    rejected = 0
    for n in range(5):
        for values in itertools.product(block.args, repeat=n):
            for results in ([i32], [f32], [], [i32, i32]):
                op = cls.create(operands=values, result_types=results)
                expected = generic_verdict(op)
                got = shortcut_verdict(op)
                assert got == expected, (cls.name, n, results)
                rejected += not got
    assert rejected > 0


@irdl_op_definition
class PropInAttrDictOp(IRDLOperation):
    """An op whose text format reads its property from the attribute dictionary: an option
    that does not touch verification."""

    name = "test.prop_in_attr_dict"
    a = operand_def(IntegerType)
    out = result_def()
    transposed = prop_def(IntegerAttr)
    irdl_options = (ParsePropInAttrDict(),)


def test_the_shortcut_covers_parse_prop_in_attr_dict_and_rejects_a_bad_property():
    irdl_shortcut.install_shortcut(PropInAttrDictOp)
    assert "verify" in vars(PropInAttrDictOp.get_irdl_definition())
    block = Block(arg_types=[i32, f32])
    for value in block.args:
        for props in ({"transposed": IntegerAttr(1, i64)}, {"transposed": StringAttr("planted")}, {}):
            op = PropInAttrDictOp.create(operands=[value], result_types=[i32], properties=props)
            expected = generic_verdict(op)
            got = shortcut_verdict(op)
            assert got == expected, (value, props)
    planted = PropInAttrDictOp.create(operands=[block.args[0]], result_types=[i32], properties={"transposed": StringAttr("x")})
    with pytest.raises(VerifyException):
        planted.verify_()


def test_a_property_typed_by_the_result_variable_agrees_with_xdsl():
    """arith.constant: its value's type is the result's T. The shortcut runs the property's
    constraint in a context holding T; a planted value of another type is rejected."""
    irdl_shortcut.install_shortcut(arith.ConstantOp)
    assert "verify" in vars(arith.ConstantOp.get_irdl_definition())
    values = [IntegerAttr(1, i32), IntegerAttr(2, i64), IntegerAttr(3, IndexType()), FloatAttr(1.5, f32), StringAttr("x")]
    rejected = 0
    for value in values:
        for result in (i32, i64, IndexType(), f32):
            for props in ({"value": value}, {}):
                op = arith.ConstantOp.create(result_types=[result], properties=props)
                expected = generic_verdict(op)
                got = shortcut_verdict(op)
                assert got == expected, (value, result, props)
                rejected += not got
    assert rejected > 0
    planted = arith.ConstantOp.create(result_types=[i64], properties={"value": IntegerAttr(1, i32)})
    with pytest.raises(VerifyException):
        planted.verify_()
