"""The Hopper (sm_90 / sm_90a) instructions of the ``ptx`` dialect.

They are one instruction family of the ``ptx`` dialect like the others beside this file
(``ptx.Ptx`` lists :data:`HOPPER_OPS`), so the printer, the target checks and the textual form
treat them like every other instruction.

* ``wgmma.*``: warpgroup matrix multiply-accumulate, asynchronous (fence, mma_async,
  commit_group, wait_group). Only sm_90a has them.
* ``mbarrier.*``: shared-memory barriers with a phase, an arrival count and a transaction
  (byte) count that bulk copies decrement.
* ``cp.async.bulk[.tensor]``: TMA copies between global and shared memory, completing on an
  mbarrier (loads) or in bulk groups (stores).
* ``fence.proxy.async``, ``setmaxnreg`` (sm_90a), ``elect.sync``.

``wgmma.mma_async`` is the one more non-SSA instruction besides ``ptx.assign``: its
accumulator registers are read and written in place (``d = a * b + d``), as in PTX, so they are
operands, not results. The registers must be defined before (``ptx.mov`` of 0.0) and are only
meaningful again after the ``wgmma.wait_group`` that covers the instruction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from kaio.dialects.ptx_base import (
    ConstOp,
    InstrInfo,
    PtxInstr,
    RegName,
    Requirement,
    _check_width,
    register_bits,
)
from xdsl.dialects.builtin import DenseArrayBase, f32, i1, i32
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import irdl_op_definition, opt_prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

SM90 = InstrInfo(min_sm=90, min_ptx=(8, 0))
_NONE = InstrInfo(n_outs=(0, 0), n_args=(0, 0), n_types=0)


class _HopperInstr(PtxInstr):
    """Hopper instructions: gated on sm_90 (``ARCH_SPECIFIC``: on sm_90a only)."""

    ARCH_SPECIFIC: ClassVar[bool] = False
    INFO: ClassVar[InstrInfo] = _NONE.but(min_sm=90, min_ptx=(8, 0))

    def requirements(self) -> Iterable[Requirement]:
        yield Requirement(self.mnemonic, self.INFO.min_sm, self.INFO.min_ptx, self.ARCH_SPECIFIC)


def _is_shared_address(v: SSAValue) -> bool:
    return register_bits(v.type) in (32, 64)


def _check_addresses(op: PtxInstr, values: Sequence[SSAValue], what: str) -> None:
    for v in values:
        if not _is_shared_address(v):
            raise VerifyException(f"{op.mnemonic}: {what} is a 32- or 64-bit address, got {v.type}")


def _bracket(text: str) -> str:
    return f"[{text}]"


# --------------------------------------------------------------------------- wgmma

_SYNC_ALIGNED = frozenset(("sync", "aligned"))


@irdl_op_definition
class WgmmaFenceOp(_HopperInstr):
    """``wgmma.fence.sync.aligned``: orders register accesses before the next wgmma."""

    name = "ptx.wgmma.fence"
    ARCH_SPECIFIC: ClassVar[bool] = True
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(mnemonic="wgmma.fence", mods=_SYNC_ALIGNED)


@irdl_op_definition
class WgmmaCommitOp(_HopperInstr):
    """``wgmma.commit_group.sync.aligned``: the wgmmas issued since the last commit form a group."""

    name = "ptx.wgmma.commit_group"
    ARCH_SPECIFIC: ClassVar[bool] = True
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(mnemonic="wgmma.commit_group", mods=_SYNC_ALIGNED)


@irdl_op_definition
class WgmmaWaitOp(_HopperInstr):
    """``wgmma.wait_group.sync.aligned N``: wait until at most N groups are in flight."""

    name = "ptx.wgmma.wait_group"
    ARCH_SPECIFIC: ClassVar[bool] = True
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(
        mnemonic="wgmma.wait_group", mods=_SYNC_ALIGNED, n_args=(1, 1), imm_required=frozenset({0})
    )


WGMMA_N = tuple(range(8, 257, 8))
WGMMA_INPUTS = frozenset(("f16", "bf16"))
WGMMA_FP8 = frozenset(("e4m3", "e5m2"))  # K = 32, K-major descriptors, no imm-trans
WGMMA_INT8 = frozenset(("s8", "u8"))  # K = 32, K-major, s32 accumulators, no imm-scale/imm-trans
WGMMA_INT8_N = (8, 16, 24, *range(32, 257, 16))  # as wgmma.INT8_N (this dialect imports no other)


def wgmma_shape(n: int, k: int = 16) -> str:
    return f"m64n{n}k{k}"


_WGMMA_SHAPES = {wgmma_shape(n, k): n for n in WGMMA_N for k in (16, 32)}


@irdl_op_definition
class WgmmaMmaAsyncOp(_HopperInstr):
    """``wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16 {d}, a, b-desc, scale-d, imm-scale-a,
    imm-scale-b[, imm-trans-a], imm-trans-b``.

    Operands: the N/2 f32 accumulator registers (updated in place), then A (one 64-bit
    shared-memory matrix descriptor, or four 32-bit registers of f16x2/bf16x2), the 64-bit B
    descriptor and the ``scale-d`` predicate (false: d = a * b, ignoring d). The immediates are
    the ``imm`` property: scale-a, scale-b (1 or -1), trans-a, trans-b (0 or 1; trans-a is
    only spelled with a descriptor A)."""

    name = "ptx.wgmma.mma_async"
    ARCH_SPECIFIC: ClassVar[bool] = True
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(
        mnemonic="wgmma.mma_async",
        n_args=(4 + 7, 128 + 9),
        n_types=3,
        types=frozenset(("f32", "s32")) | WGMMA_INPUTS | WGMMA_FP8 | WGMMA_INT8,
        mods=_SYNC_ALIGNED | frozenset(_WGMMA_SHAPES),
    )
    imm = opt_prop_def(DenseArrayBase)

    def __init__(
        self,
        spec: str,
        acc: Sequence[SSAValue],
        a: Sequence[SSAValue],
        b_desc: SSAValue,
        scale_d: SSAValue,
        *,
        scale_a: int = 1,
        scale_b: int = 1,
        trans_a: int = 0,
        trans_b: int = 0,
    ):
        super().__init__(spec, [*acc, *a, b_desc, scale_d])
        self.properties["imm"] = DenseArrayBase.from_list(i32, [scale_a, scale_b, trans_a, trans_b])

    @property
    def n(self) -> int:
        return next((_WGMMA_SHAPES[m] for m in self.mods if m in _WGMMA_SHAPES), 0)

    @property
    def immediates(self) -> tuple[int, int, int, int]:
        if self.imm is None:
            return (1, 1, 0, 0)
        values = tuple(int(v) for v in self.imm.get_values())
        return values  # type: ignore[return-value]

    @property
    def fp8(self) -> bool:
        return self.ptx_types[1] in WGMMA_FP8

    @property
    def integer(self) -> bool:
        return self.ptx_types[0] == "s32"

    @property
    def a_from_registers(self) -> bool:
        return register_bits(self.srcs[self.n // 2].type) == 32

    def operand_groups(self) -> tuple[list[SSAValue], list[SSAValue], SSAValue, SSAValue]:
        """(accumulators, A, B descriptor, scale-d)."""
        srcs = list(self.srcs)
        half = self.n // 2
        return srcs[:half], srcs[half:-2], srcs[-2], srcs[-1]

    def check(self, mods: list[str], types: list[str]) -> None:
        n = self.n
        if not n or not _SYNC_ALIGNED <= set(mods):
            raise VerifyException(f"wgmma.mma_async.{self.spec_text}: needs .sync.aligned and a m64nNk16/k32 shape (N = 8..256 by 8)")
        k = 32 if wgmma_shape(n, 32) in mods else 16
        half = types[1] == types[2] and types[1] in WGMMA_INPUTS
        fp8 = types[1] in WGMMA_FP8 and types[2] in WGMMA_FP8
        int8 = types[1] in WGMMA_INT8 and types[2] in WGMMA_INT8
        if not ((types[0] == "f32" and ((half and k == 16) or (fp8 and k == 32))) or (types[0] == "s32" and int8 and k == 32)):
            raise VerifyException(
                f"wgmma.mma_async.{self.spec_text}: kaio supports f32 += f16*f16 and bf16*bf16 (k16), e4m3/e5m2 (k32) "
                "and s32 += s8/u8 (k32)"
            )
        if int8 and n not in WGMMA_INT8_N:
            raise VerifyException(f"wgmma.mma_async.{self.spec_text}: integer wgmma takes N in {WGMMA_INT8_N}")
        if self.results:
            raise VerifyException("wgmma.mma_async updates its accumulator operands in place; it has no results")
        if len(self.srcs) < n // 2 + 3:
            raise VerifyException(f"wgmma.mma_async m64n{n}k16 takes {n // 2} accumulators, A, B and scale-d")
        acc, a, b, scale_d = self.operand_groups()
        for v in acc:
            _check_width(v, 32, "wgmma accumulator")
            if v.type != (i32 if types[0] == "s32" else f32):
                raise VerifyException(f"wgmma.mma_async accumulators are {types[0]} registers")
        if len(a) == 1:
            _check_width(a[0], 64, "wgmma A descriptor")
        elif len(a) == 4:
            for v in a:
                _check_width(v, 32, "wgmma A fragment")
        else:
            raise VerifyException(f"wgmma.mma_async: A is one 64-bit descriptor or four 32-bit registers, got {len(a)} operands")
        _check_width(b, 64, "wgmma B descriptor")
        if scale_d.type != i1:
            raise VerifyException("wgmma.mma_async: scale-d is an i1 predicate")
        scale_a, scale_b, trans_a, trans_b = self.immediates
        if scale_a not in (1, -1) or scale_b not in (1, -1) or trans_a not in (0, 1) or trans_b not in (0, 1):
            raise VerifyException("wgmma.mma_async: imm-scale-a/b are 1 or -1, imm-trans-a/b 0 or 1")
        if len(a) == 4 and trans_a:
            raise VerifyException("wgmma.mma_async: A from registers cannot be transposed")
        if (fp8 or int8) and (trans_a or trans_b):
            raise VerifyException("wgmma.mma_async: 8-bit operands are K-major (imm-trans 0)")
        if int8 and (scale_a, scale_b) != (1, 1):
            raise VerifyException("wgmma.mma_async: integer wgmma has no imm-scale-a/b")

    def requirements(self) -> Iterable[Requirement]:
        yield from super().requirements()
        if self.integer and self.ptx_types[1] != self.ptx_types[2]:  # mixed s8/u8 came with PTX 8.4
            yield Requirement("wgmma.mma_async with mixed s8/u8 inputs", 90, (8, 4), True)

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        acc, a, b, scale_d = self.operand_groups()
        scale_a, scale_b, trans_a, trans_b = self.immediates
        group = lambda xs: "{" + ", ".join(xs) + "}"
        a_text = reg(a[0]) if len(a) == 1 else group([reg(v) for v in a])
        trans = [str(trans_a), str(trans_b)] if len(a) == 1 else [str(trans_b)]
        if self.fp8:  # the ISA spells no imm-trans for 8-bit inputs
            trans = []
        if self.integer:  # nor imm-scale for integer ones
            return [group([reg(v) for v in acc]), a_text, reg(b), reg(scale_d)]
        return [group([reg(v) for v in acc]), a_text, reg(b), reg(scale_d), str(scale_a), str(scale_b), *trans]

    def print_extra_props(self, printer: Printer) -> None:
        printer.print_string(" imm [" + ", ".join(map(str, self.immediates)) + "]")

    @classmethod
    def parse_extra_props(cls, parser: Parser) -> dict[str, Attribute]:
        if parser.parse_optional_keyword("imm") is None:
            return {}
        values = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_negative=True))
        return {"imm": DenseArrayBase.from_list(i32, values)}


# --------------------------------------------------------------------------- mbarrier

_MBAR_MODS = frozenset(("shared", "shared::cta", "release", "acquire", "cta"))
_MBAR = _HopperInstr.INFO.but(types=frozenset(("b64",)), n_types=1, mods=_MBAR_MODS)


class _Mbarrier(_HopperInstr):
    """``mbarrier.<op>.shared::cta.b64 ... [addr] ...``: args[0] is the barrier's address."""

    INFO: ClassVar[InstrInfo] = _MBAR

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_addresses(self, self.srcs[:1], "the mbarrier")
        for v in self.srcs[1:]:
            _check_width(v, 32, self.mnemonic)

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        outs = [reg(v) for v in self.results] or (["_"] if self.INFO.n_outs[1] else [])
        rest = [imm(v) for v in self.srcs[1:]]
        return [*outs, _bracket(reg(self.srcs[0])), *rest]


