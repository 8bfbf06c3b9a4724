"""mbarrier: shared-memory barriers with a phase, an arrival count and a transaction count.

Supported: ``mbarrier.init``, ``mbarrier.arrive`` (optional count), ``mbarrier.arrive.expect_tx``,
``mbarrier.expect_tx``, ``mbarrier.try_wait[.parity]`` and ``mbarrier.test_wait[.parity]``,
``mbarrier.inval``; the address is in ``.shared`` / ``.shared::cta`` (or ``.shared::cluster``,
the same thing in a one-CTA cluster); ordering and scope words (``.release``, ``.cta``...) are
accepted and have no effect in this sequentially consistent simulator.

Model (PTX ISA, "mbarrier"): a barrier is in phase 0 after ``init count``, with ``count``
pending arrivals and a transaction count of 0. Arrivals decrement the pending count,
``expect_tx`` adds bytes to the transaction count, and bulk copies (``cp.async.bulk*`` with
``.mbarrier::complete_tx::bytes``) subtract the bytes they land. A phase completes when
both counts reach zero: the phase number advances, the pending count is reset to ``count``.
``try_wait.parity P`` is true once the phase of parity P has completed, i.e. while the current
phase has the other parity; ``try_wait state`` is true once the phase the arrive token names
is over. The token an arrive returns is the number of the phase it arrived in.

Bulk copies completing on a barrier land only when a wait on it would otherwise fail
(``async_proxy.py``): the wait lands them, which may complete the phase, and polls again. Under
the adversarial schedule each thread's first wait that finds a phase incomplete with copies in
flight answers false without landing them (a GPU's try_wait may return false however long it polls):
only a later wait in that phase lands them, so code that reads a stage without checking the
answer reads it while the copy is still writing, and is reported.

State lives beside shared memory (keyed by the CTA and the barrier's 8-byte slot), so a
barrier used before ``init`` or arriving more often than its count is reported. A wait that
finds its phase incomplete returns false and backs its threads off (``ctx.spinning``): the
executor runs them again only when no other thread can, so a consumer polling at a lower PC
than its producer (a warp-specialised pipeline) lets the producer run; a wait nothing can ever
nothing can ever complete is reported as a deadlock once the batch has run only failed waits
and branches for a while (``executor.FROZEN_STEPS``), instead of at the step limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .context import ExecContext
from .faults import DecodeError, SimFault
from .modifiers import Modifiers
from .operands import DecodeContext
from .ops_common import operands
from .program import Behaviour, Idx, Reader
from .ptx_types import PTX_TYPES
from .spaces import locate
from .syntax import Instruction, SinkOperand

_U32 = PTX_TYPES["u32"]
_U64 = PTX_TYPES["u64"]
_PRED = PTX_TYPES["pred"]
_SPACES = ("shared", "shared::cta", "shared::cluster")
_ORDERING = ("release", "acquire", "relaxed", "cta", "cluster", "noComplete")


@dataclass
class Barrier:
    count: int
    pending: int
    tx: int = 0
    phase: int = 0
    # who initialised it, when and where: a bulk copy needs a fence by that thread after it
    init_thread: int = -1
    init_clock: int = -1
    init_pc: int = 0


class Mbarriers:
    """The barriers of one batch, by batch-wide shared byte offset (unique per CTA)."""

    def __init__(self) -> None:
        self.barriers: dict[int, Barrier] = {}
        # (barrier, phase, thread): a wait of the thread found the phase incomplete with bulk
        # copies in flight; under the adversarial schedule only its later waits may land them
        self.refused: set[tuple[int, int, int]] = set()

    def get(self, key: int, thread: int, what: str) -> Barrier:
        b = self.barriers.get(key)
        if b is None:
            raise SimFault("sim", f"{what} on an mbarrier that was not initialized (mbarrier.init)", thread)
        return b

    def arrive(self, key: int, thread: int, count: int, tx: int = 0) -> int:
        b = self.get(key, thread, "mbarrier.arrive")
        phase = b.phase
        b.tx += tx
        b.pending -= count
        if b.pending < 0:
            raise SimFault("sim", f"mbarrier arrival beyond its expected count of {b.count} in phase {b.phase}", thread)
        self._advance(b)
        return phase

    def expect_tx(self, key: int, thread: int, tx: int) -> None:
        self.get(key, thread, "mbarrier.expect_tx").tx += tx

    def complete_tx(self, key: int, thread: int, nbytes: int) -> None:
        """A bulk copy landed ``nbytes`` (the copy's issuing thread is named on errors)."""
        b = self.get(key, thread, "a bulk copy's complete_tx")
        b.tx -= nbytes
        self._advance(b)

    @staticmethod
    def _advance(b: Barrier) -> None:
        if b.pending == 0 and b.tx == 0:
            b.phase += 1
            b.pending = b.count


def _race_use(ctx: ExecContext, idx: Idx, keys: np.ndarray) -> None:
    """For the race check an arrive, expect_tx or wait is an atomic access of the barrier's 8
    bytes and ``mbarrier.init`` a plain write: atomics do not race with each other, but a use
    by another thread that no barrier orders after the init races with it (the other threads
    may see the barrier before it is initialised)."""
    if ctx.race is not None:
        ctx.race.atomic(idx, keys, 8)


def mbarriers(ctx: ExecContext) -> Mbarriers:
    if ctx.mbarriers is None:
        ctx.mbarriers = Mbarriers()
    return ctx.mbarriers


def barrier_keys(ctx: ExecContext, idx: Idx, address: Reader, what: str) -> np.ndarray:
    """Batch-wide shared offsets of the 8-byte barrier each executing thread names."""
    m = ctx.n if idx is None else idx.size
    addr = np.broadcast_to(np.asarray(address(ctx, idx), dtype=np.uint64), (m,))
    return np.broadcast_to(locate(ctx, "shared", idx, addr, 8, 8, what), (m,))


def threads_of(ctx: ExecContext, idx: Idx) -> np.ndarray:
    return ctx.thread_index if idx is None else idx


def _space(mods: Modifiers, ins: Instruction) -> None:
    if mods.take(*_SPACES) is None:
        raise DecodeError(f"{ins.opcode}: kaio's simulator supports mbarriers in .shared (.shared::cta) only")
    for word in _ORDERING:
        mods.flag(word)
    mods.one_type({"b64"})


def _init(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    addr_op, count_op = operands(ins, 2)
    address, count = dc.address(addr_op, "shared"), dc.reader(count_op, _U32)

    def run(ctx: ExecContext, idx: Idx) -> None:
        keys = barrier_keys(ctx, idx, address, "mbarrier.init")
        if ctx.race is not None:  # a plain write of the barrier's 8 bytes (see _race_use)
            ctx.race.write(idx, keys, 8)
        counts = np.broadcast_to(np.asarray(count(ctx, idx)), keys.shape)
        state = mbarriers(ctx)
        for key, c, t in zip(keys.tolist(), counts.tolist(), threads_of(ctx, idx).tolist()):
            if not 1 <= int(c) < (1 << 20):
                raise SimFault("sim", f"mbarrier.init count {int(c)} is outside 1..2^20-1", t)
            state.barriers[key] = Barrier(int(c), int(c), init_thread=t, init_clock=ctx.clock, init_pc=ctx.pc)
            if ctx.async_proxy is not None:
                ctx.async_proxy.causal.mbarrier_init(key, t)

    return Behaviour(run=run, klass="mbarrier.init", shared_access=8)


def _arrive(ins: Instruction, mods: Modifiers, dc: DecodeContext, expect_tx: bool) -> Behaviour:
    ops = operands(ins, (2, 3))
    state_op, addr_op, extra = ops[0], ops[1], ops[2:]
    address = dc.address(addr_op, "shared")
    # arrive: optional arrival count; arrive.expect_tx: the transaction bytes (one arrival)
    amount = dc.reader(extra[0], _U32) if extra else None
    if expect_tx and amount is None:
        raise DecodeError(f"{ins.opcode} needs the transaction byte count")
    write = None if isinstance(state_op, SinkOperand) else dc.writer(state_op, _U64)

    def run(ctx: ExecContext, idx: Idx) -> None:
        keys = barrier_keys(ctx, idx, address, "mbarrier.arrive")
        _race_use(ctx, idx, keys)
        values = np.broadcast_to(np.asarray(amount(ctx, idx) if amount is not None else 1), keys.shape).tolist()
        state = mbarriers(ctx)
        threads = threads_of(ctx, idx)
        phases = [
            state.arrive(key, t, 1, int(v)) if expect_tx else state.arrive(key, t, int(v))
            for key, v, t in zip(keys.tolist(), values, threads.tolist())
        ]
        if write is not None:
            write(ctx, idx, np.array(phases, dtype=np.uint64))
        if ctx.race is not None or ctx.async_proxy is not None:
            now = np.array(phases)
            if ctx.race is not None:  # an arrival releases what its thread did before (race.py)
                ctx.race.mbarrier_arrive(threads, keys, now)
            if ctx.async_proxy is not None:  # and orders it for the async proxy (causality.py)
                ctx.async_proxy.mbarrier_arrive(ctx, threads, keys, now)

    return Behaviour(run=run, klass="mbarrier.arrive", shared_access=8)


def _expect_tx(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    addr_op, tx_op = operands(ins, 2)
    address, tx = dc.address(addr_op, "shared"), dc.reader(tx_op, _U32)

    def run(ctx: ExecContext, idx: Idx) -> None:
        keys = barrier_keys(ctx, idx, address, "mbarrier.expect_tx")
        _race_use(ctx, idx, keys)
        values = np.broadcast_to(np.asarray(tx(ctx, idx)), keys.shape).tolist()
        state = mbarriers(ctx)
        for key, v, t in zip(keys.tolist(), values, threads_of(ctx, idx).tolist()):
            state.expect_tx(key, t, int(v))

    return Behaviour(run=run, klass="mbarrier.expect_tx", shared_access=8)


def _wait(ins: Instruction, mods: Modifiers, dc: DecodeContext, parity: bool) -> Behaviour:
    ops = operands(ins, (3, 4))  # an optional suspend-time hint: no effect here
    done = dc.writer(ops[0], _PRED)
    address = dc.address(ops[1], "shared")
    token = dc.reader(ops[2], _U32 if parity else _U64)
    name = ins.opcode

    def run(ctx: ExecContext, idx: Idx) -> None:
        keys = barrier_keys(ctx, idx, address, name)
        _race_use(ctx, idx, keys)
        want = np.broadcast_to(np.asarray(token(ctx, idx)), keys.shape).tolist()
        state = mbarriers(ctx)
        thread_index = threads_of(ctx, idx)
        threads = thread_index.tolist()
        key_list = keys.tolist()

        def poll() -> tuple[np.ndarray, list[int]]:
            """Whether each thread's wait succeeds, and each barrier's current phase."""
            now = [state.get(key, t, name).phase for key, t in zip(key_list, threads)]
            result = [(phase & 1) != (int(w) & 1) if parity else phase != int(w) for phase, w in zip(now, want)]
            return np.array(result, dtype=np.bool_), now

        ready, now = poll()
        proxy = ctx.async_proxy
        # bulk copies land at the latest moment: when a wait on their barrier would fail; under
        # the adversarial schedule not at the first wait that finds the phase incomplete, which
        # answers false (as a GPU's may), so a kernel that ignores the answer reads early
        refused: set[int] = set()  # threads told "not yet" only to be asked again at once
        landed = False
        if proxy is not None and not ready.all():
            failing = {(k, p, t) for k, p, t, r in zip(key_list, now, threads, ready) if not r}
            if ctx.rng is not None:
                first = {f for f in failing - state.refused if proxy.in_flight_on(f[0])}
                state.refused |= first
                failing -= first
                refused = {t for _, _, t in first}
            if failing and proxy.land_for(ctx, list({k for k, _, _ in failing})):
                landed = True
                ready, now = poll()
        done(ctx, idx, ready)
        if (proxy is not None or ctx.race is not None) and ready.any():
            # a wait that succeeds acquires the arrivals of the phases it saw complete
            waiters, seen, phases = thread_index[ready], keys[ready], np.array(now)[ready]
            if proxy is not None:  # and the bulk copies that completed them (causality.py)
                proxy.mbarrier_acquire(waiters, seen, phases)
            if ctx.race is not None:
                ctx.race.mbarrier_acquire(waiters, seen, phases)
        if not ready.all():  # a poll that failed: let the threads that could complete it run
            # (but not a refused one: its copies land at its next poll, which must come even
            # while other threads spin on something it is to do)
            spinning = ~ready & ~np.isin(thread_index, list(refused)) if refused else ~ready
            if spinning.any():
                ctx.spinning = thread_index[spinning]
            ctx.stalled = not ready.any() and not refused and not landed

    return Behaviour(run=run, klass=name.split(".shared")[0], shared_access=8)


def _inval(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    (addr_op,) = operands(ins, 1)
    address = dc.address(addr_op, "shared")

    def run(ctx: ExecContext, idx: Idx) -> None:
        state = mbarriers(ctx)
        for key in barrier_keys(ctx, idx, address, "mbarrier.inval").tolist():
            state.barriers.pop(key, None)

    return Behaviour(run=run, klass="mbarrier.inval", shared_access=8)


def make_mbarrier(ins: Instruction, mods: Modifiers, dc: DecodeContext) -> Behaviour:
    arrive = mods.flag("arrive")
    expect_tx = mods.flag("expect_tx")
    form = "arrive" if arrive else "expect_tx" if expect_tx else mods.require("init", "try_wait", "test_wait", "inval")
    parity = mods.flag("parity")
    _space(mods, ins)
    if form == "init":
        return _init(ins, mods, dc)
    if form == "arrive":
        return _arrive(ins, mods, dc, expect_tx)
    if form == "expect_tx":
        return _expect_tx(ins, mods, dc)
    if form == "inval":
        return _inval(ins, mods, dc)
    return _wait(ins, mods, dc, parity)


TABLE = {("mbarrier", "*"): make_mbarrier}
