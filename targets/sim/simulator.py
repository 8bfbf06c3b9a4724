"""The public face of the simulator: ``Simulator`` (a device: memory plus loaded modules) and
``SimModule`` (a parsed PTX module whose ``.entry`` kernels can be launched).

A launch runs its CTAs in batches, in CTA order. A batch holds as many whole CTAs as fit a
memory budget for per-thread state (registers, local memory, scheduler arrays), so a launch of
a million threads holds only one batch's state at a time. CTAs cannot synchronize with each
other on a GPU either, so batching changes nothing observable.
"""

from __future__ import annotations

import linecache
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from kaio.errors import KaioLaunchError, KaioMemoryError, KaioSimError, source_note

from .async_proxy import state_bytes_per_cta as async_proxy_bytes_per_cta
from .context import ExecContext, LaunchGeometry
from .decoder import LoadError, decode_entry, var_size
from .executor import BatchRunner, SimDeadlock
from .faults import SimFault
from .lexer import PtxSyntaxError
from .memory import GlobalMemory
from .metrics import Profiler
from .operands import immediate
from .parser import parse_module
from .program import EntryInfo, Op, Symbol
from .ptx_types import PTX_TYPES
from .race import BYTES_PER_SHARED_BYTE as RACE_BYTES_PER_SHARED_BYTE
from .register_pool import RegisterPool
from .report import GlobalMemoryRow, LaunchReport, SharedMemoryRow
from .schedule import launch_rng
from .syntax import FunctionDecl, ImmOperand, SymOperand, VarDecl

MAX_SHARED_BYTES = 227 * 1024  # per CTA, as on sm_90
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
SCHEDULER_BYTES_PER_THREAD = 96  # pc, status, barrier bookkeeping, coordinate arrays
SCHEDULE_SEED_ENV = "KAIO_SIM_SCHEDULE_SEED"
_FROM_ENV = object()  # schedule_seed not given: read KAIO_SIM_SCHEDULE_SEED at each launch


