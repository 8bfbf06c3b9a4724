"""The stage contracts (kaio.dialects.stage_attrs): every ``kaio.*`` attribute a default
pipeline leaves is one of them, and the verifier after each pass refuses one on the wrong op,
with the wrong value, or a name no stage defines, naming the op and the pass."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, UnitAttr, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException

import kaio
from kaio.dialects import kernel, stage_attrs
from kaio.errors import KaioCompileError
from kaio.ops_library import matmul
from kaio.prelude import Array, MutArray, f32, thread_idx_x, u32


@kaio.gpu_kernel(block_size=32)
def scale(x: Array[f32], y: MutArray[f32], n: u32):
    i = thread_idx_x()
    if i < n:
        y[i] = x[i] * 2.0


@pytest.mark.parametrize("arch, expected", [
    ("sm_80", {"kaio.target", "kaio.launch", "kaio.align", "kaio.copy_barrier"}),
    ("sm_90a", {"kaio.target", "kaio.launch", "kaio.align", "kaio.tensor_maps", "kaio.tma_ring", "kaio.refill_barrier"}),
])
def test_the_library_matmul_leaves_only_defined_contracts(arch: str, expected: set[str]):
    seen: set[str] = set()

    def watch(stage: str, text: str) -> None:
        seen.update(re.findall(r'[{ ,"](kaio\.[a-z_]+)\b', text))

    kaio.compile(matmul.aot_kernel(arch), arch, dump_ir=watch)
    assert expected <= seen <= set(stage_attrs.STAGE_ATTRS), seen


def _planted(attach):
    @dataclass(frozen=True)
    class Plant(ModulePass):
        name = "test-plant-stage-attr"

        def apply(self, ctx: Context, op: ModuleOp) -> None:
            attach(op)

    return Plant()


def _first(op: ModuleOp, cls):
    return next(o for o in op.walk() if isinstance(o, cls))


@pytest.mark.parametrize(
    "attach, message",
    [
        (lambda m: _first(m, kernel.KernelFuncOp).attributes.__setitem__("kaio.tma_ring", UnitAttr()),
         r"kaio\.tma_ring sits on smem\.alloc, not on kernel\.func"),
        (lambda m: _first(m, kernel.KernelFuncOp).attributes.__setitem__("kaio.align", StringAttr("16")),
         r"kernel\.func's kaio\.align must be a DictionaryAttr"),
        (lambda m: _first(m, kernel.KernelFuncOp).attributes.__setitem__("kaio.alignment", UnitAttr()),
         r"kernel\.func carries kaio\.alignment, which no stage defines"),
    ],
)
def test_a_pass_breaking_a_contract_is_named(attach, message: str):
    pipeline = scale.default_pipeline("sm_80").insert(_planted(attach), before="lower-to-ptx")
    with pytest.raises(KaioCompileError, match=message) as info:
        kaio.compile(scale, "sm_80", pipeline=pipeline)
    assert "test-plant-stage-attr" in str(info.value)


def test_the_contract_checks_directly():
    func = kernel.KernelFuncOp("k", [], [], (32, 1, 1))
    func.attributes[stage_attrs.PRODUCER_THREADS_ATTR] = IntegerAttr(128, i64)
    stage_attrs.check_stage_attrs(func)
    stage_attrs.require_alignment(func, "x", 16)
    stage_attrs.require_alignment(func, "x", 8)  # the largest requirement wins
    stage_attrs.check_stage_attrs(func)
    assert func.attributes[stage_attrs.ALIGN_ATTR].data["x"].value.data == 16  # type: ignore[attr-defined]
    func.attributes[stage_attrs.ENTRY_REGISTERS_ATTR] = UnitAttr()
    with pytest.raises(VerifyException, match="kaio.entry_registers must be a IntegerAttr"):
        stage_attrs.check_stage_attrs(func)
