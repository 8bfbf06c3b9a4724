"""The contracts between stages: every ``kaio.*`` attribute one pass leaves on the IR for a
later pass, the printer or the runtime, defined once here with the ops it may sit on and the
value it holds, and checked wherever the IR is verified (after each pass, ``load_ir``).

A pass writes and reads these by name from this module, never from the pass that writes them,
so no pass module imports another. Ops are named by their IR name (``"kernel.func"``), so this
module imports no dialect and every dialect may use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.ir import Attribute, Operation
from xdsl.utils.exceptions import VerifyException

from kaio.launch_limits import DEFAULT_STAGES, MAX_MAXNREG, MAX_STAGES, MIN_MAXNREG


@dataclass(frozen=True)
class StageAttr:
    """One contract: its attribute name, the ops that may carry it, the value's kind."""

    name: str
    on: tuple[str, ...]
    value: type[Attribute]
    meaning: str
    entries: type[Attribute] | None = None  # a dictionary's values: parameter name -> this
    keys: tuple[tuple[str, int, int], ...] = ()
    """A dictionary of integers with fixed keys: (key, least, most) of each it may hold (none
    given: any key)."""

    def check(self, op: Operation, value: Attribute) -> None:
        if op.name not in self.on:
            raise VerifyException(f"{self.name} sits on {', '.join(self.on)}, not on {op.name}")
        if not isinstance(value, self.value):
            raise VerifyException(f"{op.name}'s {self.name} must be a {self.value.__name__}, got {value}")
        if self.entries is not None and isinstance(value, DictionaryAttr):
            if any(not isinstance(v, self.entries) for v in value.data.values()):
                raise VerifyException(f"{op.name}'s {self.name} maps parameter names to {self.entries.__name__}s")
        if self.keys and isinstance(value, DictionaryAttr):
            bounds = {key: (low, high) for key, low, high in self.keys}
            for key, entry in value.data.items():
                if key not in bounds:
                    raise VerifyException(f"{op.name}'s {self.name} holds {', '.join(bounds)}, not {key}")
                low, high = bounds[key]
                n = entry.value.data  # type: ignore[attr-defined]
                if not low <= n <= high:
                    raise VerifyException(f"{op.name}'s {self.name}: {key} is {low}..{high}, not {n}")


_KERNELS = ("kernel.func", "ptx.entry")

TARGET = StageAttr(
    "kaio.target", ("builtin.module",), StringAttr,
    "the arch the module compiles for (\"sm_90a\"): kaio.compile sets it once; lower-to-ptx and the printer read it",
)
LAUNCH = StageAttr(
    "kaio.launch", ("builtin.module",), DictionaryAttr,
    "the tile kernel's launch options the passes read, set once by the frontend: num_stages (the ring depth of "
    "pipeline-tma and pipeline-cp-async; 0 or 1: no ring) and maxnreg (lower-to-ptx's .maxnreg, pipeline-tma's "
    "register budget); a pass option given in the pipeline overrides it",
    IntegerAttr,
    (("num_stages", 0, MAX_STAGES), ("maxnreg", MIN_MAXNREG, MAX_MAXNREG)),
)

ALIGN = StageAttr(
    "kaio.align", _KERNELS, DictionaryAttr,
    "array parameter -> the byte alignment of its base that the launch must check (vectorize-loads, tile loads)",
    IntegerAttr,
)
TENSOR_MAPS = StageAttr(
    "kaio.tensor_maps", _KERNELS, DictionaryAttr,
    "tensor-map parameter -> the JSON recipe the runtime builds it from at launch (pipeline-tma, store-tma)",
    StringAttr,
)
PRODUCER_THREADS = StageAttr(
    "kaio.producer_threads", ("kernel.func",), IntegerAttr,
    "threads launched beyond block_size: the producer warpgroup of pipeline-tma{warp_specialize}",
)
ENTRY_REGISTERS = StageAttr(
    "kaio.entry_registers", ("kernel.func",), IntegerAttr,
    "registers per thread the setmaxnreg counts were budgeted from; lower-to-ptx pins .maxnreg to it",
)
COPY_BARRIER = StageAttr(
    "kaio.copy_barrier", ("kernel.barrier",), UnitAttr,
    "a barrier promote-to-shared placed that only orders tile copies (pipeline-cp-async may drop it)",
)
REFILL_BARRIER = StageAttr(
    "kaio.refill_barrier", ("kernel.barrier", "scf.if"), UnitAttr,
    "pipeline-tma: every thread is done with the stage about to be refilled (lower-to-wgmma waits before it)",
)
TMA_RING = StageAttr(
    "kaio.tma_ring", ("smem.alloc",), UnitAttr,
    "a ring filled by TMA (the async proxy) only (pipeline-tma, read by lower-to-wgmma)",
)
REFILL_FENCE = StageAttr(
    "kaio.refill_fence", ("tma.fence",), UnitAttr,
    "pipeline-tma's fence before a refill: lower-to-wgmma drops it where only the async proxy read the stage",
)
REUSE_DEAD = StageAttr(
    "kaio.reuse_dead", ("smem.alloc",), UnitAttr,
    "scratch allocated where first needed, which may take the bytes of buffers dead there (store-tma, reuse-dead-shared)",
)

