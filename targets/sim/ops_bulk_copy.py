"""Bulk copies (the TMA unit): ``cp.async.bulk`` and ``cp.async.bulk.tensor``, and the bulk
groups of stores (``cp.async.bulk.commit_group`` / ``cp.async.bulk.wait_group[.read]``).

Forms:

* ``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]``
* ``cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size``
* ``cp.async.bulk.tensor.Nd.shared::cluster.global[.tile].mbarrier::complete_tx::bytes [dst],
  [tmap, {c0, ..}], [mbar]`` (N = 1..5)
* ``cp.async.bulk.tensor.Nd.global.shared::cta[.tile].bulk_group [tmap, {c0, ..}], [src]``

Each executing thread issues its own copy (kernels elect one). Both directions run in the async
proxy, as late as the ISA allows (``async_proxy.py``): a load reads global memory when issued (a
bad source is reported at its line) and writes shared memory, then performs complete_tx of its
byte count on its mbarrier, only when a wait on that barrier would otherwise fail, or at the end
of the batch; until then its bytes are in flight and any access to them is an error. A store
reads shared memory and writes global memory at the ``cp.async.bulk.wait_group[.read]`` that
covers its bulk group, or at the end of the batch; a write to its source before then is an
error. Tensor maps are kaio's simulator format (``tensor_map.py``); box elements outside the
tensor load as zero and are not stored.
"""

from __future__ import annotations

import numpy as np

from .context import ExecContext
from .faults import DecodeError, SimFault
from .memory import GLOBAL_BASE, SHARED_WINDOW
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .async_proxy import AsyncProxy
from .ops_mbarrier import barrier_keys, mbarriers, threads_of
from .program import Behaviour, Idx
from .ptx_types import PTX_TYPES
from .spaces import locate, split_generic
from .syntax import ImmOperand, Instruction, TensorAddrOperand
from .tensor_map import TENSOR_MAP_BYTES, TensorMap, TensorMapError, swizzle

_U32 = PTX_TYPES["u32"]
_S32 = PTX_TYPES["s32"]
_LOAD = ("shared::cluster", "global", "mbarrier::complete_tx::bytes")
_STORE = ("global", "shared::cta", "bulk_group")
_DIMS = {f"{n}d": n for n in range(1, 6)}


def _direction(ins: Instruction, mods: Modifiers) -> bool:
    """True for a global -> shared load, False for a shared -> global store."""
    mods.flag("tile")
    if all(m in mods.items for m in _LOAD):
        for m in _LOAD:
            mods.flag(m)
        return True
    if all(m in mods.items for m in _STORE):
        for m in _STORE:
            mods.flag(m)
        return False
    raise DecodeError(
        f"{ins.opcode}: the simulator supports .{'.'.join(_LOAD)} loads and .{'.'.join(_STORE)} stores"
    )


def _global_offsets(ctx: ExecContext, thread: int, addresses: np.ndarray, nbytes: int, what: str) -> np.ndarray:
    """Arena offsets of ``nbytes``-byte global accesses, bounds-checked."""
    a = addresses.astype(np.uint64)
    oob = ctx.memory.out_of_bounds(a, nbytes)
    if oob is not None and oob.any():
        raise SimFault("memory", f"out-of-bounds {what}", thread, int(a[np.flatnonzero(oob)[0]]))
    return (a - np.uint64(GLOBAL_BASE)).astype(np.int64)


def _check_shared(ctx: ExecContext, thread: int, start: int, nbytes: int, align: int, what: str) -> None:
    """Alignment and bounds of the shared bytes [start, start + nbytes) of the thread's CTA."""
    locate(ctx, "shared", np.array([thread], dtype=np.int64), np.uint64(start), nbytes, align, what)


def _async_proxy(ctx: ExecContext) -> AsyncProxy:
    assert ctx.async_proxy is not None  # made for every kernel with a bulk copy (and shared memory)
    return ctx.async_proxy


def _issue_load(ctx: ExecContext, thread: int, mbar: int, offsets: np.ndarray, data: np.ndarray) -> None:
    """A load of ``data`` to the batch-wide shared ``offsets``, completing on barrier ``mbar``:
    in flight until a wait on the barrier lands it."""
    proxy = _async_proxy(ctx)
    proxy.check_barrier_init(mbarriers(ctx).get(mbar, thread, "a bulk copy's complete_tx"), thread)
    proxy.load(ctx, thread, mbar, offsets, data)


