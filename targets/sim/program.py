"""What the decoder produces and the executor runs: one ``Op`` per PTX instruction.

An op is decoded once at load time into a closure ``run(ctx, idx)`` that executes the
instruction for the threads ``idx`` of a batch (``None`` means every thread: the converged fast
path, which does no index work at all). Control flow and barriers are not closures: the executor
owns the PCs, so those ops carry a ``kind`` and their operands instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .context import ExecContext

Idx = np.ndarray | None  # sorted int64 thread indices within a batch, or None for all
RunFn = Callable[["ExecContext", Idx], None]
Reader = Callable[["ExecContext", Idx], Any]
Writer = Callable[["ExecContext", Idx, Any], None]


class OpKind(IntEnum):
    SIMPLE = 0  # runs, then every executing thread moves to the next instruction
    BRANCH = 1
    EXIT = 2
    BARRIER = 3
    TRAP = 4


@dataclass(frozen=True)
class BarrierReduction:
    """bar.red: ``op`` ("popc", "and" or "or") over the predicate ``value`` of the threads the
    barrier releases together, written to ``result`` of each of them."""

    op: str
    value: Reader
    result: Writer


@dataclass(frozen=True)
class BarrierSpec:
    barrier_id: Reader  # u32 barrier number, 0..15
    thread_count: Reader | None  # None: every thread of the CTA
    wait: bool  # bar.sync / barrier.sync wait; bar.arrive only signals
    reduction: BarrierReduction | None = None


@dataclass
class Behaviour:
    """What an instruction factory returns when the op is not a plain ``run`` closure."""

    kind: OpKind = OpKind.SIMPLE
    run: RunFn | None = None
    target_label: str | None = None
    barrier: BarrierSpec | None = None
    klass: str | None = None
    shared_access: int = 0  # bytes per thread of the shared-memory access it may make (0: none)


@dataclass(frozen=True)
class SourceLine:
    """The line of the program's own source (a kaio kernel's Python file) an instruction
    implements, from the PTX's ``.file``/``.loc`` line info."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(slots=True)
class Op:
    line: int
    text: str
    klass: str  # what profile counts it as: "add.f32", "ld.global", "bar"...
    kind: OpKind
    run: RunFn | None
    guard: int | None = None  # predicate register slot
    guard_negated: bool = False
    target: int = -1  # branch target pc
    barrier: BarrierSpec | None = None
    category: str = "control"  # its class in a profile: "int", "fp32", "memory", "tensor core"...
    shared_access: int = 0  # bytes per thread (aligned to as many) it may access in shared memory
    source: SourceLine | None = None  # the source line its .loc names, if the PTX has line info


@dataclass(frozen=True)
class Symbol:
    """A named variable. ``address`` is in its own state space: an absolute (generic) address
    for global/const, an offset into the CTA's shared window, the thread's local window or
    the kernel parameter buffer otherwise."""

    name: str
    space: str
    address: int
    size: int


@dataclass
class EntryInfo:
    """One ``.entry`` ready to launch."""

    name: str
    params: list[tuple[str, str, int]]  # (name, ptx type without the dot, nbytes)
    param_offsets: list[int]
    param_bytes: int
    ops: list[Op]
    register_types: list[np.dtype]  # container dtype per register slot
    static_shared_bytes: int
    dynamic_shared_offset: int  # where .extern .shared starts
    local_bytes: int
    reqntid: tuple[int, ...] | None = None
    maxntid: tuple[int, ...] | None = None
    symbols: dict[str, Symbol] = field(default_factory=dict)

    @property
    def shared_granule(self) -> int:
        """The largest power of two (at most 16) dividing the size and alignment of every
        shared-memory access the kernel may make: the race check keeps one record per granule,
        which is exact since no access covers part of one."""
        return min((op.shared_access for op in self.ops if op.shared_access), default=16)

    @property
    def register_bytes_per_thread(self) -> int:
        return sum(max(dt.itemsize, 1) for dt in self.register_types)