class Simulator:
    """A simulated GPU: its global memory and the modules loaded into it.

    Options:
      check_uninitialized_shared: a load of shared memory that nothing stored during the launch
        raises KaioMemoryError("uninitialized shared read"). On by default.
      synccheck: False (default): hardware semantics, threads that exited count as arrived at
        CTA-wide barriers. True: the strict rule of compute-sanitizer's synccheck, every thread
        of a CTA must reach each CTA-wide barrier, and a barrier that threads skipped by
        exiting is reported. Either way, live threads of one block waiting at different
        ``bar.sync`` instructions for one barrier are an error (a barrier in divergent code).
      exited_threads_release_barriers: the older name of ``not synccheck``.
      max_steps: instructions one batch may issue before the launch is stopped as an endless
        loop.
      batch_state_bytes: memory budget for the per-thread state of one batch of CTAs.
      max_batch_threads: upper bound on threads per batch (larger batches amortize Python
        overhead; smaller ones bound memory).
      race_check: report shared-memory races between barriers (two threads of a CTA touching
        one byte in the same barrier interval, at least one writing) as KaioMemoryError("shared
        memory race ..."). Off by default; costs nothing when off. Every option is read at each
        launch, so ``sim.race_check = True`` on an existing simulator applies to later launches.
      schedule_seed: None: the default schedule (the warps of a CTA in lockstep, lowest PC
        first). An int: the seeded adversarial schedule (``schedule``), where warps advance in a
        random order, so a kernel that counts on lockstep without a barrier fails; the same
        seed replays the same schedule. Not given: the environment variable
        ``KAIO_SIM_SCHEDULE_SEED`` (an int, or empty for none), read at each launch, so a test
        suite can run under several seeds without touching its simulators.
    """

    def __init__(
        self,
        *,
        check_uninitialized_shared: bool = True,
        synccheck: bool = False,
        exited_threads_release_barriers: bool | None = None,
        max_steps: int = 1 << 22,
        batch_state_bytes: int = 64 << 20,
        max_batch_threads: int = 1 << 17,
        race_check: bool = False,
        schedule_seed: int | None | object = _FROM_ENV,
    ):
        self.memory = GlobalMemory()
        self.check_uninitialized_shared = check_uninitialized_shared
        self.synccheck = synccheck
        if exited_threads_release_barriers is not None:
            self.synccheck = not exited_threads_release_barriers
        self.max_steps = max_steps
        self.batch_state_bytes = batch_state_bytes
        self.max_batch_threads = max_batch_threads
        self.race_check = race_check
        self._schedule_seed = schedule_seed

    @property
    def schedule_seed(self) -> int | None:
        """The adversarial schedule's seed for the next launch (None: the default schedule)."""
        if self._schedule_seed is not _FROM_ENV:
            return self._schedule_seed  # type: ignore[return-value]
        text = os.environ.get(SCHEDULE_SEED_ENV, "").strip()
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            raise KaioLaunchError(f"{SCHEDULE_SEED_ENV} must be an integer seed (or empty), not {text!r}") from None

    @schedule_seed.setter
    def schedule_seed(self, value: int | None) -> None:
        self._schedule_seed = value

    @property
    def exited_threads_release_barriers(self) -> bool:
        return not self.synccheck

    @exited_threads_release_barriers.setter
    def exited_threads_release_barriers(self, value: bool) -> None:
        self.synccheck = not value

    def load(self, ptx: str) -> SimModule:
        """Parse and decode a PTX module once; KaioLaunchError names the offending line."""
        try:
            syntax = parse_module(ptx)
        except PtxSyntaxError as exc:
            lines = ptx.splitlines()
            text = lines[exc.line - 1].strip() if 0 < exc.line <= len(lines) else ""
            raise KaioLaunchError(f"PTX syntax error at line {exc.line}: {exc.message}", log=f"line {exc.line}: {text}\n{exc.message}") from None
        try:
            globals_ = {v.name: self._place_variable(v, {}) for v in syntax.variables if v.space in ("global", "const")}
            for v in syntax.variables:  # second pass: initializers may name other variables
                if v.space in ("global", "const") and v.init:
                    self._initialize(v, globals_)
            functions: dict[str, FunctionDecl] = {}
            for fn in syntax.functions:  # a definition wins over a prototype of the same name
                if fn.body is not None or fn.name not in functions:
                    functions[fn.name] = fn
            entries = {
                fn.name: decode_entry(fn, syntax.variables, globals_, functions, syntax.files)
                for fn in syntax.functions
                if fn.is_entry and fn.body is not None
            }
        except LoadError as exc:
            raise KaioLaunchError(f"cannot load PTX: line {exc.line}: {exc.message}", log=f"line {exc.line}: {exc.text}\n{exc.message}") from None
        arch = syntax.target[0] if syntax.target else "sm_90a"
        directives = {fn.name: fn.directives for fn in syntax.functions if fn.is_entry}
        return SimModule(self, entries, globals_, ptx, arch, directives)

    def reset(self) -> None:
        """Free all device memory, module variables included; loaded modules become unusable."""
        self.memory.reset()

    # --- module variables -----------------------------------------------------------------------

    def _place_variable(self, var: VarDecl, _: dict[str, Symbol]) -> Symbol:
        size = var_size(var)
        if var.align and var.align > 256:
            raise LoadError(f"alignment {var.align} of {var.name} exceeds 256", var.line)
        return Symbol(var.name, var.space, self.memory.alloc(size), size)

    def _initialize(self, var: VarDecl, globals_: dict[str, Symbol]) -> None:
        t = PTX_TYPES[var.ptx_type]
        count = globals_[var.name].size // t.nbytes
        assert var.init is not None
        if len(var.init) > count:
            raise LoadError(f"{len(var.init)} initializers for {count} elements of {var.name}", var.line)
        data = np.zeros(count, dtype=t.container)
        for i, item in enumerate(var.init):
            if isinstance(item, SymOperand):
                target = globals_.get(item.name)
                if target is None:
                    raise LoadError(f"initializer names unknown global {item.name}", var.line)
                item = ImmOperand(target.address + item.offset, "int")
            data[i] = np.asarray(immediate(item, t)).view(t.container)
        self.memory.write(globals_[var.name].address, data)