STAGE_ATTRS: dict[str, StageAttr] = {
    a.name: a
    for a in (
        TARGET, LAUNCH, ALIGN, TENSOR_MAPS, PRODUCER_THREADS, ENTRY_REGISTERS, COPY_BARRIER, REFILL_BARRIER, TMA_RING,
        REFILL_FENCE, REUSE_DEAD,
    )  # fmt: skip
}

# the names, as passes spell them in op.attributes
TARGET_ATTR = TARGET.name
LAUNCH_ATTR = LAUNCH.name
ALIGN_ATTR = ALIGN.name
TENSOR_MAPS_ATTR = TENSOR_MAPS.name
PRODUCER_THREADS_ATTR = PRODUCER_THREADS.name
ENTRY_REGISTERS_ATTR = ENTRY_REGISTERS.name
COPY_BARRIER_ATTR = COPY_BARRIER.name
REFILL_BARRIER_ATTR = REFILL_BARRIER.name
TMA_RING_ATTR = TMA_RING.name
REFILL_FENCE_ATTR = REFILL_FENCE.name
REUSE_DEAD_ATTR = REUSE_DEAD.name


def check_stage_attrs(op: Operation) -> None:
    """``op``'s ``kaio.*`` attributes against their contracts (an unknown ``kaio.*`` name is
    an error too: a contract nobody defined is a typo or a pass reading a stale name)."""
    attributes = op.attributes
    if not attributes:
        return
    for name, value in attributes.items():
        if name.startswith("kaio."):
            contract = STAGE_ATTRS.get(name)
            if contract is None:
                raise VerifyException(f"{op.name} carries {name}, which no stage defines (kaio.dialects.stage_attrs)")
            contract.check(op, value)


def require_alignment(func: Operation, name: str, nbytes: int) -> None:
    """Record on the kernel that the launch must check that array parameter ``name`` starts at a
    multiple of ``nbytes`` (``kaio.align``; the largest requirement of all accesses wins)."""
    if nbytes <= 1:
        return
    old = func.attributes.get(ALIGN_ATTR)
    merged = {k: v.value.data for k, v in old.data.items()} if isinstance(old, DictionaryAttr) else {}  # type: ignore[union-attr]
    merged[name] = max(merged.get(name, 1), nbytes)
    func.attributes[ALIGN_ATTR] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in merged.items()})


def module_target(module: Operation) -> str | None:
    """The arch ``module`` compiles for (its ``kaio.target``), or None where none was set."""
    value = module.attributes.get(TARGET_ATTR)
    return value.data if isinstance(value, StringAttr) else None


def set_module_target(module: Operation, arch: str) -> None:
    """Give ``module`` its target, once: a module already compiled for another arch is an error
    (its lowering chose instructions for that one)."""
    held = module_target(module)
    if held is not None and held != arch:
        raise VerifyException(f"the module is compiled for {held} (its kaio.target), not {arch}")
    module.attributes[TARGET_ATTR] = StringAttr(arch)


def set_module_launch(module: Operation, num_stages: int, maxnreg: int | None = None) -> None:
    """Give ``module`` its launch options (``kaio.launch``): the ring depth and the register
    cap (None: none) that the passes read where their pipeline does not give them."""
    entries = {"num_stages": num_stages, **({} if maxnreg is None else {"maxnreg": maxnreg})}
    value = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in entries.items()})
    LAUNCH.check(module, value)
    module.attributes[LAUNCH_ATTR] = value


def _launch_entry(op: Operation, key: str) -> int | None:
    module = op
    while module.name != "builtin.module" and module.parent_op() is not None:
        module = module.parent_op()  # type: ignore[assignment]
    value = module.attributes.get(LAUNCH_ATTR)
    entry = value.data.get(key) if isinstance(value, DictionaryAttr) else None
    return entry.value.data if isinstance(entry, IntegerAttr) else None


def launch_stages(op: Operation, given: int | None = None) -> int:
    """The ring depth a pass makes for ``op``'s module: ``given`` (the pass's own option) when
    set, else the module's ``kaio.launch`` num_stages, else :data:`DEFAULT_STAGES`."""
    if given is not None:
        return given
    held = _launch_entry(op, "num_stages")
    return DEFAULT_STAGES if held is None else held


def launch_maxnreg(op: Operation, given: int | None = None) -> int | None:
    """The register cap for ``op``'s module: ``given`` (the pass's own option) when set, else
    the module's ``kaio.launch`` maxnreg, else None (no cap)."""
    return given if given is not None else _launch_entry(op, "maxnreg")