@irdl_op_definition
class MbarrierInitOp(_Mbarrier):
    """``mbarrier.init.shared::cta.b64 [addr], count``: phase 0, ``count`` arrivals expected."""

    name = "ptx.mbarrier.init"
    INFO: ClassVar[InstrInfo] = _MBAR.but(mnemonic="mbarrier.init", n_args=(2, 2), imm_args=frozenset({1}), min_sm=80, min_ptx=(7, 8))


class _Arrive(_Mbarrier):
    INFO: ClassVar[InstrInfo] = _MBAR.but(n_outs=(0, 1))

    def check(self, mods: list[str], types: list[str]) -> None:
        super().check(mods, types)
        for v in self.results:
            _check_width(v, 64, self.mnemonic)


@irdl_op_definition
class MbarrierArriveOp(_Arrive):
    """``mbarrier.arrive.shared::cta.b64 state, [addr]``: one arrival; the state token (or
    ``_`` when the op has no result) identifies the phase."""

    name = "ptx.mbarrier.arrive"
    INFO: ClassVar[InstrInfo] = _Arrive.INFO.but(mnemonic="mbarrier.arrive", n_args=(1, 1), min_sm=80, min_ptx=(7, 8))


@irdl_op_definition
class MbarrierArriveExpectTxOp(_Arrive):
    """``mbarrier.arrive.expect_tx.shared::cta.b64 state, [addr], tx``: expect ``tx`` more bytes
    of bulk copies in this phase, then arrive."""

    name = "ptx.mbarrier.arrive.expect_tx"
    INFO: ClassVar[InstrInfo] = _Arrive.INFO.but(
        mnemonic="mbarrier.arrive.expect_tx", n_args=(2, 2), imm_args=frozenset({1})
    )


