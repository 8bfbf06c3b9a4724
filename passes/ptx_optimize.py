"""The scalar passes on the ``ptx`` dialect, after ``lower-to-ptx``. Their pass classes live
here, each a frozen dataclass (name, options, contract) whose ``apply`` calls one function of
the utility module that holds its logic, so that no pass module imports another:

- ``ptx-strength-reduce``: :func:`~kaio.passes.ptx_strength_reduce.strength_reduce_module`;
- ``ptx-licm``: :func:`~kaio.passes.ptx_licm.licm_module`;
- ``ptx-iv-reduce``: :func:`~kaio.passes.ptx_iv_reduce.iv_reduce_module`;
- ``ptx-fold``: :func:`~kaio.passes.ptx_fold.fold_module`;
- ``ptx-sync-cleanup``: :func:`~kaio.passes.ptx_sync_cleanup.sync_cleanup_module`.

``ptx-optimize`` runs them as one pipeline stage: ``ptx-strength-reduce``, then ``ptx-licm``,
then ``ptx-iv-reduce``, then ``ptx-fold``, then ``ptx-sync-cleanup`` (waits and barriers that
order nothing), each switchable.

The default pipelines use this stage rather than the passes separately because the pass manager
verifies the whole module after every stage, and a verification of a kernel's PTX costs more
than the rewrites (a 2000-instruction matmul: ~150 ms against ~50 ms for strength reduction,
code motion and folding together). To see the IR between them, give them by name instead
(``kaio.pipeline.SCALAR_PASSES``): ``pipeline.replace("ptx-optimize", ...)`` or a pipeline
string.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaio.passes.ptx_fold import fold_module
from kaio.passes.ptx_iv_reduce import iv_reduce_module
from kaio.passes.ptx_licm import licm_module
from kaio.passes.ptx_strength_reduce import strength_reduce_module
from kaio.passes.ptx_sync_cleanup import sync_cleanup_module
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from kaio.pass_contracts import PassContract


@dataclass(frozen=True)
class PtxStrengthReducePass(ModulePass):
    contract = PassContract(after=("lower-to-ptx",))  # it rewrites ptx.entry bodies only
    name = "ptx-strength-reduce"

    magic: bool = True
    """Also divide by constants that are not powers of two with a multiply-high."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        strength_reduce_module(op, self.magic)


@dataclass(frozen=True)
class PtxLicmPass(ModulePass):
    contract = PassContract(after=("lower-to-ptx",))  # it rewrites ptx.entry bodies only
    name = "ptx-licm"

    budget: int = 64
    """Registers (32-bit words; a predicate counts one) that moved values may keep live across
    one loop; a loop whose invariant instructions would need more keeps them (ptxas
    rematerialises them where it has the registers)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        licm_module(op, self.budget)


@dataclass(frozen=True)
class PtxIvReducePass(ModulePass):
    contract = PassContract(after=("lower-to-ptx",))  # it rewrites ptx.entry bodies only
    name = "ptx-iv-reduce"

    budget: int = 8
    """Registers (32-bit words) the new loop-carried values of one loop may take."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        iv_reduce_module(op, self.budget)


@dataclass(frozen=True)
class PtxFoldPass(ModulePass):
    contract = PassContract(after=("lower-to-ptx",))  # it rewrites ptx.entry bodies only
    name = "ptx-fold"

    window: int = 0
    """How far back (in instructions) a repeat may find its twin (0, the default: repeats stay).
    Merging stretches a register's life across everything between the two, ptxas does not undo
    it and merges repeats itself: near its register limit, one merge is enough for it to spill
    (a log_softmax row kernel at 40 registers, the D=256 dK/dV kernel at 255)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fold_module(op, self.window)


@dataclass(frozen=True)
class PtxSyncCleanupPass(ModulePass):
    contract = PassContract(after=("lower-to-ptx",))
    name = "ptx-sync-cleanup"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sync_cleanup_module(op)


@dataclass(frozen=True)
class PtxOptimizePass(ModulePass):
    contract = PassContract(after=("lower-to-ptx",))
    name = "ptx-optimize"

    strength_reduce: bool = True
    """Run ``ptx-strength-reduce`` (multiplies, divisions, remainders by constants)."""

    licm: bool = True
    """Run ``ptx-licm`` (loop-invariant code motion)."""

    iv_reduce: bool = True
    """Run ``ptx-iv-reduce`` (values linear in a loop counter carried in registers)."""

    fold: bool = True
    """Run ``ptx-fold`` (constant folding, identities, nearby repeats, dead code)."""

    sync_cleanup: bool = True
    """Run ``ptx-sync-cleanup`` (``cp.async.wait_group`` and ``bar.sync`` that order nothing)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.strength_reduce:
            PtxStrengthReducePass().apply(ctx, op)
        if self.licm:
            PtxLicmPass().apply(ctx, op)
        if self.iv_reduce:
            PtxIvReducePass().apply(ctx, op)
        if self.fold:
            PtxFoldPass().apply(ctx, op)
        if self.sync_cleanup:
            PtxSyncCleanupPass().apply(ctx, op)