def _issue_store(ctx: ExecContext, thread: int, source: np.ndarray, shared_offsets: np.ndarray, arena_offsets: np.ndarray) -> None:
    """A store of the shared bytes ``source`` (all of the box, clipped ones included: the unit
    reads the box) whose ``shared_offsets`` go to global ``arena_offsets`` once its group
    completes."""
    if ctx.race is not None:  # the issuing thread reads the source: a writer it is not ordered after races
        ctx.race.async_read(thread, thread, source.reshape(-1), "TMA store source read")
    _async_proxy(ctx).store(ctx, thread, source.reshape(-1), shared_offsets, arena_offsets)


# --------------------------------------------------------------------------- plain bulk copies


def _bulk(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    load = _direction(ins, mods)
    ops = operands(ins, 4 if load else 3)
    dst, src = dc.address(ops[0], "shared" if load else "global"), dc.address(ops[1], "global" if load else "shared")
    size = dc.reader(ops[2], _U32)
    mbar = dc.address(ops[3], "shared") if load else None
    name = ins.opcode

    def run(ctx: ExecContext, idx: Idx) -> None:
        threads = threads_of(ctx, idx)
        m = threads.size
        d = np.broadcast_to(np.asarray(dst(ctx, idx), dtype=np.uint64), (m,)).tolist()
        s = np.broadcast_to(np.asarray(src(ctx, idx), dtype=np.uint64), (m,)).tolist()
        sizes = np.broadcast_to(np.asarray(size(ctx, idx)), (m,)).tolist()
        keys = barrier_keys(ctx, idx, mbar, name).tolist() if mbar is not None else [0] * m
        for t, da, sa, n, key in zip(threads.tolist(), d, s, sizes, keys):
            n = int(n)
            if n % 16 or da % 16 or sa % 16:
                raise SimFault("memory", f"{name}: addresses and size must be multiples of 16 (size {n})", t, int(da))
            span = np.arange(n, dtype=np.int64)
            cta_base = int(ctx.shared_base[t])
            if load:
                _check_shared(ctx, t, da, n, 16, "bulk copy write")
                g = _global_offsets(ctx, t, np.array([sa]), n, f"{name} read")[0]
                _issue_load(ctx, t, key, cta_base + da + span, ctx.memory.view(1)[g + span])
            else:
                _check_shared(ctx, t, sa, n, 16, "bulk copy read")
                g = _global_offsets(ctx, t, np.array([da]), n, f"{name} write")[0]
                source = cta_base + sa + span
                _issue_store(ctx, t, source, source, g + span)

    return Behaviour(run=run, klass="cp.async.bulk", shared_access=16)


# --------------------------------------------------------------------------- tensor copies


def _load_map(ctx: ExecContext, thread: int, address: int) -> TensorMap:
    """The 128-byte map at a generic address (global memory, the parameter window) or at a
    .param address (``mov.b64 %rd, map_param``: how compilers pass a ``__grid_constant__``
    map; param addresses are small offsets below every window)."""
    if address < SHARED_WINDOW:
        space, where_i = "param", address
    else:
        ((space, _, _, where),) = split_generic(None, 1, np.uint64(address))
        where_i = int(where[0])
    if space == "global":
        g = _global_offsets(ctx, thread, np.array([where_i], dtype=np.uint64), TENSOR_MAP_BYTES, "tensor map read")[0]
        blob = ctx.memory.view(1)[g : g + TENSOR_MAP_BYTES]
    elif space == "param" and where_i + TENSOR_MAP_BYTES <= ctx.param.size:
        blob = ctx.param[where_i : where_i + TENSOR_MAP_BYTES]
    else:
        raise SimFault("memory", f"a tensor map must be in global memory or a kernel parameter, not .{space}", thread, address)
    try:
        return TensorMap.decode(blob)
    except TensorMapError as exc:
        raise SimFault("sim", str(exc), thread, address) from None


def _tensor(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    dims = _DIMS[mods.require(*_DIMS)]
    load = _direction(ins, mods)
    ops = operands(ins, 3 if load else 2)
    tensor_op = ops[1] if load else ops[0]
    if not isinstance(tensor_op, TensorAddrOperand) or len(tensor_op.coords) != dims:
        raise DecodeError(f"{ins.opcode}: the tensor operand is [tensor-map, {{{dims} coordinates}}]")
    tmap = dc.address(tensor_op.address, None)  # generic: a global buffer or a parameter
    coords = [dc.reader(c, _S32) for c in tensor_op.coords]
    smem = dc.address(ops[0] if load else ops[1], "shared")
    mbar = dc.address(ops[2], "shared") if load else None
    name = ins.opcode

    def run(ctx: ExecContext, idx: Idx) -> None:
        threads = threads_of(ctx, idx)
        m = threads.size
        maps = np.broadcast_to(np.asarray(tmap(ctx, idx), dtype=np.uint64), (m,)).tolist()
        where = np.broadcast_to(np.asarray(smem(ctx, idx), dtype=np.uint64), (m,)).tolist()
        cs = [np.broadcast_to(np.asarray(c(ctx, idx)), (m,)).tolist() for c in coords]
        keys = barrier_keys(ctx, idx, mbar, name).tolist() if mbar is not None else [0] * m
        for k, t in enumerate(threads.tolist()):
            tm = _load_map(ctx, t, int(maps[k]))
            if tm.rank != dims:
                raise SimFault("sim", f"{name}: the tensor map has rank {tm.rank}", t)
            nbytes = tm.box_bytes
            start = int(where[k])
            _check_shared(ctx, t, start, nbytes, 128, f"{name} shared box")
            addresses, inside = tm.box_addresses(tuple(int(c[k]) for c in cs))
            e = tm.element_bytes
            byte = np.arange(e, dtype=np.int64)
            shared_addr = swizzle(start + np.arange(nbytes, dtype=np.int64), tm.swizzle_span)
            cta_base = int(ctx.shared_base[t])
            arena = ctx.memory.view(1)
            if load:
                data = np.zeros((addresses.size, e), dtype=np.uint8)
                if inside.any():
                    g = _global_offsets(ctx, t, addresses[inside], e, f"{name} read")
                    data[inside] = arena[g[:, None] + byte]
                _issue_load(ctx, t, keys[k], cta_base + shared_addr, data.reshape(-1))
            else:
                source = (cta_base + shared_addr).reshape(-1, e)
                g = _global_offsets(ctx, t, addresses[inside], e, f"{name} write") if inside.any() else np.zeros(0, dtype=np.int64)
                _issue_store(ctx, t, source, source[inside].reshape(-1), (g[:, None] + byte).reshape(-1))

    return Behaviour(run=run, klass=f"cp.async.bulk.tensor.{dims}d", shared_access=16)


# --------------------------------------------------------------------------- bulk groups


def _commit(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    operands(ins, 0)

    def run(ctx: ExecContext, idx: Idx) -> None:
        if ctx.async_proxy is not None:  # None: a kernel without shared memory has no store
            ctx.async_proxy.commit_bulk(idx)

    return Behaviour(run=run, klass="cp.async.bulk.commit_group")


def _wait(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    """``wait_group[.read] N``: the stores of all but the thread's N newest bulk groups read
    their source (and write global memory) now. ``.read`` promises only the reads; the
    simulator completes the writes with them, which a program cannot tell apart."""
    mods.flag("read")
    (n_op,) = operands(ins, 1)
    if not isinstance(n_op, ImmOperand) or n_op.kind != "int" or int(n_op.value) < 0:
        raise DecodeError(f"{ins.opcode} needs a non-negative integer constant")
    keep = int(n_op.value)

    def run(ctx: ExecContext, idx: Idx) -> None:
        proxy = ctx.async_proxy
        if proxy is not None:
            proxy.retire(ctx, idx, "store", proxy.bulk_committed, keep)

    return Behaviour(run=run, klass="cp.async.bulk.wait_group")


def make_bulk(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    """``cp.async.bulk*`` (``cp.async`` dispatches here once it has taken ``.async.bulk``)."""
    if mods.flag("commit_group"):
        return _commit(ins, mods, dc)
    if mods.flag("wait_group"):
        return _wait(ins, mods, dc)
    if any(m.startswith(("multicast", "L2::cache_hint")) for m in mods.items):
        raise DecodeError(f"{ins.opcode}: multicast and cache-hint forms are not supported")
    if mods.flag("tensor"):
        return _tensor(ins, mods, dc)
    return _bulk(ins, mods, dc)