@irdl_op_definition
class MbarrierTryWaitParityOp(_Mbarrier):
    """``mbarrier.try_wait.parity.shared::cta.b64 p, [addr], parity``: p = the phase of parity
    ``parity`` has completed (the current phase has the other parity)."""

    name = "ptx.mbarrier.try_wait.parity"
    INFO: ClassVar[InstrInfo] = _MBAR.but(mnemonic="mbarrier.try_wait.parity", n_outs=(1, 1), n_args=(2, 2), imm_args=frozenset({1}), min_ptx=(7, 8))

    def check(self, mods: list[str], types: list[str]) -> None:
        super().check(mods, types)
        _check_width(self.results[0], 1, self.mnemonic)


# --------------------------------------------------------------------------- bulk copies (TMA)

_TO_SHARED = "shared::cluster.global.mbarrier::complete_tx::bytes"
_TO_GLOBAL = "global.shared::cta.bulk_group"
_BULK_MODS = frozenset(_TO_SHARED.split(".")) | frozenset(_TO_GLOBAL.split("."))
_TENSOR_DIMS = {"1d": 1, "2d": 2, "3d": 3, "4d": 4, "5d": 5}


class _Bulk(_HopperInstr):
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(n_args=(2, 8), mods=_BULK_MODS | frozenset(_TENSOR_DIMS))

    def check_direction(self, prefix: str) -> None:
        tail = self.spec_text[len(prefix) :].lstrip(".")
        if tail not in (_TO_SHARED, _TO_GLOBAL):
            raise VerifyException(f"{self.mnemonic}.{self.spec_text}: kaio knows .{_TO_SHARED} (loads) and .{_TO_GLOBAL} (stores)")


