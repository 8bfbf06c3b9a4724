"""The ``setmaxnreg`` counts of a warp-specialised kernel: how many registers the producer
warpgroup gives back and how many each consumer thread may then take, within the CTA's pool.

A CTA is launched with R registers per thread (the count at entry) and its pool is R x threads:
``setmaxnreg.dec`` returns registers to it, ``setmaxnreg.inc`` blocks until it holds enough
(PTX ISA, "setmaxnreg": "A pool of available registers is maintained per-CTA ... setmaxnreg.inc
blocks the execution until enough registers are available in the CTA's register pool"). An
``.inc`` the pool can never cover is a hang, so the counts must come from R itself:

    producer .dec to P frees            (R - P) x 128
    each of the C consumer threads may  .inc to  R + floor((R - P) x 128 / C / 8) x 8   (<= 240)

**How the compiler knows R.** ptxas decides the count at entry only after the compiler is done,
so kaio fixes it instead of predicting it: a warp-specialised kernel carries
``kaio.entry_registers = R`` and ``lower-to-ptx`` prints ``.maxnreg R`` beside ``.maxntid``.
R is :func:`kaio.targets.ptx.registers.register_bound` of the launched threads and the user's cap,
rounded down to a multiple of 8. ptxas 12.x then gives the kernel exactly R: with ``setmaxnreg``
present it reports min(``.maxnreg``, the largest ``setmaxnreg`` count), and the ``.inc`` is above R.
Without ``.maxnreg``, ptxas derives R from ``.maxntid`` alone, and where that bound is not below
its 255-per-thread ceiling (a 256-thread block: 4 consumer warps and the producer) it prints C7508
"'setmaxnreg' ignored; unable to determine register count at entry" and drops the trade.

ptxas allocates every instruction within R, the consumers' code after the ``.inc`` included
(C7602 "Insufficient registers" names R): a cap below the consumers' accumulators can never
compile, and is refused here rather than by the driver's JIT.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaio.errors import KaioCompileError
from kaio.targets.ptx.registers import GRANULE, register_bound

PRODUCER_THREADS = 128  # one warpgroup
PRODUCER_REGISTERS = 40  # what the issuing thread needs (CUTLASS's load warpgroup keeps 40 too)
MAX_CONSUMER_REGISTERS = 240  # the most CUTLASS and FlashAttention-3 consumers take (ptxas: <= 255)
MIN_SETMAXNREG = 24  # the ISA's smallest count


@dataclass(frozen=True)
class RegisterTrade:
    """The counts of one warp-specialised kernel (``trade`` False: no ``setmaxnreg`` at all)."""

    entry: int  # R, registers per thread at launch (printed as .maxnreg)
    producer: int  # P, the producer warpgroup's .dec
    consumer: int  # the consumers' .inc
    consumers: int  # consumer threads

    @property
    def trade(self) -> bool:
        return self.consumer > self.entry

    @property
    def pool(self) -> int:
        return self.entry * (self.consumers + PRODUCER_THREADS)

    def holds(self) -> int:
        """Registers the CTA holds once both warpgroups have moved (never above :attr:`pool`)."""
        return self.producer * PRODUCER_THREADS + self.consumer * self.consumers


def entry_registers(threads: int, maxnreg: int = 0) -> int:
    """R: the bound of ``threads`` and the cap, by 8 (what ``.maxnreg`` pins ptxas to)."""
    return register_bound(threads, maxnreg or None) // GRANULE * GRANULE


def plan_trade(consumers: int, maxnreg: int = 0, producer: int = PRODUCER_REGISTERS, consumer: int = 0,
               accumulators: int = 0, where: str = "pipeline-tma") -> RegisterTrade:  # fmt: skip
    """The counts for ``consumers`` consumer threads beside the producer warpgroup, under the cap
    ``maxnreg`` (0: none). ``consumer`` 0 takes what the pool covers; an explicit count is checked.
    ``accumulators``: registers per consumer thread its accumulator tiles alone need.
    Raises :class:`KaioCompileError` for a configuration that cannot run."""
    threads = consumers + PRODUCER_THREADS
    r = entry_registers(threads, maxnreg)
    setting = f"{where}: a warp-specialised block of {consumers} consumer threads and {PRODUCER_THREADS} producer threads"
    cap = f" under maxnreg={maxnreg}" if maxnreg else ""
    if accumulators and r <= accumulators:
        raise KaioCompileError(
            f"{setting} holds {r} registers per thread at entry{cap}, but the consumers' accumulators alone take "
            f"{accumulators} (ptxas allocates every instruction within the count at entry): raise maxnreg or use a smaller tile"
        )
    if not MIN_SETMAXNREG <= producer <= 256 or producer % GRANULE:
        raise KaioCompileError(f"{setting}: producer_registers is {MIN_SETMAXNREG}..256 in steps of 8, not {producer}")
    explicit = consumer != 0
    if explicit and (not MIN_SETMAXNREG <= consumer <= 256 or consumer % GRANULE):
        raise KaioCompileError(f"{setting}: consumer_registers is {MIN_SETMAXNREG}..256 in steps of 8, not {consumer}")
    if producer >= r:
        if explicit or producer != PRODUCER_REGISTERS:
            raise KaioCompileError(
                f"{setting} holds {r} registers per thread at entry{cap}: the producer's setmaxnreg.dec to {producer} "
                f"would not give any back"
            )
        return RegisterTrade(r, producer, r, consumers)  # nothing to trade
    freed = (r - producer) * PRODUCER_THREADS
    covered = min(MAX_CONSUMER_REGISTERS, r + freed // consumers // GRANULE * GRANULE)
    if not explicit:
        return RegisterTrade(r, producer, max(covered, r), consumers)
    if consumer <= r or consumer > covered:
        need = (consumer - r) * consumers
        raise KaioCompileError(
            f"{setting} holds {r} registers per thread at entry{cap} (a pool of {r * threads}); the producer's "
            f".dec to {producer} frees {freed}, so the consumers may .inc to {r + GRANULE} .. {covered}, not {consumer}"
            + (f" (that needs {need})" if consumer > covered else "")
        )
    return RegisterTrade(r, producer, consumer, consumers)
