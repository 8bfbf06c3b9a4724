"""``lower-to-ptx``: every ``kernel.func`` becomes a ``ptx.entry``.

The pass is a table-driven translator (see ``kaio.passes.to_ptx``): it walks each kernel in
program order, flattening structured control flow into labels and branches, and calls the rule
registered for each op. Ops without a rule (a dialect whose own lowering pass has not run yet)
stop it with an error naming the op.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaio.dialects import kernel
from kaio.dialects import stage_attrs
from kaio.errors import KaioCompileError
from kaio.launch_limits import MAX_MAXNREG, MAXNREG_RULE, MIN_MAXNREG
from kaio.pass_contracts import OpRule, OptionRange, PassContract
from kaio.passes.to_ptx import (  # noqa: F401  (importing registers the rules)
    arith_math,
    control_flow,
    kernel_ops,
    mma_sync,
    random,
    relayout,
    smem_cpasync,
    tile_atomics,
    tile_distribution,
    tile_dot,
    tile_elementwise,
    tile_memory,
    tile_reduce,
    tile_views,
    tma_mbarrier,
    wgmma,
)
from kaio.passes.to_ptx.emitter import PtxEmitter
from kaio.targets.ptx.arch import DEFAULT_ARCH, get_arch
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class LowerToPtxPass(ModulePass):
    name = "lower-to-ptx"
    contract = PassContract(
        after=("tile-layout", "lower-to-mma-sync", "lower-to-wgmma", "vectorize-loads"),
        removes=(OpRule("an op that is not PTX", lambda op: not op.name.startswith(("ptx.", "builtin."))),),
        options=(OptionRange("maxnreg", MIN_MAXNREG, MAX_MAXNREG),),
    )

    arch: str | None = None
    """Target GPU (some lowerings depend on it: native bf16 math on sm_90, tanh.approx on
    sm_75). None, the default: the module's own (``kaio.target``, which ``kaio.compile`` sets),
    else sm_80. Given, it must be the module's."""

    maxnreg: int | None = None
    """Registers per thread ptxas may use at most (``.maxnreg``). None, the default: the
    module's ``kaio.launch`` maxnreg (the tile kernel's ``maxnreg``), else no cap; given, it
    overrides the module's. A lower cap fits more warps on an SM; below what the kernel needs,
    ptxas spills to local memory."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        held = stage_attrs.module_target(op)
        target = get_arch(self.arch or held or DEFAULT_ARCH)
        if held is not None and get_arch(held).name != target.name:
            raise KaioCompileError(f"lower-to-ptx: arch={self.arch} but the module compiles for {held} (its kaio.target)")
        stage_attrs.set_module_target(op, target.name)
        if self.maxnreg is not None and not MIN_MAXNREG <= self.maxnreg <= MAX_MAXNREG:
            raise KaioCompileError(f"lower-to-ptx: maxnreg is {MAXNREG_RULE} (or unset: the module's), not {self.maxnreg}")
        maxnreg = stage_attrs.launch_maxnreg(op, self.maxnreg)
        for func in kernel.kernel_funcs(op):
            budget = func.attributes.get(stage_attrs.ENTRY_REGISTERS_ATTR)
            entry = PtxEmitter(func, target).run()
            if maxnreg:
                entry.maxnreg = IntegerAttr(maxnreg, i64)
            if budget is not None:  # setmaxnreg counts assume exactly this many at entry: pin ptxas to it
                registers = budget.value.data  # type: ignore[attr-defined]
                if maxnreg and maxnreg < registers:
                    raise KaioCompileError(
                        f"lower-to-ptx: kernel {func.sym_name.data}'s setmaxnreg counts were budgeted for {registers} "
                        f"registers per thread at entry, but maxnreg={maxnreg}: give pipeline-tma the same maxnreg"
                    )
                entry.maxnreg = IntegerAttr(registers, i64)
            for attr in (stage_attrs.ALIGN_ATTR, stage_attrs.TENSOR_MAPS_ATTR):  # what the runtime checks and builds
                if attr in func.attributes:
                    entry.attributes[attr] = func.attributes[attr]
            func.parent_block().insert_op_before(entry, func)  # type: ignore[union-attr]
            func.detach()
            func.erase()
