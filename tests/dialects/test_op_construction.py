"""PTX ops are built without the IRDL argument check, through init_plain (Operation.__init__'s
work done directly): they come out field for field as the slow constructors build them, and
what they are built wrong with the verifier rejects."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, StringAttr, f32, i1, i32, i64
from xdsl.ir import Block, Operation, Region
from xdsl.irdl import IRDLOperation, irdl_op_definition, opt_prop_def, prop_def
from xdsl.utils.exceptions import VerifyException

from kaio.dialects import ptx
from kaio.dialects.plain_init import add_ops_plain, init_plain


def test_built_as_the_irdl_constructor_builds_them() -> None:
    ours = [ptx.RegOp(i32), ptx.ConstOp(3, i32), ptx.ConstOp(1.5, f32), ptx.CommentOp("a note")]
    theirs = [
        IRDLOperation.__init__(op := ptx.RegOp.__new__(ptx.RegOp), result_types=[i32]) or op,
        IRDLOperation.__init__(op := ptx.ConstOp.__new__(ptx.ConstOp), properties={"value": IntegerAttr(3, i32)},
                               result_types=[i32]) or op,  # fmt: skip
        IRDLOperation.__init__(op := ptx.ConstOp.__new__(ptx.ConstOp), properties={"value": ours[2].value},
                               result_types=[f32]) or op,  # fmt: skip
        IRDLOperation.__init__(op := ptx.CommentOp.__new__(ptx.CommentOp), properties={"text": StringAttr("a note")}) or op,
    ]
    for a, b in zip(ours, theirs, strict=True):
        assert a.properties == b.properties and a.attributes == b.attributes
        assert [r.type for r in a.results] == [r.type for r in b.results]
        assert len(a.operands) == len(b.operands) == 0 and a.regions == b.regions == ()
        assert str(ModuleOp([a])) == str(ModuleOp([b]))


@pytest.mark.parametrize("build", [lambda: ptx.RegOp(IndexType()), lambda: ptx.ConstOp(1, IndexType())])
def test_a_type_that_is_no_register_is_rejected_by_the_verifier(build) -> None:  # noqa: ANN001
    op = build()  # the constructor does not check: the verifier does
    with pytest.raises(VerifyException, match="not a PTX register type"):
        op.verify()


def test_a_planted_bad_property_is_rejected_by_the_verifier() -> None:
    comment = ptx.CommentOp("fine")
    comment.verify()
    comment.properties["text"] = IntegerAttr(1, i32)  # planted: not a string
    with pytest.raises(VerifyException):
        comment.verify()
    const = ptx.ConstOp(2, i32)
    del const.properties["value"]  # planted: the immediate is missing
    with pytest.raises(VerifyException):
        const.verify()


def same_fields(a: Operation, b: Operation) -> None:
    """Field for field, the result and use objects compared by what they hold."""
    assert vars(a).keys() == vars(b).keys()
    assert a.properties == b.properties and list(a.properties) == list(b.properties)
    assert a.attributes == b.attributes and a.location == b.location
    assert type(a._operands) is type(b._operands) and tuple(a._operands) == tuple(b._operands)  # pyright: ignore[reportPrivateUsage]
    assert type(a.results) is type(b.results)
    assert [(r.type, r.index, r.op is a) for r in a.results] == [(r.type, r.index, r.op is b) for r in b.results]
    assert [(u.operation is a, u.index) for u in a._operand_uses] == [(u.operation is b, u.index) for u in b._operand_uses]  # pyright: ignore[reportPrivateUsage]
    assert a._successors == b._successors == () and a._successor_uses == b._successor_uses == ()  # pyright: ignore[reportPrivateUsage]
    assert a.regions == b.regions == ()


def test_ptx_instructions_are_built_field_for_field_as_operation_init_builds_them() -> None:
    block = Block(arg_types=[i32, i32, i1, i64])
    x, y, p, address = block.args
    for cls, args, outs, kwargs in [
        (ptx.AddOp, (x, y), (i32,), {"spec": "s32"}),
        (ptx.AddOp, (x, y), (i32,), {"spec": "s32", "guard": p, "negate": True}),
        (ptx.LdOp, (address,), (i32,), {"spec": "global.u32", "offset": 16}),
        (ptx.ActivemaskOp, (), (i32,), {"spec": "b32"}),
    ]:
        spec = kwargs.pop("spec")
        ours = cls(spec, args, outs, **kwargs)
        theirs = cls.__new__(cls)
        operands = [*args] + ([kwargs["guard"]] if "guard" in kwargs else [])
        props = {"spec": StringAttr(spec)}
        if "guard" in kwargs:
            props["guard"] = StringAttr("@!" if kwargs.get("negate") else "@")
        if "offset" in kwargs:
            props["offset"] = IntegerAttr(kwargs["offset"], i64)
        Operation.__init__(theirs, operands=operands, result_types=outs, properties=props)
        same_fields(ours, theirs)
        for value in operands:  # the uses are linked into each value's use list
            assert sum(1 for u in value.uses if u.operation is ours) == sum(1 for u in value.uses if u.operation is theirs)
        ours.verify()


@irdl_op_definition
class DefaultedOp(IRDLOperation):
    name = "test.defaulted"
    level = prop_def(IntegerAttr, default_value=IntegerAttr(3, i64))
    note = opt_prop_def(StringAttr)


def test_irdl_property_defaults_are_filled_as_post_init_fills_them() -> None:
    ours = DefaultedOp.__new__(DefaultedOp)
    init_plain(ours, (), (), {"note": StringAttr("n")})
    theirs = DefaultedOp.__new__(DefaultedOp)
    Operation.__init__(theirs, properties={"note": StringAttr("n")})
    same_fields(ours, theirs)
    assert ours.properties["level"] == IntegerAttr(3, i64)


def test_a_planted_bad_property_on_a_plainly_built_instruction_is_rejected() -> None:
    x = Block(arg_types=[i32]).args[0]
    add = ptx.AddOp("s32", (x, x), (i32,))
    add.verify()
    bad = ptx.AddOp.__new__(ptx.AddOp)
    init_plain(bad, (x, x), (i32,), {"spec": IntegerAttr(1, i32)})  # planted: the spec is no string
    with pytest.raises(Exception):  # noqa: B017  (xDSL's VerifyException or a diagnostic around it)
        bad.verify()


def _linked(block: Block) -> list[tuple[object, ...]]:
    """Each op of the block with its links, as a walk along them reads them."""
    found, op = [], block.first_op
    while op is not None:
        found.append((op, op.parent, op.prev_op, op.next_op))
        op = op.next_op
    return found


@pytest.mark.parametrize("filled", [False, True])
def test_plain_append_links_the_ops_as_add_ops_does(filled: bool) -> None:
    """Appending plainly gives the links xDSL's ``add_ops`` gives, to an empty block or after
    its ops; an op with regions goes through ``add_op`` (the ancestor check)."""

    def ops() -> list[Operation]:
        one = ptx.ConstOp(1, i32)
        return [one, ptx.AddOp("s32", [one.result, one.result], [i32]), ptx.RegOp(i32)]

    plain, xdsl = Block(), Block()
    if filled:
        plain.add_op(ptx.RegOp(i32))
        xdsl.add_op(ptx.RegOp(i32))
    add_ops_plain(plain, ops())
    xdsl.add_ops(ops())
    shape = lambda block: [(type(o).__name__, p is block, type(a).__name__, type(n).__name__) for o, p, a, n in _linked(block)]  # noqa: E731
    assert shape(plain) == shape(xdsl) and len(shape(plain)) == 3 + filled
    assert plain.last_op is _linked(plain)[-1][0] and plain.first_op.prev_op is None  # type: ignore[union-attr]
    back, op = [], plain.last_op
    while op is not None:  # the back links agree with the forward ones
        back.append(op)
        op = op.prev_op
    assert back == [o for o, *_ in reversed(_linked(plain))]


def test_plain_append_refuses_what_add_ops_refuses() -> None:
    attached = ptx.RegOp(i32)
    Block().add_op(attached)
    with pytest.raises(ValueError, match="already attached"):
        add_ops_plain(Block(), [attached])
    inner = Block()  # an op with regions is checked by xDSL: it may not hold the block
    holder = ModuleOp(Region(inner))
    with pytest.raises(ValueError, match="contained in the operation"):
        add_ops_plain(inner, [holder])
