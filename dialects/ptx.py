"""The ``ptx`` dialect: one op per PTX instruction. The single place PTX knowledge lives.

Each op knows its spelling (mnemonic + ``spec``, the dot-separated modifiers and types written
after it: ``add`` + ``"lo.s32"``), which modifiers and types it accepts, the register widths of
its operands, the oldest GPU and PTX ISA that have it, and how it prints as PTX text. The
printer (``kaio.targets.ptx.printer``) is a thin walk calling :meth:`PtxInstr.ptx`.

Values are virtual registers: every result is a fresh register of the class of its type (i1
``.pred``, i16/f16/bf16 ``.b16``, i32 ``.b32``, f32 ``.f32``, i64 ``.b64``, f64 ``.f64``).
Control flow is flat: ``ptx.label`` and ``ptx.bra`` in one block. The one non-SSA op is
``ptx.assign`` (``mov`` into an existing register), used for loop-carried values and the
results of branches. ``ptx.const`` values are printed as immediates where an instruction takes
one. Any instruction may be predicated (``guard = "@"`` or ``"@!"``; the predicate is then the
last operand).

Textual form: ``%d = ptx.add s32 %a, %b : (i32, i32) -> i32``,
``ptx.st global.f32 [%p + 4], %v if %q : (i64, f32, i1) -> ()``.

This module is the dialect's entry point: it re-exports every op and builds :data:`Ptx`. The
ops live by instruction family beside it: ``ptx_base`` (types, :class:`PtxInstr`, ``reg`` and
``const``), ``ptx_arith``, ``ptx_logic`` (bits, ``setp``, ``selp``), ``ptx_move`` (``cvt``,
``mov``, ``assign``), ``ptx_memory`` (``ld``, ``st``, atomics, ``cp.async``), ``ptx_control``
(branches, barriers, warp-synchronous), ``ptx_tensor`` (``ldmatrix``, ``mma``),
``ptx_structure`` (entries, declarations, labels) and ``ptx_hopper`` (sm_90). Each family
imports only ``ptx_base``.
"""

from __future__ import annotations

from kaio.dialects.ptx_arith import (
    AbsOp,
    AddOp,
    CopysignOp,
    CosOp,
    DivOp,
    Dp2aOp,
    Dp4aOp,
    Ex2Op,
    FmaOp,
    Lg2Op,
    MadOp,
    MaxOp,
    MinOp,
    MulOp,
    NegOp,
    RcpOp,
    RemOp,
    RsqrtOp,
    SinOp,
    SqrtOp,
    SubOp,
    TanhOp,
)
from kaio.dialects.ptx_base import (
    FLOAT_TYPES,
    INT_TYPES,
    REGISTER_CLASSES,
    TYPE_BITS,
    ConstOp,
    InstrInfo,
    PtxInstr,
    RegName,
    RegOp,
    Requirement,
    register_bits,
    register_type,
    within_attr,
    within_of,
)
from kaio.dialects.ptx_control import (
    ActivemaskOp,
    BarSyncOp,
    BraOp,
    ExitOp,
    MembarOp,
    RetOp,
    ShflOp,
    VoteOp,
)
from kaio.dialects.ptx_hopper import HOPPER_OPS
from kaio.dialects.ptx_logic import (
    CMP_OPS,
    AndOp,
    BfeOp,
    BfiOp,
    BrevOp,
    ClzOp,
    Lop3Op,
    NotOp,
    OrOp,
    PopcOp,
    PrmtOp,
    SelpOp,
    SetpOp,
    ShlOp,
    ShrOp,
    XorOp,
)
from kaio.dialects.ptx_memory import (
    AtomOp,
    CpAsyncCommitOp,
    CpAsyncOp,
    CpAsyncWaitAllOp,
    CpAsyncWaitGroupOp,
    LdIntoOp,
    LdOp,
    RedOp,
    StOp,
)
from kaio.dialects.ptx_move import (
    AssignOp,
    CvtaOp,
    CvtOp,
    MovOp,
)
from kaio.dialects.ptx_structure import (
    MAX_MAXNREG,
    MIN_MAXNREG,
    TENSOR_MAP_PARAM,
    ArrayDecl,
    CommentOp,
    DynamicSharedDeclOp,
    EntryOp,
    LabelOp,
    LocalDeclOp,
    SharedDeclOp,
)
from kaio.dialects.ptx_tensor import (
    MMA_FRAGMENTS,
    LdmatrixOp,
    MmaOp,
)
from xdsl.ir import Dialect, Operation

# --------------------------------------------------------------------------- targets