@irdl_op_definition
class CpAsyncBulkOp(_Bulk):
    """``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size,
    [mbar]`` (a load completing on the mbarrier) or ``cp.async.bulk.global.shared::cta.bulk_group
    [dst], [src], size`` (a store completing in a bulk group). Size: a multiple of 16 bytes."""

    name = "ptx.cp.async.bulk"
    INFO: ClassVar[InstrInfo] = _Bulk.INFO.but(mnemonic="cp.async.bulk", n_args=(3, 4), imm_args=frozenset({2}))

    def check(self, mods: list[str], types: list[str]) -> None:
        self.check_direction("")
        want = 4 if self.spec_text == _TO_SHARED else 3
        if len(self.srcs) != want:
            raise VerifyException(f"cp.async.bulk.{self.spec_text} takes {want} operands")
        _check_addresses(self, self.srcs[:2], "dst and src")
        _check_width(self.srcs[2], 32, "cp.async.bulk size")
        if want == 4:
            _check_addresses(self, self.srcs[3:], "the mbarrier")

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        s = self.srcs
        texts = [_bracket(reg(s[0])), _bracket(reg(s[1])), imm(s[2])]
        return texts + ([_bracket(reg(s[3]))] if len(s) == 4 else [])


@irdl_op_definition
class CpAsyncBulkTensorOp(_Bulk):
    """``cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [dst],
    [tmap, {x, y}], [mbar]`` (a box of the tensor map's tensor into shared memory; elements
    outside the tensor read as zero) or ``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group
    [tmap, {x, y}], [src]`` (shared memory into the box; elements outside are not written).
    Operands: loads dst, tmap, coordinates, mbar; stores tmap, coordinates, src."""

    name = "ptx.cp.async.bulk.tensor"
    INFO: ClassVar[InstrInfo] = _Bulk.INFO.but(mnemonic="cp.async.bulk.tensor")

    @property
    def dims(self) -> int:
        return _TENSOR_DIMS.get(self.mods[0], 0) if self.mods else 0

    def check(self, mods: list[str], types: list[str]) -> None:
        if not self.dims:
            raise VerifyException(f"cp.async.bulk.tensor.{self.spec_text}: the spec starts with the dimension (.1d .. .5d)")
        self.check_direction(mods[0])
        if len(self.srcs) != self.dims + 3 - (0 if self.spec_text.endswith(_TO_SHARED) else 1):
            raise VerifyException(f"cp.async.bulk.tensor.{self.spec_text}: wrong operand count {len(self.srcs)}")
        load = self.spec_text.endswith(_TO_SHARED)
        tmap = self.srcs[1] if load else self.srcs[0]
        _check_width(tmap, 64, "the tensor map address")
        coords = self.srcs[2 : 2 + self.dims] if load else self.srcs[1 : 1 + self.dims]
        for v in coords:
            _check_width(v, 32, "a tensor coordinate")
        _check_addresses(self, [self.srcs[0], self.srcs[-1]] if load else [self.srcs[-1]], "shared address")

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        s = self.srcs
        load = self.spec_text.endswith(_TO_SHARED)
        tmap, coords = (s[1], s[2:-1]) if load else (s[0], s[1:-1])
        box = f"[{reg(tmap)}, {{{', '.join(imm(c) for c in coords)}}}]"
        return [_bracket(reg(s[0])), box, _bracket(reg(s[-1]))] if load else [box, _bracket(reg(s[-1]))]


