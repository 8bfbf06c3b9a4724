"""``tma`` and ``mbarrier`` -> the Hopper ptx instructions (``ptx_hopper``): bulk copies between
global and shared memory (``cp.async.bulk[.tensor]``) and the shared barriers that count their
bytes.

Most rules are one instruction; the exceptions say why:

- ``tma.issuer`` is computed once where the kernel starts (every warp converged there), from
  lane 0's warp index (``shfl.sync.idx``, :func:`kernel_ops.uniform_warp`) and ``elect.sync``:
  ptxas then knows what is built from it is warp-uniform;
- ``mbarrier.wait_parity`` is the usual try_wait loop.
"""

from __future__ import annotations

from kaio.dialects import mbarrier, ptx, tma
from kaio.dialects import ptx_hopper as hp
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter
from kaio.passes.to_ptx.kernel_ops import uniform_warp
from xdsl.dialects.builtin import i1, i32
from xdsl.ir import SSAValue

_TO_SHARED = "shared::cluster.global.mbarrier::complete_tx::bytes"
_TO_GLOBAL = "global.shared::cta.bulk_group"
_MBAR = "shared::cta.b64"


# --------------------------------------------------------------------------- mbarrier


@lowering(mbarrier.AllocOp)
def lower_mbarrier_alloc(em: PtxEmitter, op: mbarrier.AllocOp) -> None:
    em.bind(op.result, em.shared("mbarrier", 8 * op.slots, 8))


@lowering(mbarrier.InitOp)
def lower_mbarrier_init(em: PtxEmitter, op: mbarrier.InitOp) -> None:
    em.emit(hp.MbarrierInitOp(_MBAR, [em.value(op.barrier), em.const(op.count.value.data, i32)]))


@lowering(mbarrier.ArriveOp)
def lower_arrive(em: PtxEmitter, op: mbarrier.ArriveOp) -> None:
    em.emit(hp.MbarrierArriveOp(_MBAR, [em.value(op.barrier)]))


@lowering(mbarrier.ArriveExpectTxOp)
def lower_arrive_expect_tx(em: PtxEmitter, op: mbarrier.ArriveExpectTxOp) -> None:
    em.emit(hp.MbarrierArriveExpectTxOp(_MBAR, [em.value(op.barrier), em.value(op.bytes)]))


def _try_wait(em: PtxEmitter, barrier: SSAValue, parity: SSAValue) -> SSAValue:
    return em.instr(hp.MbarrierTryWaitParityOp, _MBAR, [em.value(barrier), em.value(parity)], i1)


@lowering(mbarrier.TryWaitParityOp)
def lower_try_wait(em: PtxEmitter, op: mbarrier.TryWaitParityOp) -> None:
    em.bind(op.result, _try_wait(em, op.barrier, op.parity))


@lowering(mbarrier.WaitParityOp)
def lower_wait_parity(em: PtxEmitter, op: mbarrier.WaitParityOp) -> None:
    again = em.label("mbarrier_wait")
    em.place_label(again)
    em.branch(again, _try_wait(em, op.barrier, op.parity), negate=True)


# --------------------------------------------------------------------------- tma


@lowering(tma.IssuerOp)
def lower_issuer(em: PtxEmitter, op: tma.IssuerOp) -> None:
    warp = op.warp.value.data

    def build() -> SSAValue:
        mine = em.instr(ptx.SetpOp, "eq.u32", [uniform_warp(em), em.const(warp, i32)], i1)
        elect = hp.ElectSyncOp("", [em.const(-1, i32)], [i32, i1])
        em.emit(elect)
        return em.instr(ptx.AndOp, "pred", [mine, elect.outs[1]], i1)

    em.bind(op.result, em.invariant(("tma issuer", warp), build))


@lowering(tma.AllocOp)
def lower_tma_alloc(em: PtxEmitter, op: tma.AllocOp) -> None:
    em.bind(op.result, em.shared("tma_buffer", op.bytes.value.data, op.align.value.data))


@lowering(tma.LoadOp)
def lower_tma_load(em: PtxEmitter, op: tma.LoadOp) -> None:
    coords = [em.value(c) for c in op.coords]
    spec = f"{len(coords)}d.{_TO_SHARED}"
    em.emit(hp.CpAsyncBulkTensorOp(spec, [em.value(op.dst), em.value(op.tmap), *coords, em.value(op.barrier)]))


@lowering(tma.StoreOp)
def lower_tma_store(em: PtxEmitter, op: tma.StoreOp) -> None:
    coords = [em.value(c) for c in op.coords]
    spec = f"{len(coords)}d.{_TO_GLOBAL}"
    em.emit(hp.CpAsyncBulkTensorOp(spec, [em.value(op.tmap), *coords, em.value(op.src)]))


@lowering(tma.BulkLoadOp)
def lower_bulk_load(em: PtxEmitter, op: tma.BulkLoadOp) -> None:
    args = [em.value(op.dst), em.value(op.src), em.value(op.size), em.value(op.barrier)]
    em.emit(hp.CpAsyncBulkOp(_TO_SHARED, args))


@lowering(tma.BulkStoreOp)
def lower_bulk_store(em: PtxEmitter, op: tma.BulkStoreOp) -> None:
    em.emit(hp.CpAsyncBulkOp(_TO_GLOBAL, [em.value(op.dst), em.value(op.src), em.value(op.size)]))


@lowering(tma.CommitOp)
def lower_tma_commit(em: PtxEmitter, op: tma.CommitOp) -> None:
    em.emit(hp.CpAsyncBulkCommitOp(""))


@lowering(tma.WaitOp)
def lower_tma_wait(em: PtxEmitter, op: tma.WaitOp) -> None:
    spec = "read" if op.read.value.data else ""
    em.emit(hp.CpAsyncBulkWaitOp(spec, [em.const(op.pending.value.data, i32)]))


@lowering(tma.FenceOp)
def lower_tma_fence(em: PtxEmitter, op: tma.FenceOp) -> None:
    em.emit(hp.FenceProxyAsyncOp("shared::cta"))