def requirements(module: Operation) -> list[tuple[Operation, Requirement]]:
    """Every (op, feature requirement) in a module, in program order."""
    found: list[tuple[Operation, Requirement]] = []
    for op in module.walk():
        if isinstance(op, PtxInstr):
            found.extend((op, r) for r in op.requirements())
    return found


def required_ptx_version(module: Operation) -> tuple[int, int]:
    return max((r.min_ptx for _, r in requirements(module)), default=(1, 0))


def check_target(module: Operation, sm: int, arch_name: str) -> None:
    """Raise KaioTargetError for the first instruction the target does not have."""
    for _, req in requirements(module):
        if not req.met_by(sm, arch_name.endswith("a")):
            raise req.error(arch_name)


BASE_OPS: list[type[Operation]] = [
        # structure
        EntryOp,
        SharedDeclOp,
        DynamicSharedDeclOp,
        LocalDeclOp,
        RegOp,
        LabelOp,
        CommentOp,
        ConstOp,
        # arithmetic
        AddOp,
        SubOp,
        MulOp,
        MadOp,
        FmaOp,
        DivOp,
        RemOp,
        MinOp,
        MaxOp,
        AbsOp,
        NegOp,
        CopysignOp,
        RcpOp,
        SqrtOp,
        RsqrtOp,
        Ex2Op,
        Lg2Op,
        SinOp,
        CosOp,
        TanhOp,
        # bits and logic
        AndOp,
        OrOp,
        XorOp,
        NotOp,
        ShlOp,
        ShrOp,
        Lop3Op,
        PrmtOp,
        Dp4aOp,
        Dp2aOp,
        BfeOp,
        BfiOp,
        PopcOp,
        ClzOp,
        BrevOp,
        # compare, select, convert, move
        SetpOp,
        SelpOp,
        CvtOp,
        CvtaOp,
        MovOp,
        AssignOp,
        # memory
        LdOp,
        LdIntoOp,
        StOp,
        AtomOp,
        RedOp,
        # control
        BraOp,
        RetOp,
        ExitOp,
        BarSyncOp,
        MembarOp,
        # warp-synchronous
        ShflOp,
        VoteOp,
        ActivemaskOp,
        # tensor cores and async copies
        LdmatrixOp,
        MmaOp,
        CpAsyncOp,
        CpAsyncCommitOp,
        CpAsyncWaitGroupOp,
        CpAsyncWaitAllOp,
]  # fmt: skip


Ptx = Dialect("ptx", [*BASE_OPS, *HOPPER_OPS], [])

__all__ = [
    "within_attr",
    "within_of",
    "BASE_OPS",
    "CMP_OPS",
    "FLOAT_TYPES",
    "INT_TYPES",
    "MAX_MAXNREG",
    "MIN_MAXNREG",
    "MMA_FRAGMENTS",
    "REGISTER_CLASSES",
    "TENSOR_MAP_PARAM",
    "TYPE_BITS",
    "AbsOp",
    "ActivemaskOp",
    "AddOp",
    "AndOp",
    "ArrayDecl",
    "AssignOp",
    "AtomOp",
    "BarSyncOp",
    "BfeOp",
    "BfiOp",
    "BraOp",
    "BrevOp",
    "ClzOp",
    "CommentOp",
    "ConstOp",
    "CopysignOp",
    "CosOp",
    "CpAsyncCommitOp",
    "CpAsyncOp",
    "CpAsyncWaitAllOp",
    "CpAsyncWaitGroupOp",
    "CvtOp",
    "CvtaOp",
    "DivOp",
    "DynamicSharedDeclOp",
    "EntryOp",
    "Ex2Op",
    "ExitOp",
    "FmaOp",
    "InstrInfo",
    "LabelOp",
    "LdIntoOp",
    "LdOp",
    "LdmatrixOp",
    "Lg2Op",
    "LocalDeclOp",
    "Lop3Op",
    "Dp2aOp",
    "Dp4aOp",
    "MadOp",
    "MaxOp",
    "MembarOp",
    "MinOp",
    "MmaOp",
    "MovOp",
    "MulOp",
    "NegOp",
    "NotOp",
    "OrOp",
    "PopcOp",
    "PrmtOp",
    "Ptx",
    "PtxInstr",
    "RcpOp",
    "RedOp",
    "RegName",
    "RegOp",
    "RemOp",
    "Requirement",
    "RetOp",
    "RsqrtOp",
    "SelpOp",
    "SetpOp",
    "SharedDeclOp",
    "ShflOp",
    "ShlOp",
    "ShrOp",
    "SinOp",
    "SqrtOp",
    "StOp",
    "SubOp",
    "TanhOp",
    "VoteOp",
    "XorOp",
    "check_target",
    "register_bits",
    "register_type",
    "required_ptx_version",
    "requirements",
]
