"""``ptx`` tensor-core instructions of sm_75/sm_80: ``ldmatrix`` and ``mma.sync``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from kaio.dialects.ptx_base import (
    InstrInfo,
    PtxInstr,
    RegName,
    Requirement,
    _check_address,
    _check_width,
    _gate,
)
from xdsl.irdl import (
    irdl_op_definition,
)
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------- tensor cores


@irdl_op_definition
class LdmatrixOp(PtxInstr):
    """``ldmatrix.sync.aligned.m8n8.x4.shared.b16 {a, b, c, d}, [addr]``: each of the 32 lanes
    gives one 16-byte row address; each result register holds two b16 of one 8x8 matrix."""

    name = "ptx.ldmatrix"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(1, 4),
        n_args=(1, 1),
        types=frozenset(("b16",)),
        mods=frozenset(("sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared")),
        has_address=True,
        group_outs=True,
        min_sm=75,
        min_ptx=(6, 5),
    )

    def check(self, mods: list[str], types: list[str]) -> None:
        _check_address(self, mods)
        count = next((int(m[1]) for m in mods if m in ("x1", "x2", "x4")), 0)
        if count != len(self.results):
            raise VerifyException(
                f"ldmatrix .x{count} yields {count} registers, got {len(self.results)}"
            )
        for v in self.results:
            _check_width(v, 32, "ldmatrix")


# (shape, A/B type) -> registers per thread in the A, B and C/D (f32 or s32) fragments
MMA_FRAGMENTS: dict[tuple[str, str], tuple[int, int, int]] = {
    ("m16n8k16", "f16"): (4, 2, 4),
    ("m16n8k16", "bf16"): (4, 2, 4),
    ("m16n8k8", "f16"): (2, 1, 4),
    ("m16n8k8", "bf16"): (2, 1, 4),
    ("m16n8k32", "s8"): (4, 2, 4),
    ("m16n8k32", "u8"): (4, 2, 4),
    ("m16n8k32", "e4m3"): (4, 2, 4),
    ("m16n8k32", "e5m2"): (4, 2, 4),
}
# A and B may differ within one of these families (s8 x u8, e4m3 x e5m2), never across them.
MMA_INPUT_FAMILIES: tuple[frozenset[str], ...] = (
    frozenset(("f16",)),
    frozenset(("bf16",)),
    frozenset(("s8", "u8")),
    frozenset(("e4m3", "e5m2")),
)
FP8_TYPES = frozenset(("e4m3", "e5m2"))


@irdl_op_definition
class MmaOp(PtxInstr):
    """``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {d}, {a}, {b}, {c}``: one warp
    multiplies a 16xK by a Kx8 tile and accumulates into 16x8 (D = A*B + C)."""

    name = "ptx.mma"
    INFO: ClassVar[InstrInfo] = PtxInstr.INFO.but(
        n_outs=(4, 4),
        n_args=(7, 10),
        n_types=4,
        types=frozenset(("f32", "f16", "bf16", "s32", "s8", "u8", "e4m3", "e5m2")),
        mods=frozenset(("sync", "aligned", "row", "col", "satfinite"))
        | {s for s, _ in MMA_FRAGMENTS},
    )

    def fragment_sizes(self) -> tuple[int, int, int]:
        mods, types = self.split_spec()
        shape = next((m for m in mods if m in {s for s, _ in MMA_FRAGMENTS}), "")
        return MMA_FRAGMENTS.get((shape, types[1]), (0, 0, 0))

    def check(self, mods: list[str], types: list[str]) -> None:
        na, nb, nc = self.fragment_sizes()
        if not na:
            raise VerifyException(f"mma.{self.spec_text}: unsupported shape/type combination")
        same_family = any(types[1] in f and types[2] in f for f in MMA_INPUT_FAMILIES)
        acc = "s32" if types[1] in ("s8", "u8") else "f32"
        if not same_family or types[0] != types[3] or types[0] != acc:
            raise VerifyException(
                f"mma.{self.spec_text}: kaio supports D=C in f32 (s32 for s8/u8) and A, B of one"
                " family (f16, bf16, s8/u8, e4m3/e5m2)"
            )
        if len(self.srcs) != na + nb + nc or len(self.results) != nc:
            raise VerifyException(
                f"mma.{self.spec_text} takes {na}+{nb}+{nc} operands and yields {nc}"
            )
        for v in (*self.results, *self.srcs):
            _check_width(v, 32, "mma")

    def requirements(self) -> Iterable[Requirement]:
        shape_k8_f16 = "m16n8k8" in self.mods and self.ptx_types[1] == "f16"
        if self.ptx_types[1] in FP8_TYPES:  # fp8 tensor cores came with Ada
            a, b = self.ptx_types[1:3]
            yield _gate(f"fp8 tensor cores (mma.sync m16n8k32 .{a} x .{b})", 89, (8, 4))
            return
        yield _gate(
            "mma.sync " + self.spec_text,
            75 if shape_k8_f16 else 80,
            (6, 4) if shape_k8_f16 else (7, 0),
        )

    def operand_texts(self, reg: RegName, imm: RegName) -> list[str]:
        na, nb, _ = self.fragment_sizes()
        names = [reg(v) for v in self.srcs]
        group = lambda xs: "{" + ", ".join(xs) + "}"  # noqa: E731
        return [
            group([reg(v) for v in self.results]),
            group(names[:na]),
            group(names[na : na + nb]),
            group(names[na + nb :]),
        ]
