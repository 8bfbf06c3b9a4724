"""ptx.reg, ptx.const and ptx.comment are built with Operation's constructor (no IRDL argument
check): they come out as the IRDL constructor builds them, and what they are built wrong with
the verifier rejects."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, StringAttr, f32, i32
from xdsl.irdl import IRDLOperation
from xdsl.utils.exceptions import VerifyException

from kaio.dialects import ptx


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