@irdl_op_definition
class CpAsyncBulkCommitOp(_HopperInstr):
    """``cp.async.bulk.commit_group``: the bulk stores issued since the last commit form a group."""

    name = "ptx.cp.async.bulk.commit_group"
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(mnemonic="cp.async.bulk.commit_group")


@irdl_op_definition
class CpAsyncBulkWaitOp(_HopperInstr):
    """``cp.async.bulk.wait_group[.read] N``: at most N bulk groups in flight (``.read``: only
    their reads of shared memory done)."""

    name = "ptx.cp.async.bulk.wait_group"
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(
        mnemonic="cp.async.bulk.wait_group", mods=frozenset(("read",)), n_args=(1, 1), imm_required=frozenset({0})
    )


# --------------------------------------------------------------------------- the rest


@irdl_op_definition
class FenceProxyAsyncOp(_HopperInstr):
    """``fence.proxy.async[.shared::cta]``: orders generic-proxy accesses (st.shared) with the
    async proxy (TMA stores, wgmma operand reads) that follows."""

    name = "ptx.fence.proxy.async"
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(
        mnemonic="fence.proxy.async", mods=frozenset(("shared::cta", "shared::cluster", "global"))
    )


@irdl_op_definition
class SetmaxnregOp(_HopperInstr):
    """``setmaxnreg.inc.sync.aligned.u32 240``: a warpgroup raises (or lowers) its register
    budget, so producer warps can give registers to the consumers. Count: 24..256, by 8."""

    name = "ptx.setmaxnreg"
    ARCH_SPECIFIC: ClassVar[bool] = True
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(
        mnemonic="setmaxnreg",
        n_args=(1, 1),
        n_types=1,
        types=frozenset(("u32",)),
        mods=_SYNC_ALIGNED | {"inc", "dec"},
        imm_required=frozenset({0}),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        if not ({"inc", "dec"} & set(mods)) or not _SYNC_ALIGNED <= set(mods):
            raise VerifyException("setmaxnreg needs .inc or .dec and .sync.aligned")
        const = self.srcs[0].owner
        assert isinstance(const, ConstOp)
        count = int(const.value.value.data)  # type: ignore[attr-defined]
        if not 24 <= count <= 256 or count % 8:
            raise VerifyException(f"setmaxnreg: the register count is 24..256 in steps of 8, got {count}")


@irdl_op_definition
class ElectSyncOp(_HopperInstr):
    """``elect.sync d|p, membermask``: one lane of the mask (the lowest) gets p = true; d is
    its lane id in every lane."""

    name = "ptx.elect.sync"
    INFO: ClassVar[InstrInfo] = _HopperInstr.INFO.but(
        mnemonic="elect.sync", n_outs=(2, 2), pair_outs=True, n_args=(1, 1), imm_args=frozenset({0})
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_width(self.results[0], 32, "elect.sync")
        _check_width(self.results[1], 1, "elect.sync")
        _check_width(self.srcs[0], 32, "elect.sync")


HOPPER_OPS = [
    # wgmma
    WgmmaFenceOp,
    WgmmaCommitOp,
    WgmmaWaitOp,
    WgmmaMmaAsyncOp,
    # mbarrier
    MbarrierInitOp,
    MbarrierArriveOp,
    MbarrierArriveExpectTxOp,
    MbarrierTryWaitParityOp,
    # bulk copies
    CpAsyncBulkOp,
    CpAsyncBulkTensorOp,
    CpAsyncBulkCommitOp,
    CpAsyncBulkWaitOp,
    # the rest
    FenceProxyAsyncOp,
    SetmaxnregOp,
    ElectSyncOp,
]  # fmt: skip