class SimModule:
    """A loaded PTX module: ``entries`` by kernel name, ``variables`` (global/const addresses)."""

    def __init__(
        self,
        sim: Simulator,
        entries: dict[str, EntryInfo],
        variables: dict[str, Symbol],
        ptx: str = "",
        arch: str = "sm_90a",
        directives: dict[str, dict[str, tuple[int, ...]]] | None = None,
    ):
        self.sim = sim
        self.entries = entries
        self.variables = {name: sym.address for name, sym in variables.items()}
        self._generation = sim.memory.generation
        self._ptx = ptx
        self._arch = arch
        self._directives = directives or {}
        self._entry_registers: dict[tuple[str, int], int] = {}

    def entry_registers(self, name: str, threads: int) -> int:
        """Registers per thread a CTA of ``threads`` threads of kernel ``name`` is launched with
        (``kaio.targets.ptx.registers``: ptxas's count where the wheel is installed, else the
        bound of the block size and ``.maxnreg``), or 0 where ptxas drops the kernel's
        ``setmaxnreg`` (no bound tells it the count at entry); remembered per kernel and block size."""
        key = (name, threads)
        if key not in self._entry_registers:
            from kaio.targets.ptx.registers import entry_registers, setmaxnreg_honoured

            directives = self._directives.get(name, {})
            if not setmaxnreg_honoured(self._ptx, self._arch, set(directives)):
                self._entry_registers[key] = 0
            else:
                maxnreg = directives.get("maxnreg", (0,))[0] or None
                self._entry_registers[key] = entry_registers(self._ptx, name, self._arch, threads, maxnreg)
        return self._entry_registers[key]

    def launch(
        self,
        name: str,
        grid: Sequence[int] | int,
        block: Sequence[int] | int,
        params: Sequence[bytes] = (),
        shared_bytes: int = 0,
        profile: bool = False,
        registers_per_thread: int | None = None,
    ) -> LaunchReport:
        """Run kernel ``name`` to completion; raises KaioMemoryError / KaioSimError on faults.

        ``registers_per_thread``: what the CTA holds at entry, for ``setmaxnreg``'s register
        pool (default: :meth:`entry_registers`, worked out only for kernels with setmaxnreg;
        where that is 0, ptxas would drop the setmaxnreg, and the simulator ignores it too)."""
        sim = self.sim
        if self._generation != sim.memory.generation:
            raise KaioLaunchError("this module was loaded before memory.reset(); load it again")
        entry = self.entries.get(name)
        if entry is None:
            raise KaioLaunchError(f"no kernel named {name!r} in this module (has: {', '.join(self.entries) or 'none'})")
        geometry = LaunchGeometry(_dims(grid, "grid", MAX_GRID), _dims(block, "block", MAX_BLOCK))
        _check_block(entry, geometry.block)
        param = _param_buffer(entry, params)
        if shared_bytes < 0:
            raise KaioLaunchError("shared_bytes must be >= 0")
        total_shared = max(entry.static_shared_bytes, entry.dynamic_shared_offset + shared_bytes if shared_bytes else 0)
        if total_shared > MAX_SHARED_BYTES:
            raise KaioLaunchError(f"kernel {name} needs {total_shared} bytes of shared memory per CTA; the limit is {MAX_SHARED_BYTES}")
        report = LaunchReport(name, geometry.grid, geometry.block, total_shared, profiled=profile)
        cta_threads = geometry.cta_threads
        per_thread = entry.register_bytes_per_thread + entry.local_bytes + SCHEDULER_BYTES_PER_THREAD
        per_cta = cta_threads * per_thread + 2 * total_shared
        race_check = bool(sim.race_check)
        if race_check:
            per_cta += RACE_BYTES_PER_SHARED_BYTE * total_shared
        per_cta += async_proxy_bytes_per_cta(entry, cta_threads, total_shared)
        batch = max(1, min(sim.batch_state_bytes // per_cta, sim.max_batch_threads // cta_threads, geometry.n_ctas))
        report.ctas_per_batch = batch
        profiler = Profiler(entry.ops) if profile else None
        by_pc = np.zeros(len(entry.ops), dtype=np.int64)
        warp_requests = np.zeros(len(entry.ops), dtype=np.int64)
        registers = 0
        if any(op.klass == "setmaxnreg" for op in entry.ops):
            registers = registers_per_thread or self.entry_registers(name, cta_threads)
        seed = sim.schedule_seed
        start = time.perf_counter()
        with np.errstate(all="ignore"):
            for first in range(0, geometry.n_ctas, batch):
                n_ctas = min(batch, geometry.n_ctas - first)
                ctx = ExecContext(entry, geometry, first, n_ctas, sim.memory, param, total_shared, sim.check_uninitialized_shared, profiler, race_check)
                if registers:
                    ctx.entry_registers = registers
                    ctx.register_pool = RegisterPool(ctx, registers)  # before any warp exits
                if seed is not None:
                    ctx.rng = launch_rng(seed, name, first)
                runner = BatchRunner(
                    ctx,
                    entry.ops,
                    exited_release=not sim.synccheck,
                    max_steps=sim.max_steps,
                    profile=profile,
                )
                try:
                    stats = runner.run()
                except SimFault as fault:
                    raise _public_error(fault, ctx, runner, name) from None
                except SimDeadlock as dead:
                    thread, block_xyz = ctx.coordinates(dead.thread)
                    waiting = next((op for op in entry.ops if op.line == dead.line), None)
                    source = _source_fields(waiting)
                    note = source_note(*source.values()) if source else ""
                    err = KaioSimError(f"{dead.message} in kernel '{name}' at PTX line {dead.line}: block {block_xyz}{note}", **source)
                    _annotate(err, name, dead.line, thread, block_xyz)
                    raise err from None
                report.batches += 1
                report.steps += stats.steps
                report.thread_instructions += stats.thread_instructions
                report.barriers += stats.barriers
                report.barrier_releases += stats.barrier_releases
                if stats.by_pc is not None and stats.warp_requests is not None:
                    by_pc += stats.by_pc
                    warp_requests += stats.warp_requests
        report.seconds = time.perf_counter() - start
        if profiler is not None:
            fill_profile(report, entry.ops, by_pc, warp_requests, profiler)
        return report


def fill_profile(report: LaunchReport, ops: list[Op], by_pc: np.ndarray, warp_requests: np.ndarray, profiler: Profiler) -> None:
    """Aggregate per-instruction counts into the report's tables (rows in PTX line order)."""
    for at in np.flatnonzero(by_pc):
        op = ops[at]
        report.by_class[op.klass] += int(by_pc[at])
        report.by_category[op.category] += int(by_pc[at])
    report.warp_instructions = int(warp_requests.sum())
    for pc, g in sorted(profiler.global_counts.items(), key=lambda kv: ops[kv[0]].line):
        report.global_memory.append(GlobalMemoryRow(ops[pc].line, ops[pc].text, g.requests, g.sectors, g.bytes))
    for pc, s in sorted(profiler.shared_counts.items(), key=lambda kv: ops[kv[0]].line):
        report.shared_memory.append(SharedMemoryRow(ops[pc].line, ops[pc].text, s.access, s.requests, s.wavefronts, s.phases, s.max_ways))


def _annotate(err: Exception, kernel: str, line: int, thread: tuple[int, int, int], block: tuple[int, int, int]) -> None:
    err.kernel = kernel  # type: ignore[attr-defined]
    err.ptx_line = line  # type: ignore[attr-defined]
    err.thread = thread  # type: ignore[attr-defined]
    err.block = block  # type: ignore[attr-defined]


def _source_fields(op: Op | None) -> dict[str, Any]:
    """``source_file``/``source_line``/``source_text`` of the Python line an op implements (from
    the PTX's line info; the text read as tracebacks read it), or nothing without line info."""
    if op is None or op.source is None:
        return {}
    text = linecache.getline(op.source.file, op.source.line).strip()
    return {"source_file": op.source.file, "source_line": op.source.line, "source_text": text or None}


def _public_error(fault: SimFault, ctx: ExecContext, runner: BatchRunner, kernel: str) -> Exception:
    op = runner.current
    line = op.line if op is not None else 0
    thread, block = ctx.coordinates(fault.thread)
    source = _source_fields(op)
    if fault.kind == "memory":
        err = KaioMemoryError(
            fault.message, kernel=kernel, ptx_line=line, thread=thread, block=block, address=fault.address or 0,
            ptx_text=op.text if op is not None else None, **source,
        )  # fmt: skip
        for key, value in fault.extra.items():
            setattr(err, key, value)
        return err
    text = f" ({op.text})" if op is not None else ""
    note = source_note(*source.values()) if source else ""
    err = KaioSimError(f"{fault.message} in kernel '{kernel}' at PTX line {line}{text}: thread {thread}, block {block}{note}", **source)
    _annotate(err, kernel, line, thread, block)
    return err


def _dims(value: Sequence[int] | int, what: str, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) for d in dims):
        raise KaioLaunchError(f"{what} must be 1 to 3 integers, got {value!r}")
    full = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    for axis, (d, limit) in enumerate(zip(full, limits)):
        if not 1 <= d <= limit:
            raise KaioLaunchError(f"{what} dimension {'xyz'[axis]} = {d} is outside 1..{limit}")
    return full  # type: ignore[return-value]


def _check_block(entry: EntryInfo, block: tuple[int, int, int]) -> None:
    threads = math.prod(block)
    if threads > 1024:
        raise KaioLaunchError(f"a block of {threads} threads exceeds 1024")
    if entry.reqntid:
        want = tuple(entry.reqntid) + (1,) * (3 - len(entry.reqntid))
        if block != want:
            raise KaioLaunchError(f"kernel {entry.name} requires block {want} (.reqntid), got {block}")
    if entry.maxntid and threads > math.prod(entry.maxntid):
        raise KaioLaunchError(f"kernel {entry.name} allows at most {math.prod(entry.maxntid)} threads per block (.maxntid)")


def _param_buffer(entry: EntryInfo, params: Sequence[bytes]) -> np.ndarray:
    if len(params) != len(entry.params):
        raise KaioLaunchError(f"kernel {entry.name} takes {len(entry.params)} parameters, got {len(params)}")
    buf = np.zeros(max(16, (entry.param_bytes + 15) // 16 * 16), dtype=np.uint8)
    for (pname, ptype, nbytes), offset, raw in zip(entry.params, entry.param_offsets, params):
        data = bytes(raw)
        if len(data) != nbytes:
            raise KaioLaunchError(f"parameter {pname} (.{ptype}) of {entry.name} takes {nbytes} bytes, got {len(data)}")
        buf[offset : offset + nbytes] = np.frombuffer(data, dtype=np.uint8)
    return buf
