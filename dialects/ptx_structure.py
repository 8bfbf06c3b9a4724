"""``ptx`` module structure: kernel entries, shared/local array declarations, labels and
comments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kaio.dialects.isolated_from_above import IsolatedFromAbove
from kaio.dialects.plain_init import init_plain
from kaio.dialects.ptx_base import (
    TYPE_BITS,
    RegName,
)
from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Region
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.traits import NoTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

from kaio.launch_limits import MAX_MAXNREG, MIN_MAXNREG  # what ptxas accepts for .maxnreg

# --------------------------------------------------------------------------- structure


TENSOR_MAP_PARAM = "tensormap"
"""The parameter type of a TMA tensor map: printed ``.param .align 64 .b8 name[128]``."""


@irdl_op_definition
class EntryOp(IRDLOperation):
    """A ``.visible .entry``: parameters are declared here and read with ``ld.param`` (a
    tensor map's address is taken instead: ``mov.b64`` of the name, then ``cvta.param``)."""

    name = "ptx.entry"
    sym_name = prop_def(SymbolNameConstraint())
    param_names = prop_def(ArrayAttr[StringAttr])
    param_types = prop_def(ArrayAttr[StringAttr])
    maxntid = opt_prop_def(DenseArrayBase)
    maxnreg = opt_prop_def(IntegerAttr[I64])
    """``.maxnreg N``: ptxas gives each thread at most N registers (more warps fit per SM)."""
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator(), SymbolOpInterface())
    assembly_format = (
        "$sym_name `params` $param_names `types` $param_types (`maxntid` qualified($maxntid)^)? "
        "(`maxnreg` $maxnreg^)? attr-dict-with-keyword $body"
    )

    def __init__(
        self, name: str, params: Sequence[tuple[str, str]], maxntid: Sequence[int] | None = None,
        maxnreg: int | None = None,
    ):  # fmt: skip
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name),
            "param_names": ArrayAttr([StringAttr(n) for n, _ in params]),
            "param_types": ArrayAttr([StringAttr(t) for _, t in params]),
        }
        if maxntid is not None:
            props["maxntid"] = DenseArrayBase.from_list(i32, list(maxntid))
        if maxnreg is not None:
            props["maxnreg"] = IntegerAttr(maxnreg, i64)
        super().__init__(properties=props, regions=[Region(Block())])

    @property
    def params(self) -> list[tuple[str, str]]:
        return [(n.data, t.data) for n, t in zip(self.param_names.data, self.param_types.data)]

    def verify_(self) -> None:
        if len(self.param_names.data) != len(self.param_types.data):
            raise VerifyException("one type per parameter")
        for _, t in self.params:
            if (t not in TYPE_BITS or t == "pred") and t != TENSOR_MAP_PARAM:
                raise VerifyException(f"bad parameter type {t}")
        if self.maxnreg is not None and not MIN_MAXNREG <= self.maxnreg.value.data <= MAX_MAXNREG:
            raise VerifyException(
                f".maxnreg is {MIN_MAXNREG}..{MAX_MAXNREG}, not {self.maxnreg.value.data}"
            )


class ArrayDecl(IRDLOperation):
    """``.<space> .align A .b8 name[size];``: a byte array in a state space, declared in the
    entry (address it with ``ptx.mov`` of the symbol)."""

    SPACE: ClassVar[str]
    sym_name = prop_def(StringAttr)
    size = prop_def(IntegerAttr[I64])
    align = prop_def(IntegerAttr[I64])
    assembly_format = "$sym_name `size` $size `align` $align attr-dict"

    def __init__(self, name: str, size: int, align: int = 16):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "size": IntegerAttr(size, i64),
                "align": IntegerAttr(align, i64),
            }
        )

    def ptx(self, reg: RegName, imm: RegName) -> str:
        align, size = self.align.value.data, self.size.value.data
        return f".{self.SPACE} .align {align} .b8 {self.sym_name.data}[{size}];"


@irdl_op_definition
class SharedDeclOp(ArrayDecl):
    """Shared memory of the block."""

    name = "ptx.shared"
    SPACE: ClassVar[str] = "shared"


@irdl_op_definition
class DynamicSharedDeclOp(ArrayDecl):
    """The block's dynamic shared memory, ``.extern .shared .align A .b8 name[];`` (printed at
    module scope); ``size`` is how many bytes the kernel needs there at launch."""

    name = "ptx.dynamic_shared"
    SPACE: ClassVar[str] = "shared"

    def ptx(self, reg: RegName, imm: RegName) -> str:
        return f".extern .shared .align {self.align.value.data} .b8 {self.sym_name.data}[];"


@irdl_op_definition
class LocalDeclOp(ArrayDecl):
    """Per-thread local memory (a stack array)."""

    name = "ptx.local"
    SPACE: ClassVar[str] = "local"


@irdl_op_definition
class LabelOp(IRDLOperation):
    name = "ptx.label"
    sym_name = prop_def(StringAttr)
    assembly_format = "$sym_name attr-dict"

    def __init__(self, name: str):
        super().__init__(properties={"sym_name": StringAttr(name)})

    def ptx(self, reg: RegName, imm: RegName) -> str:
        return f"${self.sym_name.data}:"


@irdl_op_definition
class CommentOp(IRDLOperation):
    name = "ptx.comment"
    text = prop_def(StringAttr)
    assembly_format = "$text attr-dict"

    def __init__(self, text: str):
        init_plain(self, (), (), {"text": StringAttr(text)})  # as ptx.reg's: no IRDL re-check

    def ptx(self, reg: RegName, imm: RegName) -> str:
        return f"// {self.text.data}"
